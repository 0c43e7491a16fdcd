// The error for a path at which nothing was found, one wording for every caller: a local
// path says what was looked for; a remote one adds what the store answered (status line,
// error code, request id and host id, the endpoint asked), so a missing object is told from
// a missing bucket or an empty prefix, and a wrong endpoint shows.
// Thread-safety: as `fs`.
#pragma once

#include <string>

#include "gpufeed/file.h"

namespace gpufeed {

// Throws Error(kNotFound): `message` ("s3://b/x.h5: no such file or folder"), followed for a
// remote path by fs.WhyMissing(path).
// REQUIRES: fs.Type(path) answered PathType::kMissing (so fs still holds why).
[[noreturn]] void ThrowMissing(const FileSystem& fs, const std::string& path,
                               const std::string& message);

}  // namespace gpufeed
