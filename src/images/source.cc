#include "images/source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/checked_math.h"
#include "core/io/missing_path.h"
#include "core/path_names.h"
#include "gpufeed/error.h"

namespace gpufeed {

ImageSetSource::ImageSetSource(std::shared_ptr<const ImageSet> set) : set_(std::move(set)) {
  const int size = set_->options().size;
  schema_.fields = {FieldSpec{"image", set_->options().dtype, {3, size, size}},
                    FieldSpec{"label", DType::kInt64, {}}};
}

namespace {

constexpr size_t kMaxSkipRecords = 8;
constexpr size_t kNamedAtOpen = 5;

// At open, not mid-epoch: torchvision's ImageFolder lists formats gpufeed does not decode.
void RefuseUndecodedFormats(const std::string& origin, const ImageList& list) {
  const std::vector<std::string> paths = UndecodedFormatPaths(list);
  if (paths.empty()) return;
  std::string names;
  for (size_t i = 0; i < std::min(paths.size(), kNamedAtOpen); ++i) {
    names += (i == 0 ? "" : ", ") + paths[i];
  }
  if (paths.size() > kNamedAtOpen)
    names += fmt::format(" and {} more", paths.size() - kNamedAtOpen);
  throw Error(ErrorCode::kUnsupported,
              fmt::format("{}: {} of {} files are in formats gpufeed does not decode (BMP, TIFF, "
                          "WebP, PPM or PGM; it decodes JPEG and PNG): {}; convert them to JPEG "
                          "or PNG, move them out, or open with on_error=\"skip\" to replace "
                          "each with the next good sample (counted in skipped())",
                          origin, paths.size(), list.paths.size(), names));
}

// The streaming source: each sample decoded from its file and cropped as options say.
class StreamingImageSource final : public ImageSetSource {
 public:
  explicit StreamingImageSource(std::shared_ptr<const ImageSet> set)
      : ImageSetSource(std::move(set)) {}

  std::string Describe() const override {
    return fmt::format("images:{} ({} images, {} classes, {} crop {})", set_->origin(), size(),
                       set_->list().classes.size(), CropModeName(set_->options().crop),
                       set_->options().size);
  }
  std::string Identity() const override {
    const ImageOptions& o = set_->options();
    return fmt::format("images:{}:{}:{}:{}:{}|{}", CropModeName(o.crop), o.size, o.resize,
                       o.dct_scaling, set_->OutputIdentity(), set_->FilesIdentity());
  }
  std::unique_ptr<SourceWorkerState> NewWorkerState() const override {
    return std::make_unique<ImageWorker>();
  }
  void ReadSeeded(std::span<const int64_t> indices, const BatchView& out, SourceWorkerState* state,
                  uint64_t seed) const override {
    CheckReadRequest(*this, indices, out);
    ImageWorker local;
    auto* worker = state != nullptr ? static_cast<ImageWorker*>(state) : &local;
    if (!set_->uint8_output()) worker->chw.resize(ImageSetSource::ChwBytes());
    // Each file is decoded as it arrives, while the rest of the batch is still in flight. A
    // row whose decode fails there is left to the pass below, which reads it again and raises
    // or skips exactly as a read one by one does.
    std::vector<bool> row_done(indices.size(), false);
    std::unordered_multimap<std::string_view, size_t> rows_of;
    for (size_t row = 0; row < indices.size(); ++row) rows_of.emplace(path(indices[row]), row);
    worker->Prefetch(*set_, indices, [&](const std::string& fetched_path) {
      const auto [first, last] = rows_of.equal_range(fetched_path);
      for (auto it = first; it != last; ++it) {
        const size_t row = it->second;
        try {
          ProduceRow(row, indices[row], indices[row], out, seed, *worker);
          row_done[row] = true;
        } catch (const Error&) {  // the pass below reports it
        }
      }
    });
    for (size_t row = 0; row < indices.size(); ++row) {
      if (row_done[row]) continue;
      const int64_t index = indices[row];
      set_->ProduceOrSkip(
          index, [&](int64_t sample) { ProduceRow(row, index, sample, out, seed, *worker); });
    }
    worker->fetched.clear();
  }

