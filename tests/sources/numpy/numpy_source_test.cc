#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "core/io/fault_file.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::RawNpy;
using testing::ScratchDir;

constexpr DType kNpyDTypes[] = {
    DType::kBool,   DType::kInt8,    DType::kInt16,   DType::kInt32,
    DType::kInt64,  DType::kUInt8,   DType::kUInt16,  DType::kUInt32,
    DType::kUInt64, DType::kFloat16, DType::kFloat32, DType::kFloat64,
};

// The byte stored at `byte` of `sample` in a field salted `salt`: every row differs.
std::byte PatternByte(int salt, int64_t sample, size_t byte, DType dtype) {
  const auto v = static_cast<uint8_t>(sample * 31 + static_cast<int64_t>(byte) * 7 + salt * 13);
  return std::byte(dtype == DType::kBool ? v & 1 : v);
}

std::vector<std::byte> PatternData(const FieldSpec& spec, int salt, int64_t samples) {
  const size_t rb = spec.SampleBytes();
  std::vector<std::byte> data(rb * static_cast<size_t>(samples));
  for (int64_t s = 0; s < samples; ++s) {
    for (size_t b = 0; b < rb; ++b) {
      data[static_cast<size_t>(s) * rb + b] = PatternByte(salt, s, b, spec.dtype);
    }
  }
  return data;
}

// One buffer per field, laid out as the loader lays out a batch.
struct Batch {
  std::vector<std::vector<std::byte>> fields;
  BatchView view;
};

Batch MakeBatch(const Schema& schema, size_t rows) {
  Batch batch;
  for (const auto& f : schema.fields) {
    batch.fields.emplace_back(f.SampleBytes() * rows, std::byte{0xEE});
  }
  for (auto& buf : batch.fields) batch.view.fields.push_back(buf.data());
  batch.view.rows = static_cast<int64_t>(rows);
  return batch;
}

// Expects row i of every field of `batch` to hold the pattern of sample indices[i].
void ExpectPatternRows(const Schema& schema, const Batch& batch,
                       const std::vector<int64_t>& indices, const std::vector<int>& salts) {
  for (size_t f = 0; f < schema.fields.size(); ++f) {
    const FieldSpec& spec = schema.fields[f];
    const size_t rb = spec.SampleBytes();
    for (size_t i = 0; i < indices.size(); ++i) {
      for (size_t b = 0; b < rb; ++b) {
        ASSERT_EQ(batch.fields[f][i * rb + b], PatternByte(salts[f], indices[i], b, spec.dtype))
            << spec.ToString() << " row " << i << " sample " << indices[i] << " byte " << b;
      }
    }
  }
}

std::vector<int64_t> ShuffledWithRepeats(int64_t samples, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < samples; ++i) indices.push_back(i);
  std::shuffle(indices.begin(), indices.end(), rng);
  indices.resize(std::min<size_t>(indices.size(), count));
  // Repeats, adjacent and apart, and a consecutive run in order (coalesced into one read).
  indices.push_back(indices.front());
  indices.push_back(indices.front());
  indices.push_back(indices[1]);
  for (int64_t i = 2; i < std::min<int64_t>(samples, 6); ++i) indices.push_back(i);
  return indices;
}

class NumpySourceTest : public ::testing::Test {
 protected:
  // Writes `specs` with pattern data (salt = field number) and returns the folder.
  std::string WriteDataSet(const std::vector<FieldSpec>& specs, int64_t samples,
                           const std::string& sub = "ds") {
    const std::string root = dir_.path() + "/" + sub;
    std::filesystem::create_directories(root);
    for (size_t f = 0; f < specs.size(); ++f) {
      const auto data = PatternData(specs[f], static_cast<int>(f), samples);
      WriteNpy(root + "/" + specs[f].name + ".npy", specs[f], samples, data.data());
    }
    return root;
  }
  ScratchDir dir_;
};

