#include "sources/numpy/npy_header.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::ElementsAre;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::RawNpy;
using testing::ScratchDir;

NpyHeader Parse(std::string_view dict) { return ParseNpyDict(dict, "x.npy"); }

TEST(NpyDictTest, ParsesWhatNumpyWrites) {
  auto h = Parse("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }          \n");
  EXPECT_EQ(h.dtype, DType::kFloat32);
  EXPECT_THAT(h.shape, ElementsAre(3, 4));
  h = Parse("{'descr': '|b1', 'fortran_order': False, 'shape': (7,), }\n");
  EXPECT_EQ(h.dtype, DType::kBool);
  EXPECT_THAT(h.shape, ElementsAre(7));
  // Any key order, double quotes, no trailing comma, Python 2 longs.
  h = Parse("{\"shape\": (2L, 5L), \"fortran_order\": False, \"descr\": \"<u2\"}\n");
  EXPECT_EQ(h.dtype, DType::kUInt16);
  EXPECT_THAT(h.shape, ElementsAre(2, 5));
}

TEST(NpyDictTest, MapsEveryNumericDescr) {
  const std::pair<const char*, DType> cases[] = {
      {"|b1", DType::kBool},    {"|i1", DType::kInt8},    {"<i2", DType::kInt16},
      {"<i4", DType::kInt32},   {"<i8", DType::kInt64},   {"|u1", DType::kUInt8},
      {"<u2", DType::kUInt16},  {"<u4", DType::kUInt32},  {"<u8", DType::kUInt64},
      {"<f2", DType::kFloat16}, {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64},
  };
  for (const auto& [descr, dtype] : cases) {
    const auto h =
        Parse(fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (1,), }}", descr));
    EXPECT_EQ(h.dtype, dtype) << descr;
    EXPECT_EQ(NpyDescr(dtype), descr);
  }
  EXPECT_EQ(ErrorCodeOf([] { NpyDescr(DType::kBFloat16); }), ErrorCode::kUnsupported);
}

TEST(NpyDictTest, RejectsUnsupportedDtypesNamingFileAndDescr) {
  for (const char* descr :
       {"<U10", ">f4", ">i8", "|O", "<c8", "<c16", "|S5", "<M8[ns]", "<f16", "|V8", "<i3"}) {
    std::string message;
    EXPECT_EQ(ErrorCodeOf(
                  [&] {
                    Parse(fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (1,), }}",
                                      descr));
                  },
                  &message),
              ErrorCode::kUnsupported)
        << descr;
    EXPECT_THAT(message, HasSubstr("x.npy"));
    EXPECT_THAT(message, HasSubstr(descr));
  }
  std::string message;
  EXPECT_EQ(ErrorCodeOf(
                [&] {
                  Parse(
                      "{'descr': [('a', '<f4'), ('b', '<i8')], 'fortran_order': False, "
                      "'shape': (1,), }");
                },
                &message),
            ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("structured"));
}

TEST(NpyDictTest, RejectsFortranOrderAndZeroDimensional) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([] { Parse("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }"); },
                        &message),
            ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("Fortran"));
  EXPECT_EQ(ErrorCodeOf([] { Parse("{'descr': '<f4', 'fortran_order': False, 'shape': (), }"); },
                        &message),
            ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("0-d"));
}

TEST(NpyDictTest, RejectsMalformedDicts) {
  for (const char* dict : {
           "",
           "{}",
           "{'descr': '<f4', 'fortran_order': False}",                         // no shape
           "{'descr': '<f4', 'shape': (1,)}",                                  // no order
           "{'fortran_order': False, 'shape': (1,)}",                          // no descr
           "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",  // extra key
           "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
           "{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}",  // not Python
           "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",  // an int
           "{'descr': '<f4', 'fortran_order': False, 'shape': (3,,)}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': [3]}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing",
           "{'descr': '<f4 'fortran_order': False, 'shape': (1,)}",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)",
       }) {
    std::string message;
    EXPECT_EQ(ErrorCodeOf([&] { Parse(dict); }, &message), ErrorCode::kCorruptData) << dict;
    EXPECT_THAT(message, HasSubstr("x.npy")) << dict;
  }
}