 private:
  // Writes sample `sample`'s image and label into row `row` of `out`. The crop is drawn from
  // the generator of the row's own `index`: a replacement (on_error="skip") crops with it too.
  void ProduceRow(size_t row, int64_t index, int64_t sample, const BatchView& out, uint64_t seed,
                  ImageWorker& worker) const {
    std::byte* target = out.fields[0] + row * schema_.fields[0].SampleBytes();
    uint8_t* image = set_->uint8_output() ? reinterpret_cast<uint8_t*>(target) : worker.chw.data();
    Pcg32 rng(MixSeed(seed, static_cast<uint64_t>(index)));
    Produce(sample, rng, worker, image);
    if (!set_->uint8_output()) set_->ConvertImage(image, target);
    const int64_t label = set_->list().labels[static_cast<size_t>(sample)];
    std::memcpy(out.fields[1] + row * sizeof(int64_t), &label, sizeof(label));
  }

  void Produce(int64_t sample, Pcg32& rng, ImageWorker& worker, uint8_t* image) const {
    const ImageOptions& o = set_->options();
    const int size = o.size;
    if (o.crop == CropMode::kRandom) {
      ImageCrop rect;
      CropRect window;
      int ox = 0;
      int oy = 0;
      const double d = DecodeOriented(
          *set_, sample, worker,
          [&](int w, int h) {
            rect = DrawCrop(w, h, o, rng);
            window = {rect.x, rect.y, rect.width, rect.height};
            return DctScaleFor(rect.width, rect.height, size, size);
          },
          &window, &ox, &oy);
      // The crop chosen in full-size pixels, mapped into the image decoded at 1/d, then into
      // the decoded window (exact: d is a power of two, the origin an integer).
      ResampleToChw(View(worker.decoded),
                    {rect.x / d - ox, rect.y / d - oy, (rect.x + rect.width) / d - ox,
                     (rect.y + rect.height) / d - oy},
                    {size, size, 0, 0, size, size}, rect.flip, image, worker.resample);
      return;
    }
    int full_w = 0;
    int full_h = 0;
    int resized_w = 0;
    int resized_h = 0;
    const double d = DecodeOriented(*set_, sample, worker, [&](int w, int h) {
      full_w = w;
      full_h = h;
      ResizedSize(w, h, o.resize, resized_w, resized_h);
      return DctScaleFor(w, h, resized_w, resized_h);
    });
    // torchvision's CenterCrop: int(round((side - size) / 2.0)), half to even.
    const int left = static_cast<int>(std::nearbyint((resized_w - size) / 2.0));
    const int top = static_cast<int>(std::nearbyint((resized_h - size) / 2.0));
    ResampleToChw(View(worker.decoded), {0, 0, full_w / d, full_h / d},
                  {resized_w, resized_h, left, top, size, size}, false, image, worker.resample);
  }
};

void CheckOutputOptions(const ImageOptions& o) {
  if (o.dtype != DType::kUInt8 && o.dtype != DType::kFloat32 && o.dtype != DType::kFloat16) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("images: dtype must be uint8, float32 or float16, got {}", DTypeName(o.dtype)));
  }
  if (o.normalize_mean.empty() && o.normalize_std.empty()) return;
  if (o.normalize_mean.size() != 3 || o.normalize_std.size() != 3) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("images: normalize takes 3 means and 3 standard deviations (R, G, "
                            "B), got {} and {}",
                            o.normalize_mean.size(), o.normalize_std.size()));
  }
  for (size_t c = 0; c < 3; ++c) {
    if (!std::isfinite(o.normalize_mean[c]) || !(o.normalize_std[c] > 0) ||
        !std::isfinite(o.normalize_std[c])) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("images: normalize needs finite means and standard deviations > "
                              "0, got mean {} and std {} for channel {}",
                              o.normalize_mean[c], o.normalize_std[c], c));
    }
  }
  if (o.dtype == DType::kUInt8) {
    throw Error(ErrorCode::kInvalidArgument,
                "images: normalize needs dtype float32 or float16 (uint8 cannot hold the "
                "normalised values)");
  }
}

}  // namespace

