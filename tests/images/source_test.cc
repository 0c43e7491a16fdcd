// Image sources under the real Loader: every image once per epoch, crops reproducible from
// the seed whichever worker reads them, bad files named (or skipped and counted), and the
// decoded-image cache.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "error_code_of.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/images.h"
#include "gpufeed/loader.h"
#include "images/crop.h"
#include "images/decode.h"
#include "images/resample.h"
#include "images/test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::ScratchDir;

// Three classes of JPEGs and PNGs of varied sizes (a few tens of pixels: fast).
void MakeFolder(const ScratchDir& dir, int per_class = 4) {
  int seed = 0;
  for (const char* cls : {"ant", "bee", "cat"}) {
    for (int i = 0; i < per_class; ++i, ++seed) {
      const int w = 40 + 7 * seed % 50;
      const int h = 30 + 5 * seed % 40;
      if (i == per_class - 1) {
        dir.Write(fmt::format("{}/{}.png", cls, i),
                  testing::EncodePng(testing::Pattern(w, h, 3, seed), w, h, PNG_FORMAT_RGB));
      } else {
        dir.Write(fmt::format("{}/{}.jpg", cls, i), testing::RgbJpeg(w, h, seed));
      }
    }
  }
}

struct Epoch {
  std::vector<int64_t> indices;
  std::vector<int64_t> labels;
  std::vector<uint8_t> images;  // in plan order
};

Epoch RunEpoch(std::shared_ptr<Source> source, uint64_t seed, int64_t epoch, int workers,
               int64_t batch_size = 5) {
  Loader loader(source, {.batch_size = batch_size,
                         .shuffle = true,
                         .seed = seed,
                         .workers = workers,
                         .start_epoch = epoch});
  Epoch out;
  while (auto batch = loader.Next()) {
    const auto image = batch->field("image");
    const auto label = batch->field("label");
    out.indices.insert(out.indices.end(), batch->indices().begin(), batch->indices().end());
    out.labels.insert(out.labels.end(), label.as<int64_t>(), label.as<int64_t>() + label.rows);
    out.images.insert(out.images.end(), image.as<uint8_t>(), image.as<uint8_t>() + image.bytes());
  }
  return out;
}

std::string NextError(std::shared_ptr<Source> source, ErrorCode* code = nullptr) {
  Loader loader(source, {.batch_size = 4, .shuffle = false, .workers = 2});
  try {
    while (loader.Next()) {
    }
  } catch (const Error& e) {
    if (code != nullptr) *code = e.code();
    return e.what();
  }
  return "no error";
}

TEST(ImageSourceTest, AnEpochVisitsEveryImageOnceWithItsLabel) {
  ScratchDir dir;
  MakeFolder(dir);
  auto source = OpenImages(dir.path(), {.size = 16});
  EXPECT_EQ(source->size(), 12);
  EXPECT_THAT(source->classes(), ::testing::ElementsAre("ant", "bee", "cat"));
  EXPECT_EQ(source->schema().ToString(), "image: uint8[3,16,16], label: int64[]");
  const Epoch epoch = RunEpoch(source, 1, 0, 2);
  std::vector<int64_t> sorted = epoch.indices;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 12; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  for (size_t r = 0; r < epoch.indices.size(); ++r) {
    EXPECT_EQ(epoch.labels[r], epoch.indices[r] / 4);
    EXPECT_EQ(epoch.labels[r], source->label(epoch.indices[r]));
  }
  EXPECT_THAT(source->path(4), HasSubstr("bee/0.jpg"));
}

