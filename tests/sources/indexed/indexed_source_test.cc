// The Megatron indexed data set (OpenIndexed): files written here byte for byte as Megatron's
// IndexedDatasetBuilder writes them, read back through ReadLengths and ReadItems, opened
// through OpenPath, and hostile indexes refused naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/io/fault_file.h"
#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "gpufeed/varlen.h"
#include "sources/open_path.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::ScratchDir;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// The .idx as megatron/core/datasets/indexed_dataset.py's _IndexWriter writes it.
struct IdxSpec {
  uint8_t code = 4;
  std::vector<int32_t> lengths = {};
  std::vector<int64_t> pointers = {};   // empty: contiguous, as _sequence_pointers computes them
  std::vector<int64_t> documents = {};  // empty: one document per sequence, [0, 1, ..., S]
  uint64_t version = 1;
  std::string magic = std::string("MMIDIDX\0\0", 9);
  size_t item_bytes = 4;
};

std::string IdxBytesOf(IdxSpec s) {
  if (s.pointers.empty()) {
    int64_t at = 0;
    for (int32_t n : s.lengths) {
      s.pointers.push_back(at);
      at += int64_t{n} * static_cast<int64_t>(s.item_bytes);
    }
  }
  if (s.documents.empty()) {
    s.documents.resize(s.lengths.size() + 1);
    std::iota(s.documents.begin(), s.documents.end(), 0);
  }
  std::string out = s.magic;
  Put<uint64_t>(out, s.version);
  Put<uint8_t>(out, s.code);
  Put<uint64_t>(out, s.lengths.size());
  Put<uint64_t>(out, s.documents.size());
  for (int32_t n : s.lengths) Put(out, n);
  for (int64_t p : s.pointers) Put(out, p);
  for (int64_t d : s.documents) Put(out, d);
  return out;
}

class IndexedTest : public ::testing::Test {
 protected:
  // Writes prefix.bin (the sequences end to end) and prefix.idx for `sequences` of T.
  template <typename T>
  std::string WriteCorpus(const std::string& name, uint8_t code,
                          const std::vector<std::vector<T>>& sequences,
                          std::vector<int64_t> documents = {}) {
    std::string bin;
    IdxSpec spec{.code = code, .documents = std::move(documents), .item_bytes = sizeof(T)};
    for (const auto& seq : sequences) {
      bin.append(reinterpret_cast<const char*>(seq.data()), seq.size() * sizeof(T));
      spec.lengths.push_back(static_cast<int32_t>(seq.size()));
    }
    const std::string prefix = dir_.Path(name);
    dir_.Write(name + ".bin", bin);
    dir_.Write(name + ".idx", IdxBytesOf(spec));
    return prefix;
  }

  // Writes a hostile .idx beside a .bin of `bin_bytes` zero bytes; returns the prefix.
  std::string WriteHostile(const std::string& idx, size_t bin_bytes = 64) {
    dir_.Write("bad.bin", std::string(bin_bytes, '\0'));
    dir_.Write("bad.idx", idx);
    return dir_.Path("bad");
  }

  // The refusal of opening `prefix`: its code, and a message that names the .idx.
  ErrorCode Refusal(const std::string& prefix, std::string* message) {
    const ErrorCode code = ErrorCodeOf([&] { OpenIndexed(prefix); }, message);
    EXPECT_THAT(*message, HasSubstr(prefix + ".idx"));
    return code;
  }

  template <typename T>
  void ExpectReadsBack(const std::shared_ptr<Source>& source,
                       const std::vector<std::vector<T>>& sequences) {
    ASSERT_EQ(source->size(), static_cast<int64_t>(sequences.size()));
    std::vector<int64_t> indices(sequences.size());
    std::iota(indices.begin(), indices.end(), 0);
    std::reverse(indices.begin(), indices.end());
    std::vector<int64_t> lengths(indices.size());
    source->ReadLengths(0, indices, lengths, nullptr);
    for (size_t i = 0; i < indices.size(); ++i) {
      const auto& want = sequences[static_cast<size_t>(indices[i])];
      ASSERT_EQ(lengths[i], static_cast<int64_t>(want.size())) << "sequence " << indices[i];
      std::vector<T> got(want.size());
      source->ReadItems(0, indices[i], 0, std::as_writable_bytes(std::span(got)), nullptr);
      EXPECT_EQ(got, want) << "sequence " << indices[i];
      if (want.size() >= 3) {  // a piece from the middle
        std::vector<T> piece(want.size() - 2);
        source->ReadItems(0, indices[i], 1, std::as_writable_bytes(std::span(piece)), nullptr);
        EXPECT_TRUE(std::equal(piece.begin(), piece.end(), want.begin() + 1));
      }
    }
  }

