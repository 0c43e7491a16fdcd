// Images: JPEG and PNG files (a folder in torchvision's ImageFolder layout, or a CSV list)
// decoded, cropped and resized in the loader's worker threads.
//
//   auto source = gpufeed::OpenImages("train/", {.size = 224});          // random crops
//   gpufeed::Loader loader(source, {.batch_size = 256, .shuffle = true, .seed = 1});
//   while (auto batch = loader.Next()) { batch->field("image"); batch->field("label"); }
//
// Fields: `image` uint8[3, size, size] (channels first, RGB; float32 or float16 with `dtype`,
// normalised with `normalize_mean` and `normalize_std`) and `label` int64[]. Decoding
// uses libjpeg-turbo (at 1/2, 1/4 or 1/8 scale in the DCT when the crop is at least that
// many times the output size; for a random crop only the rows and columns around the crop are
// decoded, with the same pixels as a whole decode) and libpng; grey, palette and CMYK come out
// RGB, alpha is dropped, the EXIF orientation of a JPEG (APP1) or PNG (eXIf) is applied. PNG
// pixels are the stored values, as PIL and torchvision return them (no gamma conversion);
// 16-bit PNGs keep their high byte, except 16-bit grey, scaled to 8 bits (PIL clips it). Random
// crops draw from (loader seed, epoch, sample index): the same seed and epoch give the same crops
// on any machine, whichever worker reads the sample.
//
// Thread-safety: OpenImages may be called from any thread; an ImageSource is thread-safe
// like every Source (Read from many workers at once, without a shared lock).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/dtype.h"
#include "gpufeed/file.h"
#include "gpufeed/source.h"