TEST_F(NumpySourceTest, RoundTripsEveryDtypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {3}, {1, 64, 32}};
  for (DType dtype : kNpyDTypes) {
    for (const auto& shape : shapes) {
      const std::vector<FieldSpec> specs = {{"x", dtype, shape}, {"label", DType::kInt64, {}}};
      const std::string root = WriteDataSet(specs, 17);
      for (bool use_mmap : {true, false}) {
        const auto source = OpenNumpy(root, {.fields = {"x", "label"}, .use_mmap = use_mmap});
        ASSERT_EQ(source->size(), 17);
        ASSERT_EQ(source->schema().fields.size(), 2u);
        EXPECT_EQ(source->schema().fields[0], specs[0]);
        EXPECT_EQ(source->schema().fields[1], specs[1]);
        const auto indices = ShuffledWithRepeats(17, 17, 7);
        Batch batch = MakeBatch(source->schema(), indices.size());
        auto state = source->NewWorkerState();
        source->Read(indices, batch.view, state.get());
        ExpectPatternRows(source->schema(), batch, indices, {0, 1});
        // A null worker state works too.
        Batch again = MakeBatch(source->schema(), indices.size());
        source->Read(indices, again.view, nullptr);
        EXPECT_EQ(again.fields, batch.fields);
      }
    }
  }
}

TEST_F(NumpySourceTest, MmapAndPreadGiveEqualBytes) {
  const std::vector<FieldSpec> specs = {{"a", DType::kFloat32, {5, 7}}, {"b", DType::kUInt8, {3}}};
  const std::string root = WriteDataSet(specs, 1000);
  // Short reads exercise the retry loop under coalesced runs.
  auto faulty = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem(),
                                                           FaultRules{.max_bytes_per_read = 100});
  const auto mapped = OpenNumpy(root, {});
  const auto pread = OpenNumpy(root, {.use_mmap = false});
  const auto short_reads = OpenNumpy(root, {.file_system = faulty});
  for (uint32_t seed = 0; seed < 5; ++seed) {
    std::vector<int64_t> indices = ShuffledWithRepeats(1000, 300, seed);
    // Sorted and sequential plans too: those read straight into the batch.
    if (seed == 3) std::sort(indices.begin(), indices.end());
    if (seed == 4) {
      indices.clear();
      for (int64_t i = 100; i < 400; ++i) indices.push_back(i);
    }
    Batch a = MakeBatch(mapped->schema(), indices.size());
    Batch b = MakeBatch(mapped->schema(), indices.size());
    Batch c = MakeBatch(mapped->schema(), indices.size());
    mapped->Read(indices, a.view, nullptr);
    pread->Read(indices, b.view, nullptr);
    short_reads->Read(indices, c.view, nullptr);
    EXPECT_EQ(a.fields, b.fields);
    EXPECT_EQ(a.fields, c.fields);
    ExpectPatternRows(mapped->schema(), a, indices, {0, 1});
  }
  EXPECT_GT(faulty->reads(), 0);
}

TEST_F(NumpySourceTest, DefaultFieldsAreEveryNpyByNameAndOptionsOrderIsKept) {
  const std::string root = WriteDataSet(
      {{"zeta", DType::kInt32, {}}, {"alpha", DType::kInt8, {2}}, {"mid", DType::kFloat64, {}}}, 4);
  dir_.Write("ds/notes.txt", "not a field");
  const auto all = OpenNumpy(root);
  ASSERT_EQ(all->schema().fields.size(), 3u);
  EXPECT_EQ(all->schema().fields[0].name, "alpha");
  EXPECT_EQ(all->schema().fields[1].name, "mid");
  EXPECT_EQ(all->schema().fields[2].name, "zeta");
  const auto some = OpenNumpy(root, {.fields = {"zeta", "alpha"}});
  ASSERT_EQ(some->schema().fields.size(), 2u);
  EXPECT_EQ(some->schema().fields[0].name, "zeta");
  EXPECT_EQ(some->PreferredBlock(), 1);
  EXPECT_THAT(some->Describe(), HasSubstr(root));
  EXPECT_THAT(some->Describe(), HasSubstr("4 samples"));
}

TEST_F(NumpySourceTest, IdentityNamesFilesAndChangesWithThem) {
  const std::string root = WriteDataSet({{"a", DType::kInt16, {}}}, 4);
  const std::string before = OpenNumpy(root)->Identity();
  EXPECT_THAT(before, HasSubstr(root + "/a.npy"));
  EXPECT_THAT(before, HasSubstr("a: int16[]"));
  // The same folder named another way is the same data.
  EXPECT_EQ(OpenNumpy(std::filesystem::relative(root).string())->Identity(), before);
  EXPECT_EQ(OpenNumpy(root + "/./")->Identity(), before);
  WriteDataSet({{"a", DType::kInt16, {}}}, 5);
  EXPECT_NE(OpenNumpy(root)->Identity(), before);
}

