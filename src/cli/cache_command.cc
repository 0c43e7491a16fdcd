#include "cli/cache_command.h"

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/sigint_cancel.h"
#include "core/format.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"

namespace gpufeed::cli {
namespace {

struct CacheArgs {
  std::string dir = "/dev/shm";
  std::string group;
  bool json = false;
  std::vector<std::string> keys;
  bool all = false;
  std::string path;
  std::vector<std::string> fields;
  int threads = 0;
};

std::string Age(double seconds) {
  if (seconds < 120) return fmt::format("{:.0f} s", seconds);
  if (seconds < 7200) return fmt::format("{:.0f} min", seconds / 60);
  if (seconds < 2 * 86400) return fmt::format("{:.1f} h", seconds / 3600);
  return fmt::format("{:.1f} d", seconds / 86400);
}

std::string State(const ShmCacheEntry& e) {
  if (e.half_built) return "half-built";
  if (e.path.find(".tmp-") != std::string::npos) return "building";
  if (!e.valid) return "invalid";
  return e.stale ? "stale" : "ok";
}

nlohmann::json ToJson(const ShmCacheEntry& e) {
  return {{"key", e.key},      {"path", e.path},         {"description", e.description},
          {"bytes", e.bytes},  {"age_s", e.age_seconds}, {"processes", e.processes},
          {"state", State(e)}, {"identity", e.identity}};
}

void PrintEntries(const std::vector<ShmCacheEntry>& entries) {
  fmt::print("{:<16}  {:>9}  {:>8}  {:>5}  {:<10}  {}\n", "KEY", "SIZE", "AGE", "PROCS", "STATE",
             "SOURCE");
  for (const auto& e : entries) {
    fmt::print("{:<16}  {:>9}  {:>8}  {:>5}  {:<10}  {}\n", e.key,
               FormatBytes(static_cast<double>(e.bytes)), Age(e.age_seconds),
               e.processes < 0 ? "?" : std::to_string(e.processes), State(e), e.description);
  }
}

int RunLs(const CacheArgs& a) {
  const auto entries = ListShmCaches(a.dir, a.group);
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) out.push_back(ToJson(e));
    fmt::print("{}\n", out.dump(2));
  } else if (entries.empty()) {
    fmt::print("no gpufeed caches in {}\n", a.dir);
  } else {
    PrintEntries(entries);
  }
  return 0;
}

int RunRm(const CacheArgs& a) {
  std::vector<std::string> keys = a.keys;
  if (a.all == !keys.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "gpufeed cache rm: give KEY... or --all");
  }
  if (a.all) {
    for (const auto& e : ListShmCaches(a.dir, a.group)) keys.push_back(e.key);
  }
  int missing = 0;
  for (const auto& key : keys) {
    if (RemoveShmCache(key, a.dir, a.group)) {
      fmt::print("removed {}\n", key);
    } else if (!a.all) {
      fmt::print(stderr, "gpufeed: no cache {} in {}\n", key, a.dir);
      ++missing;
    }
  }
  return missing == 0 ? 0 : ExitCodeFor(ErrorCode::kNotFound);
}

int RunGc(const CacheArgs& a) {
  const auto removed = CollectShmGarbage(a.dir, a.group);
  for (const auto& e : removed) {
    fmt::print("removed {} ({}, {}): {}\n", e.key, State(e),
               FormatBytes(static_cast<double>(e.bytes)), e.description);
  }
  if (removed.empty()) fmt::print("nothing to collect in {}\n", a.dir);
  return 0;
}

