// Cached image reading: each image decoded once, resized to a stored size (shorter side
// cache_size, the longer at most 4/3 of that) and kept as uint8 rows in a cache tier; crops
// are cut from the stored image in every epoch. The source asks for the tier; the loader's
// assembly (OpenLoader) makes the copy and hands it back (gpufeed/cache.h, StoreBelow). The
// stored row is a fixed-size box padded after the pixels, with the image's own height and
// width beside it:
//   pixels: uint8[cache_size * max_long * 3]  (the image's rows, HWC, then zeros)
//   hw:     int32[2]                          (stored height, width)
//   label:  int64[]
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "images/source.h"

namespace gpufeed {
namespace {

// Rows read from the cache per step: bounds a worker's scratch to a few MB.
constexpr int64_t kStoredRowsPerStep = 8;

int MaxLongSide(int short_side) {
  return (short_side * kStoredAspectNum + kStoredAspectDen - 1) / kStoredAspectDen;
}

// The stored size of a w x h image: shorter side `s` unless that makes the longer one exceed
// MaxLongSide(s), then the longer side is that maximum.
void StoredSize(int w, int h, int s, int& out_w, int& out_h) {
  const int long_max = MaxLongSide(s);
  const int64_t shorter = std::min(w, h);
  const int64_t longer = std::max(w, h);
  int64_t new_short = s;
  int64_t new_long = s * longer / shorter;
  if (new_long > long_max) {
    new_long = long_max;
    new_short = std::max<int64_t>(1, long_max * shorter / longer);
  }
  out_w = static_cast<int>(w <= h ? new_short : new_long);
  out_h = static_cast<int>(w <= h ? new_long : new_short);
}

// Decodes each image once into its stored form; the tier below caches these rows.
class StoredImageSource final : public Source {
 public:
  explicit StoredImageSource(std::shared_ptr<const ImageSet> set) : set_(std::move(set)) {
    const int s = set_->options().cache_size;
    schema_.fields = {
        FieldSpec{"pixels", DType::kUInt8, {static_cast<int64_t>(s) * MaxLongSide(s) * 3}},
        FieldSpec{"hw", DType::kInt32, {2}}, FieldSpec{"label", DType::kInt64, {}}};
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return set_->size(); }
  std::string Describe() const override {
    return fmt::format("images:{} ({} images decoded to shorter side {})", set_->origin(), size(),
                       set_->options().cache_size);
  }
  std::string Identity() const override {
    return fmt::format("images-stored:v1:{}:{}{}", set_->options().cache_size,
                       set_->options().exif_orientation, set_->FilesIdentity());
  }
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override {
    return std::make_unique<ImageWorker>();
  }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    CheckReadRequest(*this, indices, out);
    ImageWorker local;
    auto* worker = state != nullptr ? static_cast<ImageWorker*>(state) : &local;
    const size_t row_bytes = schema_.fields[0].SampleBytes();
    const int s = set_->options().cache_size;
    for (size_t row = 0; row < indices.size(); ++row) {
      auto* pixels = reinterpret_cast<uint8_t*>(out.fields[0]) + row * row_bytes;
      int32_t hw[2] = {0, 0};
      const int64_t produced = set_->ProduceOrSkip(indices[row], [&](int64_t sample) {
        int full_w = 0;
        int full_h = 0;
        int w = 0;
        int h = 0;
        const double d = DecodeOriented(*set_, sample, *worker, [&](int fw, int fh) {
          full_w = fw;
          full_h = fh;
          StoredSize(fw, fh, s, w, h);
          return DctScaleFor(fw, fh, w, h);
        });
        RgbImage stored;
        stored.pixels.reserve(row_bytes);
        ResampleToRgb(View(worker->decoded), {0, 0, full_w / d, full_h / d}, {w, h, 0, 0, w, h},
                      stored, worker->resample);
        std::memcpy(pixels, stored.pixels.data(), stored.pixels.size());
        std::memset(pixels + stored.pixels.size(), 0, row_bytes - stored.pixels.size());
        hw[0] = h;
        hw[1] = w;
      });
      std::memcpy(out.fields[1] + row * sizeof(hw), hw, sizeof(hw));
      const int64_t label = set_->list().labels[static_cast<size_t>(produced)];
      std::memcpy(out.fields[2] + row * sizeof(int64_t), &label, sizeof(label));
    }
  }