TEST_F(NumpySourceTest, MissingFolderIsNotFound) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir_.path() + "/nowhere"); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("nowhere"));
}

TEST_F(NumpySourceTest, EmptyFolderIsNotFound) {
  std::filesystem::create_directories(dir_.path() + "/empty");
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(dir_.path() + "/empty"); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("no .npy"));
}

TEST_F(NumpySourceTest, AFileInsteadOfAFolderIsInvalid) {
  const std::string root = WriteDataSet({{"a", DType::kInt16, {}}}, 4);
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(root + "/a.npy"); }), ErrorCode::kInvalidArgument);
}

TEST_F(NumpySourceTest, MissingFieldNamesItAndListsThoseThere) {
  const std::string root =
      WriteDataSet({{"mel", DType::kFloat32, {2}}, {"label", DType::kInt64, {}}}, 4);
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  OpenNumpy(root, {.fields = {"mel", "lable"}});
                },
                &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("'lable'"));
  EXPECT_THAT(message, HasSubstr("label, mel"));
  EXPECT_EQ(ErrorCodeOf([&] {
              OpenNumpy(root, {.fields = {"mel", "mel"}});
            }),
            ErrorCode::kInvalidArgument);
}

TEST_F(NumpySourceTest, DifferentSampleCountsNameBothFilesAndCounts) {
  const std::string root = WriteDataSet({{"a", DType::kInt16, {}}}, 10);
  const FieldSpec b{"b", DType::kInt8, {}};
  const std::vector<int8_t> data(9);
  WriteNpy(root + "/b.npy", b, 9, data.data());
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(root); }, &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("a.npy holds 10"));
  EXPECT_THAT(message, HasSubstr("b.npy holds 9"));
}

TEST_F(NumpySourceTest, BadFilesAreRejectedNamingTheFile) {
  const std::string data(24, '\x01');  // (3, 2) int32 is 24 bytes
  const std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }";
  struct Case {
    std::string name;
    std::string bytes;
    ErrorCode code;
    std::string says;
  };
  std::string bad_magic = RawNpy(1, dict, data);
  bad_magic[0] = 'X';
  const std::vector<Case> cases = {
      {"truncated", RawNpy(1, dict, data.substr(0, 20)), ErrorCode::kCorruptData, "truncated"},
      {"extra", RawNpy(1, dict, data + "!"), ErrorCode::kCorruptData, "extra bytes"},
      {"magic", bad_magic, ErrorCode::kCorruptData, "magic"},
      {"unicode",
       RawNpy(1, "{'descr': '<U10', 'fortran_order': False, 'shape': (3,), }",
              std::string(120, 'a')),
       ErrorCode::kUnsupported, "<U10"},
      {"bigendian", RawNpy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", data),
       ErrorCode::kUnsupported, "big-endian"},
      {"object", RawNpy(1, "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", data),
       ErrorCode::kUnsupported, "|O"},
      {"complex", RawNpy(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", data),
       ErrorCode::kUnsupported, "complex"},
      {"fortran", RawNpy(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (3, 2), }", data),
       ErrorCode::kUnsupported, "Fortran"},
      {"scalar", RawNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", "abcd"),
       ErrorCode::kUnsupported, "0-d"},
  };
  for (const auto& c : cases) {
    const std::string root = dir_.path() + "/bad-" + c.name;
    dir_.Write("bad-" + c.name + "/" + c.name + ".npy", c.bytes);
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(root); }, &message), c.code) << c.name;
    EXPECT_THAT(message, HasSubstr(c.name + ".npy")) << c.name;
    EXPECT_THAT(message, HasSubstr(c.says)) << c.name;
  }
}

TEST_F(NumpySourceTest, OutOfRangeIndexIsInvalidArgument) {
  const auto source = OpenNumpy(WriteDataSet({{"a", DType::kInt16, {}}}, 4));
  Batch batch = MakeBatch(source->schema(), 1);
  for (int64_t bad : {int64_t{4}, int64_t{-1}}) {
    const std::vector<int64_t> indices{bad};
    EXPECT_EQ(ErrorCodeOf([&] { source->Read(indices, batch.view, nullptr); }),
              ErrorCode::kInvalidArgument);
  }
}

