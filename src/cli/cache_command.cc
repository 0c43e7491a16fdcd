#include "cli/cache_command.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/sigint_cancel.h"
#include "core/format.h"
#include "gpufeed/error.h"
#include "gpufeed/open_loader.h"
#include "gpufeed/shm_caches.h"
#include "gpufeed/sources.h"
#if GPUFEED_WITH_REMOTE
#include "remote/disk/disk_cache.h"
#include "remote/disk/disk_cache_verify.h"
#endif

namespace gpufeed::cli {
namespace {

struct CacheArgs {
  std::string dir = kShmRoot;
  std::string group;
  bool json = false;
  std::vector<std::string> keys;
  bool all = false;
  std::string path;
  std::vector<std::string> fields;
  int threads = 0;
  std::string source;      // rm --source
  bool force = false;      // rm: held caches too
  std::string key;         // build --key: the key the build must have
  bool detach = false;     // build --detach
  std::string older_than;  // gc --older-than
  uint64_t max_bytes = 0;  // gc --max-bytes
  bool disk = false;       // verify --disk
  std::string disk_dir;    // verify --disk-dir
  bool remove = false;     // verify --disk --remove
};

std::string Age(double seconds);

// "90" or "90s", "15m", "12h", "1d", "2w" in seconds; Error(kInvalidArgument) otherwise.
double ParseDuration(const std::string& text) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  const std::string unit = text.substr(std::min(used, text.size()));
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"w", 7 * 86400}};
  for (const auto& [name, seconds] : kUnits) {
    if (value >= 0 && used > 0 && unit == name) return value * seconds;
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("'{}' is not a duration (a number with s, m, h, d or w: '1d')", text));
}

// Where the cache's data lives: its NumPy folder or data files, else its description.
std::string SourceText(const ShmCacheEntry& e) {
  if (e.sources.empty()) return e.description;
  if (e.sources.size() == 1) return e.sources[0];
  return fmt::format("{} + {} more", e.sources[0], e.sources.size() - 1);
}

std::string LastUsed(const ShmCacheEntry& e) {
  if (e.processes > 0) return "in use";
  return e.idle_seconds < 0 ? "?" : Age(e.idle_seconds) + " ago";
}

std::string Held(int processes) {
  return processes < 0 ? "held by unknown processes"
                       : fmt::format("held by {} process{}", processes, processes == 1 ? "" : "es");
}

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
  return {{"key", e.key},           {"path", e.path},           {"description", e.description},
          {"sources", e.sources},   {"bytes", e.bytes},         {"built_share", e.built_share},
          {"age_s", e.age_seconds}, {"idle_s", e.idle_seconds}, {"processes", e.processes},
          {"state", State(e)},      {"identity", e.identity}};
}

