// Crafted HDF5 files, one per class of hostile input, written by
// make_hostile_hdf5.py: each must become an Error naming the file and what is wrong, from
// OpenHdf5 and from `gpufeed inspect`, never a crash, a hang or a huge allocation. Also a
// file truncated while a source reads it: Error(kIo), never SIGBUS.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdlib>
#include <filesystem>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/fixture.h"
#include "sources/hdf5/tools/inspect.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

struct HostileCase {
  const char* name;
  ErrorCode code;
  const char* says;  // a part of the message saying what is wrong
};

const HostileCase kCases[] = {
    // Item 1: the chunk counts' product wraps 64 bits (so does the element count).
    {"grid_overflow", ErrorCode::kCorruptData, "holds more than 2^64 elements"},
    // Item 1: 2^40 chunks, no wrap: the table would take terabytes.
    {"grid_huge", ErrorCode::kCorruptData, "makes a grid of 1099511627776 chunks"},
    // Item 2: chunk dims whose byte count wraps to 0.
    {"chunk_wrap", ErrorCode::kCorruptData, "is 4 GiB or more"},
    // Item 3: a sample of 2^124 elements in a dataset of 0 samples.
    {"shape_overflow", ErrorCode::kCorruptData, "holds more than 2^64 elements"},
    // Items 4 and 5: a B-tree whose root is its own child (libhdf5 1.10.8 recurses until
    // the stack overflows: gpufeed's walk must refuse it before libhdf5 walks it).
    {"btree_cycle", ErrorCode::kCorruptData, "is reached twice"},
    // Item 4: every child of the root is one leaf.
    {"btree_shared", ErrorCode::kCorruptData, "is reached twice"},
    // Item 4: a chunk listed twice (which one depends on h5py's node order).
    {"btree_duplicate", ErrorCode::kCorruptData, "] twice"},
    // Item 5: the root object header lies past the end of the file.
    {"root_past_eof", ErrorCode::kCorruptData, "root group object header"},
    // Item 5: more symbols than a symbol node holds (libhdf5 overflows its node buffer).
    {"symbol_node_overflow", ErrorCode::kCorruptData, "has 65535 entries, more than 2K = 8"},
    // Item 5: a header message longer than its header.
    {"message_overrun", ErrorCode::kCorruptData, "runs past its block"},
    // Item 5: a local heap free list that loops (libhdf5 follows it forever).
    {"heap_free_list_loop", ErrorCode::kCorruptData, "its free list loops"},
    // An enumeration whose base type claims 1.5 GB: libhdf5 would allocate 3 GB for its two
    // values (found by hdf5_fuzz).
    {"enum_base_size", ErrorCode::kCorruptData,
     "enumeration datatype of 1 bytes over a base type of 1610612737 bytes"},
    // An external dataset whose file-name heap claims 0x31313131313131 bytes: libhdf5 would
    // allocate that much on open (found by hdf5_fuzz).
    {"external_heap_size", ErrorCode::kCorruptData,
     "(13846361207288113 bytes) lies past the end of the file"},
    // A group linking to itself whose reference count says one link: libhdf5 lists the
    // datasets by recursing around the cycle until the stack overflows (found by hdf5_fuzz).
    {"group_cycle", ErrorCode::kCorruptData,
     "is reached by 2 hard links but its reference count is 1"},
    // A group entry named "z/": names are resolved as paths (one named "/" made libhdf5's
    // visit recurse until the stack overflowed; found by hdf5_fuzz).
    {"link_name_slash", ErrorCode::kCorruptData, "a link named 'z/'"},
    // HDF5 2.0's layout message (version 5), as h5py on HDF5 2.x writes it under
    // libver="latest": refused as a format libhdf5 1.10.8 does not read, with the remedy.
    {"layout_v5", ErrorCode::kUnsupported,
     "data layout message version 5 (HDF5 2.0's format"},
    // Chunk indexes of libver="latest" files (layout version 4), read by gpufeed itself: a
    // fixed array block changed after its checksum; a fixed array header (checksum intact)
    // claiming 2^40 entries; two extensible array pointers naming one data block; a v2
    // B-tree node that is its own child; a v2 B-tree leaf listing one chunk twice.
    {"fa_checksum", ErrorCode::kCorruptData, "fixed array data block at offset"},
    {"fa_count", ErrorCode::kCorruptData, "holds 1099511627776 entries for a chunk grid of 100"},
    {"earray_shared", ErrorCode::kCorruptData, "data block at offset"},
    {"bt2_cycle", ErrorCode::kCorruptData, "is reached twice"},
    {"bt2_duplicate", ErrorCode::kCorruptData, "] twice"},
    // Dense link storage (a group of more than 8 links, libver="latest"), read by gpufeed
    // before libhdf5 walks it: a name index hash that is not its name's; a heap ID past its
    // block; a heap block changed after its checksum.
    {"dense_hash", ErrorCode::kCorruptData, "hash of 'd"},
    {"dense_heap_id", ErrorCode::kCorruptData, "outside its direct block"},
    {"dense_heap_checksum", ErrorCode::kCorruptData, "fails its checksum"},
};

