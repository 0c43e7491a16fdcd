// The fills OpenCached runs in the background: an shm cache built (or another process's build
// waited for) and a RAM preload. See background_cache.h.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "cache/background_cache.h"
#include "cache/detached_build.h"
#include "cache/gather_probe.h"
#include "cache/ram_cache.h"
#include "cache/shm/shm_open.h"
#include "cache/shm/shm_user_dir.h"
#include "core/log.h"

namespace gpufeed {
namespace {

constexpr char kStreaming[] =
    "building in the background; streaming from the source until it is complete";

// The share of the samples another process's build of `key` has written: the tmp file's
// allocated bytes over its size (tmpfs allocates a page when it is first written). 0 when
// there is no such file.
double OtherBuildersShare(const std::string& folder, const std::string& key) {
  const std::string prefix = fmt::format("gpufeed-{}.tmp-", key);
  std::error_code ec;
  double share = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) continue;
    share = std::max(share, std::min(1.0, static_cast<double>(st.st_blocks) * 512 /
                                              static_cast<double>(st.st_size)));
  }
  return share;
}

// What OpenShmCache reports while another process holds the build lock: the reason says so
// once, the share is refreshed at most once a second.
class WaitReport {
 public:
  WaitReport(CacheProgress& progress, std::string folder, std::string key, std::string path)
      : progress_(progress),
        folder_(std::move(folder)),
        key_(std::move(key)),
        path_(std::move(path)) {}

  void operator()() {
    const auto now = std::chrono::steady_clock::now();
    if (said_ && now - last_ < std::chrono::seconds(1)) return;
    if (!said_) {
      progress_.SetReason(
          fmt::format("another process is building {}; streaming from the "
                      "source until it publishes it",
                      path_));
      said_ = true;
    }
    last_ = now;
    progress_.SetFraction(std::min(0.99, OtherBuildersShare(folder_, key_)));
  }

 private:
  CacheProgress& progress_;
  const std::string folder_;
  const std::string key_;
  const std::string path_;
  bool said_ = false;
  std::chrono::steady_clock::time_point last_;
};

// The detached build that finishes what a stopped fill of `options`' cache started; an empty
// source_path when the build stays in this process (CacheOptions::detach, source_path).
DetachedBuild HandOverOf(const CacheOptions& options, int threads) {
  DetachedBuild build;
  if (!options.detach) return build;
  build.cli_binary = options.cli_binary;
  build.source_path = options.source_path;
  build.fields = options.source_fields;
  build.shm_dir = options.shm_dir;
  build.shm_group = options.shm_group;
  build.threads = threads;
  return build;
}

// Called with the build lock released, after this process stopped building `key`: hands the
// build to a detached `gpufeed cache build`, or says once why it stays unfinished.
void HandOver(DetachedBuild build, const std::string& key, const std::string& path, bool verbose) {
  if (build.source_path.empty()) return;
  build.key = key;
  const std::string why = SpawnDetachedBuild(build);
  if (!verbose) return;
  if (why.empty()) {
    Log(LogLevel::kInfo, fmt::format("cache: the build of {} goes on in a detached `gpufeed "
                                     "cache build` (nice 19), which publishes it",
                                     path));
  } else {
    Log(LogLevel::kInfo,
        fmt::format("cache: the build of {} stopped and nothing was published: {}", path, why));
  }
}

// Builds (or waits for and maps) the shm cache of `base`, reporting to `p`. A build this
// process stops (the loader closed) is handed over as `hand_over` says.
BackgroundCachedSource::Filled FillShm(const std::shared_ptr<Source>& base, ShmOpenOptions open,
                                       const std::string& chosen, const std::string& folder,
                                       const std::string& key, const std::string& path,
                                       const DetachedBuild& hand_over, CacheProgress& p) {
  WaitReport waiting(p, folder, key, path);
  bool building = false;  // this process holds the build lock and writes the file
  open.on_progress = [&p](double share) { p.SetFraction(std::min(0.99, share)); };
  open.while_waiting = [&waiting] { waiting(); };
  open.on_build_start = [&building] { building = true; };
  ShmOpenResult shm;
  try {
    shm = OpenShmCache(base, open);
  } catch (const Error& e) {
    // OpenShmCache has released the lock and removed its tmp file: the detached builder
    // takes the lock at once. A wait for another builder is not handed over: that one builds.
    if (e.code() == ErrorCode::kCancelled && building) {
      HandOver(hand_over, key, path, open.verbose);
    }
    throw;
  }
  if (shm.source == nullptr) {
    return {nullptr, CacheTier::kNone,
            fmt::format("the shared-memory cache could not be built: {}; reading from the "
                        "source without a cache",
                        shm.failure)};
  }
  return {shm.source, CacheTier::kShm,
          fmt::format("{}; {} in the background", chosen,
                      shm.built ? "built" : "another process built it"),
          shm.built};
}

