// The parts of the image sources (gpufeed/images.h) shared by streaming and cached reading:
// the file list with its options, the per-worker decoding state, and the skip accounting.
// Thread-safety: ImageSet is immutable after construction except its skip and warning
// records, which take their own mutex (only when a sample is skipped or a file warned about,
// never on the good path); ImageWorker is one worker's.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpufeed/images.h"
#include "images/crop.h"
#include "images/decode.h"
#include "images/list.h"
#include "images/resample.h"

namespace gpufeed {

class ImageSet {
 public:
  ImageSet(std::string origin, ImageList list, ImageOptions options);

  const std::string& origin() const { return origin_; }
  const ImageList& list() const { return list_; }
  const ImageOptions& options() const { return options_; }
  int64_t size() const { return static_cast<int64_t>(list_.paths.size()); }
  const FileSystem& file_system() const { return *fs_; }
  bool skip() const { return options_.on_error == OnError::kSkip; }
  RandomCropParams crop_params() const;
  // Whether the image field is uint8 (written by the resampler straight into the batch).
  bool uint8_output() const { return options_.dtype == DType::kUInt8; }
  // Writes a uint8 [3, size, size] image into `target` as options' dtype and normalisation.
  void ConvertImage(const uint8_t* chw, std::byte* target) const;
  // The output dtype and normalisation, for Source::Identity.
  std::string OutputIdentity() const;

  // Runs `produce(sample)` for `index`; on an Error, with on_error="raise", rethrows it naming
  // the sample; with "skip", records it (once, for `index`) and tries the following samples
  // (wrapping around) until one succeeds. Returns the sample that was produced, whose label
  // goes with the image.
  int64_t ProduceOrSkip(int64_t index, const std::function<void(int64_t)>& produce) const;

  void RecordSkip(const std::string& what) const;
  SkippedImages skipped() const;
  // A decode of `path` that libjpeg warned about: an Error with strict=true, else counted.
  void NoteDecodeWarning(const std::string& path, const std::string& warning) const;
  ImageDecodeWarnings decode_warnings() const;
  // "path:size:mtime_ns" of every file, joined, for Source::Identity (stats every file).
  std::string FilesIdentity() const;

 private:
  std::string origin_;
  ImageList list_;
  ImageOptions options_;
  std::shared_ptr<const FileSystem> fs_;
  // Float output: (x / 255 - mean) / std per channel and value, computed once in float32 with
  // the operations torchvision makes, so that every value equals its result.
  std::array<std::array<float, 256>, 3> float_of_{};
  mutable std::mutex notes_mu_;
  mutable SkippedImages skipped_;
  mutable ImageDecodeWarnings warnings_;
};

class ImageWorker : public SourceWorkerState {
 public:
  // Reads the whole file of `path` into bytes (from `fetched` when Prefetch got it). Throws
  // Error naming it.
  void ReadFile(const ImageSet& set, const std::string& path);
  // Fetches the files of samples `indices` together where the file system reads several files
  // at once (remote objects: every request of the batch in flight, so a worker is not bound
  // by one request's latency per image); ReadFile then takes their bytes from `fetched`. Local
  // files are left to ReadFile, and so is everything after a failure, so that the error names
  // its file and on_error applies to that sample alone.
  // `on_fetched(path)`, where given, is called as each file's bytes are in `fetched`, while the
  // batch's other files are still arriving, so that the caller decodes one as the others
  // come in. Once Prefetch returns, `fetched` holds only files read whole (a failed read
  // leaves the rest to ReadFile).
  void Prefetch(const ImageSet& set, std::span<const int64_t> indices,
                const std::function<void(const std::string&)>& on_fetched = nullptr);
  std::unordered_map<std::string, std::vector<uint8_t>> fetched;

  ImageDecoder decoder;
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chw;  // float output: the uint8 image before conversion
  RgbImage decoded;
  RgbImage scratch;
  ResampleScratch resample;
  std::vector<std::byte> stored_rows;  // cached reading: stored images of a few samples
  std::vector<std::byte> stored_sizes;
  std::vector<std::byte> stored_labels;
  // Cached reading: the worker state for the store of stored images (or its copy), and which
  // of the two it was made for.
  std::unique_ptr<SourceWorkerState> inner;
  const Source* inner_for = nullptr;
};

// Draws the random crop of a width x height image from the sample's generator.
ImageCrop DrawCrop(int width, int height, const ImageOptions& options, Pcg32& rng);

// Decodes the file of `index` with its orientation applied, at a DCT scale chosen by `need`
// (given the oriented full size, returns the scale); `decoded` receives the image; returns
// the factor full-size pixels were divided by (8 / num for a scale num/8, 1 for none).
// With `window` (filled in by `need`, in the oriented full-size image's pixels), only as much
// of a JPEG stored upright is decoded as holds that window (ImageDecoder::DecodeWindow), and
// `origin` receives where `decoded`'s top-left pixel lies in the image decoded at the scale
// ((0, 0) for a whole image).
double DecodeOriented(const ImageSet& set, int64_t index, ImageWorker& worker,
                      const std::function<DctScale(int, int)>& need,
                      const CropRect* window = nullptr, int* origin_x = nullptr,
                      int* origin_y = nullptr);

// The cached reading's stored image: the longer side at most this many times the shorter.
constexpr int kStoredAspectNum = 4;
constexpr int kStoredAspectDen = 3;

// What both image sources share: the ImageSet they read, the output schema (image uint8
// [3, size, size], label int64) and the per-sample accessors; Read is ReadSeeded with the
// unseeded generator.
class ImageSetSource : public ImageSource {
 public:
  explicit ImageSetSource(std::shared_ptr<const ImageSet> set);

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return set_->size(); }
  const std::string& path(int64_t index) const override {
    return set_->list().paths.at(static_cast<size_t>(index));
  }
  int64_t label(int64_t index) const override {
    return set_->list().labels.at(static_cast<size_t>(index));
  }
  const std::vector<std::string>& classes() const override { return set_->list().classes; }
  SkippedImages skipped() const override { return set_->skipped(); }
  ImageDecodeWarnings decode_warnings() const override { return set_->decode_warnings(); }
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    ReadSeeded(indices, out, state, MixSeed(0, 0));
  }

 protected:
  // Bytes of one uint8 [3, size, size] image.
  size_t ChwBytes() const {
    const auto size = static_cast<size_t>(set_->options().size);
    return 3 * size * size;
  }

  std::shared_ptr<const ImageSet> set_;
  Schema schema_;
};

// The streaming source (crops decoded straight from the files).
std::shared_ptr<ImageSource> NewStreamingImageSource(std::shared_ptr<const ImageSet> set);
// The cached source: crops cut from stored images, which the source asks to be kept in
// `options.cache`'s tier; its assembly makes that copy (gpufeed/cache.h, StoreBelow).
std::shared_ptr<ImageSource> NewCachedImageSource(std::shared_ptr<const ImageSet> set);

}  // namespace gpufeed
