// The disk tier: turned on for the process (UseDiskTier), and reported (DiskTierInfo).
#include "cache/disk_tier.h"

#include <fmt/format.h>

#include "core/io/remote_hooks.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"

namespace gpufeed {

void UseDiskTier(const std::string& path, const CacheOptions& options) {
  if (path.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "cache tier \"disk\" keeps remote data (s3://, http(s)://) on this node: it "
                "needs the data's URI");
  }
  if (!IsRemoteUri(path)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cache tier \"disk\" keeps remote data (s3://, http(s)://) on this "
                            "node; {} is already on disk: use \"ram\" or \"shm\" to keep it in "
                            "memory",
                            path));
  }
  UseNodeDiskCache(options.disk_dir, options.disk_budget_bytes);
}

CacheInfo DiskTierInfo(const Source& source, const CacheOptions& options) {
  const std::string dir = NodeDiskCacheDir();
  if (dir.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cache tier \"disk\": {} was opened without it, so its reads would "
                            "not go through it; turn it on before opening the source "
                            "(UseDiskTier; OpenLoader does, for data named by LoaderRecipe::path)",
                            source.Describe()));
  }
  CacheInfo info;
  info.tier = CacheTier::kDisk;
  info.reason = "asked for: remote bytes kept on this node's disk";
  info.path = dir;
  info.bytes = source.schema().SampleBytes() * static_cast<uint64_t>(source.size());
  info.loader_transforms = options.transforms;
  return info;
}

}  // namespace gpufeed