  ScratchDir dir_;
};

TEST_F(IndexedTest, ReadsBackEveryDTypeWithEmptyAndLongSequences) {
  std::vector<int32_t> long_seq(100000);
  std::iota(long_seq.begin(), long_seq.end(), -5);
  const std::vector<std::vector<int32_t>> i32 = {{1, 2, 3}, {}, long_seq, {7}, {}, {8, 9}};
  const auto source = OpenIndexed(WriteCorpus("i32", 4, i32, {0, 2, 3, 6}));
  EXPECT_EQ(source->schema().fields.size(), 1u);
  EXPECT_EQ(source->schema().fields[0].ToString(), "tokens: int32[*]");
  EXPECT_THAT(source->Describe(), HasSubstr("6 sequences in 3 documents"));
  EXPECT_THAT(source->Describe(), HasSubstr("100K tokens, int32"));
  ExpectReadsBack(source, i32);

  const std::vector<std::vector<uint16_t>> u16 = {{65535, 0, 1}, {}, {42}};
  const auto s16 = OpenIndexed(WriteCorpus("u16", 8, u16));
  EXPECT_EQ(s16->schema().fields[0].ToString(), "tokens: uint16[*]");
  ExpectReadsBack(s16, u16);

  const std::vector<std::vector<int64_t>> i64 = {{int64_t{1} << 40, -1}, {3}};
  ExpectReadsBack(OpenIndexed(WriteCorpus("i64", 5, i64)), i64);
  const std::vector<std::vector<float>> f32 = {{1.5f}, {}, {2.5f, -0.25f, 3}};
  ExpectReadsBack(OpenIndexed(WriteCorpus("f32", 7, f32)), f32);
  const std::vector<std::vector<double>> f64 = {{1.5, 2.5}};
  ExpectReadsBack(OpenIndexed(WriteCorpus("f64", 6, f64)), f64);
  const std::vector<std::vector<uint8_t>> u8 = {{255, 0}, {}, {}};
  ExpectReadsBack(OpenIndexed(WriteCorpus("u8", 1, u8)), u8);
  const std::vector<std::vector<int8_t>> i8 = {{-128, 127}};
  ExpectReadsBack(OpenIndexed(WriteCorpus("i8", 2, i8)), i8);
  const std::vector<std::vector<int16_t>> i16 = {{-300, 300}};
  ExpectReadsBack(OpenIndexed(WriteCorpus("i16", 3, i16)), i16);
}

TEST_F(IndexedTest, AnEmptyCorpusOpens) {
  const auto source = OpenIndexed(WriteCorpus<int32_t>("empty", 4, {}));
  EXPECT_EQ(source->size(), 0);
}

TEST_F(IndexedTest, ReadsThroughPreadWhereFilesDoNotMap) {
  const std::vector<std::vector<int32_t>> seqs = {{1, 2, 3}, {}, {4, 5}};
  const std::string prefix = WriteCorpus("c", 4, seqs);
  // The fault-injecting wrapper maps nothing: every byte goes through ReadAt.
  const auto fs = std::make_shared<FaultInjectingFileSystem>(PosixFileSystem());
  ExpectReadsBack(OpenIndexed(prefix, fs), seqs);
}

TEST_F(IndexedTest, OpenPathTakesThePrefixOrEitherFile) {
  const std::vector<std::vector<int32_t>> seqs = {{1, 2, 3}, {4}};
  const std::string prefix = WriteCorpus("corpus", 4, seqs);
  const auto fs = DefaultFileSystem();
  for (const std::string& path : {prefix, prefix + ".idx", prefix + ".bin"}) {
    EXPECT_EQ(ClassifyPath(path, *fs), PathKind::kIndexed) << path;
    const auto source = OpenPath(path, {});
    EXPECT_EQ(source->size(), 2) << path;
    EXPECT_THAT(source->Describe(), HasSubstr("indexed:" + prefix + " ("));
  }
  EXPECT_EQ(OpenPath(prefix, {"tokens"})->size(), 2);
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(prefix, {"text"}); }, &message), ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("'text'"));
  // A .bin with no .idx beside it is any binary file.
  const std::string lone = dir_.Write("lone.bin", "xyz");
  EXPECT_EQ(ClassifyPath(lone, *fs), PathKind::kUnknown);
}