// Exit 0 when every named cache verifies, the corrupt-data code when one does not.
int RunVerify(const CacheArgs& a) {
  if (a.keys.empty()) throw Error(ErrorCode::kInvalidArgument, "gpufeed cache verify: give KEY...");
  int bad = 0;
  for (const auto& key : a.keys) {
    const ShmVerifyReport r = VerifyShmCache(key, a.dir, a.group);
    if (a.json) {
      fmt::print("{}\n", nlohmann::json{{"key", r.key},
                                        {"path", r.path},
                                        {"ok", r.ok},
                                        {"blocks", r.blocks},
                                        {"checked", r.checked},
                                        {"first_bad_block", r.first_bad_block},
                                        {"first_bad", r.first_bad}}
                             .dump());
    } else if (r.ok) {
      fmt::print("{} ok: {} blocks, {} match the hashes written when it was built ({})\n", key,
                 r.blocks, FormatBytes(static_cast<double>(r.bytes)), r.path);
    } else {
      fmt::print(
          "{} BAD: {} does not match its hash (the file was changed after it was built; "
          "remove it with `gpufeed cache rm {}`, the next open rebuilds it)\n",
          key, r.first_bad, key);
    }
    bad += r.ok ? 0 : 1;
  }
  return bad == 0 ? 0 : ExitCodeFor(ErrorCode::kCorruptData);
}

int RunBuild(const CacheArgs& a) {
  CacheInfo info;
  SigintCancels sigint;  // Ctrl-C stops the build: its half-written file is removed
  OpenCached(OpenPath(a.path, a.fields),
             {.tier = CacheTier::kShm,
              .shm_dir = a.dir,
              .shm_group = a.group,
              .threads = a.threads,
              .verbose = true},
             &info);
  sigint.ThrowIfInterrupted("building the cache");
  if (info.tier != CacheTier::kShm) return ExitCodeFor(ErrorCode::kIo);
  fmt::print("{} {} in {:.2f} s: {}\n", info.built ? "built" : "found", info.key, info.open_seconds,
             info.path);
  return 0;
}

void Run(CLI::App* cmd, int (*body)(const CacheArgs&), std::shared_ptr<CacheArgs> args) {
  cmd->add_option("--dir", args->dir, "The shared-memory root (caches are in its gpufeed-user-UID)")
      ->capture_default_str();
  cmd->add_option("--group", args->group,
                  "The caches shared with this group (a name or gid you belong to), in "
                  "gpufeed-group-GID, instead of your own");
  cmd->callback([body, args] {
    const int code = RunReportingErrors([&] { return body(*args); });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace

void RegisterCacheCommand(CLI::App& app) {
  auto args = std::make_shared<CacheArgs>();
  CLI::App* cache = app.add_subcommand(
      "cache",
      "Your shared-memory caches (/dev/shm/gpufeed-user-UID/gpufeed-KEY): one copy of a data\n"
      "set that every local process of yours reads. `cache='shm'` or 'auto' makes them; these\n"
      "commands list, verify, remove and collect them. Other users' caches are not visible or\n"
      "used; --group names a group's shared caches (Loader(shm_group=...)) instead.");
  cache->require_subcommand(1);

  CLI::App* ls = cache->add_subcommand(
      "ls", "List caches: key, size, age, processes mapping it now, state, source");
  ls->add_flag("--json", args->json, "Print a JSON array");
  Run(ls, RunLs, args);

  CLI::App* rm = cache->add_subcommand(
      "rm", "Remove caches (processes mapping one keep their copy until they exit)");
  rm->add_option("keys", args->keys, "Cache keys (see `gpufeed cache ls`)");
  rm->add_flag("--all", args->all, "Remove every gpufeed cache in the folder");
  Run(rm, RunRm, args);

  CLI::App* gc = cache->add_subcommand(
      "gc",
      "Remove half-built files of dead builders, invalid files, and caches whose source "
      "files changed or are gone");
  Run(gc, RunGc, args);

  CLI::App* verify = cache->add_subcommand(
      "verify",
      "Re-hash caches against the hashes written when they were built and name the first "
      "block that differs (readers do not re-hash: only you can write your caches)");
  verify->add_option("keys", args->keys, "Cache keys (see `gpufeed cache ls`)")->required();
  verify->add_flag("--json", args->json, "Print one JSON object per cache");
  Run(verify, RunVerify, args);

  CLI::App* build = cache->add_subcommand(
      "build", "Build (or find) the shared-memory cache of a data set before training starts");
  build->add_option("path", args->path, "A NumPy folder or an HDF5 file")->required();
  build->add_option("--fields", args->fields, "Fields to cache (default: all)")->delimiter(',');
  build->add_option("--threads", args->threads, "Build threads (default: hardware threads)");
  Run(build, RunBuild, args);
}

}  // namespace gpufeed::cli
