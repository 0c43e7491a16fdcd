#include "cache/shm/flock_holders.h"

#include <fmt/format.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <sstream>
#include <string>

namespace gpufeed {

std::optional<std::vector<FlockHolder>> FlockHolders(dev_t dev, ino_t ino) {
  std::ifstream in("/proc/locks");
  if (!in) return std::nullopt;
  const std::string id = fmt::format("{:02x}:{:02x}:{}", major(dev), minor(dev), ino);
  std::vector<FlockHolder> holders;
  std::string line;
  while (std::getline(in, line)) {
    // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; waiters read "1: -> FLOCK ...".
    std::istringstream words(line);
    std::string number, kind, mode, access, pid, inode;
    words >> number >> kind;
    if (kind == "->") continue;
    words >> mode >> access >> pid >> inode;
    if (kind != "FLOCK" || inode != id) continue;
    FlockHolder h;
    try {
      h.pid = static_cast<pid_t>(std::stol(pid));
    } catch (const std::exception&) {
      continue;
    }
    h.exclusive = access == "WRITE";
    holders.push_back(h);
  }
  return holders;
}

}  // namespace gpufeed