TEST_F(NumpySourceTest, EioMidReadNamesFileFieldAndSample) {
  const std::string root = WriteDataSet({{"mel", DType::kFloat32, {4}}}, 20);
  auto fs = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem());
  const auto source = OpenNumpy(root, {.file_system = fs});
  // Sorted, the plan reads 3, then 5, then 9..10 as one run; a bad sector under sample 9
  // fails the batch's reads, and the rows read again one by one name the sample.
  const std::vector<int64_t> indices{10, 5, 9, 3};
  const uint64_t data_offset = std::filesystem::file_size(root + "/mel.npy") - 20 * 16;
  fs->SetRules({.eio_begin = data_offset + 9 * 16 + 4, .eio_end = data_offset + 9 * 16 + 8});
  Batch batch = MakeBatch(source->schema(), indices.size());
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { source->Read(indices, batch.view, nullptr); }, &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, HasSubstr("mel.npy"));
  EXPECT_THAT(message, HasSubstr("'mel'"));
  EXPECT_THAT(message, HasSubstr("sample 9"));
  // The disk recovers: the same read now succeeds.
  fs->SetRules({});
  source->Read(indices, batch.view, nullptr);
  ExpectPatternRows(source->schema(), batch, indices, {0});
}

TEST_F(NumpySourceTest, FileShrunkAfterOpenIsCorruptNamingTheSample) {
  const std::string root = WriteDataSet({{"a", DType::kInt64, {}}}, 10);
  const auto source = OpenNumpy(root, {.use_mmap = false});
  const auto header_bytes = std::filesystem::file_size(root + "/a.npy") - 8 * 10;
  std::filesystem::resize_file(root + "/a.npy", header_bytes + 8 * 6);  // samples 0..5 remain
  const std::vector<int64_t> indices{2, 7};
  Batch batch = MakeBatch(source->schema(), indices.size());
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { source->Read(indices, batch.view, nullptr); }, &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("sample 7"));
  EXPECT_THAT(message, HasSubstr("a.npy"));
}

TEST_F(NumpySourceTest, DelaysSlowReadsButKeepData) {
  const std::string root = WriteDataSet({{"a", DType::kUInt16, {2}}}, 50);
  auto fs = std::make_shared<FaultInjectingFileSystem>(DefaultFileSystem());
  const auto source = OpenNumpy(root, {.file_system = fs});
  fs->SetRules({.delay_us = 5'000});
  const std::vector<int64_t> indices{40, 1, 20};  // three separate reads
  Batch batch = MakeBatch(source->schema(), indices.size());
  const int64_t reads_before = fs->reads();
  const auto start = std::chrono::steady_clock::now();
  source->Read(indices, batch.view, nullptr);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(15));
  EXPECT_EQ(fs->reads() - reads_before, 3);
  ExpectPatternRows(source->schema(), batch, indices, {0});
}

TEST_F(NumpySourceTest, ManyThreadsReadAtOnce) {
  const std::vector<FieldSpec> specs = {{"x", DType::kFloat32, {16}}, {"y", DType::kInt64, {}}};
  const std::string root = WriteDataSet(specs, 2000);
  for (bool use_mmap : {true, false}) {
    const auto source = OpenNumpy(root, {.use_mmap = use_mmap});
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (uint32_t t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        auto state = source->NewWorkerState();
        for (uint32_t b = 0; b < 20; ++b) {
          const auto indices = ShuffledWithRepeats(2000, 64, t * 100 + b);
          Batch batch = MakeBatch(source->schema(), indices.size());
          source->Read(indices, batch.view, state.get());
          for (size_t i = 0; i < indices.size(); ++i) {
            if (batch.fields[1][i * 8] != PatternByte(1, indices[i], 0, DType::kInt64)) ++bad;
            if (batch.fields[0][i * 64 + 63] != PatternByte(0, indices[i], 63, DType::kFloat32)) {
              ++bad;
            }
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(bad.load(), 0) << "use_mmap=" << use_mmap;
  }
}

TEST_F(NumpySourceTest, WriteNpyFailuresNameThePath) {
  const FieldSpec spec{"a", DType::kFloat32, {2}};
  const std::vector<float> data(4);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { WriteNpy(dir_.path() + "/no/such/a.npy", spec, 2, data.data()); },
                        &message),
            ErrorCode::kIo);
  EXPECT_THAT(message, HasSubstr("no/such/a.npy"));
  EXPECT_EQ(ErrorCodeOf([&] {
              WriteNpy(dir_.path() + "/b.npy", {"b", DType::kBFloat16, {}}, 2, data.data());
            }),
            ErrorCode::kUnsupported);
  EXPECT_EQ(ErrorCodeOf([&] { WriteNpy(dir_.path() + "/c.npy", spec, 2, nullptr); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] { WriteNpy(dir_.path() + "/d.npy", spec, -1, data.data()); }),
            ErrorCode::kInvalidArgument);
  // Nothing half-written is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.path()),
                          std::filesystem::directory_iterator()),
            0);
}

