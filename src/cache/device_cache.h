// DeviceCachedSource: the whole data set resident in GPU memory, one array per field, so a
// loader on that GPU gathers each batch with a kernel (DeviceStream::GatherRows) and no host
// work per batch. The upload reads the base source in chunks on a few threads, each with
// its own stream and two pinned staging buffers (one filling while the other's copy runs),
// and applies the deterministic transforms given (casts, normalization) before the copy: the
// arrays hold the transformed rows, and schema() is the transformed schema.
//
// Read() serves the same samples from the host (the base source, transformed), for a loader
// on another device or a tool that inspects the data.
//
// Thread-safety: thread-safe after construction, like every Source.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cached_source.h"
#include "cache/device_share.h"
#include "gpufeed/cache.h"
#include "gpufeed/device.h"
#include "gpufeed/transforms.h"

namespace gpufeed {

struct DeviceUploadOptions {
  int threads = 1;       // Default: 1. Reader threads (and streams) of the upload; >= 1
  bool verbose = false;  // Default: false. Progress logged when the upload takes > 2 s
  // Default: 8 MiB. Rows per staging chunk: this many bytes of samples, at least one row.
  size_t chunk_bytes = size_t{8} << 20;
  // Default: false = a private copy. True: one copy for every process on this GPU that uploads
  // the same rows, through CUDA IPC (DeviceShare: the files live in the user's folder under
  // shm_dir, or shm_group's); a process that cannot share gets a private copy and share_note()
  // says why.
  bool share = false;
  std::string shm_dir = kShmRoot;
  std::optional<gid_t> shm_group = std::nullopt;
};

class DeviceCachedSource : public CachedSource {
 public:
  // Uploads every sample of `base`, transformed by `transforms`, to `device`. REQUIRES: every
  // transform is deterministic (Transform::deterministic()). Throws Error(kDevice) naming the
  // bytes when the device (or pinned staging) memory cannot be had, and what the base source
  // throws, and Error(kCancelled) when the calling thread's CancelToken (gpufeed/cancel.h) is
  // cancelled during the upload; nothing stays allocated then.
  static std::shared_ptr<DeviceCachedSource> Upload(
      std::shared_ptr<Source> base, std::shared_ptr<Device> device,
      std::vector<std::shared_ptr<Transform>> transforms, DeviceUploadOptions options);
  ~DeviceCachedSource() override;
  DeviceCachedSource(const DeviceCachedSource&) = delete;
  DeviceCachedSource& operator=(const DeviceCachedSource&) = delete;

  // The transformed schema, and the base's identity with the transforms: the rows differ.
  const Schema& schema() const override { return schema_; }
  std::string Describe() const override;
  std::string Identity() const override;
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override;
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override;
  const DeviceResidentRows* device_rows() const override { return &rows_; }

  uint64_t device_bytes() const;  // what the arrays take on the device
  // Seconds the upload took (for an imported copy: the import).
  double upload_seconds() const { return upload_seconds_; }
  // How the copy is held: "uploaded here and shared ...", "imported the copy process N
  // uploaded ...", "a private copy: <why>"; empty when sharing was not asked for.
  std::string share_note() const;
  bool imported() const;

 private:
  DeviceCachedSource(std::shared_ptr<Source> base, std::shared_ptr<Device> device,
                     std::vector<std::shared_ptr<Transform>> transforms);
  void UploadAll(const DeviceUploadOptions& options);
  // Fills the arrays rows_.fields points at from the base source.
  void FillArrays(const DeviceUploadOptions& options);

  std::vector<std::shared_ptr<Transform>> transforms_;
  Schema schema_;  // after the transforms
  DeviceResidentRows rows_;
  std::vector<uint64_t> array_bytes_;
  double upload_seconds_ = 0;
  std::shared_ptr<DeviceShare> share_;  // holds the arrays when sharing was asked for
};

}  // namespace gpufeed