ImageSet::ImageSet(std::string origin, ImageList list, ImageOptions options)
    : origin_(std::move(origin)), list_(std::move(list)), options_(std::move(options)) {
  fs_ = options_.file_system != nullptr ? options_.file_system : DefaultFileSystem();
  const bool normalize = !options_.normalize_mean.empty();
  for (size_t c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      // torchvision: img.float().div(255), then .sub(mean).div(std), each in float32.
      float x = static_cast<float>(v) / 255.0f;
      if (normalize) x = (x - options_.normalize_mean[c]) / options_.normalize_std[c];
      float_of_[c][static_cast<size_t>(v)] = x;
    }
  }
}

void ImageSet::ConvertImage(const uint8_t* chw, std::byte* target) const {
  const auto plane = static_cast<size_t>(options_.size) * static_cast<size_t>(options_.size);
  for (size_t c = 0; c < 3; ++c) {
    const std::array<float, 256>& table = float_of_[c];
    const uint8_t* in = chw + c * plane;
    if (options_.dtype == DType::kFloat32) {
      auto* out = reinterpret_cast<float*>(target) + c * plane;
      for (size_t i = 0; i < plane; ++i) out[i] = table[in[i]];
    } else {
      auto* out = reinterpret_cast<uint16_t*>(target) + c * plane;
      for (size_t i = 0; i < plane; ++i) out[i] = FloatToHalf(table[in[i]]);
    }
  }
}

std::string ImageSet::OutputIdentity() const {
  std::string id(DTypeName(options_.dtype));
  for (size_t c = 0; c < options_.normalize_mean.size(); ++c) {
    id += fmt::format(":{}/{}", options_.normalize_mean[c], options_.normalize_std[c]);
  }
  return id;
}

RandomCropParams ImageSet::crop_params() const {
  return {options_.scale_min, options_.scale_max, options_.ratio_min, options_.ratio_max};
}

int64_t ImageSet::ProduceOrSkip(int64_t index, const std::function<void(int64_t)>& produce) const {
  const int64_t n = size();
  for (int64_t attempt = 0; attempt < n; ++attempt) {
    const int64_t sample = (index + attempt) % n;
    try {
      produce(sample);
      return sample;
    } catch (const Error& e) {
      if (!skip()) {
        throw Error(e.code(), fmt::format("{} (image sample {})", e.what(), sample));
      }
      // Only the sample asked for counts: a failing replacement is counted when it is read as
      // itself, so a pass over the data set counts each bad file once.
      if (attempt == 0) RecordSkip(e.what());
    }
  }
  throw Error(
      ErrorCode::kCorruptData,
      fmt::format("{}: on_error=\"skip\" found no image that decodes among all {}", origin_, n));
}

void ImageSet::RecordSkip(const std::string& what) const {
  std::lock_guard lock(notes_mu_);
  ++skipped_.count;
  if (skipped_.first.size() < kMaxSkipRecords &&
      std::find(skipped_.first.begin(), skipped_.first.end(), what) == skipped_.first.end()) {
    skipped_.first.push_back(what);
  }
}

SkippedImages ImageSet::skipped() const {
  std::lock_guard lock(notes_mu_);
  return skipped_;
}

void ImageSet::NoteDecodeWarning(const std::string& path, const std::string& warning) const {
  if (options_.strict) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: libjpeg warned: {} (strict=true refuses files decoded with a "
                            "warning; PIL decodes them)",
                            path, warning));
  }
  const std::string what = fmt::format("{}: {}", path, warning);
  std::lock_guard lock(notes_mu_);
  ++warnings_.count;
  if (warnings_.first.size() < kMaxSkipRecords &&
      std::find(warnings_.first.begin(), warnings_.first.end(), what) == warnings_.first.end()) {
    warnings_.first.push_back(what);
  }
}

ImageDecodeWarnings ImageSet::decode_warnings() const {
  std::lock_guard lock(notes_mu_);
  return warnings_;
}

std::string ImageSet::FilesIdentity() const {
  std::string id;
  id.reserve(list_.paths.size() * 64);
  for (const std::string& p : list_.paths) {
    uint64_t bytes = 0;
    int64_t mtime_ns = 0;
    try {
      const auto file = fs_->Open(p);
      bytes = file->Size();
      mtime_ns = file->ModificationTimeNs();
    } catch (const Error&) {
      // A file that cannot be opened keys as size 0: reading it reports it.
    }
    id += fmt::format("|{}:{}:{}", IdentityPath(p), bytes, mtime_ns);
  }
  return id;
}

