// The bytes a remote file hands back are the object's own, whatever the network does: bodies
// that end early without a transport error, and small reads that straddle a page the file's
// page cache holds and one it does not. Against s3rver behind the fault proxy.
#include <gtest/gtest.h>

#include <string>

#include "gpufeed/file.h"
#include "gpufeed/remote.h"
#include "remote/http_test_server.h"
#include "remote/s3_fixture.h"
#include "remote/s3_suite.h"

namespace gpufeed {
namespace {

using testing::RandomBytes;
using testing::S3Fixture;
using testing::S3Suite;

// The first offset where `got` and `want` differ, or npos: a mismatch prints where, not both
// strings whole.
size_t FirstDifference(const std::string& got, const std::string& want) {
  if (got.size() != want.size()) return std::min(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return i;
  }
  return std::string::npos;
}

class RemoteS3Bytes : public S3Suite<RemoteS3Bytes> {
 public:
  static void Seed(S3Fixture& s3) {
    object_ = RandomBytes(1 << 20, 3);
    s3.Put("data", "big.bin", object_);
  }

 protected:
  static inline std::string object_;
};

// A body that ends cleanly before its range is complete (sent chunked, so no transport error
// shows it) is not taken as whole: the rest is asked for.
TEST_F(RemoteS3Bytes, BodyEndedShortIsResumedNotAccepted) {
  auto fs = RemoteFileSystem::Create(Options());
  auto file = fs->Open("s3://data/big.bin");
  s3_->ResetProxy();
  s3_->SetRules({{"short_after_bytes", 5000}, {"short_count", 3}});
  std::string got(200000, '\0');
  ReadFully(*file, 4321, got.data(), got.size(), "bytes");
  EXPECT_EQ(FirstDifference(got, object_.substr(4321, got.size())), std::string::npos);
  EXPECT_EQ(s3_->Counts()["ranged"], 4);
  EXPECT_EQ(fs->stats().retries, 3);
}

// A small read across a page boundary where one page is held and the other is not: the held
// page's bytes stay, the fetched page's bytes land at their own place. Both orders. libhdf5
// makes such reads for metadata beside bytes it read moments before; wrong bytes here read as
// a corrupt file.
TEST_F(RemoteS3Bytes, SmallReadAcrossAPageWithOneSideHeld) {
  constexpr uint64_t kPage = 64 * 1024;
  auto fs = RemoteFileSystem::Create(Options());
  for (const uint64_t held : {kPage + 100, kPage - 100}) {
    for (const uint64_t offset : {kPage - 8, kPage - 3000, kPage - 1}) {
      auto file = fs->Open("s3://data/big.bin");  // a page cache of its own
      char byte = 0;
      ASSERT_EQ(file->ReadAt(held, &byte, 1), 1u);
      std::string got(4000, '\0');
      ASSERT_EQ(file->ReadAt(offset, got.data(), got.size()), got.size());
      ASSERT_EQ(FirstDifference(got, object_.substr(offset, got.size())), std::string::npos)
          << "page holding byte " << held << " cached, read at " << offset;
    }
  }
}

}  // namespace
}  // namespace gpufeed