TEST(ImageSourceTest, CropsComeFromSeedEpochAndSampleOnly) {
  ScratchDir dir;
  MakeFolder(dir);
  auto source = OpenImages(dir.path(), {.size = 16});
  const Epoch a = RunEpoch(source, 3, 1, 1);
  const Epoch b = RunEpoch(source, 3, 1, 3, /*batch_size=*/4);  // other workers and batches
  // Same seed and epoch: every sample's crop is the same, whatever batch it landed in.
  std::map<int64_t, std::vector<uint8_t>> by_sample;
  const size_t bytes = 3 * 16 * 16;
  for (size_t r = 0; r < a.indices.size(); ++r) {
    by_sample[a.indices[r]].assign(a.images.begin() + r * bytes,
                                   a.images.begin() + (r + 1) * bytes);
  }
  for (size_t r = 0; r < b.indices.size(); ++r) {
    EXPECT_TRUE(std::equal(b.images.begin() + r * bytes, b.images.begin() + (r + 1) * bytes,
                           by_sample[b.indices[r]].begin()))
        << "sample " << b.indices[r];
  }
  EXPECT_EQ(a.images, RunEpoch(source, 3, 1, 2).images);
  EXPECT_NE(a.images, RunEpoch(source, 3, 2, 1).images);  // another epoch, other crops
  // The evaluation crop draws nothing: any seed gives the same pixels for a sample.
  auto eval = OpenImages(dir.path(), {.crop = CropMode::kCenter, .size = 16, .resize = 20});
  const Epoch e1 = RunEpoch(eval, 1, 0, 2, 12);
  const Epoch e2 = RunEpoch(eval, 2, 5, 1, 12);
  for (size_t r = 0; r < 12; ++r) {
    const auto other =
        std::find(e2.indices.begin(), e2.indices.end(), e1.indices[r]) - e2.indices.begin();
    EXPECT_TRUE(std::equal(e1.images.begin() + r * bytes, e1.images.begin() + (r + 1) * bytes,
                           e2.images.begin() + other * bytes));
  }
}

// The streaming source decodes only the window of each random crop (at its DCT scale): its
// samples equal the whole file decoded at that scale, then cropped and resampled, exactly, for
// crops decoded at full size and at 1/2, 1/4 and 1/8.
TEST(ImageSourceTest, WindowDecodedCropsEqualFullDecodeThenCrop) {
  ScratchDir dir;
  for (int i = 0; i < 6; ++i) {
    const int w = i < 4 ? 300 + 13 * i : 50;  // 1/8 needs crops of 192 on both sides
    const int h = i < 4 ? 262 - 5 * i : 40;   // and 1/1 crops under 48
    dir.Write(fmt::format("c/{}.jpg", i), testing::RgbJpeg(w, h, i));
  }
  const int size = 24;
  const ImageOptions options{.size = size};
  auto source = OpenImages(dir.path(), options);
  int scaled[4] = {0, 0, 0, 0};  // crops per DCT scale: 1/1, 1/2, 1/4, 1/8
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    const Epoch run = RunEpoch(source, 9, epoch, 2, 4);
    const size_t bytes = 3 * size * size;
    for (size_t r = 0; r < run.indices.size(); ++r) {
      const int64_t index = run.indices[r];
      std::ifstream in(source->path(index), std::ios::binary);
      const std::string file((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(file.data()),
                                          file.size());
      ImageDecoder decoder;
      const ImageHeader header = decoder.ReadHeader(data, "f", 1u << 30);
      const ImageCrop crop = RandomCropOf(header.width, header.height, 9, epoch, index, options);
      const DctScale scale = DctScaleFor(crop.width, crop.height, size, size);
      ++scaled[scale.denom == 1 ? 0 : scale.denom == 2 ? 1 : scale.denom == 4 ? 2 : 3];
      RgbImage full;
      decoder.Decode(data, header, scale, "f", full);
      const double d = scale.denom;
      std::vector<uint8_t> expected(bytes);
      ResampleScratch scratch;
      ResampleToChw(View(full),
                    {crop.x / d, crop.y / d, (crop.x + crop.width) / d, (crop.y + crop.height) / d},
                    {size, size, 0, 0, size, size}, crop.flip, expected.data(), scratch);
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), run.images.begin() + r * bytes))
          << "sample " << index << " epoch " << epoch << " at 1/" << scale.denom;
    }
  }
  for (int s = 0; s < 4; ++s) EXPECT_GT(scaled[s], 0) << "no crop at DCT scale 1/" << (1 << s);
}