TEST(NpyHeaderTest, FormatIsPaddedTo64AndParsesBack) {
  for (const auto& shape : {std::vector<int64_t>{5}, std::vector<int64_t>{5, 3},
                            std::vector<int64_t>{100000, 1, 64, 32}}) {
    const std::string header = FormatNpyHeader(DType::kFloat32, shape);
    EXPECT_EQ(header.size() % 64, 0u);
    EXPECT_EQ(header.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    EXPECT_EQ(header.back(), '\n');
    const auto h = ParseNpyDict(std::string_view(header).substr(10), "x.npy");
    EXPECT_EQ(h.shape, shape);
  }
  // The same text NumPy 1.24 writes for np.zeros((5,), '<f4').
  EXPECT_EQ(FormatNpyHeader(DType::kFloat32, {5}).substr(10, 62),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }     ");
}

class NpyFileTest : public ::testing::Test {
 protected:
  NpyHeader ReadHeaderOf(const std::string& bytes) {
    auto file = DefaultFileSystem()->Open(dir_.Write("f.npy", bytes));
    return ReadNpyHeader(*file);
  }
  ErrorCode ErrorOf(const std::string& bytes, std::string* message) {
    auto file = DefaultFileSystem()->Open(dir_.Write("f.npy", bytes));
    return ErrorCodeOf([&] { ReadNpyHeader(*file); }, message);
  }
  ScratchDir dir_;
};

constexpr const char* kDict = "{'descr': '<i2', 'fortran_order': False, 'shape': (3, 2), }";

TEST_F(NpyFileTest, ReadsEveryVersion) {
  for (int version : {1, 2, 3}) {
    const auto h = ReadHeaderOf(RawNpy(version, kDict, std::string(12, 'x')));
    EXPECT_EQ(h.dtype, DType::kInt16);
    EXPECT_THAT(h.shape, ElementsAre(3, 2));
    // The dict is 61 characters: with preamble and newline NumPy pads it to 128 bytes.
    EXPECT_EQ(h.data_offset, 128u) << version;
  }
}

TEST_F(NpyFileTest, RejectsBadFilesNamingThem) {
  std::string message;
  const std::string good = RawNpy(1, kDict, std::string(12, 'x'));
  EXPECT_EQ(ErrorOf(good.substr(0, good.size() - 1), &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("truncated"));
  EXPECT_THAT(message, HasSubstr("f.npy"));
  EXPECT_EQ(ErrorOf(good + "y", &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("extra bytes"));
  EXPECT_EQ(ErrorOf(good.substr(0, 40), &message), ErrorCode::kCorruptData);
  EXPECT_EQ(ErrorOf("\x93NUM", &message), ErrorCode::kCorruptData);
  EXPECT_EQ(ErrorOf("", &message), ErrorCode::kCorruptData);

  std::string bad_magic = good;
  bad_magic[1] = 'X';
  EXPECT_EQ(ErrorOf(bad_magic, &message), ErrorCode::kCorruptData);
  EXPECT_THAT(message, HasSubstr("magic"));
  EXPECT_THAT(message, HasSubstr("f.npy"));

  std::string version4 = good;
  version4[6] = 4;
  EXPECT_EQ(ErrorOf(version4, &message), ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("4.0"));

  std::string huge_header = good;  // a header length past the end of the file
  huge_header[8] = '\xff';
  huge_header[9] = '\xff';
  EXPECT_EQ(ErrorOf(huge_header, &message), ErrorCode::kCorruptData);

  std::string no_newline = good;
  no_newline[good.size() - 12 - 1] = ' ';  // the byte before the data
  EXPECT_EQ(ErrorOf(no_newline, &message), ErrorCode::kCorruptData);

  // A shape whose byte count overflows 64 bits must not wrap around to the file size.
  EXPECT_EQ(ErrorOf(RawNpy(1,
                           "{'descr': '<f8', 'fortran_order': False, 'shape': "
                           "(4611686018427387904, 4), }",
                           ""),
                    &message),
            ErrorCode::kCorruptData);
}

TEST_F(NpyFileTest, RandomCorruptionsAreErrorsNeverCrashes) {
  const std::string good = RawNpy(1, kDict, std::string(12, 'x'));
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng() % 256);
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    auto file = DefaultFileSystem()->Open(dir_.Write("f.npy", bytes));
    try {
      const NpyHeader h = ReadNpyHeader(*file);
      // Whatever passes is self-consistent: the data exactly fill the rest of the file.
      uint64_t size = DTypeSize(h.dtype);
      for (int64_t d : h.shape) size *= static_cast<uint64_t>(d);
      ASSERT_EQ(h.data_offset + size, bytes.size()) << round;
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(accepted, 0);  // edits inside the padding are harmless
}

}  // namespace
}  // namespace gpufeed