void PrintEntries(const std::vector<ShmCacheEntry>& entries) {
  fmt::print("{:<16}  {:>9}  {:>5}  {:>8}  {:>10}  {:>5}  {:<10}  {}\n", "KEY", "SIZE", "BUILT",
             "AGE", "LAST USED", "PROCS", "STATE", "SOURCE");
  for (const auto& e : entries) {
    fmt::print("{:<16}  {:>9}  {:>4.0f}%  {:>8}  {:>10}  {:>5}  {:<10}  {}\n", e.key,
               FormatBytes(static_cast<double>(e.bytes)), 100 * e.built_share, Age(e.age_seconds),
               LastUsed(e), e.processes < 0 ? "?" : std::to_string(e.processes), State(e),
               SourceText(e));
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

// rm --all / --source: the caches chosen; those other processes hold go only with --force.
int RemoveChosen(const CacheArgs& a, std::vector<ShmCacheEntry> chosen) {
  if (chosen.empty()) {
    fmt::print("no gpufeed caches in {}\n", a.dir);
    return 0;
  }
  uint64_t bytes = 0;
  int held = 0;
  int holders = 0;
  for (const auto& e : chosen) {
    bytes += e.bytes;
    if (e.processes != 0) {
      ++held;
      holders += std::max(e.processes, 0);
    }
  }
  fmt::print("{} {} cache{} ({}){}\n", a.force || held == 0 ? "removing" : "found", chosen.size(),
             chosen.size() == 1 ? "" : "s", FormatBytes(static_cast<double>(bytes)),
             held == 0 ? ""
                       : fmt::format("; {} held by {} other process{}{}", held, holders,
                                     holders == 1 ? "" : "es",
                                     a.force ? " (removed: they keep their copy until they exit)"
                                             : " (kept: --force removes them too)"));
  for (const auto& e : chosen) {
    if (e.processes != 0 && !a.force) {
      fmt::print("kept {} ({}): {}\n", e.key, Held(e.processes), SourceText(e));
    } else if (RemoveShmCache(e.key, a.dir, a.group)) {
      fmt::print("removed {} ({}): {}\n", e.key, FormatBytes(static_cast<double>(e.bytes)),
                 SourceText(e));
    }
  }
  return 0;
}

int RunRm(const CacheArgs& a) {
  const int ways = (a.all ? 1 : 0) + (a.keys.empty() ? 0 : 1) + (a.source.empty() ? 0 : 1);
  if (ways != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "gpufeed cache rm: give KEY..., --source PATH or --all");
  }
  if (a.all) {
    std::vector<ShmCacheEntry> chosen;
    for (auto& e : ListShmCaches(a.dir, a.group)) {
      const bool building = !e.half_built && e.path.find(".tmp-") != std::string::npos;
      if (!building) chosen.push_back(std::move(e));
    }
    return RemoveChosen(a, std::move(chosen));
  }
  if (!a.source.empty()) {
    auto chosen = ShmCachesOfSource(a.source, a.dir, a.group);
    if (chosen.empty()) {
      fmt::print(stderr, "gpufeed: no cache of {} in {}\n", a.source, a.dir);
      return ExitCodeFor(ErrorCode::kNotFound);
    }
    return RemoveChosen(a, std::move(chosen));
  }
  int missing = 0;
  for (const auto& key : a.keys) {
    if (RemoveShmCache(key, a.dir, a.group)) {
      fmt::print("removed {}\n", key);
    } else {
      fmt::print(stderr, "gpufeed: no cache {} in {}\n", key, a.dir);
      ++missing;
    }
  }
  return missing == 0 ? 0 : ExitCodeFor(ErrorCode::kNotFound);
}

int RunGc(const CacheArgs& a) {
  ShmGcOptions options{.max_bytes = a.max_bytes};
  if (!a.older_than.empty()) options.older_than_s = ParseDuration(a.older_than);
  std::vector<ShmCacheEntry> held;
  const auto removed = CollectShmGarbage(a.dir, a.group, options, &held);
  for (const auto& e : removed) {
    // A valid, current cache went for the limits: say when it was last used.
    const std::string why = State(e) == "ok" ? "last used " + LastUsed(e) : State(e);
    fmt::print("removed {} ({}, {}): {}\n", e.key, why, FormatBytes(static_cast<double>(e.bytes)),
               SourceText(e));
  }
  for (const auto& e : held) {
    fmt::print("kept {} ({}, {}, {}): {}\n", e.key, State(e),
               FormatBytes(static_cast<double>(e.bytes)), Held(e.processes), SourceText(e));
  }
  if (removed.empty() && held.empty()) fmt::print("nothing to collect in {}\n", a.dir);
  return 0;
}

#if GPUFEED_WITH_REMOTE
nlohmann::json ToJson(const DiskCacheVerifyReport& r) {
  nlohmann::json damaged = nlohmann::json::array();
  for (const DiskBlockProblem& p : r.damaged) {
    damaged.push_back({{"path", p.path},
                       {"object", p.object},
                       {"block", p.index},
                       {"problem", p.what},
                       {"removed", p.removed},
                       {"kept_why", p.kept_why}});
  }
  return {{"dir", r.dir},
          {"ok", r.ok()},
          {"objects", r.objects},
          {"blocks", r.blocks},
          {"bytes", r.bytes},
          {"other_layout", r.other_layout},
          {"temporaries", r.temporaries},
          {"damaged", damaged}};
}

void PrintDiskReport(const DiskCacheVerifyReport& r, bool remove) {
  for (const DiskBlockProblem& p : r.damaged) {
    fmt::print("DAMAGED {} (block {} of {}): {}{}\n", p.path, p.index,
               p.object.empty() ? "an object its folder does not name" : p.object, p.what,
               p.removed ? "; removed"
               : remove  ? "; kept: " + p.kept_why
                         : "");
  }
  fmt::print(
      "{}: {} object{}, {} block{} ({}) checked: {}\n", r.dir, r.objects, r.objects == 1 ? "" : "s",
      r.blocks, r.blocks == 1 ? "" : "s", FormatBytes(static_cast<double>(r.bytes)),
      r.ok() ? "every block matches its checksum" : fmt::format("{} damaged", r.damaged.size()));
  if (r.other_layout > 0) {
    fmt::print(
        "{} blocks were written by a gpufeed of another layout: each is fetched again when "
        "it is read\n",
        r.other_layout);
  }
  if (r.temporaries > 0) {
    fmt::print(
        "{} blocks are being written, or were left by killed writers (`gpufeed` removes "
        "those as it fills the cache)\n",
        r.temporaries);
  }
  if (!r.ok() && !remove) {
    fmt::print(
        "remove the damaged blocks with `gpufeed cache verify --disk --remove`, or leave "
        "them: a process that reads one removes it and fetches the block again\n");
  }
}

// Exit 0 when every block verifies, the corrupt-data code when one does not (removed or not).
int RunVerifyDisk(const CacheArgs& a) {
  if (!a.keys.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "gpufeed cache verify: give KEY... (shared-memory caches) or --disk, not both");
  }
  const std::string dir = a.disk_dir.empty() ? DefaultDiskCacheDir() : a.disk_dir;
  const DiskCacheVerifyReport r = VerifyDiskCache(dir, a.remove);
  if (a.json) {
    fmt::print("{}\n", ToJson(r).dump(2));
  } else {
    PrintDiskReport(r, a.remove);
  }
  return r.ok() ? 0 : ExitCodeFor(ErrorCode::kCorruptData);
}
#else
int RunVerifyDisk(const CacheArgs&) {
  throw Error(ErrorCode::kUnsupported,
              "gpufeed cache verify --disk: this build of gpufeed has no remote support, so no "
              "disk cache (it was built with -DGPUFEED_WITH_REMOTE=OFF)");
}
#endif

