#include "core/io/private_file.h"

#include <fmt/format.h>
#include <unistd.h>

namespace gpufeed {

std::string NotPrivate(const struct stat& st, bool want_dir) {
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return want_dir ? "not a directory" : "not a regular file";
  }
  if (st.st_uid != geteuid()) {
    return fmt::format("owned by uid {}, not by this user (uid {})", st.st_uid, geteuid());
  }
  if ((st.st_mode & 077) != 0) {
    return fmt::format("mode {:04o}: open to other users", st.st_mode & 07777);
  }
  return {};
}

}  // namespace gpufeed
