// ImageWorker's reading: a sample's file read whole (fetched together with the rest of its
// batch where the file system reads several files at once) and decoded with its orientation.
#include <fmt/format.h>

#include <cmath>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "images/source.h"

namespace gpufeed {

namespace {

// No image format packs more than a few bytes per pixel: a bigger file is refused before it
// is read whole (max_pixels guards the decoded size the same way).
uint64_t MaxImageFileBytes(const ImageOptions& options) {
  return AddOrThrow(MulOrThrow(options.max_pixels, 8, "max_pixels"), 64 << 20, "max_pixels");
}

}  // namespace

void ImageWorker::ReadFile(const ImageSet& set, const std::string& path) {
  if (const auto it = fetched.find(path); it != fetched.end()) {
    bytes = it->second;  // a copy: a padded batch may hold the sample twice
    return;
  }
  const auto file = set.file_system().Open(path);
  const uint64_t size = file->Size();
  if (size > MaxImageFileBytes(set.options())) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {} bytes, more than an image of max_pixels = {} can take; "
                            "raise max_pixels to read it",
                            path, size, set.options().max_pixels));
  }
  bytes.resize(size);
  ReadFully(*file, 0, bytes.data(), bytes.size(), path);
}

void ImageWorker::Prefetch(const ImageSet& set, std::span<const int64_t> indices,
                           const std::function<void(const std::string&)>& on_fetched) {
  fetched.clear();
  if (indices.size() < 2) return;
  const uint64_t limit = MaxImageFileBytes(set.options());
  try {
    std::vector<std::unique_ptr<File>> files;
    std::vector<FileRead> reads;
    std::vector<const std::string*> paths;  // reads[i]'s path
    for (const int64_t index : indices) {
      const std::string& path = set.list().paths[static_cast<size_t>(index)];
      if (fetched.contains(path)) continue;
      auto file = set.file_system().Open(path);
      if (file->BatchKey() == nullptr) {  // local files: read one by one, as they decode
        fetched.clear();
        return;
      }
      if (file->Size() > limit) continue;            // ReadFile refuses it, naming it
      std::vector<uint8_t>& buffer = fetched[path];  // stays put as the map grows
      buffer.resize(file->Size());
      reads.push_back({file.get(), 0, buffer.data(), buffer.size()});
      paths.push_back(&path);
      files.push_back(std::move(file));
    }
    std::function<void(size_t)> done;
    if (on_fetched) done = [&](size_t i) { on_fetched(*paths[i]); };
    ReadFiles(reads, "image", done);
  } catch (const Error&) {
    // What on_fetched had is used; every other file is read again on its own.
    fetched.clear();
  }
}

double DecodeOriented(const ImageSet& set, int64_t index, ImageWorker& worker,
                      const std::function<DctScale(int, int)>& need, const CropRect* window,
                      int* origin_x, int* origin_y) {
  const std::string& path = set.list().paths[static_cast<size_t>(index)];
  worker.ReadFile(set, path);
  const ImageHeader header =
      worker.decoder.ReadHeader(worker.bytes, path, set.options().max_pixels);
  const int orientation = set.options().exif_orientation ? header.orientation : 1;
  const bool swap = SwapsAxes(orientation);
  DctScale scale = need(swap ? header.height : header.width, swap ? header.width : header.height);
  if (header.format != ImageFormat::kJpeg || !set.options().dct_scaling) scale = {1, 1};
  const double divisor = static_cast<double>(scale.denom) / scale.num;
  if (origin_x != nullptr) *origin_x = 0;
  if (origin_y != nullptr) *origin_y = 0;
  if (window != nullptr && orientation == 1 && header.format == ImageFormat::kJpeg) {
    // The resampler's taps stay in [floor(x0 / d), ceil(x1 / d)): that is the window.
    worker.decoder.DecodeWindow(worker.bytes, header, scale,
                                static_cast<int>(std::floor(window->x / divisor)),
                                static_cast<int>(std::floor(window->y / divisor)),
                                static_cast<int>(std::ceil((window->x + window->width) / divisor)),
                                static_cast<int>(std::ceil((window->y + window->height) / divisor)),
                                path, worker.decoded, *origin_x, *origin_y);
  } else {
    worker.decoder.Decode(worker.bytes, header, scale, path, worker.decoded);
    ApplyOrientation(orientation, worker.decoded, worker.scratch);
  }
  if (!worker.decoder.warning().empty()) set.NoteDecodeWarning(path, worker.decoder.warning());
  return divisor;
}

}  // namespace gpufeed