// Exit 0 when every named cache verifies, the corrupt-data code when one does not.
int RunVerify(const CacheArgs& a) {
  if (a.disk) return RunVerifyDisk(a);
  if (!a.disk_dir.empty() || a.remove) {
    throw Error(ErrorCode::kInvalidArgument,
                "gpufeed cache verify: --disk-dir and --remove go with --disk");
  }
  if (a.keys.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "gpufeed cache verify: give KEY... or --disk");
  }
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

// build --detach: the command goes on in a child started with setsid at nice 19, and the
// first process exits at once (whoever started it reaps it and goes on). Before any thread
// starts, so the fork copies one thread.
void Detach() {
  const pid_t child = fork();
  if (child < 0) {
    throw Error(ErrorCode::kIo, fmt::format("cannot fork: {}", std::strerror(errno)));
  }
  if (child > 0) _exit(0);
  setsid();
  setpriority(PRIO_PROCESS, 0, 19);
}

// Stamps stderr lines of a detached build, which go to a log shared by all of them.
void SayDetached(const std::string& what) {
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  fmt::print(stderr, "{} gpufeed cache build (pid {}): {}\n", when, getpid(), what);
}

int RunBuild(const CacheArgs& a) {
  if (a.detach) {
    Detach();
    SayDetached(fmt::format("building {} for the node", a.key.empty() ? a.path : a.key));
  }
  SigintCancels sigint;  // Ctrl-C stops the build: its half-written file is removed
  std::shared_ptr<Source> source = OpenPath(a.path, a.fields);
  // A build handed over by a loader must be the loader's copy: another key (the loader
  // opened the source another way) would build a copy nobody asked for.
  if (!a.key.empty() && CacheKey(*source) != a.key) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} opens as cache key {}, not {} as --key says; nothing built",
                            source->Describe(), CacheKey(*source), a.key));
  }
  // The copy a loader of this data would read, without the loader.
  const CacheInfo info = OpenLoader({.source = std::move(source),
                                     .device = "cpu",
                                     .cache = {.tier = CacheTier::kShm,
                                               .shm_dir = a.dir,
                                               .shm_group = a.group,
                                               .threads = a.threads,
                                               .verbose = true,
                                               // the command's work is the build itself
                                               .background = false},
                                     .cache_only = true})
                             .cache;
  sigint.ThrowIfInterrupted("building the cache");
  if (info.tier != CacheTier::kShm) return ExitCodeFor(ErrorCode::kIo);
  fmt::print("{} {} in {:.2f} s: {}\n", info.built ? "built" : "found", info.key, info.open_seconds,
             info.path);
  if (a.detach) {
    SayDetached(fmt::format("{} {} in {:.2f} s", info.built ? "published" : "found", info.key,
                            info.open_seconds));
  }
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