ImageCrop DrawCrop(int width, int height, const ImageOptions& options, Pcg32& rng) {
  const CropRect rect = RandomResizedCropRect(
      width, height, {options.scale_min, options.scale_max, options.ratio_min, options.ratio_max},
      rng);
  const bool flip = options.flip && (rng.Next() >> 31) != 0;
  return {rect.x, rect.y, rect.width, rect.height, flip};
}

ImageCrop RandomCropOf(int width, int height, uint64_t seed, int64_t epoch, int64_t index,
                       const ImageOptions& options) {
  if (width <= 0 || height <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("RandomCropOf: a {}x{} image has no pixels", width, height));
  }
  Pcg32 rng(MixSeed(MixSeed(seed, static_cast<uint64_t>(epoch)), static_cast<uint64_t>(index)));
  return DrawCrop(width, height, options, rng);
}

std::shared_ptr<ImageSource> NewStreamingImageSource(std::shared_ptr<const ImageSet> set) {
  return std::make_shared<StreamingImageSource>(std::move(set));
}

std::shared_ptr<ImageSource> OpenImages(const std::string& path, ImageOptions options) {
  if (options.crop != CropMode::kRandom && options.crop != CropMode::kCenter) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("images: crop must be CropMode::kRandom or kCenter, got {}",
                            static_cast<int>(options.crop)));
  }
  if (options.size <= 0 || options.size > 16384) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("images: size must be in [1, 16384], got {}", options.size));
  }
  if (options.resize == 0) options.resize = options.size * 256 / 224;
  if (options.resize < options.size || options.resize > 16384) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("images: resize ({}) must be at least size ({}) and at most 16384",
                            options.resize, options.size));
  }
  if (!(options.scale_min > 0 && options.scale_min <= options.scale_max &&
        options.scale_max <= 1.0)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("images: scale must satisfy 0 < min <= max <= 1, got ({}, {})",
                            options.scale_min, options.scale_max));
  }
  if (!(options.ratio_min > 0 && options.ratio_min <= options.ratio_max)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("images: ratio must satisfy 0 < min <= max, got ({}, {})",
                            options.ratio_min, options.ratio_max));
  }
  if (options.on_error != OnError::kRaise && options.on_error != OnError::kSkip) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("images: on_error must be OnError::kRaise or kSkip, got {}",
                            static_cast<int>(options.on_error)));
  }
  CheckOutputOptions(options);
  if (options.max_pixels == 0) {
    throw Error(ErrorCode::kInvalidArgument, "images: max_pixels must be > 0");
  }
  if (options.cache == CacheTier::kDevice) {
    throw Error(ErrorCode::kInvalidArgument,
                "images: cache must be none, ram, shm or auto, got \"device\" (each epoch's "
                "crops are cut on the host from the stored images)");
  }
  if (options.cache == CacheTier::kDisk) {
    throw Error(ErrorCode::kInvalidArgument,
                "images: cache must be none, ram, shm or auto, got \"disk\" (it keeps the "
                "bytes of remote files, not decoded images: ask the loader for it)");
  }
  if (options.cache != CacheTier::kNone &&
      (options.cache_size < options.size || options.cache_size > 4096)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("images: cache_size ({}) must be at least size ({}) and at most 4096",
                            options.cache_size, options.size));
  }
  const std::shared_ptr<const FileSystem> fs =
      options.file_system ? options.file_system : DefaultFileSystem();
  const PathType type = fs->Type(path);
  if (type == PathType::kMissing) {
    ThrowMissing(*fs, path, fmt::format("{}: no such image folder or list", path));
  }
  std::vector<std::string> skipped_rows;
  ImageList list =
      type == PathType::kDirectory
          ? ListImageFolder(path, *fs)
          : ReadImageList(path, options.path_column, options.label_column, options.classes,
                          options.on_error == OnError::kSkip, &skipped_rows, *fs);
  if (options.on_error == OnError::kRaise) RefuseUndecodedFormats(path, list);
  auto set = std::make_shared<ImageSet>(path, std::move(list), options);
  for (const std::string& row : skipped_rows) set->RecordSkip(row);
  if (options.cache == CacheTier::kNone) return NewStreamingImageSource(std::move(set));
  return NewCachedImageSource(std::move(set));
}

}  // namespace gpufeed