class Hdf5HostileTest : public ::testing::TestWithParam<HostileCase> {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::SharedScriptOutput("hdf5_hostile", GPUFEED_HOSTILE_HDF5_SCRIPT, &error_);
    have_h5py_ = !dir_.empty() || testing::HaveH5py();
  }
  void SetUp() override {
    if (!have_h5py_) GTEST_SKIP() << "Debian's h5py (/usr/bin/python3) is unavailable";
    ASSERT_FALSE(dir_.empty()) << error_;
  }
  static std::string Path(const std::string& name) { return dir_ + "/" + name + ".h5"; }

  static bool have_h5py_;
  static std::string dir_;
  static std::string error_;
};

bool Hdf5HostileTest::have_h5py_ = false;
std::string Hdf5HostileTest::dir_;
std::string Hdf5HostileTest::error_;

TEST_P(Hdf5HostileTest, OpenHdf5RefusesItNamingTheFile) {
  const HostileCase& c = GetParam();
  const std::string path = Path(c.name);
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({path}, {"x"}); }, &msg), c.code) << msg;
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr(c.says)));
}

TEST_P(Hdf5HostileTest, InspectReportsItNamingTheFile) {
  const HostileCase& c = GetParam();
  const std::string path = Path(c.name);
  // A damaged superblock stops the whole inspection; a damaged dataset is reported.
  try {
    const Hdf5Inspection in = InspectHdf5(path, nullptr, uint64_t{1} << 30);
    ASSERT_EQ(in.datasets.size(), 1u);
    EXPECT_THAT(in.datasets[0].unsupported, AllOf(HasSubstr(path), HasSubstr(c.says)));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), c.code);
    EXPECT_THAT(e.what(), AllOf(HasSubstr(path), HasSubstr(c.says)));
  }
}

INSTANTIATE_TEST_SUITE_P(Crafted, Hdf5HostileTest, ::testing::ValuesIn(kCases),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// Reads every sample of `s` in batches of 100.
void ReadEverything(const Source& s) {
  const auto state = s.NewWorkerState();
  for (int64_t start = 0; start < s.size(); start += 100) {
    const int64_t n = std::min<int64_t>(100, s.size() - start);
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = start + i;
    std::vector<std::vector<std::byte>> rows;
    BatchView view;
    view.rows = n;
    for (const auto& f : s.schema().fields) {
      rows.emplace_back(static_cast<size_t>(n) * f.SampleBytes());
      view.fields.push_back(rows.back().data());
    }
    s.Read(idx, view, state.get());
  }
}

// Item 9: a file truncated (or rewritten shorter) after open, while a source reads it.
TEST(Hdf5ChangedFileTest, TruncatedWhileOpenIsAnIoErrorNamingTheFile) {
  GPUFEED_REQUIRE_HDF5_FILES(files);
  testing::ScratchDir dir;
  // Contiguous (mapped), compressed chunks (pread) and unfiltered chunks (mapped).
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"plain", {"mel", "label"}}, {"gzip", {"mel", "label"}}, {"h5py_defaults", {"plain_chunks"}}};
  for (const auto& [name, fields] : cases) {
    const std::string path = dir.path() + "/" + name + ".h5";
    std::filesystem::copy_file(files->File(name), path);
    // No decoded-chunk cache: the second pass must read the file again (the workers' shared
    // cache would serve the chunks the first pass decoded, correctly, from memory).
    const auto source = OpenHdf5({path}, fields, {.file_system = nullptr, .chunk_cache_bytes = 0});
    ReadEverything(*source);  // reads fine while the file is whole
    std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
    std::string msg;
    EXPECT_EQ(ErrorCodeOf([&] { ReadEverything(*source); }, &msg), ErrorCode::kIo) << name;
    EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("changed size while being read")));
  }
}

// A chunk shape that cuts each sample into more pieces than the reader plans (2^20) is refused
// at open, before the copy runs are built: here [2048, 1024] samples in chunks of [2048, 1]
// make 2^21 one-byte pieces per sample from a grid of only 1024 chunks.
TEST(Hdf5ChunkGeometryLimit, SampleCutIntoTooManyPiecesIsRefused) {
  testing::ScratchDir dir;
  const std::string path = dir.path() + "/pieces.h5";
  {
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[3] = {1, 2048, 1024};
    const hsize_t chunk[3] = {1, 2048, 1};
    const hid_t space = H5Screate_simple(3, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_chunk(dcpl, 3, chunk), 0);
    const hid_t ds =
        H5Dcreate2(file, "x", H5T_NATIVE_UINT8, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(file);
  }
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({path}, {"x"}); }, &msg), ErrorCode::kUnsupported) << msg;
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("2097152 pieces"),
                         HasSubstr("rewrite the file with larger chunks")));
}

}  // namespace
}  // namespace gpufeed
