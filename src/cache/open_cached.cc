// OpenCached: checks what it is asked, then CacheInTier picks a tier within the budgets, says
// why once, and wraps the source.
#include "cache/open_cached.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "cache/background_cache.h"
#include "cache/deferred_cache.h"
#include "cache/device_cache.h"
#include "cache/disk_tier.h"
#include "cache/gather_probe.h"
#include "cache/ram_cache.h"
#include "cache/shm/shm_format.h"
#include "cache/shm/shm_open.h"
#include "cache/shm/shm_source.h"
#include "cache/shm/shm_user_dir.h"
#include "cache/tier_choice.h"
#include "core/log.h"
#include "core/system/system_memory.h"
#include "gpufeed/cache.h"
#include "gpufeed/cache_remedy.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs fs {};
  if (statvfs(dir.c_str(), &fs) != 0) return 0;
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

// Why device-resident rows cannot feed a loader running `transforms`; empty when they can.
std::string DeviceRefusal(const std::vector<std::shared_ptr<Transform>>& transforms) {
  for (const auto& t : transforms) {
    if (!t->deterministic()) {
      return fmt::format(
          "the transform {} is random (a new draw every batch, on the host), "
          "and device-resident rows never pass through the host",
          t->name());
    }
  }
  return {};
}

// $LOCAL_WORLD_SIZE (torchrun: the training processes on this node), 1 when unset or not a
// positive number.
int LocalProcesses() {
  const char* text = std::getenv("LOCAL_WORLD_SIZE");
  if (text == nullptr) return 1;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && n > 0 && n < 1 << 20 ? static_cast<int>(n) : 1;
}

}  // namespace

std::string CacheInfo::ToString() const {
  if (path.empty()) return fmt::format("{} ({})", CacheTierName(tier), reason);
  return fmt::format("{} ({}; {})", CacheTierName(tier), reason, path);
}

std::string CacheKey(const Source& source) {
  return ShmCacheKey(source.Identity(), source.schema().ToString());
}

namespace {

// What the tier choice reads: the set's size, the budgets, the device, the shm folder.
TierInputs GatherTierInputs(const Source& source, const CacheOptions& options) {
  TierInputs in;
  in.requested = options.tier;
  in.bytes = source.schema().SampleBytes() * static_cast<uint64_t>(source.size());
  in.ram_budget = options.ram_budget_bytes != 0 ? options.ram_budget_bytes : RamBudgetBytes();
  in.cuda = options.device != nullptr && options.device->type() == DeviceType::kCuda;
  in.device_name = options.device != nullptr ? options.device->name() : "not given";
  in.device_refusal = DeviceRefusal(options.transforms);
  if (in.device_refusal.empty() && !options.transforms.empty()) {
    Schema uploaded = source.schema();
    for (const auto& t : options.transforms) uploaded = t->OutputSchema(uploaded);
    in.device_bytes = uploaded.SampleBytes() * static_cast<uint64_t>(source.size());
  }
  if (in.cuda && (options.tier == CacheTier::kAuto || options.tier == CacheTier::kDevice)) {
    in.device_budget = options.device_budget_bytes != 0
                           ? options.device_budget_bytes
                           : options.device->MemoryInfo().free_bytes / 5 * 2;
  }
  in.shareable = source.shareable_across_processes();
  in.shm_free = FreeBytes(options.shm_dir);
  in.local_processes = LocalProcesses();
  return in;
}

// The device tier: the kernels readied, then the set uploaded (shared through CUDA IPC where
// the source's identity means the same in another process). Fills `result`'s device fields.
std::shared_ptr<Source> UploadToDevice(const std::shared_ptr<Source>& source,
                                       const CacheOptions& options, const TierInputs& in,
                                       int threads, const std::optional<gid_t>& group,
                                       CacheInfo& result) {
  // The kernels first: a GPU whose driver cannot load them should not get the data set.
  options.device->PrepareGather();
  DeviceUploadOptions upload{.threads = std::min(threads, 4), .verbose = options.verbose};
  upload.share = in.shareable;
  upload.shm_dir = options.shm_dir;
  upload.shm_group = group;
  auto device = DeviceCachedSource::Upload(source, options.device, options.transforms, upload);
  result.device_share = in.shareable ? device->share_note()
                                     : "a private copy: the source's identity is "
                                       "not meaningful in another process";
  result.loader_transforms.clear();
  result.bytes = in.device_bytes != 0 ? in.device_bytes : in.bytes;
  return device;
}

// The host tiers: a RAM copy, the published shm cache, or an shm cache opened (built, or
// waited for). An shm cache that could not be built leaves the source uncached, and says why.
std::shared_ptr<Source> ServeHostTier(const std::shared_ptr<Source>& source,
                                      const CacheOptions& options,
                                      const std::shared_ptr<Source>& published, int threads,
                                      const std::optional<gid_t>& group, CacheInfo& result) {
  // A background fill takes half the threads: the loader's workers read meanwhile.
  const int fill_threads = std::max(1, threads / 2);
  if (result.tier == CacheTier::kRam) {
    if (options.preload && options.background) {
      return StartRamPreload(source, options, fill_threads, result);
    }
    auto ram = std::make_shared<RamCachedSource>(source);
    if (options.preload) ram->Preload(threads, options.verbose);
    return ram;
  }
  if (result.tier != CacheTier::kShm) return nullptr;
  if (published != nullptr) {
    result.key = CacheKey(*source);
    result.path = static_cast<const ShmCachedSource&>(*published).path();
    return published;
  }
  if (options.background) return StartShmFill(source, options, group, fill_threads, result);
  ShmOpenResult shm = OpenShmCache(
      source,
      {.dir = options.shm_dir, .group = group, .threads = threads, .verbose = options.verbose});
  result.key = shm.key;
  result.built = shm.built;
  if (shm.source) {
    result.path = shm.path;
    return shm.source;
  }
  result.tier = CacheTier::kNone;
  result.reason = fmt::format("the shared-memory cache could not be built: {}", shm.failure);
  return nullptr;
}

// Under "auto" with nothing published: whether the filler measures and decides, because the
// budgets allow a host copy that would have to be measured for.
bool AutoDecidesInTheBackground(const CacheOptions& options, const TierInputs& in) {
  if (!options.background || options.tier != CacheTier::kAuto || !options.measure_gather ||
      in.shm_published) {
    return false;
  }
  const CacheTier unmeasured = ChooseTier(in).tier;
  return unmeasured == CacheTier::kShm || unmeasured == CacheTier::kRam;
}

// What CacheInTier returns: logs the choice once and hands `result` to the caller.
std::shared_ptr<Source> Opened(std::shared_ptr<Source> cached, CacheInfo result,
                               const CacheOptions& options,
                               std::chrono::steady_clock::time_point start, CacheInfo* info) {
  result.open_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.verbose) Log(LogLevel::kInfo, "cache: " + result.ToString());
  if (info != nullptr) *info = std::move(result);
  return cached;
}

}  // namespace

