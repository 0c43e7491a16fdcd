// Handing an unfinished shared-memory build to a process of its own: a loader that stops its
// build (closed, or its process exiting) starts `gpufeed cache build` of the same source,
// detached from it (setsid, nice 19, stdin and stdout on /dev/null, stderr appended
// to ~/.cache/gpufeed/cache-build.log), which takes the key's build lock once the loader has
// released it, then builds and publishes the same key for every process of the node. The
// flock still makes it the only builder; a reader still maps only a published file.
//
// Credentials never reach a command line or a file: a password in a database URI goes to the
// builder's environment (PGPASSWORD), and what the environment holds (AWS_*, PG*) is inherited.
// Thread-safety: thread-safe (each call spawns its own process).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gpufeed {

struct DetachedBuild {
  std::string cli_binary;           // Default: empty = FindCliBinary("")
  std::string source_path;          // Required: what OpenPath opens
  std::vector<std::string> fields;  // Default: all
  std::string key;                  // Required: the key the builder must compute
  std::string shm_dir;              // the shared-memory root
  std::string shm_group;            // Default: the user's own folder
  int threads = 0;                  // Default: 0 = hardware threads
};

// The gpufeed CLI: `given` when not empty, else $GPUFEED_BIN, else `gpufeed` beside this
// process's executable, else the first `gpufeed` on $PATH; nullopt when none is executable.
std::optional<std::string> FindCliBinary(const std::string& given);

// The command line of the detached build, without credentials: a password in a database
// URI is left out (and returned in `*password`, when given, for the builder's environment).
std::vector<std::string> DetachedBuildArgs(const DetachedBuild& build, std::string* password);

// Starts the detached build and returns once it runs on its own (the CLI forks and its first
// process exits at once; this call reaps it). Returns "" on success, else why not (no CLI
// found, the spawn failed). Never throws.
std::string SpawnDetachedBuild(const DetachedBuild& build);

}  // namespace gpufeed