TEST_F(IndexedTest, IdentityNamesBothFilesAndReadChecksItsArguments) {
  const auto source = OpenIndexed(WriteCorpus<int32_t>("c", 4, {{1, 2}, {3}}));
  EXPECT_THAT(source->Identity(), HasSubstr("c.idx:"));
  EXPECT_THAT(source->Identity(), HasSubstr("c.bin:12:"));
  std::vector<int64_t> indices = {1, 0};
  source->Read(indices, {.fields = {nullptr}, .rows = 2}, nullptr);  // nothing to copy
  std::vector<int64_t> lengths(1);
  std::vector<int64_t> bad = {2};
  EXPECT_EQ(ErrorCodeOf([&] { source->ReadLengths(0, bad, lengths, nullptr); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrorCodeOf([&] { source->ReadLengths(1, indices, lengths, nullptr); }),
            ErrorCode::kInvalidArgument);
  std::vector<int32_t> three(3);
  EXPECT_EQ(ErrorCodeOf([&] {
              source->ReadItems(0, 0, 0, std::as_writable_bytes(std::span(three)), nullptr);
            }),
            ErrorCode::kInvalidArgument);
}

TEST_F(IndexedTest, AMissingFileIsNamed) {
  dir_.Write("only_idx.idx", IdxBytesOf({}));
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenIndexed(dir_.Path("only_idx")); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("only_idx.bin"));
  dir_.Write("only_bin.bin", "");
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(dir_.Path("only_bin"), {}); }, &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("only_bin.idx"));
}

TEST_F(IndexedTest, HostileHeadersAreRefused) {
  std::string message;
  const std::string good = IdxBytesOf({.lengths = {2, 3}});
  EXPECT_EQ(Refusal(WriteHostile("MMIDID"), &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("ends early"));
  EXPECT_EQ(Refusal(WriteHostile(good.substr(0, 30)), &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("document count"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.magic = std::string("TNTIDX\0\0\0", 9)})), &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("magic"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.version = 2})), &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("version 2"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.code = 9})), &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("dtype code 9"));
  std::string huge = good;
  const uint64_t count = uint64_t{1} << 60;
  std::memcpy(huge.data() + 18, &count, 8);
  EXPECT_EQ(Refusal(WriteHostile(huge), &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("sequence count 1152921504606846976"));
  std::memcpy(huge.data() + 18, "\xff\xff\xff\xff\xff\xff\xff\x3f", 8);
  EXPECT_EQ(Refusal(WriteHostile(huge), &message), ErrorCode::kCorruptData);
  EXPECT_EQ(Refusal(WriteHostile(good + "x"), &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("follow the document index"));
  EXPECT_EQ(Refusal(WriteHostile(good + "\x01\x01"), &message), ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("multimodal"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.documents = {}}).substr(0, 34)), &message),
            ErrorCode::kCorruptData);
}

TEST_F(IndexedTest, HostileArraysAreRefusedNamingTheSequence) {
  std::string message;
  // A pointer past the end of the 64-byte .bin.
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.lengths = {1, 1}, .pointers = {0, 64}})), &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("sequence 1: pointer 64 and length 1"));
  EXPECT_THAT(message, HasSubstr("bad.bin (64 bytes)"));
  // Lengths that run past the .bin: 10 + 7 int32 = 68 bytes.
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.lengths = {10, 7}})), &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("sequence 1:"));
  // A pointer whose end overflows 64 bits.
  EXPECT_EQ(
      Refusal(WriteHostile(IdxBytesOf({.lengths = {1}, .pointers = {INT64_MAX - 1}})), &message),
      ErrorCode::kCorruptData);
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.lengths = {1}, .pointers = {-4}})), &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("pointer -4"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.lengths = {2, -1}})), &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("sequence 1: length -1"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.lengths = {1, 1, 1}, .documents = {0, 2, 1, 3}})),
                    &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("document index entry 2 is sequence 1"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.lengths = {1, 1}, .documents = {1, 2}})), &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("entry 0 is 1"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.lengths = {1, 1}, .documents = {0, 1}})), &message),
            ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("ends at sequence 1"));
  EXPECT_EQ(Refusal(WriteHostile(IdxBytesOf({.lengths = {1, 1}, .documents = {0, 3}})), &message),
            ErrorCode::kCorruptData);
}

}  // namespace
}  // namespace gpufeed
