#include "cache/detached_build.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "gpufeed/database.h"

extern char** environ;

namespace gpufeed {
namespace {

bool Executable(const std::string& path) {
  struct stat st {};
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

std::string PercentDecoded(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const std::string hex = text.substr(i + 1, 2);
      char* end = nullptr;
      const long value = std::strtol(hex.c_str(), &end, 16);
      if (end == hex.c_str() + 2) {
        out.push_back(static_cast<char>(value));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

// `uri` without its password (postgresql://user:PASSWORD@host or ?password=...), which goes
// to `*password` (percent-decoded, as libpq would read it).
std::string WithoutPassword(std::string uri, std::string* password) {
  if (uri.rfind("postgresql://", 0) != 0 && uri.rfind("postgres://", 0) != 0) return uri;
  const size_t authority = uri.find("://") + 3;
  const size_t authority_end = uri.find_first_of("/?", authority);
  const size_t at = uri.rfind('@', authority_end == std::string::npos ? uri.size() : authority_end);
  if (at != std::string::npos && at >= authority) {
    const size_t colon = uri.find(':', authority);
    if (colon != std::string::npos && colon < at) {
      *password = PercentDecoded(uri.substr(colon + 1, at - colon - 1));
      uri.erase(colon, at - colon);
    }
  }
  const size_t query = uri.find('?');
  if (query == std::string::npos) return uri;
  size_t begin = query + 1;
  while (begin < uri.size()) {
    size_t end = uri.find('&', begin);
    if (end == std::string::npos) end = uri.size();
    if (uri.compare(begin, 9, "password=") == 0) {
      *password = PercentDecoded(uri.substr(begin + 9, end - begin - 9));
      // Drops the parameter and the separator before it (or after it, when it is first).
      const size_t from = begin == query + 1 ? begin : begin - 1;
      const size_t to = begin == query + 1 && end < uri.size() ? end + 1 : end;
      uri.erase(from, to - from);
      if (uri.back() == '?') uri.pop_back();
      continue;
    }
    begin = end + 1;
  }
  return uri;
}

// ~/.cache/gpufeed/cache-build.log ($XDG_CACHE_HOME/gpufeed where set), opened for appending,
// 0600 in a 0700 folder; /dev/null when that cannot be made.
int OpenBuildLog() {
  std::string base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    base = std::string(home) + "/.cache";
  }
  if (!base.empty()) {
    mkdir(base.c_str(), 0700);
    const std::string folder = base + "/gpufeed";
    mkdir(folder.c_str(), 0700);
    struct stat st {};
    if (lstat(folder.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid()) {
      const int fd = open((folder + "/cache-build.log").c_str(),
                          O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd >= 0) return fd;
    }
  }
  return open("/dev/null", O_WRONLY | O_CLOEXEC);
}

}  // namespace

std::optional<std::string> FindCliBinary(const std::string& given) {
  if (!given.empty()) return Executable(given) ? std::optional(given) : std::nullopt;
  if (const char* env = std::getenv("GPUFEED_BIN"); env != nullptr && env[0] != '\0') {
    return Executable(env) ? std::optional<std::string>(env) : std::nullopt;
  }
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string beside(self, static_cast<size_t>(n));
    beside = beside.substr(0, beside.rfind('/') + 1) + "gpufeed";
    if (Executable(beside)) return beside;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(begin, end - begin) + "/gpufeed";
    if (end > begin && Executable(candidate)) return candidate;
    begin = end + 1;
  }
  return std::nullopt;
}

std::vector<std::string> DetachedBuildArgs(const DetachedBuild& build, std::string* password) {
  std::string secret;
  const std::string path = IsDatabaseUri(build.source_path)
                               ? WithoutPassword(build.source_path, &secret)
                               : build.source_path;
  if (password != nullptr) *password = secret;
  std::vector<std::string> args = {"gpufeed", "cache",    "build", path,         "--key",
                                   build.key, "--detach", "--dir", build.shm_dir};
  if (!build.fields.empty()) {
    std::string joined;
    for (const auto& f : build.fields) joined += (joined.empty() ? "" : ",") + f;
    args.insert(args.end(), {"--fields", joined});
  }
  if (!build.shm_group.empty()) args.insert(args.end(), {"--group", build.shm_group});
  if (build.threads > 0) args.insert(args.end(), {"--threads", std::to_string(build.threads)});
  return args;
}

std::string SpawnDetachedBuild(const DetachedBuild& build) {
  const auto binary = FindCliBinary(build.cli_binary);
  if (!binary) {
    return build.cli_binary.empty()
               ? "the gpufeed command-line tool was not found ($GPUFEED_BIN, beside this "
                 "program, $PATH)"
               : fmt::format("{} is not an executable file", build.cli_binary);
  }
  std::string password;
  const std::vector<std::string> args = DetachedBuildArgs(build, &password);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The environment as it is, and the database password where the URI held one.
  std::vector<std::string> extra;
  std::vector<char*> envp;
  if (!password.empty()) extra.push_back("PGPASSWORD=" + password);
  for (auto& e : extra) envp.push_back(e.data());
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (!password.empty() && std::strncmp(*e, "PGPASSWORD=", 11) == 0) continue;
    envp.push_back(*e);
  }
  envp.push_back(nullptr);

  const int log = OpenBuildLog();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (log >= 0) posix_spawn_file_actions_adddup2(&actions, log, 2);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, binary->c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (log >= 0) close(log);
  if (err != 0) return fmt::format("cannot start {}: {}", *binary, std::strerror(err));
  // The CLI's first process forks the builder and exits: reaped here, so no zombie is left.
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fmt::format(
        "{} cache build --detach exited with status {} (see "
        "~/.cache/gpufeed/cache-build.log)",
        *binary, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return {};
}

}  // namespace gpufeed