void RegisterVerify(CLI::App& cache, const std::shared_ptr<CacheArgs>& args) {
  CLI::App* verify = cache.add_subcommand(
      "verify",
      "Re-hash shared-memory caches against the hashes written when they were built and name "
      "the first block that differs (readers do not re-hash: only you can write your caches); "
      "with --disk, check every block of the node-local disk cache of remote data against its "
      "checksum and name the damaged ones. Exits 4 when something is damaged");
  verify->add_option("keys", args->keys, "Shared-memory cache keys (see `gpufeed cache ls`)");
  verify->add_flag("--json", args->json,
                   "Print one JSON object per cache (with --disk: one for the disk cache)");
  verify->add_flag("--disk", args->disk,
                   "Check the node-local disk cache of remote data (cache=\"disk\") instead");
  verify->add_option("--disk-dir", args->disk_dir,
                     "With --disk: the disk cache folder (default: $XDG_CACHE_HOME/gpufeed/remote, "
                     "else ~/.cache/gpufeed/remote)");
  verify->add_flag("--remove", args->remove,
                   "With --disk: remove the damaged blocks no process is using (readers fetch "
                   "them again)");
  Run(verify, RunVerify, args);
}

}  // namespace

void RegisterCacheCommand(CLI::App& app) {
  auto args = std::make_shared<CacheArgs>();
  CLI::App* cache = app.add_subcommand(
      "cache",
      "Your shared-memory caches (/dev/shm/gpufeed-user-UID/gpufeed-KEY): one copy of a data\n"
      "set that every local process of yours reads. `cache='shm'` or 'auto' makes them; these\n"
      "commands list, verify, remove and collect them (`verify --disk`: the node-local disk\n"
      "cache of remote data). Other users' caches are not visible or used; --group names a\n"
      "group's shared caches (Loader(shm_group=...)) instead.");
  cache->require_subcommand(1);

  CLI::App* ls = cache->add_subcommand(
      "ls",
      "List caches: key, size, share built, age, last use, processes holding it now, state, "
      "source");
  ls->add_flag("--json", args->json, "Print a JSON array");
  Run(ls, RunLs, args);

  CLI::App* rm = cache->add_subcommand(
      "rm", "Remove caches (processes mapping one keep their copy until they exit)");
  rm->add_option("keys", args->keys, "Cache keys (see `gpufeed cache ls`)");
  rm->add_option("--source", args->source,
                 "Remove the caches of this data (a NumPy folder, an HDF5 file, or a folder "
                 "holding them)");
  rm->add_flag("--all", args->all, "Remove every gpufeed cache in the folder");
  rm->add_flag("--force", args->force,
               "With --all or --source: also remove caches other processes hold (they keep "
               "their copy until they exit)");
  Run(rm, RunRm, args);

  CLI::App* gc = cache->add_subcommand(
      "gc",
      "Remove half-built files of dead builders, invalid files, and caches whose source "
      "files changed or are gone; with limits, also caches unused for long or the least "
      "recently used. A cache a process holds is never removed");
  gc->add_option("--older-than", args->older_than,
                 "Also remove caches unused for longer than this (90s, 15m, 12h, 1d, 2w)");
  gc->add_option("--max-bytes", args->max_bytes,
                 "Then remove the least recently used caches until the rest take at most this "
                 "(bytes; 500M, 4G)")
      ->transform(CLI::AsSizeValue(false));
  Run(gc, RunGc, args);

  RegisterVerify(*cache, args);

  CLI::App* build = cache->add_subcommand(
      "build", "Build (or find) the shared-memory cache of a data set before training starts");
  build
      ->add_option("path", args->path,
                   "The data set: a folder of .npy files (one per field), an HDF5 file, or a "
                   "database URI (sqlite:///abs/path.db?table=T, "
                   "postgresql://user@host/db?query=...), as `gpufeed bench` takes them")
      ->required();
  build
      ->add_option("--fields", args->fields,
                   "Fields to cache: HDF5 datasets, .npy names or database columns (default: "
                   "all)")
      ->delimiter(',');
  build->add_option("--threads", args->threads, "Build threads (default: hardware threads)");
  build->add_option("--key", args->key,
                    "Build only when the data set opens as this cache key (a build a loader "
                    "hands over)");
  build->add_flag("--detach", args->detach,
                  "Go on in the background: setsid, nice 19; this command returns at "
                  "once (a loader closed during its build hands it over this way)");
  Run(build, RunBuild, args);
}

}  // namespace gpufeed::cli