TEST(ImageSourceTest, BadFilesAreNamedByNext) {
  ScratchDir dir;
  MakeFolder(dir, 2);
  const std::string jpeg = testing::RgbJpeg(40, 40);
  const struct {
    std::string file;
    std::string bytes;
    std::string says;
  } cases[] = {
      {"bee/0.jpg", "", "bee/0.jpg: empty file (0 bytes)"},
      {"bee/0.jpg", "#!/bin/sh\necho not an image\n", "bee/0.jpg: not a JPEG or PNG file"},
      {"bee/0.jpg", jpeg.substr(0, jpeg.size() * 2 / 3), "bee/0.jpg: corrupt or truncated JPEG"},
      {"bee/0.jpg",
       [] {
         std::string png = testing::EncodePng(testing::Pattern(4, 4, 3), 4, 4, PNG_FORMAT_RGB);
         png[25] = 5;
         return png;
       }(),
       "bee/0.jpg: PNG colour type 5"},
  };
  for (const auto& c : cases) {
    dir.Write(c.file, c.bytes);
    const std::string message = NextError(OpenImages(dir.path(), {.size = 8}));
    EXPECT_THAT(message, HasSubstr(c.says));
    EXPECT_THAT(message, HasSubstr("(image sample 2)"));
  }
}

TEST(ImageSourceTest, ListErrorsNameTheFile) {
  ScratchDir dir;
  dir.Write("img/a.jpg", testing::RgbJpeg(20, 20));
  const std::string list = dir.Write("list.csv", "path,label\nimg/a.jpg,cat\nimg/gone.jpg,dog\n");
  ErrorCode code{};
  const std::string message = NextError(OpenImages(list, {.size = 8}), &code);
  EXPECT_THAT(message, HasSubstr("img/gone.jpg"));
  EXPECT_THAT(message, HasSubstr("(image sample 1)"));
  EXPECT_EQ(code, ErrorCode::kNotFound);
  std::string open_message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenImages(list, {.classes = {"cat"}}); }, &open_message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(open_message, HasSubstr("list.csv:3: unknown class 'dog'"));
}

TEST(ImageSourceTest, SkipReplacesBadSamplesWithTheNextGoodOneAndCountsThem) {
  ScratchDir dir;
  MakeFolder(dir, 2);
  dir.Write("ant/0.jpg", "");
  dir.Write("bee/1.png", "garbage");
  auto source = OpenImages(dir.path(), {.size = 8, .on_error = OnError::kSkip});
  const Epoch epoch = RunEpoch(source, 0, 0, 2, 3);
  ASSERT_EQ(epoch.indices.size(), 6u);
  for (size_t r = 0; r < epoch.indices.size(); ++r) {
    // ant/0 (sample 0) is replaced by ant/1 (label 0); bee/1 (sample 3) by cat/0 (label 2).
    if (epoch.indices[r] == 3) {
      EXPECT_EQ(epoch.labels[r], 2);
    }
    if (epoch.indices[r] == 0) {
      EXPECT_EQ(epoch.labels[r], 0);
    }
  }
  // The loader reads ahead into the next epochs, so it may have replaced them more than once.
  SkippedImages skipped = source->skipped();
  EXPECT_GE(skipped.count, 2);
  ASSERT_EQ(skipped.first.size(), 2u);  // each distinct failure listed once
  // One read of the whole data set replaces exactly two samples.
  const int64_t before = skipped.count;
  std::vector<uint8_t> images(6 * 3 * 8 * 8);
  std::vector<int64_t> labels(6);
  const std::vector<int64_t> every = {0, 1, 2, 3, 4, 5};
  source->Read(
      every,
      {{reinterpret_cast<std::byte*>(images.data()), reinterpret_cast<std::byte*>(labels.data())},
       6},
      nullptr);
  EXPECT_EQ(source->skipped().count, before + 2);
  EXPECT_THAT(labels, ::testing::ElementsAre(0, 0, 1, 2, 2, 2));
  std::string all = skipped.first[0] + skipped.first[1];
  EXPECT_THAT(all, HasSubstr("ant/0.jpg: empty file"));
  EXPECT_THAT(all, HasSubstr("bee/1.png: not a JPEG or PNG file"));
}

