// Bad input gets an Error naming the file, the dataset and (where there is one) the chunk
// and sample; never a crash, a hang or wrong data.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/io/fault_file.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/fixture.h"
#include "sources/numpy/npy_test_util.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

constexpr const char* kMakeBadFiles = R"PY(
import sys, os, json, numpy as np, h5py
d = sys.argv[1]
info = {}
with h5py.File(os.path.join(d, 'types.h5'), 'w') as f:
    f['compound'] = np.zeros(10, dtype=[('a', 'i4'), ('b', 'f4')])
    f.create_dataset('vlen', data=['a', 'bb', 'ccc'], dtype=h5py.string_dtype())
    f['fixed'] = np.array([b'ab', b'cd'], dtype='S2')
    f['ok'] = np.arange(10)
    f['scalar'] = 5.0
with h5py.File(os.path.join(d, 'lengths.h5'), 'w') as f:
    f['a'] = np.arange(10)
    f['b'] = np.arange(12)
with h5py.File(os.path.join(d, 'other_dtype.h5'), 'w') as f:
    f['mel'] = np.zeros((5, 1, 64, 32), dtype='f8')
    f['label'] = np.arange(5)
for name, kw in [('corrupt', dict(compression='gzip')), ('checksum', dict(fletcher32=True))]:
    with h5py.File(os.path.join(d, name + '.h5'), 'w') as f:
        f.create_dataset('x', data=np.arange(16000, dtype='f4').reshape(1000, 16),
                         chunks=(100, 16), **kw)
    with h5py.File(os.path.join(d, name + '.h5'), 'r') as f:
        c = f['x'].id.get_chunk_info_by_coord((300, 0))
        info[name] = {'offset': c.byte_offset, 'size': c.size}
json.dump(info, open(os.path.join(d, 'bad.json'), 'w'))
)PY";

class Hdf5ErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    files_ = testing::Hdf5Files::Get();
    if (files_ == nullptr) GTEST_SKIP() << "Debian's h5py (/usr/bin/python3) is unavailable";
    // The tests damage their files: each gets its own copy of the shared set.
    std::string error;
    const std::string shared = testing::SharedPythonOutput("hdf5_bad", kMakeBadFiles, &error);
    ASSERT_FALSE(shared.empty()) << error;
    std::filesystem::copy(shared, dir_.path(),
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing);
    info_ = nlohmann::json::parse(testing::ReadWholeFile(dir_.path() + "/bad.json"));
  }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name + ".h5"; }

  // Overwrites `n` bytes in the middle of the chunk recorded for `name`.
  void DamageChunk(const std::string& name, size_t n) {
    const uint64_t offset = info_[name]["offset"];
    const uint64_t size = info_[name]["size"];
    std::fstream f(Path(name), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset + size / 2 - n / 2));
    for (size_t i = 0; i < n; ++i) f.put(static_cast<char>(0x5a ^ i));
  }

  // Reads every sample in one batch.
  static void ReadEverything(const Source& s) {
    std::vector<int64_t> idx(s.size());
    for (int64_t i = 0; i < s.size(); ++i) idx[i] = i;
    std::vector<std::vector<std::byte>> rows;
    BatchView view;
    view.rows = s.size();
    for (const auto& f : s.schema().fields) {
      rows.emplace_back(s.size() * f.SampleBytes());
      view.fields.push_back(rows.back().data());
    }
    s.Read(idx, view, s.NewWorkerState().get());
  }

  const testing::Hdf5Files* files_ = nullptr;
  testing::ScratchDir dir_;
  nlohmann::json info_;
};

TEST_F(Hdf5ErrorsTest, TruncatedFileNamesTheFile) {
  const std::string path = dir_.path() + "/truncated.h5";
  std::filesystem::copy_file(files_->File("plain"), path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  std::string msg;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenHdf5({path}, {"mel", "label"});
                },
                &msg),
            ErrorCode::kCorruptData);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("truncated")));
}

TEST_F(Hdf5ErrorsTest, TruncatedChunkedFileNamesTheFile) {
  const std::string path = dir_.path() + "/truncated_gzip.h5";
  std::filesystem::copy_file(files_->File("gzip"), path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1000);
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({path}, {"mel"}); }, &msg), ErrorCode::kCorruptData);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("truncated")));
}

TEST_F(Hdf5ErrorsTest, CorruptDeflateStreamNamesFileDatasetChunkAndSample) {
  DamageChunk("corrupt", 64);
  auto source = OpenHdf5({Path("corrupt")}, {"x"});
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { ReadEverything(*source); }, &msg), ErrorCode::kCorruptData);
  EXPECT_THAT(msg, AllOf(HasSubstr(Path("corrupt")), HasSubstr("dataset x"),
                         HasSubstr("chunk 3 at [300,0] (samples 300..399"), HasSubstr("sample 300"),
                         HasSubstr("deflate")));
  // The chunks before it read fine.
  std::vector<int64_t> idx{0, 150, 299};
  std::vector<std::byte> rows(3 * 64);
  BatchView view{{rows.data()}, 3};
  EXPECT_NO_THROW(source->Read(idx, view, nullptr));
}

