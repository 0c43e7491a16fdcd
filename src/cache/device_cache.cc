#include "cache/device_cache.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numeric>

#include "core/checked_math.h"
#include "core/format.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "gpufeed/cancel.h"
#include "gpufeed/error.h"
#include "pipeline/batch_layout.h"

namespace gpufeed {
namespace {

// One upload thread's stream and its two pinned staging buffers: one fills while the copy
// out of the other runs. Freed only after the stream has drained, so no copy reads freed
// memory whatever failed.
class UploadLane {
 public:
  UploadLane(Device& device, size_t staging_bytes) : device_(device) {
    stream_ = device.NewStream();
    try {
      for (auto& buffer : staging_) {
        buffer = static_cast<std::byte*>(device.AllocHost(staging_bytes));
      }
    } catch (...) {
      // No destructor runs for a constructor that throws: free the first buffer here.
      FreeStaging();
      throw;
    }
  }
  ~UploadLane() {
    if (stream_) {
      try {
        stream_->Synchronize();
      } catch (...) {
        // The failure was (or will be) reported by Finish or the chunk that caused it.
      }
    }
    FreeStaging();
  }
  UploadLane(const UploadLane&) = delete;
  UploadLane& operator=(const UploadLane&) = delete;

  // A staging buffer no queued copy reads any more.
  std::byte* NextBuffer() {
    current_ = 1 - current_;
    if (done_[current_]) done_[current_]->Wait();
    done_[current_].reset();
    return staging_[current_];
  }
  DeviceStream& stream() { return *stream_; }
  void Issued() { done_[current_] = stream_->Record(); }
  // Throws the error of a copy that failed on the stream.
  void Finish() { stream_->Synchronize(); }

  std::unique_ptr<SourceWorkerState> state;

 private:
  void FreeStaging() noexcept {
    for (std::byte*& buffer : staging_) {
      if (buffer != nullptr) device_.FreeHost(buffer);
      buffer = nullptr;
    }
  }