TEST(ImageSourceTest, OptionsAreCheckedAtOpen) {
  ScratchDir dir;
  MakeFolder(dir, 1);
  EXPECT_EQ(ErrorCodeOf([&] { OpenImages(dir.path(), {.crop = static_cast<CropMode>(7)}); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] { OpenImages(dir.path(), {.on_error = static_cast<OnError>(7)}); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] { OpenImages(dir.path(), {.size = 64, .resize = 32}); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] { OpenImages(dir.path() + "/none"); }), ErrorCode::kNotFound);
}

// Python and the CLI pass the crop and error policy as text: each name round-trips, and any
// other text is refused with a message that lists the accepted names.
TEST(ImageSourceTest, CropModeAndOnErrorParseTheirNames) {
  for (const CropMode mode : {CropMode::kRandom, CropMode::kCenter}) {
    EXPECT_EQ(ParseCropMode(CropModeName(mode)), mode);
  }
  for (const OnError policy : {OnError::kRaise, OnError::kSkip}) {
    EXPECT_EQ(ParseOnError(OnErrorName(policy)), policy);
  }
  EXPECT_EQ(CropModeName(CropMode::kCenter), "center");
  EXPECT_EQ(OnErrorName(OnError::kSkip), "skip");
  try {
    ParseCropMode("middle");
    ADD_FAILURE() << "ParseCropMode accepted \"middle\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("crop must be \"random\" or \"center\", got \"middle\""));
  }
  try {
    ParseOnError("ignore");
    ADD_FAILURE() << "ParseOnError accepted \"ignore\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("on_error must be \"raise\" or \"skip\", got \"ignore\""));
  }
}

TEST(ImageSourceTest, RamCacheServesStoredImagesAndCropsFromThem) {
  ScratchDir dir;
  MakeFolder(dir);
  auto cached = OpenImages(
      dir.path(), {.size = 16, .cache = CacheTier::kRam, .cache_size = 24, .verbose = false});
  // The copy OpenLoader makes of the stored images (gpufeed/cache.h, StoreBelow), by hand.
  const auto copy = [](std::shared_ptr<Source> store, const CacheOptions& asked) {
    return OpenCached(std::move(store), asked);
  };
  StoreBelow::Of(*cached)->CacheStore(copy);
  EXPECT_EQ(cached->cache_tier(), CacheTier::kRam);
  const Epoch first = RunEpoch(cached, 4, 0, 2);
  const Epoch again = RunEpoch(cached, 4, 0, 1);  // from the cache: same crops
  EXPECT_EQ(first.images, again.images);
  std::vector<int64_t> sorted = again.indices;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 12; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  for (size_t r = 0; r < again.indices.size(); ++r) {
    EXPECT_EQ(again.labels[r], again.indices[r] / 4);
  }
  // The stored image is the resize to cache_size (aspects within 4/3 are not clamped): its
  // centre crop equals the streaming Resize(24) + CenterCrop(16), pixel for pixel.
  ScratchDir plain;
  plain.Write("a/0.jpg", testing::RgbJpeg(40, 30, 1));
  plain.Write("a/1.jpg", testing::RgbJpeg(30, 40, 2));
  plain.Write("b/0.png", testing::EncodePng(testing::Pattern(36, 30, 3), 36, 30, PNG_FORMAT_RGB));
  auto stream_eval =
      OpenImages(plain.path(), {.crop = CropMode::kCenter, .size = 16, .resize = 24});
  auto cached_eval = OpenImages(plain.path(), {.crop = CropMode::kCenter,
                                               .size = 16,
                                               .resize = 24,
                                               .cache = CacheTier::kRam,
                                               .cache_size = 24,
                                               .verbose = false});
  StoreBelow::Of(*cached_eval)->CacheStore(copy);
  EXPECT_EQ(RunEpoch(stream_eval, 0, 0, 1, 3).images, RunEpoch(cached_eval, 0, 0, 1, 3).images);
}

// Reads every sample of `source` once, in order, through one worker state (one decoder).
Epoch ReadAll(const std::shared_ptr<ImageSource>& source) {
  const auto n = static_cast<size_t>(source->size());
  const size_t image_bytes = source->schema().fields[0].SampleBytes();
  Epoch out;
  out.images.resize(n * image_bytes);
  out.labels.resize(n);
  for (size_t i = 0; i < n; ++i) out.indices.push_back(static_cast<int64_t>(i));
  const auto state = source->NewWorkerState();
  source->Read(out.indices,
               {{reinterpret_cast<std::byte*>(out.images.data()),
                 reinterpret_cast<std::byte*>(out.labels.data())},
                static_cast<int64_t>(n)},
               state.get());
  return out;
}