std::shared_ptr<Source> OpenCached(std::shared_ptr<Source> source, CacheOptions options,
                                   CacheInfo* info) {
  if (source == nullptr) throw Error(ErrorCode::kInvalidArgument, "OpenCached: source is null");
  if (options.tier != CacheTier::kNone && options.tier != CacheTier::kDisk &&
      !source->rows_repeat()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: its samples differ from read to read (random crops drawn per "
                            "epoch), so a copy of them would freeze one draw; cache what "
                            "repeats with the source's own cache option (images: the decoded "
                            "images, ImageOptions::cache)",
                            source->Describe()));
  }
  return CacheInTier(std::move(source), options, info);
}

std::shared_ptr<Source> CacheInTier(std::shared_ptr<Source> source, const CacheOptions& options,
                                    CacheInfo* info) {
  // The disk tier is below the source, in the file system: nothing to wrap.
  if (options.tier == CacheTier::kDisk) {
    CacheInfo disk = DiskTierInfo(*source, options);
    return Opened(std::move(source), std::move(disk), options, std::chrono::steady_clock::now(),
                  info);
  }
  const auto start = std::chrono::steady_clock::now();
  const int threads = options.threads > 0 ? options.threads : UsableCpus();
  // A group named for sharing is checked whatever the tier turns out to be.
  std::optional<gid_t> group;
  if (!options.shm_group.empty()) group = ResolveShmGroup(options.shm_group);
  TierInputs in = GatherTierInputs(*source, options);
  // Under "auto" and "shm", a published cache serves at once: no probe, no build, no wait
  // for a lock, and the first batch already reads the copy.
  std::shared_ptr<Source> published;
  if ((options.tier == CacheTier::kAuto || options.tier == CacheTier::kShm) && in.shareable) {
    published = OpenPublishedShmCache(source, options.shm_dir, group);
    in.shm_published = published != nullptr;
  }
  // Under "auto", a host copy (shm or RAM) is made only when gathering from it is measured
  // faster than gathering from the source: a page-cached file's mapping can be as fast.
  const auto choose = [&] {
    TierChoice c = ChooseTier(in);
    if (options.tier == CacheTier::kAuto && options.measure_gather && !in.measured &&
        !in.shm_published && (c.tier == CacheTier::kShm || c.tier == CacheTier::kRam)) {
      in.measured = ProbeGatherRates(*source);
      c = ChooseTier(in);
    }
    return c;
  };
  CacheInfo result;
  result.bytes = in.bytes;
  result.loader_transforms = options.transforms;
  std::shared_ptr<Source> cached = source;
  // The probe reads thousands of random rows (seconds from a slow source): in the background,
  // a host copy the budgets allow is measured for, and made, by the filler.
  if (AutoDecidesInTheBackground(options, in)) {
    cached = StartAutoFill(source, options, in, group, std::max(1, threads / 2), result);
    return Opened(std::move(cached), std::move(result), options, start, info);
  }
  TierChoice choice = choose();
  if (choice.tier == CacheTier::kDevice) {
    try {
      cached = UploadToDevice(source, options, in, threads, group, result);
    } catch (const Error& e) {
      // Asked for "device", the error is the answer. Under "auto" the device tier was a
      // choice, not a promise: the next tier serves, and the reason says what failed.
      if (options.tier != CacheTier::kAuto || e.code() != ErrorCode::kDevice) throw;
      in.device_refusal = fmt::format("the device tier failed ({})", e.what());
      choice = choose();
    }
  }
  result.tier = choice.tier;
  result.reason = choice.reason;
  if (choice.tier == CacheTier::kDevice && !result.device_share.empty()) {
    result.reason += "; " + result.device_share;
  }
  if (in.measured) {
    result.measured = {in.measured->source_bytes_per_s, in.measured->ram_bytes_per_s,
                       in.measured->shm_bytes_per_s};
  }
  if (auto host = ServeHostTier(source, options, published, threads, group, result)) {
    cached = std::move(host);
  }
  return Opened(std::move(cached), std::move(result), options, start, info);
}

std::string StartCacheWhileRunning(const Source& loader_source, std::string* why) {
  const DeferredCachedSource* deferred = DeferredCachedSource::Of(loader_source);
  if (deferred == nullptr) {
    *why = "the loader was not opened to cache while it runs (LoaderRecipe::remedies)";
    return {};
  }
  return deferred->Start(why);
}

}  // namespace gpufeed
