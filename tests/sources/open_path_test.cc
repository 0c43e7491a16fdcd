#include "sources/open_path.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "core/io/fault_file.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::ScratchDir;

class OpenPathTest : public ::testing::Test {
 protected:
  std::string WriteNumpyFolder() {
    const std::string root = dir_.path() + "/ds";
    std::filesystem::create_directories(root);
    const std::vector<int64_t> labels{4, 5, 6};
    WriteNpy(root + "/label.npy", {"label", DType::kInt64, {}}, 3, labels.data());
    return root;
  }
  ScratchDir dir_;
};

TEST_F(OpenPathTest, AFolderOpensAsNumpy) {
  const auto source = OpenPath(WriteNumpyFolder(), {"label"});
  EXPECT_EQ(source->size(), 3);
  EXPECT_THAT(source->Describe(), HasSubstr("numpy:"));
  EXPECT_EQ(ClassifyPath(dir_.path() + "/ds", *DefaultFileSystem()), PathKind::kNumpyFolder);
}

TEST_F(OpenPathTest, FieldsAndFileSystemArePassedOn) {
  const std::string root = WriteNumpyFolder();
  auto fs = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem());
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(root, {"nope"}, fs); }), ErrorCode::kNotFound);
  OpenPath(root, {}, fs);
  EXPECT_GT(fs->reads(), 0);
}

TEST_F(OpenPathTest, MissingPathIsNotFound) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(dir_.path() + "/none.h5", {}); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("none.h5"));
}

TEST_F(OpenPathTest, ALoneNpyFileSuggestsItsFolder) {
  const std::string root = WriteNumpyFolder();
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(root + "/label.npy", {}); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("open " + root + " instead"));
}

TEST_F(OpenPathTest, Hdf5ByExtensionOrSignatureGoesToTheHdf5Source) {
  const std::string by_ext = dir_.Write("train.H5", "not really hdf5");
  const std::string by_magic = dir_.Write("train.data", std::string("\x89HDF\r\n\x1a\n", 8) + "xx");
  EXPECT_EQ(ClassifyPath(by_ext, *DefaultFileSystem()), PathKind::kHdf5);
  EXPECT_EQ(ClassifyPath(by_magic, *DefaultFileSystem()), PathKind::kHdf5);
  // Whatever the HDF5 source makes of these files, it is an Error, not a crash.
  EXPECT_THROW(OpenPath(by_magic, {}), Error);
}

TEST_F(OpenPathTest, UnknownFileIsUnsupported) {
  const std::string path = dir_.Write("notes.txt", "hello");
  EXPECT_EQ(ClassifyPath(path, *DefaultFileSystem()), PathKind::kUnknown);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(path, {}); }, &message), ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("notes.txt"));
}

}  // namespace
}  // namespace gpufeed