TEST_F(Hdf5ErrorsTest, Fletcher32MismatchNamesTheChunk) {
  DamageChunk("checksum", 8);
  auto source = OpenHdf5({Path("checksum")}, {"x"});
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { ReadEverything(*source); }, &msg), ErrorCode::kCorruptData);
  EXPECT_THAT(msg, AllOf(HasSubstr("dataset x"), HasSubstr("chunk 3 at [300,0]"),
                         HasSubstr("fletcher32 checksum mismatch")));
}

TEST_F(Hdf5ErrorsTest, MissingDatasetListsTheDatasetsThere) {
  std::string msg;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenHdf5({files_->File("plain")}, {"mel", "nope"});
                },
                &msg),
            ErrorCode::kNotFound);
  EXPECT_THAT(msg, AllOf(HasSubstr(files_->File("plain")), HasSubstr("no dataset 'nope'"),
                         HasSubstr("/label, /mel")));
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({files_->File("groups")}, {"/train/nope"}); }),
            ErrorCode::kNotFound);
}

TEST_F(Hdf5ErrorsTest, MissingFileIsNotFound) {
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({Path("absent")}, {"x"}); }, &msg), ErrorCode::kNotFound);
  EXPECT_THAT(msg, HasSubstr(Path("absent")));
}

TEST_F(Hdf5ErrorsTest, DatasetsOfDifferentLengthsAreNamed) {
  std::string msg;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenHdf5({Path("lengths")}, {"a", "b"});
                },
                &msg),
            ErrorCode::kCorruptData);
  EXPECT_THAT(msg, AllOf(HasSubstr(Path("lengths")), HasSubstr("a holds 10 samples"),
                         HasSubstr("b holds 12")));
}

TEST_F(Hdf5ErrorsTest, UnsupportedDtypesAreNamed) {
  for (const auto& [name, what] :
       std::vector<std::pair<std::string, std::string>>{{"compound", "dtype compound"},
                                                        {"fixed", "fixed-length string"},
                                                        {"scalar", "scalar"}}) {
    const std::string dataset = name;  // clang 14 lambdas cannot capture a structured binding
    std::string msg;
    EXPECT_EQ(ErrorCodeOf(
                  [&] {
                    OpenHdf5({Path("types")}, {"ok", dataset});
                  },
                  &msg),
              ErrorCode::kUnsupported)
        << dataset;
    EXPECT_THAT(msg,
                AllOf(HasSubstr(Path("types")), HasSubstr("dataset " + dataset), HasSubstr(what)));
  }
}

// A variable-length string is read (as its stored bytes): python/tests/test_hdf5_vlen.py.
TEST_F(Hdf5ErrorsTest, VariableLengthStringsAreBytesOfAnyLength) {
  const auto source = OpenHdf5({Path("types")}, {"vlen"});
  EXPECT_EQ(source->schema().fields.at(0).ToString(), "vlen: uint8[*]");
}

TEST_F(Hdf5ErrorsTest, FilesMustAgreeOnDtypeAndShape) {
  std::string msg;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenHdf5({files_->File("plain"), Path("other_dtype")}, {"mel", "label"});
                },
                &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(msg,
              AllOf(HasSubstr(Path("other_dtype")), HasSubstr("float64"), HasSubstr("float32")));
}

TEST_F(Hdf5ErrorsTest, BadArguments) {
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({}, {"x"}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] {
              OpenHdf5({files_->File("plain")}, {"mel", "mel"});
            }),
            ErrorCode::kInvalidArgument);
  auto source = OpenHdf5({files_->File("plain")}, {"label"});
  std::vector<int64_t> idx{1000};
  std::vector<std::byte> row(8);
  BatchView view{{row.data()}, 1};
  EXPECT_EQ(ErrorCodeOf([&] { source->Read(idx, view, nullptr); }), ErrorCode::kInvalidArgument);
}

TEST_F(Hdf5ErrorsTest, EioFromTheFileSeamNamesFileDatasetAndSample) {
  for (const std::string name : {"plain", "gzip", "h5py_defaults"}) {
    auto fs = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem());
    auto source = OpenHdf5({files_->File(name)}, {"mel"}, {.file_system = fs});
    auto rules = fs->rules();
    rules.eio_after_reads = 0;  // every read from now on fails
    fs->SetRules(rules);
    std::string msg;
    EXPECT_EQ(ErrorCodeOf([&] { ReadEverything(*source); }, &msg), ErrorCode::kIo) << name;
    EXPECT_THAT(
        msg, AllOf(HasSubstr(files_->File(name)), HasSubstr("dataset mel"), HasSubstr("sample 0")))
        << name;
    if (name != "plain") {
      EXPECT_THAT(msg, HasSubstr("chunk 0 at [0,0,0,0]"));
    }
    // Once the disk recovers, the same source reads again.
    rules.eio_after_reads = -1;
    fs->SetRules(rules);
    EXPECT_NO_THROW(ReadEverything(*source)) << name;
  }
}

TEST_F(Hdf5ErrorsTest, ShortReadsAreRetried) {
  auto fs = std::make_shared<FaultInjectingFileSystem>(
      DefaultFileSystem(), FaultInjectingFileSystem::Rules{.max_bytes_per_read = 7});
  auto source = OpenHdf5({files_->File("multi_axis")}, {"x", "y"}, {.file_system = fs});
  EXPECT_NO_THROW(ReadEverything(*source));
}

}  // namespace
}  // namespace gpufeed
