// Opening an HDF5 file under a cancelled token (gpufeed/cancel.h): the chunk index read stops
// with Error(kCancelled), and the same open without one succeeds.
#include <gtest/gtest.h>

#include <string>

#include "error_code_of.h"
#include "gpufeed/cancel.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/fixture.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;

TEST(Hdf5CancelTest, ACancelledOpenStopsInTheChunkIndex) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  const std::string path = files->File("gzip");  // chunked: a v1 B-tree chunk index
  CancelToken token;
  token.Cancel();
  std::string message;
  {
    CancelScope scope(&token);
    EXPECT_EQ(ErrorCodeOf(
                  [&] {
                    OpenHdf5({path}, {"mel", "label"});
                  },
                  &message),
              ErrorCode::kCancelled);
  }
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("chunk index: interrupted"), std::string::npos) << message;
  EXPECT_EQ(OpenHdf5({path}, {"mel", "label"})->size(), 1000);
}

}  // namespace
}  // namespace gpufeed