TEST(ImageSourceTest, SkipAfterAnUnsupportedJpegKeepsEveryOtherSampleAndCountsEachOnce) {
  // Samples: 0 ant/0.jpg, 1 ant/1.png, 2 bee/0.jpg, 3 bee/1.png, 4 cat/0.jpg, 5 cat/1.png.
  ScratchDir dir;
  MakeFolder(dir, 2);
  const auto clean = ReadAll(OpenImages(dir.path(), {.crop = CropMode::kCenter, .size = 8}));
  std::string twelve_bit = testing::RgbJpeg(40, 30);
  twelve_bit[twelve_bit.find("\xFF\xC0") + 4] = 12;  // sample precision 12
  dir.Write("ant/0.jpg", twelve_bit);
  dir.Write("ant/1.png", "garbage");
  auto source =
      OpenImages(dir.path(), {.crop = CropMode::kCenter, .size = 8, .on_error = OnError::kSkip});
  const Epoch read = ReadAll(source);
  // Both bad samples take sample 2's image and label; every other sample is its own.
  const size_t image_bytes = 3 * 8 * 8;
  const auto image = [&](const Epoch& e, size_t i) {
    return std::vector<uint8_t>(e.images.begin() + static_cast<ptrdiff_t>(i * image_bytes),
                                e.images.begin() + static_cast<ptrdiff_t>((i + 1) * image_bytes));
  };
  EXPECT_THAT(read.labels, ::testing::ElementsAre(1, 1, 1, 1, 2, 2));
  EXPECT_EQ(image(read, 0), image(clean, 2));
  EXPECT_EQ(image(read, 1), image(clean, 2));
  for (size_t i = 2; i < 6; ++i) EXPECT_EQ(image(read, i), image(clean, i)) << i;
  const SkippedImages skipped = source->skipped();
  EXPECT_EQ(skipped.count, 2);  // one per bad sample, although sample 1 was tried twice
  ASSERT_EQ(skipped.first.size(), 2u);
  EXPECT_THAT(skipped.first[0], HasSubstr("ant/0.jpg: 12-bit JPEG"));
  EXPECT_THAT(skipped.first[1], HasSubstr("ant/1.png: not a JPEG or PNG file"));
}

TEST(ImageSourceTest, JpegWarningsAreCountedOrRefusedWhenStrict) {
  ScratchDir dir;
  MakeFolder(dir, 2);
  const std::string jpeg = testing::RgbJpeg(40, 30, 5);
  const size_t dqt = jpeg.find("\xFF\xDB");
  dir.Write("bee/0.jpg", jpeg.substr(0, dqt) + "\x01\x02" + jpeg.substr(dqt));
  for (const CropMode crop : {CropMode::kCenter, CropMode::kRandom}) {
    SCOPED_TRACE(CropModeName(crop));
    auto source = OpenImages(dir.path(), {.crop = crop, .size = 8});
    EXPECT_EQ(NextError(source), "no error");
    const ImageDecodeWarnings warnings = source->decode_warnings();
    EXPECT_GE(warnings.count, 1);
    ASSERT_EQ(warnings.first.size(), 1u);
    EXPECT_THAT(warnings.first[0],
                HasSubstr("bee/0.jpg: Corrupt JPEG data: 2 extraneous bytes before marker 0xdb"));
    ErrorCode code{};
    const std::string message =
        NextError(OpenImages(dir.path(), {.crop = crop, .size = 8, .strict = true}), &code);
    EXPECT_THAT(message, HasSubstr("bee/0.jpg: libjpeg warned: Corrupt JPEG data"));
    EXPECT_EQ(code, ErrorCode::kCorruptData);
  }
}

