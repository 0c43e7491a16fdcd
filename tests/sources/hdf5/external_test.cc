// Every way an HDF5 file can place a dataset's bytes elsewhere: an external
// link (the data lies in another HDF5 file) is refused naming the link's target, never read
// through the linking file; external storage (H5Pset_external: raw files beside the HDF5 file)
// is read from the right file whatever the current directory, and a missing or short raw file
// is an error naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/test_files.h"
#include "sources/hdf5/tools/inspect.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

constexpr const char* kMakeFiles = R"PY(
import os, sys, numpy as np, h5py
d = sys.argv[1]
os.chdir(d)
with h5py.File('target.h5', 'w') as f:
    f['pad'] = np.full(1000, 42.0)
    f['data'] = np.linspace(0.1257, 1.0, 100)
with h5py.File('linking.h5', 'w') as f:
    f['own'] = np.full(5000, 42.0)  # what reading target.h5's offsets here would return
    f['ext'] = h5py.ExternalLink('target.h5', '/data')
    f['soft'] = h5py.SoftLink('/ext')
    f.create_group('g')['inner'] = h5py.ExternalLink('target.h5', '/')
with h5py.File('only_links.h5', 'w') as f:
    f['a'] = h5py.ExternalLink('target.h5', '/data')
    f.create_group('g')['b'] = h5py.ExternalLink('other.h5', '/x')
np.arange(50, dtype='<f4').tofile('raw.bin')
np.arange(100, 130, dtype='<f4').tofile('raw2.bin')
with h5py.File('external.h5', 'w') as f:
    f.create_dataset('e', shape=(50,), dtype='<f4', external=[('raw.bin', 0, 200)])
    f.create_dataset('two', shape=(40,), dtype='<f4',
                     external=[('raw.bin', 40, 40), ('raw2.bin', 0, 120)])
    f.create_dataset('short', shape=(60,), dtype='<f4', external=[('raw.bin', 0, 240)])
    f.create_dataset('gone', shape=(10,), dtype='<f4', external=[('missing.bin', 0, 40)])
)PY";

class Hdf5ExternalTest : public ::testing::Test {
 protected:
  // The files are written once for the suite (a Python start costs most of a second).
  static void SetUpTestSuite() {
    if (!testing::HaveH5py()) return;
    dir_ = new testing::ScratchDir;
    made_ = testing::RunPython(dir_->path(), "make.py", kMakeFiles, dir_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (dir_ == nullptr) GTEST_SKIP() << "Debian's h5py (/usr/bin/python3) is unavailable";
    ASSERT_TRUE(made_) << testing::ReadWholeFile(dir_->path() + "/make.py.log");
  }
  static std::string Path(const std::string& name) { return dir_->path() + "/" + name; }

  static testing::ScratchDir* dir_;
  static bool made_;
};

testing::ScratchDir* Hdf5ExternalTest::dir_ = nullptr;
bool Hdf5ExternalTest::made_ = false;

std::vector<float> ReadFloats(const Source& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t i = 0; i < s.size(); ++i) idx[i] = i;
  std::vector<float> out(s.size());
  BatchView view;
  view.rows = s.size();
  view.fields.push_back(reinterpret_cast<std::byte*>(out.data()));
  const auto state = s.NewWorkerState();
  s.Read(idx, view, state.get());
  return out;
}

TEST_F(Hdf5ExternalTest, ExternalLinkIsRefusedNamingItsTarget) {
  for (const std::string name : {"ext", "soft", "g/inner/data"}) {
    std::string msg;
    EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({Path("linking.h5")}, {name}); }, &msg),
              ErrorCode::kUnsupported)
        << name << ": " << msg;
    EXPECT_THAT(msg, AllOf(HasSubstr(Path("linking.h5")), HasSubstr("external link"),
                           HasSubstr("target.h5")))
        << name;
  }
  // The target named in the message, opened directly, holds the data.
  auto source = OpenHdf5({Path("target.h5")}, {"data"});
  ASSERT_EQ(source->size(), 100);
  std::vector<double> got(100);
  std::vector<int64_t> idx(100);
  for (int i = 0; i < 100; ++i) idx[i] = i;
  BatchView view;
  view.rows = 100;
  view.fields.push_back(reinterpret_cast<std::byte*>(got.data()));
  const auto state = source->NewWorkerState();
  source->Read(idx, view, state.get());
  EXPECT_DOUBLE_EQ(got[0], 0.1257);
  // The linking file's own datasets still open.
  EXPECT_EQ(OpenHdf5({Path("linking.h5")}, {"own"})->size(), 5000);
}

// A file whose datasets all lie behind external links is not called empty: the error and
// `gpufeed inspect` name the links and the files they lead to.
TEST_F(Hdf5ExternalTest, FileOfOnlyExternalLinksNamesTheirFiles) {
  const std::string path = Path("only_links.h5");
  for (const std::vector<std::string>& fields :
       {std::vector<std::string>{}, std::vector<std::string>{"zz"}}) {
    std::string msg;
    EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({path}, fields); }, &msg), ErrorCode::kNotFound) << msg;
    EXPECT_THAT(msg,
                AllOf(HasSubstr(path), HasSubstr("behind external links"),
                      HasSubstr("/a -> target.h5 (/data)"), HasSubstr("/g/b -> other.h5 (/x)")));
  }
  const Hdf5Inspection in = InspectHdf5(path, nullptr, uint64_t{1} << 30);
  EXPECT_TRUE(in.datasets.empty());
  EXPECT_THAT(in.recommendation,
              AllOf(HasSubstr("no datasets of its own"), HasSubstr("/a -> target.h5 (/data)")));
}

TEST_F(Hdf5ExternalTest, ExternalStorageIsReadBesideTheFileFromAnyDirectory) {
  // The test runs elsewhere: the raw files are found beside external.h5, not in the cwd.
  ASSERT_NE(std::filesystem::current_path(), std::filesystem::path(dir_->path()));
  auto source = OpenHdf5({Path("external.h5")}, {"e"});
  const std::vector<float> e = ReadFloats(*source);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(e[i], static_cast<float>(i)) << i;
  // Two segments: elements 10..19 of raw.bin, then raw2.bin.
  const std::vector<float> two = ReadFloats(*OpenHdf5({Path("external.h5")}, {"two"}));
  for (int i = 0; i < 10; ++i) ASSERT_EQ(two[i], static_cast<float>(10 + i)) << i;
  for (int i = 0; i < 30; ++i) ASSERT_EQ(two[10 + i], static_cast<float>(100 + i)) << i;
}

TEST_F(Hdf5ExternalTest, ShortOrMissingExternalStorageIsAnErrorNamingTheFile) {
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({Path("external.h5")}, {"short"}); }, &msg),
            ErrorCode::kCorruptData);
  EXPECT_THAT(msg, AllOf(HasSubstr("raw.bin holds 200 bytes"), HasSubstr("dataset short")));
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({Path("external.h5")}, {"gone"}); }, &msg),
            ErrorCode::kNotFound);
  EXPECT_THAT(msg, AllOf(HasSubstr("missing.bin is missing"), HasSubstr(dir_->path())));
}

}  // namespace
}  // namespace gpufeed