 private:
  std::shared_ptr<const ImageSet> set_;
  Schema schema_;
};

// The cache the stored images ask for: ImageOptions' cache fields.
CacheOptions StoreCacheOptions(const ImageOptions& o) {
  CacheOptions cache;
  cache.tier = o.cache;
  cache.ram_budget_bytes = o.ram_budget_bytes;
  cache.shm_dir = o.shm_dir;
  cache.threads = o.cache_threads;
  cache.verbose = o.verbose;
  return cache;
}

// Crops cut from stored images: read from the store itself (each image decoded at every read)
// until the assembly hands back the store's copy (StoreBelow), then from the copy.
class CachedImageSource final : public ImageSetSource, public StoreBelow {
 public:
  explicit CachedImageSource(std::shared_ptr<const ImageSet> set)
      : ImageSetSource(std::move(set)),
        store_(std::make_shared<StoredImageSource>(set_)),
        asked_(StoreCacheOptions(set_->options())),
        serving_(store_.get()) {
    stored_ = store_->schema();
  }

  std::string Describe() const override {
    return fmt::format("images:{} ({} images, {} classes, {} crop {}, cached {} at {})",
                       set_->origin(), size(), set_->list().classes.size(),
                       CropModeName(set_->options().crop), set_->options().size,
                       CacheTierName(Store().cache_tier()), set_->options().cache_size);
  }
  std::string Identity() const override {
    const ImageOptions& o = set_->options();
    return fmt::format("images-cached:{}:{}:{}:{}|{}", CropModeName(o.crop), o.size, o.resize,
                       set_->OutputIdentity(), store_->Identity());
  }
  CacheTier cache_tier() const override { return Store().cache_tier(); }
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override {
    auto worker = std::make_unique<ImageWorker>();
    StoreState(*worker);
    return worker;
  }

  void CacheStore(const MakeCopy& make_copy) const override {
    if (asked_.tier == CacheTier::kNone) return;
    std::lock_guard lock(copy_mu_);
    if (copy_ != nullptr) return;
    std::shared_ptr<Source> copy = make_copy(store_, asked_);
    if (copy == nullptr) return;
    copy_ = std::move(copy);
    serving_.store(copy_.get(), std::memory_order_release);
  }
  void ReadSeeded(std::span<const int64_t> indices, const BatchView& out, SourceWorkerState* state,
                  uint64_t seed) const override {
    CheckReadRequest(*this, indices, out);
    ImageWorker local;
    auto* worker = state != nullptr ? static_cast<ImageWorker*>(state) : &local;
    const size_t pixel_bytes = stored_.fields[0].SampleBytes();
    const size_t image_bytes = schema_.fields[0].SampleBytes();
    worker->stored_rows.resize(pixel_bytes * kStoredRowsPerStep);
    worker->stored_sizes.resize(2 * sizeof(int32_t) * kStoredRowsPerStep);
    worker->stored_labels.resize(sizeof(int64_t) * kStoredRowsPerStep);
    if (!set_->uint8_output()) worker->chw.resize(ChwBytes());
    const Source& store = StoreState(*worker);
    for (size_t first = 0; first < indices.size(); first += kStoredRowsPerStep) {
      const size_t count = std::min<size_t>(kStoredRowsPerStep, indices.size() - first);
      BatchView stored{
          {worker->stored_rows.data(), worker->stored_sizes.data(), worker->stored_labels.data()},
          static_cast<int64_t>(count)};
      store.Read(indices.subspan(first, count), stored, worker->inner.get());
      for (size_t i = 0; i < count; ++i) {
        const size_t row = first + i;
        int32_t hw[2];
        std::memcpy(hw, worker->stored_sizes.data() + i * sizeof(hw), sizeof(hw));
        const int64_t max_pixels = static_cast<int64_t>(pixel_bytes / 3);
        // The cache is memory other processes wrote (shm): its sizes are checked like a file's.
        if (hw[0] <= 0 || hw[1] <= 0 || static_cast<int64_t>(hw[0]) * hw[1] > max_pixels) {
          throw Error(ErrorCode::kCorruptData,
                      fmt::format("{}: cached image of sample {} claims {}x{} pixels (the "
                                  "stored box holds {})",
                                  set_->origin(), indices[row], hw[1], hw[0], max_pixels));
        }
        const RgbView image{
            reinterpret_cast<const uint8_t*>(worker->stored_rows.data()) + i * pixel_bytes, hw[1],
            hw[0]};
        std::byte* target = out.fields[0] + row * image_bytes;
        if (set_->uint8_output()) {
          Crop(image, indices[row], seed, *worker, reinterpret_cast<uint8_t*>(target));
        } else {
          Crop(image, indices[row], seed, *worker, worker->chw.data());
          set_->ConvertImage(worker->chw.data(), target);
        }
        std::memcpy(out.fields[1] + row * sizeof(int64_t),
                    worker->stored_labels.data() + i * sizeof(int64_t), sizeof(int64_t));
      }
    }
  }