TEST_F(NumpySourceTest, ZeroSamplesIsAnEmptySource) {
  const std::string root = WriteDataSet({{"a", DType::kInt16, {3}}}, 0);
  const auto source = OpenNumpy(root);
  EXPECT_EQ(source->size(), 0);
  Batch batch = MakeBatch(source->schema(), 0);
  source->Read({}, batch.view, nullptr);
}

}  // namespace
}  // namespace gpufeed

namespace gpufeed {
namespace {

// The warmer is opt-in (GPUFEED_MAPPING_WARMER=1); the tests below are about it, and the
// rest of this program's files are too small for it to matter.
const bool kWarmerOn = setenv("GPUFEED_MAPPING_WARMER", "1", 1) == 0;

// A field large enough for the background warmer (WarmedMapping::kMinWarmedBytes): while it
// warms, a batch's rows come partly from the mapping and partly by pread; every split must
// give the bytes the pread-only source gives, the file's last rows included.
TEST_F(NumpySourceTest, WarmingMappingAndPreadGiveEqualBytesAtEverySplit) {
  const std::vector<FieldSpec> specs = {{"a", DType::kUInt8, {8192}}, {"b", DType::kInt64, {}}};
  const int64_t samples = 4100;  // 33.6 MB in a.npy: just over kMinWarmedBytes
  const std::string root = WriteDataSet(specs, samples);
  const auto pread = OpenNumpy(root, {.use_mmap = false});
  std::vector<int64_t> indices = ShuffledWithRepeats(samples, 100, 7);
  indices.push_back(samples - 1);  // the file's last row, alone and in a run
  indices.push_back(samples - 2);
  indices.push_back(samples - 1);
  Batch expected = MakeBatch(pread->schema(), indices.size());
  pread->Read(indices, expected.view, nullptr);
  ExpectPatternRows(pread->schema(), expected, indices, {0, 1});
  // Fresh sources, read at once and again as the warmer moves, from two threads.
  for (int round = 0; round < 2; ++round) {
    const auto mapped = OpenNumpy(root, {});
    std::vector<std::thread> readers;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 2; ++t) {
      readers.emplace_back([&] {
        for (int i = 0; i < 10; ++i) {
          Batch got = MakeBatch(mapped->schema(), indices.size());
          mapped->Read(indices, got.view, nullptr);
          if (got.fields != expected.fields) ++wrong;
        }
      });
    }
    for (auto& th : readers) th.join();
    EXPECT_EQ(wrong.load(), 0);
  }
}

TEST_F(NumpySourceTest, MappedFileTruncatedAfterOpenIsAnErrorNamingTheFileNotACrash) {
  const std::vector<FieldSpec> specs = {{"a", DType::kUInt8, {8192}}};
  const int64_t samples = 4100;
  const std::string root = WriteDataSet(specs, samples);
  for (bool first_read_before : {false, true}) {
    const auto source = OpenNumpy(root, {});
    std::vector<int64_t> indices{0, 1, samples - 1};
    if (first_read_before) {  // the warmer runs while the file shrinks
      Batch batch = MakeBatch(source->schema(), indices.size());
      source->Read(indices, batch.view, nullptr);
    }
    const auto header_bytes = std::filesystem::file_size(root + "/a.npy") - 8192 * samples;
    std::filesystem::resize_file(root + "/a.npy", header_bytes + 8192 * 100);
    Batch batch = MakeBatch(source->schema(), indices.size());
    std::string message;
    const ErrorCode code =
        ErrorCodeOf([&] { source->Read(indices, batch.view, nullptr); }, &message);
    EXPECT_TRUE(code == ErrorCode::kIo || code == ErrorCode::kCorruptData) << message;
    EXPECT_THAT(message, HasSubstr("a.npy"));
    if (!first_read_before) WriteDataSet(specs, samples);  // the file back for the next round
  }
}

}  // namespace
}  // namespace gpufeed
