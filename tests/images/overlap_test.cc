// Files fetched together (a remote batch) are decoded as each one arrives, while the rest of
// the batch is still in flight, and the batch equals a local read: values, order, labels, and
// bad files raised or skipped the same way.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/images.h"
#include "gpufeed/loader.h"
#include "images/test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::ScratchDir;

// Local files that say they are read together (a BatchKey), whose ReadBatch completes them one
// at a time in order, handing each over at once, and runs `before_last` before it reads the
// last: what the caller did with the others by then is what it did while that one was still
// in flight.
class OneByOneFileSystem final : public FileSystem {
 public:
  std::function<void()> before_last = [] {};

  std::unique_ptr<File> Open(const std::string& path) const override {
    return std::make_unique<OneByOneFile>(PosixFileSystem()->Open(path), this);
  }
  PathType Type(const std::string& path) const override { return PosixFileSystem()->Type(path); }
  std::vector<DirEntry> List(const std::string& path) const override {
    return PosixFileSystem()->List(path);
  }

 private:
  class OneByOneFile final : public File {
   public:
    OneByOneFile(std::unique_ptr<File> local, const OneByOneFileSystem* fs)
        : local_(std::move(local)), fs_(fs) {}
    const std::string& path() const override { return local_->path(); }
    uint64_t Size() const override { return local_->Size(); }
    size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
      return local_->ReadAt(offset, buf, n);
    }
    const std::byte* Map() const override { return nullptr; }
    const void* BatchKey() const override { return fs_; }
    void ReadBatch(std::span<const FileRead> reads, const std::string& what,
                   const std::function<void(size_t)>& on_done) const override {
      for (size_t i = 0; i < reads.size(); ++i) {
        if (i + 1 == reads.size()) fs_->before_last();
        ReadFully(*reads[i].file, reads[i].offset, reads[i].buf, reads[i].n, what);
        if (on_done) on_done(i);
      }
    }

   private:
    std::unique_ptr<File> local_;
    const OneByOneFileSystem* fs_;
  };
};

// Two classes of JPEGs and a PNG of varied sizes.
void MakeFolder(const ScratchDir& dir) {
  int seed = 0;
  for (const char* cls : {"ant", "bee"}) {
    for (int i = 0; i < 3; ++i, ++seed) {
      const int w = 40 + 9 * seed, h = 30 + 6 * seed;
      if (seed == 4) {
        dir.Write(fmt::format("{}/{}.png", cls, i),
                  testing::EncodePng(testing::Pattern(w, h, 3, seed), w, h, PNG_FORMAT_RGB));
      } else {
        dir.Write(fmt::format("{}/{}.jpg", cls, i), testing::RgbJpeg(w, h, seed));
      }
    }
  }
}

struct Rows {
  std::vector<std::byte> images;
  std::vector<int64_t> labels;
};

// Reads samples `indices` as one batch of `source`; `rows` receives the batch's buffers, which
// stay where they are while the read runs.
void ReadBatch(const ImageSource& source, const std::vector<int64_t>& indices, Rows& rows) {
  const size_t image_bytes = source.schema().fields[0].SampleBytes();
  rows.images.assign(indices.size() * image_bytes, std::byte{0});
  rows.labels.assign(indices.size(), -1);
  const BatchView out{{rows.images.data(), reinterpret_cast<std::byte*>(rows.labels.data())},
                      static_cast<int64_t>(indices.size())};
  const auto state = source.NewWorkerState();
  source.ReadSeeded(indices, out, state.get(), 42);
}

class ImageOverlapTest : public ::testing::TestWithParam<DType> {
 protected:
  ImageOptions Options() const {
    ImageOptions o;
    o.size = 24;
    o.crop = CropMode::kRandom;
    o.dtype = GetParam();
    if (GetParam() != DType::kUInt8) {
      o.normalize_mean = {0.5f, 0.4f, 0.3f};
      o.normalize_std = {0.2f, 0.25f, 0.3f};
    }
    return o;
  }
};

