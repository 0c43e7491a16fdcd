// The check every per-user folder and file gpufeed keeps (the shared-memory cache, the
// node-local disk cache) passes before it is trusted.
// Thread-safety: pure function.
#pragma once

#include <sys/stat.h>

#include <string>

namespace gpufeed {

// What is wrong with `st` as a regular file (or, with `want_dir`, a folder) that only this
// user can open: another type, another owner, or any group or other permission. Empty when
// nothing is.
std::string NotPrivate(const struct stat& st, bool want_dir);

}  // namespace gpufeed
