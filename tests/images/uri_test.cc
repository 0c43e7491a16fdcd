// An image folder and an image list read through a FileSystem whose paths are URIs
// (tests/sources/uri_file_system.h) give exactly the samples their local paths give: the
// folders are listed, the list read and its relative paths joined, and every image read,
// through the file system alone.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/images.h"
#include "gpufeed/loader.h"
#include "images/test_util.h"
#include "sources/open_path.h"
#include "sources/scratch_dir.h"
#include "sources/uri_file_system.h"

namespace gpufeed {
namespace {

using ::testing::ElementsAre;
using testing::ErrorCodeOf;
using testing::ScratchDir;
using testing::UriFileSystem;

// Two classes of JPEGs and PNGs, one in a nested folder.
void MakeFolder(const ScratchDir& dir) {
  int seed = 0;
  for (const char* cls : {"ant", "bee"}) {
    for (int i = 0; i < 4; ++i, ++seed) {
      const int w = 30 + 7 * seed, h = 24 + 5 * seed;
      const std::string name = i == 3 ? fmt::format("imgs/{}/deep/{}.png", cls, i)
                                      : fmt::format("imgs/{}/{}.jpg", cls, i);
      dir.Write(name,
                i == 3 ? testing::EncodePng(testing::Pattern(w, h, 3, seed), w, h, PNG_FORMAT_RGB)
                       : testing::RgbJpeg(w, h, seed));
    }
  }
  dir.Write("imgs/notes.txt", "not an image");
  dir.Write("train.csv",
            "path,label\nimgs/bee/0.jpg,bee\nimgs/ant/deep/3.png,ant\nimgs/ant/1.jpg,ant\n");
}

struct Samples {
  std::vector<int64_t> indices, labels;
  std::vector<uint8_t> images;
};

Samples Epoch(std::shared_ptr<Source> source) {
  Loader loader(source, {.batch_size = 3, .shuffle = true, .seed = 5, .workers = 2});
  Samples out;
  while (auto batch = loader.Next()) {
    const auto image = batch->field("image");
    const auto label = batch->field("label");
    out.indices.insert(out.indices.end(), batch->indices().begin(), batch->indices().end());
    out.labels.insert(out.labels.end(), label.as<int64_t>(), label.as<int64_t>() + label.rows);
    out.images.insert(out.images.end(), image.as<uint8_t>(), image.as<uint8_t>() + image.bytes());
  }
  return out;
}

void ExpectSame(std::shared_ptr<ImageSource> local, std::shared_ptr<ImageSource> remote) {
  ASSERT_EQ(local->size(), remote->size());
  EXPECT_EQ(local->classes(), remote->classes());
  const Samples a = Epoch(local);
  const Samples b = Epoch(remote);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_TRUE(a.images == b.images);
}

TEST(ImageUriTest, AnImageFolderReadsTheSameThroughUris) {
  ScratchDir dir;
  MakeFolder(dir);
  const auto fs = std::make_shared<UriFileSystem>(dir.path());
  const std::string uri = fs->Uri("imgs");
  EXPECT_EQ(ClassifyPath(uri, *fs), PathKind::kImages);
  const auto remote = OpenImages(uri, {.size = 16, .file_system = fs});
  EXPECT_THAT(remote->classes(), ElementsAre("ant", "bee"));
  EXPECT_EQ(remote->path(3), "s3://testbucket/root/imgs/ant/deep/3.png");
  ExpectSame(OpenImages(dir.path() + "/imgs", {.size = 16}), remote);
  EXPECT_GT(fs->counters().lists, 0);
}

TEST(ImageUriTest, AListsRelativePathsResolveBesideItThroughUris) {
  ScratchDir dir;
  MakeFolder(dir);
  const auto fs = std::make_shared<UriFileSystem>(dir.path());
  const std::string uri = fs->Uri("train.csv");
  EXPECT_EQ(ClassifyPath(uri, *fs), PathKind::kImages);
  const auto remote = OpenImages(uri, {.size = 16, .file_system = fs});
  EXPECT_EQ(remote->path(0), "s3://testbucket/root/imgs/bee/0.jpg");
  ExpectSame(OpenImages(dir.path() + "/train.csv", {.size = 16}), remote);
  EXPECT_EQ(ErrorCodeOf([&] { OpenImages(fs->Uri("none.csv"), {.file_system = fs}); }),
            ErrorCode::kNotFound);
}

}  // namespace
}  // namespace gpufeed
