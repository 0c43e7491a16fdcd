// The fills OpenCached runs in the background: an shm cache built (or another process's build
// waited for) and a RAM preload. See background_cache.h.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "cache/background_cache.h"
#include "cache/ram_cache.h"
#include "cache/shm_open.h"
#include "cache/shm_user_dir.h"

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

}  // namespace

std::shared_ptr<Source> StartShmFill(std::shared_ptr<Source> base, const CacheOptions& options,
                                     std::optional<gid_t> group, int threads, CacheInfo& info) {
  // Opened (and made) now: a folder another user planted is refused before any thread starts.
  const auto folder = ShmUserDir::Open(options.shm_dir, /*create=*/true, group);
  info.key = CacheKey(*base);
  info.path = folder->PathOf("gpufeed-" + info.key);
  const std::string chosen = info.reason;
  info.reason = fmt::format("{}; {}", chosen, kStreaming);
  auto progress = std::make_shared<CacheProgress>(
      CacheProgress::Snapshot{.tier = base->cache_tier(), .reason = info.reason});
  info.progress = progress;
  ShmOpenOptions open{
      .dir = options.shm_dir, .group = group, .threads = threads, .verbose = options.verbose};
  auto fill = [base, open, chosen, folder_path = folder->path(), key = info.key,
               path = info.path](CacheProgress& p) mutable {
    WaitReport waiting(p, folder_path, key, path);
    open.on_progress = [&p](double share) { p.SetFraction(std::min(0.99, share)); };
    open.while_waiting = [&waiting] { waiting(); };
    ShmOpenResult shm = OpenShmCache(base, open);
    if (shm.source == nullptr) {
      return BackgroundCachedSource::Filled{
          nullptr, CacheTier::kNone,
          fmt::format("the shared-memory cache could not be built: {}; reading from the source "
                      "without a cache",
                      shm.failure)};
    }
    return BackgroundCachedSource::Filled{
        shm.source, CacheTier::kShm,
        fmt::format("{}; {} in the background", chosen,
                    shm.built ? "built" : "another process built it"),
        shm.built};
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
  auto progress = std::make_shared<CacheProgress>(
      CacheProgress::Snapshot{.tier = CacheTier::kRam, .reason = info.reason});
  info.progress = progress;
  auto fill = [ram, threads, verbose = options.verbose, chosen](CacheProgress& p) {
    ram->Preload(threads, verbose, [&p](double share) { p.SetFraction(std::min(0.99, share)); });
    return BackgroundCachedSource::Filled{ram, CacheTier::kRam,
                                          chosen + "; preloaded in the background", true};
  };
  return std::make_shared<BackgroundCachedSource>(ram, std::move(fill), std::move(progress),
                                                  options.verbose);
}

}  // namespace gpufeed