TEST(ImageSourceTest, FormatsTheDecodersRefuseAreNamedAtOpen) {
  ScratchDir dir;
  MakeFolder(dir, 2);
  dir.Write("bee/2.bmp", "BM not really a bitmap");
  dir.Write("cat/deep/3.WEBP", std::string("RIFF\x10\0\0\0WEBPVP8 ", 16));
  ErrorCode code{};
  std::string message;
  code = ErrorCodeOf([&] { OpenImages(dir.path(), {.size = 8}); }, &message);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("2 of 8 files are in formats gpufeed does not decode"));
  EXPECT_THAT(message, HasSubstr("bee/2.bmp, "));
  EXPECT_THAT(message, HasSubstr("cat/deep/3.WEBP"));
  // With on_error="skip" the listing keeps torchvision's indices; each such file is replaced
  // and counted, with the format named.
  auto source =
      OpenImages(dir.path(), {.crop = CropMode::kCenter, .size = 8, .on_error = OnError::kSkip});
  ASSERT_EQ(source->size(), 8);
  ReadAll(source);
  const SkippedImages skipped = source->skipped();
  EXPECT_EQ(skipped.count, 2);
  ASSERT_EQ(skipped.first.size(), 2u);
  EXPECT_THAT(skipped.first[0], HasSubstr("bee/2.bmp: not a JPEG or PNG file (a BMP file"));
  EXPECT_THAT(skipped.first[1], HasSubstr("3.WEBP: not a JPEG or PNG file (a WebP file"));
}

TEST(ImageSourceTest, PngExifOrientationIsAppliedAsAJpegs) {
  // The same picture stored upright, and stored on its side with orientation 6 (rotate 90
  // clockwise to show): the same output.
  const int w = 12;
  const int h = 20;
  const auto upright = testing::Pattern(w, h, 3, 4);
  std::vector<uint8_t> sideways(upright.size());  // w x h shown = h x w stored, rotated back
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      // Stored (sx, sy) shows at (h_s - 1 - sy, sx) with h_s = w: so shown (x, y) is stored
      // (y, w - 1 - x).
      std::memcpy(&sideways[(static_cast<size_t>(w - 1 - x) * h + y) * 3],
                  &upright[(static_cast<size_t>(y) * w + x) * 3], 3);
    }
  }
  ScratchDir a;
  a.Write("c/0.png", testing::EncodePngRaw(upright, w, h, 8, 2));
  ScratchDir b;
  b.Write("c/0.png", testing::EncodePngRaw(sideways, h, w, 8, 2, {.exif = testing::ExifTiff(6)}));
  const ImageOptions o{.crop = CropMode::kCenter, .size = 12, .resize = 12};
  EXPECT_EQ(ReadAll(OpenImages(b.path(), o)).images, ReadAll(OpenImages(a.path(), o)).images);
}

TEST(ImageSourceTest, FloatOutputIsToTensorThenNormalize) {
  ScratchDir dir;
  MakeFolder(dir, 2);
  const ImageOptions plain_options{.crop = CropMode::kCenter, .size = 8};
  const Epoch plain = ReadAll(OpenImages(dir.path(), plain_options));
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f};
  const std::vector<float> sd = {0.229f, 0.224f, 0.225f};
  ImageOptions o = plain_options;
  o.dtype = DType::kFloat32;
  o.normalize_mean = mean;
  o.normalize_std = sd;
  auto source = OpenImages(dir.path(), o);
  EXPECT_EQ(source->schema().fields[0].dtype, DType::kFloat32);
  const Epoch normalized = ReadAll(source);  // its bytes hold floats
  ASSERT_EQ(normalized.images.size(), plain.images.size() * sizeof(float));
  const auto* values = reinterpret_cast<const float*>(normalized.images.data());
  const size_t plane = 8 * 8;
  for (size_t i = 0; i < plain.images.size(); ++i) {
    const size_t c = (i / plane) % 3;
    const float expected = (static_cast<float>(plain.images[i]) / 255.0f - mean[c]) / sd[c];
    ASSERT_EQ(values[i], expected) << i;
  }
  EXPECT_EQ(normalized.labels, plain.labels);
  ImageOptions bad = plain_options;
  bad.normalize_mean = mean;
  bad.normalize_std = sd;
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenImages(dir.path(), bad); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("normalize needs dtype float32 or float16"));
}

}  // namespace
}  // namespace gpufeed