namespace gpufeed {

// What each sample becomes.
enum class CropMode {
  kRandom,  // "random": torchvision's RandomResizedCrop(size, scale, ratio) +
            // RandomHorizontalFlip (training)
  kCenter,  // "center": Resize(resize) + CenterCrop(size) (evaluation)
};

// What a file that cannot be decoded does.
enum class OnError {
  kRaise,  // "raise": stops the loader with an error naming the file
  kSkip,   // "skip": the next good sample takes its place, counted in skipped()
};

// The names Python and the CLI spell ("random", "center"; "raise", "skip"). The parsers throw
// Error(kInvalidArgument) naming the accepted values for any other text.
CropMode ParseCropMode(std::string_view text);
std::string_view CropModeName(CropMode mode);
OnError ParseOnError(std::string_view text);
std::string_view OnErrorName(OnError policy);

struct ImageOptions {
  CropMode crop = CropMode::kRandom;  // Default: kRandom (see CropMode)
  int size = 224;                     // Default: 224: output side in pixels
  int resize = 0;           // Default: 0 = size * 256 / 224 (256 for 224): kCenter's shorter side
  double scale_min = 0.08;  // Default: 0.08  (RandomResizedCrop's scale)
  double scale_max = 1.0;   // Default: 1.0
  double ratio_min = 3.0 / 4.0;  // Default: 3/4   (RandomResizedCrop's ratio)
  double ratio_max = 4.0 / 3.0;  // Default: 4/3
  bool flip = true;              // Default: true: kRandom mirrors half the samples
  // Default: kUInt8: the image field as decoded, 0..255. kFloat32 or kFloat16: x / 255 (as
  // torchvision's ToTensor), then (x / 255 - mean) / std per channel when normalize_mean and
  // normalize_std are given (torchvision's Normalize after ToTensor), computed in float32 in
  // the worker threads (float16: rounded to nearest even from there).
  DType dtype = DType::kUInt8;
  std::vector<float> normalize_mean = {};  // Default: empty = none; else 3 values (R, G, B)
  std::vector<float> normalize_std = {};   // Default: empty = none; else 3 values, each > 0
  // Default: true. Decode JPEGs at 1/2, 1/4, 1/8 scale where the output needs no more.
  // False decodes at full size, as PIL does (then pixels equal torchvision's exactly).
  bool dct_scaling = true;
  bool exif_orientation = true;  // Default: true (PIL and torchvision ignore it)
  // Default: 178956970 (PIL's limit): an image whose header claims more pixels is refused
  // before anything is allocated for it.
  uint64_t max_pixels = 178956970;
  // Default: kRaise: a file that cannot be decoded stops the loader with an error naming it
  // (raised by the next Next()), and OpenImages refuses a folder or list holding files in a
  // format gpufeed does not decode (BMP, TIFF, WebP, PPM, PGM), naming them. kSkip: the next
  // good sample takes its place, and skipped() counts it.
  OnError on_error = OnError::kRaise;
  // Default: false: a JPEG libjpeg decodes with a warning ("Corrupt JPEG data: 3 extraneous
  // bytes before marker 0xd9", as camera and editor files often have) is decoded as PIL
  // decodes it and counted in decode_warnings(). True: such a file is an error like a corrupt
  // one (raised, or skipped with OnError::kSkip).
  bool strict = false;
  // A CSV list file: its path and label columns, and the class names in label order.
  // Default: "path", "label", empty = the names found in the list, sorted.
  std::string path_column = "path";
  std::string label_column = "label";
  std::vector<std::string> classes = {};
  // Decoded-image cache: none, ram, shm or auto (see gpufeed/cache.h). Images are
  // stored once at `cache_size` pixels on the shorter side (the longer side at most
  // cache_size * 4 / 3; wider images get a shorter short side), uint8; crops are then cut
  // from the stored image, so the decoded files are read only in the first epoch. The source
  // asks for the copy and the loader's assembly makes it (OpenLoader, when it opens a loader
  // over the source; gpufeed/cache.h, StoreBelow), with the fields below. Until then, or in a
  // loader built by hand, the source decodes the stored image at every read: the same crops.
  // By hand: StoreBelow::Of(*source)->CacheStore([](auto store, const CacheOptions& asked) {
  //   return OpenCached(store, asked); });
  CacheTier cache = CacheTier::kNone;  // Default: none
  int cache_size = 256;                // Default: 256
  std::string shm_dir = "/dev/shm";    // Default: /dev/shm
  uint64_t ram_budget_bytes = 0;       // Default: 0 = 50% of available RAM
  int cache_threads = 0;               // Default: 0 = hardware threads (shm build, preload)
  bool verbose = true;                 // Default: true: the cache says its choice on stderr
  // Default: null = DefaultFileSystem() (local paths, s3:// and http(s):// URIs): folders are
  // listed and every image file read through it.
  std::shared_ptr<const FileSystem> file_system = nullptr;
};

// Samples an OnError::kSkip source replaced: how many, and the first few, with the reason.
// Each read of a sample that fails counts once (a replacement that fails too is not counted
// against the sample it replaces: its own read counts it), so one pass over the data set
// counts each bad file once.
struct SkippedImages {
  int64_t count = 0;
  std::vector<std::string> first;  // "train/cat/1.jpg: not a JPEG or PNG file (...)"
};

// Decodes that libjpeg warned about (strict=false): how many, and the first few files with
// the warning. Each decode of such a file counts once (a window decode for a random crop
// stops at the crop's last row, so it only sees what lies above it).
struct ImageDecodeWarnings {
  int64_t count = 0;
  std::vector<std::string> first;  // "train/cat/1.jpg: Corrupt JPEG data: 3 extraneous ..."
};

class ImageSource : public Source {
 public:
  // The file of sample `index`. REQUIRES: 0 <= index < size().
  virtual const std::string& path(int64_t index) const = 0;
  virtual int64_t label(int64_t index) const = 0;
  // Class names by label (ImageFolder: its sub-folders, sorted; empty for integer labels).
  virtual const std::vector<std::string>& classes() const = 0;
  virtual SkippedImages skipped() const = 0;
  virtual ImageDecodeWarnings decode_warnings() const = 0;
  // Crops are drawn per epoch: the decoded images are what repeats (ImageOptions::cache).
  bool rows_repeat() const override { return false; }
};

// The random crop of sample `index` in `epoch` of a loader seeded `seed`, on an image of
// width x height pixels (after its EXIF orientation), as CropMode::kRandom draws it: the region
// in the image's pixels and whether the output is mirrored. For debugging and comparisons.
struct ImageCrop {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  bool flip = false;
};
ImageCrop RandomCropOf(int width, int height, uint64_t seed, int64_t epoch, int64_t index,
                       const ImageOptions& options = {});

// Opens `path`: a folder in ImageFolder layout (one sub-folder per class), or a CSV list file
// (.csv, paths relative to its folder). Throws Error(kNotFound) for a missing path or an
// ImageFolder without images, Error(kInvalidArgument) for bad options or list rows.
std::shared_ptr<ImageSource> OpenImages(const std::string& path, ImageOptions options = {});

}  // namespace gpufeed