// A RAM copy of `base`, preloaded on `threads` threads when `preload` (else it fills on
// touch from the moment it serves).
BackgroundCachedSource::Filled FillRam(const std::shared_ptr<Source>& ram_source, bool preload,
                                       int threads, bool verbose, const std::string& chosen,
                                       CacheProgress& p) {
  auto* ram = static_cast<RamCachedSource*>(ram_source.get());
  if (!preload) return {ram_source, CacheTier::kRam, chosen, true};
  ram->Preload(threads, verbose, [&p](double share) { p.SetFraction(std::min(0.99, share)); });
  return {ram_source, CacheTier::kRam, chosen + "; preloaded in the background", true};
}

// The progress of a fill that starts now, serving `serving`, with `info.reason`; kept in `info`.
std::shared_ptr<CacheProgress> NewProgress(CacheTier serving, CacheInfo& info) {
  auto progress = std::make_shared<CacheProgress>(
      CacheProgress::Snapshot{.tier = serving, .reason = info.reason});
  info.progress = progress;
  return progress;
}

// How a fill opens (or waits for) the shm cache in `options.shm_dir`.
ShmOpenOptions ShmOpenOf(const CacheOptions& options, std::optional<gid_t> group, int threads) {
  return {.dir = options.shm_dir, .group = group, .threads = threads, .verbose = options.verbose};
}

}  // namespace

std::shared_ptr<Source> StartShmFill(std::shared_ptr<Source> base, const CacheOptions& options,
                                     std::optional<gid_t> group, int threads, CacheInfo& info) {
  // Opened (and made) now: a folder another user planted is refused before any thread starts.
  const auto folder = ShmUserDir::Open(options.shm_dir, /*create=*/true, group);
  info.key = CacheKey(*base);
  info.path = folder->PathOf("gpufeed-" + info.key);
  const std::string chosen = info.reason;
  info.reason = fmt::format("{}; {}", chosen, kStreaming);
  auto progress = NewProgress(base->cache_tier(), info);
  const ShmOpenOptions open = ShmOpenOf(options, group, threads);
  auto fill = [base, open, chosen, folder_path = folder->path(), key = info.key, path = info.path,
               hand_over = HandOverOf(options, threads)](CacheProgress& p) {
    return FillShm(base, open, chosen, folder_path, key, path, hand_over, p);
  };
  return std::make_shared<BackgroundCachedSource>(std::move(base), std::move(fill),
                                                  std::move(progress), options.verbose);
}

std::shared_ptr<Source> StartRamPreload(std::shared_ptr<Source> base, const CacheOptions& options,
                                        int threads, CacheInfo& info) {
  auto ram = std::make_shared<RamCachedSource>(std::move(base));
  const std::string chosen = info.reason;
  info.reason = fmt::format(
      "{}; preloading in the background; rows not loaded yet are read "
      "from the source",
      chosen);
  auto progress = NewProgress(CacheTier::kRam, info);
  auto fill = [ram, threads, verbose = options.verbose, chosen](CacheProgress& p) {
    return FillRam(ram, /*preload=*/true, threads, verbose, chosen, p);
  };
  return std::make_shared<BackgroundCachedSource>(ram, std::move(fill), std::move(progress),
                                                  options.verbose);
}

std::shared_ptr<Source> StartAutoFill(std::shared_ptr<Source> base, const CacheOptions& options,
                                      TierInputs in, std::optional<gid_t> group, int threads,
                                      CacheInfo& info) {
  const auto folder = ShmUserDir::Open(options.shm_dir, /*create=*/true, group);
  info.tier = CacheTier::kNone;  // until the measurement chooses
  info.reason =
      "auto: measuring in the background which tier gathers fastest; streaming from "
      "the source until a copy is complete";
  auto progress = NewProgress(base->cache_tier(), info);
  const ShmOpenOptions open = ShmOpenOf(options, group, threads);
  auto fill = [base, open, in, folder_path = folder->path(), preload = options.preload,
               verbose = options.verbose, threads,
               hand_over = HandOverOf(options, threads)](CacheProgress& p) mutable {
    in.measured = ProbeGatherRates(*base);
    const TierChoice choice = ChooseTier(in);
    if (verbose)
      Log(LogLevel::kInfo,
          fmt::format("cache: auto chose {} ({})", CacheTierName(choice.tier), choice.reason));
    if (choice.tier == CacheTier::kShm) {
      const std::string key = CacheKey(*base);
      const std::string path = folder_path + "/gpufeed-" + key;
      p.SetReason(fmt::format("{}; {}", choice.reason, kStreaming));
      return FillShm(base, open, choice.reason, folder_path, key, path, hand_over, p);
    }
    if (choice.tier == CacheTier::kRam) {
      p.SetReason(fmt::format("{}; {}", choice.reason, kStreaming));
      return FillRam(std::make_shared<RamCachedSource>(base), preload, threads, verbose,
                     choice.reason, p);
    }
    return BackgroundCachedSource::Filled{nullptr, CacheTier::kNone, choice.reason};
  };
  return std::make_shared<BackgroundCachedSource>(std::move(base), std::move(fill),
                                                  std::move(progress), options.verbose);
}

}  // namespace gpufeed
