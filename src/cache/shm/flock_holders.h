// Who holds flocks on a file, from /proc/locks: for `gpufeed cache ls` (processes using a
// cache) and for the build lock's "waiting for process N" message.
// Thread-safety: pure function (reads /proc).
#pragma once

#include <sys/types.h>

#include <optional>
#include <vector>

namespace gpufeed {

struct FlockHolder {
  pid_t pid = 0;
  bool exclusive = false;  // WRITE (LOCK_EX) rather than READ (LOCK_SH)
};

// The flocks held on the file `dev`/`ino` (waiters are not counted), or nullopt when
// /proc/locks cannot be read. A pid is the process that took the lock (for an inherited
// descriptor, possibly no longer its holder).
std::optional<std::vector<FlockHolder>> FlockHolders(dev_t dev, ino_t ino);

}  // namespace gpufeed