  Device& device_;
  std::unique_ptr<DeviceStream> stream_;
  std::byte* staging_[2] = {nullptr, nullptr};
  std::shared_ptr<DeviceEvent> done_[2];
  int current_ = 1;
};

Schema TransformedSchema(const Schema& schema,
                         const std::vector<std::shared_ptr<Transform>>& transforms) {
  Schema out = schema;
  for (const auto& t : transforms) out = t->OutputSchema(out);
  return out;
}

// What Read needs to run the transforms on the host: a scratch batch sized for the widest
// dtype along the chain.
class ReadScratch : public SourceWorkerState {
 public:
  std::unique_ptr<SourceWorkerState> base;
  std::vector<std::byte> buffer;
};

}  // namespace

DeviceCachedSource::DeviceCachedSource(std::shared_ptr<Source> base, std::shared_ptr<Device> device,
                                       std::vector<std::shared_ptr<Transform>> transforms)
    : CachedSource(std::move(base), CacheTier::kDevice),
      transforms_(std::move(transforms)),
      schema_(TransformedSchema(base_->schema(), transforms_)) {
  rows_.device = std::move(device);
}

DeviceCachedSource::~DeviceCachedSource() {
  if (share_ != nullptr) return;  // the share frees (or keeps) its block
  for (const std::byte* array : rows_.fields) {
    if (array != nullptr) rows_.device->FreeDevice(const_cast<std::byte*>(array));
  }
}

std::shared_ptr<DeviceCachedSource> DeviceCachedSource::Upload(
    std::shared_ptr<Source> base, std::shared_ptr<Device> device,
    std::vector<std::shared_ptr<Transform>> transforms, DeviceUploadOptions options) {
  GPUFEED_ASSERT(base != nullptr && device != nullptr, "Upload: base and device");
  for (const auto& t : transforms) {
    GPUFEED_ASSERT(t->deterministic(), "Upload: only deterministic transforms run before upload");
  }
  std::shared_ptr<DeviceCachedSource> source(
      new DeviceCachedSource(std::move(base), std::move(device), std::move(transforms)));
  source->UploadAll(options);  // on a throw, the destructor frees what was allocated
  return source;
}

void DeviceCachedSource::UploadAll(const DeviceUploadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Device& device = *rows_.device;
  const int64_t samples = base_->size();
  for (const FieldSpec& field : schema_.fields) {
    array_bytes_.push_back(MulOrThrow(field.SampleBytes(), static_cast<uint64_t>(samples),
                                      "device cache array", ErrorCode::kInvalidArgument));
  }
  if (options.share) {
    const std::string text = fmt::format("gpufeed-device-v1|{}|{}", Identity(), schema_.ToString());
    DeviceShareRequest request{.shm_dir = options.shm_dir,
                               .group = options.shm_group,
                               .key = fmt::format("{:016x}", XXH3_64bits(text.data(), text.size())),
                               .array_bytes = array_bytes_};
    try {
      share_ = DeviceShare::Acquire(request, rows_.device, [&](const std::vector<std::byte*>& f) {
        rows_.fields.assign(f.begin(), f.end());
        FillArrays(options);
      });
    } catch (...) {
      rows_.fields.clear();  // Acquire freed the block they pointed into
      throw;
    }
    rows_.fields.assign(share_->fields().begin(), share_->fields().end());
    upload_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return;
  }
  for (const uint64_t bytes : array_bytes_) {
    // One byte for an empty array keeps every field's pointer distinct and valid.
    rows_.fields.push_back(
        static_cast<std::byte*>(device.AllocDevice(std::max<uint64_t>(1, bytes))));
  }
  FillArrays(options);
  upload_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string DeviceCachedSource::share_note() const {
  return share_ != nullptr ? share_->note() : std::string();
}

bool DeviceCachedSource::imported() const { return share_ != nullptr && share_->imported(); }

void DeviceCachedSource::FillArrays(const DeviceUploadOptions& options) {
  Device& device = *rows_.device;
  const int64_t samples = base_->size();
  if (samples == 0) return;
  const size_t sample_bytes = std::max<size_t>(1, base_->schema().SampleBytes());
  const int64_t chunk =
      std::clamp<int64_t>(static_cast<int64_t>(options.chunk_bytes / sample_bytes), 1, samples);
  const BatchLayout layout(base_->schema(), transforms_, chunk);
  const int64_t chunks = (samples + chunk - 1) / chunk;
  const int threads = static_cast<int>(std::clamp<int64_t>(options.threads, 1, chunks));

  std::vector<std::unique_ptr<UploadLane>> lanes;
  for (int i = 0; i < threads; ++i) {
    lanes.push_back(std::make_unique<UploadLane>(device, layout.buffer_bytes()));
  }
  std::atomic<bool> failed{false};
  const uint64_t total_bytes =
      std::accumulate(array_bytes_.begin(), array_bytes_.end(), uint64_t{0});
  TenthsProgress progress(options.verbose, static_cast<uint64_t>(samples),
                          [&](int percent, uint64_t, double s) {
                            return fmt::format("cache: uploading {} to {}: {}% of {} ({:.0f} s)",
                                               base_->Describe(), device.name(), percent,
                                               FormatBytes(total_bytes), s);
                          });
  const std::string what = fmt::format("uploading {} to {}", base_->Describe(), device.name());
  ThreadPool pool(threads);
  pool.ParallelFor(chunks, [&](int64_t task, int thread) {
    if (failed.load()) return;  // the first error is what the caller hears
    try {
      ThrowIfCancelled(what);  // every chunk (options.chunk_bytes)
      UploadLane& lane = *lanes[static_cast<size_t>(thread)];
      const int64_t begin = task * chunk;
      const int64_t rows = std::min(samples, begin + chunk) - begin;
      std::vector<int64_t> indices(static_cast<size_t>(rows));
      std::iota(indices.begin(), indices.end(), begin);
      const BatchView view = layout.View(lane.NextBuffer(), rows);
      if (!lane.state) lane.state = base_->NewWorkerState();
      base_->Read(indices, view, lane.state.get());
      for (size_t i = 0; i < transforms_.size(); ++i) {
        transforms_[i]->Apply(layout.stage_schema(i), view, 0);  // deterministic: seed unused
      }
      for (size_t f = 0; f < schema_.fields.size(); ++f) {
        const size_t row_bytes = schema_.fields[f].SampleBytes();
        if (row_bytes == 0) continue;
        lane.stream().CopyToDevice(
            const_cast<std::byte*>(rows_.fields[f]) + static_cast<size_t>(begin) * row_bytes,
            view.fields[f], static_cast<size_t>(rows) * row_bytes);
      }
      lane.Issued();
      progress.Add(static_cast<uint64_t>(rows));
    } catch (...) {
      failed = true;
      throw;
    }
  });
  for (auto& lane : lanes) lane->Finish();
}

std::string DeviceCachedSource::Describe() const {
  return fmt::format("{} resident on {}", base_->Describe(), rows_.device->name());
}

std::string DeviceCachedSource::Identity() const {
  std::string identity = base_->Identity();
// g++ 12 warns -Wrestrict on `"literal" + std::string` inside libstdc++ (a false positive,
// GCC bug 105329); silenced for this line only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"
  for (const auto& t : transforms_) identity += "|" + t->name();
#pragma GCC diagnostic pop
  return identity;
}

uint64_t DeviceCachedSource::device_bytes() const {
  return std::accumulate(array_bytes_.begin(), array_bytes_.end(), uint64_t{0});
}

std::unique_ptr<SourceWorkerState> DeviceCachedSource::NewWorkerState() const {
  auto state = std::make_unique<ReadScratch>();
  state->base = base_->NewWorkerState();
  return state;
}

void DeviceCachedSource::Read(std::span<const int64_t> indices, const BatchView& out,
                              SourceWorkerState* state) const {
  CheckReadRequest(*this, indices, out);
  auto* scratch = static_cast<ReadScratch*>(state);
  SourceWorkerState* base_state = scratch != nullptr ? scratch->base.get() : nullptr;
  if (transforms_.empty()) {
    base_->Read(indices, out, base_state);
    return;
  }
  // The arrays hold transformed rows: the host path transforms the same way, in a scratch
  // batch wide enough for every stage.
  const auto rows = static_cast<int64_t>(indices.size());
  const BatchLayout layout(base_->schema(), transforms_, std::max<int64_t>(1, rows));
  std::vector<std::byte> local;
  std::vector<std::byte>& buffer = scratch != nullptr ? scratch->buffer : local;
  if (buffer.size() < layout.buffer_bytes()) buffer.resize(layout.buffer_bytes());
  const BatchView view = layout.View(buffer.data(), rows);
  base_->Read(indices, view, base_state);
  for (size_t i = 0; i < transforms_.size(); ++i) {
    transforms_[i]->Apply(layout.stage_schema(i), view, 0);
  }
  for (size_t f = 0; f < schema_.fields.size(); ++f) {
    std::memcpy(out.fields[f], view.fields[f],
                schema_.fields[f].SampleBytes() * static_cast<size_t>(rows));
  }
}

}  // namespace gpufeed
