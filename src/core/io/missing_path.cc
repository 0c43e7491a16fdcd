// ThrowMissing: "no such file", with the store's evidence for a remote path.
#include "core/io/missing_path.h"

#include "gpufeed/error.h"

namespace gpufeed {

void ThrowMissing(const FileSystem& fs, const std::string& path, const std::string& message) {
  const std::string why = fs.WhyMissing(path);
  throw Error(ErrorCode::kNotFound, why.empty() ? message : message + ": " + why);
}

}  // namespace gpufeed