 private:
  void Crop(const RgbView& image, int64_t index, uint64_t seed, ImageWorker& worker,
            uint8_t* target) const {
    const ImageOptions& o = set_->options();
    const int size = o.size;
    if (o.crop == CropMode::kRandom) {
      Pcg32 rng(MixSeed(seed, static_cast<uint64_t>(index)));
      const ImageCrop rect = DrawCrop(image.width, image.height, o, rng);
      ResampleToChw(
          image,
          {static_cast<double>(rect.x), static_cast<double>(rect.y),
           static_cast<double>(rect.x + rect.width), static_cast<double>(rect.y + rect.height)},
          {size, size, 0, 0, size, size}, rect.flip, target, worker.resample);
      return;
    }
    int resized_w = 0;
    int resized_h = 0;
    ResizedSize(image.width, image.height, o.resize, resized_w, resized_h);
    // A stored image narrower than the crop (a very wide image's short side) is resized up.
    const int left = static_cast<int>(std::nearbyint((resized_w - size) / 2.0));
    const int top = static_cast<int>(std::nearbyint((resized_h - size) / 2.0));
    ResampleToChw(image,
                  {0, 0, static_cast<double>(image.width), static_cast<double>(image.height)},
                  {resized_w, resized_h, left, top, size, size}, false, target, worker.resample);
  }

  // What serves the stored images now: the store, or its copy once handed back.
  const Source& Store() const { return *serving_.load(std::memory_order_acquire); }

  // The store serving now, with `worker`'s state for it (made afresh after the switch).
  const Source& StoreState(ImageWorker& worker) const {
    const Source& store = Store();
    if (worker.inner_for != &store) {
      worker.inner = store.NewWorkerState();
      worker.inner_for = &store;
    }
    return store;
  }

  const std::shared_ptr<Source> store_;  // the stored images, decoded at every read
  const CacheOptions asked_;             // the cache ImageOptions ask for them
  Schema stored_;
  mutable std::mutex copy_mu_;
  mutable std::shared_ptr<Source> copy_;  // the store's copy; set once, under copy_mu_
  mutable std::atomic<const Source*> serving_;  // store_ or copy_
};

}  // namespace

std::shared_ptr<ImageSource> NewCachedImageSource(std::shared_ptr<const ImageSet> set) {
  return std::make_shared<CachedImageSource>(std::move(set));
}

}  // namespace gpufeed