TEST_P(ImageOverlapTest, EachFileIsDecodedBeforeTheLastOfItsBatchArrives) {
  ScratchDir dir;
  MakeFolder(dir);
  const auto local = OpenImages(dir.path(), Options());
  const auto fs = std::make_shared<OneByOneFileSystem>();
  ImageOptions o = Options();
  o.file_system = fs;
  const auto fetched = OpenImages(dir.path(), o);
  // Out of order, with a sample twice (a padded batch): the file read last is sample 1's.
  const std::vector<int64_t> indices = {5, 0, 3, 0, 4, 2, 1};
  Rows expected;
  ReadBatch(*local, indices, expected);
  const size_t image_bytes = local->schema().fields[0].SampleBytes();

  Rows got;
  std::vector<std::byte> before_last_images;
  std::vector<int64_t> before_last_labels;
  fs->before_last = [&] {
    before_last_images = got.images;
    before_last_labels = got.labels;
  };
  ReadBatch(*fetched, indices, got);
  EXPECT_TRUE(got.images == expected.images);
  EXPECT_EQ(got.labels, expected.labels);
  // Every row but sample 1's was already decoded, cropped and labelled while sample 1's file
  // had not been read.
  ASSERT_EQ(before_last_labels.size(), indices.size());
  for (size_t row = 0; row < indices.size(); ++row) {
    const auto begin = static_cast<std::ptrdiff_t>(row * image_bytes);
    const bool same = std::equal(before_last_images.begin() + begin,
                                 before_last_images.begin() + begin + image_bytes,
                                 expected.images.begin() + begin);
    if (indices[row] == 1) {
      EXPECT_EQ(before_last_labels[row], -1) << "row " << row;
    } else {
      EXPECT_TRUE(same) << "row " << row;
      EXPECT_EQ(before_last_labels[row], expected.labels[row]) << "row " << row;
    }
  }
}

TEST_P(ImageOverlapTest, BadFilesAreRaisedOrSkippedAsInALocalRead) {
  ScratchDir dir;
  MakeFolder(dir);
  dir.Write("ant/1.jpg", testing::RgbJpeg(50, 40, 9).substr(0, 20));  // cut short
  const std::vector<int64_t> indices = {2, 1, 4, 0};
  for (const OnError on_error : {OnError::kRaise, OnError::kSkip}) {
    ImageOptions o = Options();
    o.on_error = on_error;
    const auto local = OpenImages(dir.path(), o);
    o.file_system = std::make_shared<OneByOneFileSystem>();
    const auto fetched = OpenImages(dir.path(), o);
    Rows expected;
    Rows got;
    if (on_error == OnError::kRaise) {
      std::string expected_message;
      std::string message;
      const ErrorCode code =
          ErrorCodeOf([&] { ReadBatch(*local, indices, expected); }, &expected_message);
      EXPECT_EQ(ErrorCodeOf([&] { ReadBatch(*fetched, indices, got); }, &message), code);
      EXPECT_EQ(message, expected_message);
      EXPECT_THAT(message, HasSubstr("ant/1.jpg"));
      continue;
    }
    ReadBatch(*local, indices, expected);
    ReadBatch(*fetched, indices, got);
    EXPECT_TRUE(got.images == expected.images);
    EXPECT_EQ(got.labels, expected.labels);
    EXPECT_EQ(fetched->skipped().count, 1);
    EXPECT_EQ(local->skipped().count, 1);
  }
}

TEST_P(ImageOverlapTest, AnEpochOfTwoWorkersEqualsTheLocalEpoch) {
  ScratchDir dir;
  MakeFolder(dir);
  ImageOptions o = Options();
  const auto local = OpenImages(dir.path(), o);
  o.file_system = std::make_shared<OneByOneFileSystem>();
  const auto fetched = OpenImages(dir.path(), o);
  const auto epoch = [](std::shared_ptr<Source> source) {
    Loader loader(source, {.batch_size = 4, .shuffle = true, .seed = 3, .workers = 2});
    std::vector<std::byte> images;
    std::vector<int64_t> indices;
    while (auto batch = loader.Next()) {
      const auto image = batch->field("image");
      images.insert(images.end(), image.as<std::byte>(), image.as<std::byte>() + image.bytes());
      indices.insert(indices.end(), batch->indices().begin(), batch->indices().end());
    }
    return std::make_pair(images, indices);
  };
  EXPECT_TRUE(epoch(fetched) == epoch(local));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ImageOverlapTest,
                         ::testing::Values(DType::kUInt8, DType::kFloat32),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace gpufeed
