// Listing image data sets: torchvision's ImageFolder order and class indices, CSV lists.
#include "images/list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "gpufeed/sources.h"
#include "sources/open_path.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::ElementsAre;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::ScratchDir;

TEST(ImageListTest, ImageFolderOrderAndClassesAreTorchvisions) {
  ScratchDir dir;
  // Classes sorted by byte ("B" < "a"); files sorted by name ("10" < "2"); sub-folders
  // walked and sorted by path (".../sub" is a prefix of ".../sub-2": first); only image
  // extensions, any case; a file at the root is no class.
  for (const char* name : {"a/2.jpg", "a/10.JPG", "a/notes.txt", "a/sub/x.png", "a/sub-2/y.jpeg",
                           "B/z.webp", "B/q.bmp", "root.jpg"}) {
    dir.Write(name, "x");
  }
  const ImageList list = ListImageFolder(dir.path());
  EXPECT_THAT(list.classes, ElementsAre("B", "a"));
  std::vector<std::string> relative;
  for (const auto& p : list.paths) relative.push_back(p.substr(dir.path().size() + 1));
  EXPECT_THAT(relative, ElementsAre("B/q.bmp", "B/z.webp", "a/10.JPG", "a/2.jpg", "a/sub/x.png",
                                    "a/sub-2/y.jpeg"));
  EXPECT_THAT(list.labels, ElementsAre(0, 0, 1, 1, 1, 1));
}

TEST(ImageListTest, ImageFolderErrorsNameWhatIsMissing) {
  ScratchDir dir;
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { ListImageFolder(dir.path() + "/nope"); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("no such image folder"));
  dir.Write("loose.jpg", "x");
  EXPECT_EQ(ErrorCodeOf([&] { ListImageFolder(dir.path()); }, &message), ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("no class folder"));
  dir.Write("cat/1.jpg", "x");
  dir.Write("dog/readme.txt", "x");
  EXPECT_EQ(ErrorCodeOf([&] { ListImageFolder(dir.path()); }, &message), ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("no image file for the classes dog"));
}

TEST(ImageListTest, CsvListsTakeIntegerLabelsOrClassNames) {
  ScratchDir dir;
  const std::string ints = dir.Write("l/ints.csv", "label,path\n3,a.jpg\n0,\"b,c.jpg\"\n");
  ImageList list = ReadImageList(ints);
  EXPECT_THAT(list.paths, ElementsAre(dir.path() + "/l/a.jpg", dir.path() + "/l/b,c.jpg"));
  EXPECT_THAT(list.labels, ElementsAre(3, 0));
  EXPECT_TRUE(list.classes.empty());

  const std::string names = dir.Write("names.csv", "path,label\n/abs/x.jpg,dog\ny.jpg,cat\n");
  list = ReadImageList(names);
  EXPECT_THAT(list.classes, ElementsAre("cat", "dog"));
  EXPECT_THAT(list.labels, ElementsAre(1, 0));
  EXPECT_EQ(list.paths[0], "/abs/x.jpg");
}

TEST(ImageListTest, CsvErrorsNameTheFileAndLine) {
  ScratchDir dir;
  const std::string names = dir.Write("names.csv", "path,label\nx.jpg,dog\ny.jpg,zebra\n");
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  ReadImageList(names, "path", "label", {"cat", "dog"});
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("names.csv:3: unknown class 'zebra'"));
  std::vector<std::string> skipped;
  const ImageList list = ReadImageList(names, "path", "label", {"cat", "dog"}, true, &skipped);
  EXPECT_THAT(list.labels, ElementsAre(1));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0], HasSubstr("unknown class 'zebra'"));

  const std::string no_column = dir.Write("bad.csv", "file,label\nx.jpg,1\n");
  EXPECT_EQ(ErrorCodeOf([&] { ReadImageList(no_column); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("no column 'path'"));
  EXPECT_EQ(ErrorCodeOf([&] { ReadImageList(dir.path() + "/none.csv"); }, &message),
            ErrorCode::kNotFound);
}

TEST(ImageListTest, ClassifyPathKnowsImageFoldersAndLists) {
  ScratchDir dir;
  dir.Write("imgs/cat/1.jpg", "x");
  dir.Write("npy/mel.npy", "x");
  dir.Write("npy/sub/x", "x");
  const std::string list = dir.Write("list.csv", "path,label\n");
  const auto fs = DefaultFileSystem();
  EXPECT_EQ(ClassifyPath(dir.path() + "/imgs", *fs), PathKind::kImages);
  EXPECT_EQ(ClassifyPath(list, *fs), PathKind::kImages);
  EXPECT_EQ(ClassifyPath(dir.path() + "/npy", *fs), PathKind::kNumpyFolder);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(dir.path() + "/imgs", {}); }, &message),
            ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("open it with OpenImages"));
}

}  // namespace
}  // namespace gpufeed
