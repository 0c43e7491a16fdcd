// Valid HDF5 files in layouts other tools write (make_unusual_hdf5.py): each dataset must read
// exactly as libhdf5 converts it into the native type (as h5py reads it): N-bit and offset
// integers sign-extended, floats with another exponent bias or in VAX byte order converted,
// data layout messages of versions 1 and 2 (HDF5 1.6 and older) read, never-written and sparse
// datasets served their fill value. And crafted compact layouts whose data do not match the
// dataset, refused before libhdf5 reads them (it copied from a null pointer: SIGSEGV).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/fixture.h"
#include "sources/hdf5/tools/inspect.h"
#include "sources/hdf5/unusual_fixture.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

class Hdf5UnusualTest : public testing::UnusualHdf5Files {
 protected:
  // Every sample of dataset 'x' of case `name`, as gpufeed reads them, in plan order.
  static std::string ReadAll(const std::string& name, DType* dtype) {
    const auto source = OpenHdf5({Path(name)}, {"x"});
    const FieldSpec& field = source->schema().fields.at(0);
    *dtype = field.dtype;
    const auto state = source->NewWorkerState();
    std::vector<int64_t> idx(source->size());
    for (int64_t i = 0; i < source->size(); ++i) idx[i] = i;
    std::string out(idx.size() * field.SampleBytes(), '\0');
    BatchView view;
    view.rows = static_cast<int64_t>(idx.size());
    view.fields.push_back(reinterpret_cast<std::byte*>(out.data()));
    source->Read(idx, view, state.get());
    return out;
  }
};

TEST_F(Hdf5UnusualTest, EveryCaseReadsAsLibhdf5ConvertsIt) {
  const auto cases = nlohmann::json::parse(testing::ReadWholeFile(dir_ + "/cases.json"));
  // The cases the product's fixes are about must be there.
  for (const char* name :
       {"nbit_int", "precision_int", "offset_int", "ebias_float", "vax_float32", "vax_float64",
        "compact_be", "layout_v1_contiguous", "layout_v1_chunked", "layout_v2_chunked",
        "layout_v1_compact", "never_written", "never_written_chunked", "sparse_chunked",
        "never_written_fixed_array", "never_written_extensible_array", "never_written_btree2",
        "sparse_huge_grid", "sparse_huge_grid_2d"}) {
    EXPECT_TRUE(cases.contains(name)) << name;
  }
  for (const char* name :
       {"bitfield_b8", "bitfield_b8_chunked", "bitfield_b8_compact", "bitfield_b16_be",
        "bitfield_b32_le", "bitfield_b64_be", "bitfield_b16_compact"}) {
    EXPECT_TRUE(cases.contains(name)) << name;
  }
  for (const auto& [name, dtype_name] : cases.items()) {
    SCOPED_TRACE(name);
    DType dtype{};
    std::string got;
    try {
      got = ReadAll(name, &dtype);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(DTypeName(dtype), dtype_name.get<std::string>());
    EXPECT_TRUE(got == testing::ReadWholeFile(dir_ + "/" + name + ".bin"));
  }
}

// The values the fixes are about, spelled out (the comparison above holds them too).
TEST_F(Hdf5UnusualTest, NbitSignedIntegersKeepTheirSign) {
  for (const char* name : {"nbit_int", "precision_int"}) {
    DType dtype{};
    const std::string got = ReadAll(name, &dtype);
    ASSERT_EQ(dtype, DType::kInt32);
    int32_t values[8];
    ASSERT_EQ(got.size(), sizeof(values));
    std::memcpy(values, got.data(), sizeof(values));
    EXPECT_THAT(values, ::testing::ElementsAre(-4, -3, -2, -1, 0, 1, 2, 3)) << name;
  }
}

TEST_F(Hdf5UnusualTest, VaxFloatsAreConverted) {
  DType dtype{};
  const std::string got = ReadAll("vax_float32", &dtype);
  ASSERT_EQ(dtype, DType::kFloat32);
  float values[8];
  ASSERT_EQ(got.size(), sizeof(values));
  std::memcpy(values, got.data(), sizeof(values));
  EXPECT_FLOAT_EQ(values[0], -2.0f);
  EXPECT_FLOAT_EQ(values[7], 3.0f);
}

TEST_F(Hdf5UnusualTest, InspectSaysLibhdf5ConvertsTheElements) {
  const Hdf5Inspection in = InspectHdf5(Path("precision_int"), nullptr, uint64_t{1} << 30);
  ASSERT_EQ(in.datasets.size(), 1u);
  EXPECT_THAT(in.datasets[0].read_path, HasSubstr("3-bit precision at bit offset 0"));
  // Chunks read through libhdf5 are still counted: 8 samples in chunks of 4.
  const Hdf5Inspection nbit = InspectHdf5(Path("nbit_int"), nullptr, uint64_t{1} << 30);
  ASSERT_EQ(nbit.datasets.size(), 1u);
  EXPECT_EQ(nbit.datasets[0].chunks_stored, 2);
}

// PyTables stores bool as an 8-bit bitfield; wider bitfields are unsigned integers (h5py).
TEST_F(Hdf5UnusualTest, BitfieldsReadAsBoolOrUnsignedIntegers) {
  DType dtype{};
  std::string got = ReadAll("bitfield_b8", &dtype);
  EXPECT_EQ(dtype, DType::kBool);
  EXPECT_EQ(got, std::string("\0\1\1\0\0\1\1\1\1\0\0\0", 12));
  got = ReadAll("bitfield_b64_be", &dtype);
  ASSERT_EQ(dtype, DType::kUInt64);
  uint64_t values[6];
  ASSERT_EQ(got.size(), sizeof(values));
  std::memcpy(values, got.data(), sizeof(values));
  EXPECT_THAT(values,
              ::testing::ElementsAre(0, 1, uint64_t{1} << 63, UINT64_MAX, 0x123456789abcdef0, 7));
  const Hdf5Inspection in = InspectHdf5(Path("bitfield_b16_be"), nullptr, uint64_t{1} << 30);
  ASSERT_EQ(in.datasets.size(), 1u);
  EXPECT_TRUE(in.datasets[0].unsupported.empty()) << in.datasets[0].unsupported;
  EXPECT_EQ(in.datasets[0].dtype, "uint16");
}

// Per dataset, what gpufeed will do: read it itself, through libhdf5 (and why), with a dtype=
// PyTorch needs (unsigned dtypes torch 1.13 lacks), or refuse it (and why).
TEST_F(Hdf5UnusualTest, InspectSaysWhatGpufeedWillDoWithEachDataset) {
  auto one = [&](const char* name) {
    Hdf5Inspection in = InspectHdf5(Path(name), nullptr, uint64_t{1} << 30);
    EXPECT_EQ(in.datasets.size(), 1u) << name;
    return in.datasets.at(0);
  };
  const auto direct = one("bitfield_b8");
  EXPECT_EQ(direct.access, "direct");
  EXPECT_THAT(direct.access_detail, HasSubstr("read directly by gpufeed"));
  const auto library = one("precision_int");
  EXPECT_EQ(library.access, "libhdf5");
  EXPECT_THAT(library.access_detail,
              AllOf(HasSubstr("through libhdf5 (slow"), HasSubstr("3-bit precision")));
  struct Cast {
    const char* name;
    const char* dtype;
    const char* says;
  };
  for (const Cast& c : {Cast{"bitfield_b16_be", "int32", "every uint16 fits"},
                        Cast{"bitfield_b32_le", "int64", "every uint32 fits"},
                        Cast{"bitfield_b64_be", "int64", "a value above 2^63-1 is refused"}}) {
    const auto d = one(c.name);
    EXPECT_EQ(d.access, "cast") << c.name;
    EXPECT_EQ(d.cast_dtype, c.dtype) << c.name;
    EXPECT_THAT(d.access_detail,
                AllOf(HasSubstr("needs a cast for PyTorch"),
                      HasSubstr(fmt::format("dtype={{'x': '{}'}}", c.dtype)), HasSubstr(c.says)));
  }
  const Hdf5Inspection refused = InspectHdf5(Path("mantissa_float"), nullptr, uint64_t{1} << 30);
  ASSERT_EQ(refused.datasets.size(), 1u);
  EXPECT_EQ(refused.datasets[0].access, "refused");
  EXPECT_THAT(refused.datasets[0].access_detail, HasSubstr("20-bit mantissa"));
  // Both forms of the report say it.
  const auto json = Hdf5InspectionToJson(InspectHdf5(Path("bitfield_b64_be"), nullptr, 1));
  EXPECT_EQ(json["datasets"][0]["access"], "cast");
  EXPECT_EQ(json["datasets"][0]["cast_dtype"], "int64");
  EXPECT_THAT(FormatHdf5Inspection(InspectHdf5(Path("precision_int"), nullptr, 1)),
              HasSubstr("gpufeed:     read through libhdf5 (slow"));
}

// A byte other than 0 or 1 is no bool: refused as it is read, naming the sample.
TEST_F(Hdf5UnusualTest, EightBitBitfieldHoldingOtherThanBoolIsRefusedNamingTheSample) {
  const std::string path = Path("bitfield_b8_not_bool");
  const auto source = OpenHdf5({path}, {"x"});
  ASSERT_EQ(source->schema().fields.at(0).dtype, DType::kBool);
  const auto state = source->NewWorkerState();
  std::string out(2 * 2, '\0');
  BatchView view;
  view.fields.push_back(reinterpret_cast<std::byte*>(out.data()));
  view.rows = 2;
  const std::vector<int64_t> good = {0, 1};
  source->Read(good, view, state.get());  // samples 0 and 1 hold 0 and 1 only
  const std::vector<int64_t> bad = {0, 2};
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { source->Read(bad, view, state.get()); }, &msg),
            ErrorCode::kUnsupported);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("dataset x"), HasSubstr("sample 2"),
                         HasSubstr("holds 5")));
}

TEST_F(Hdf5UnusualTest, CompactLayoutsThatDoNotHoldTheDatasetAreRefused) {
  struct Case {
    const char* name;
    const char* says;
  };
  for (const Case& c :
       {Case{"hostile_compact_size_zero", "the compact layout holds 0 bytes for 12 elements"},
        Case{"hostile_compact_dataspace_larger",
             "the compact layout holds 48 bytes for 120 elements of 4 bytes"},
        Case{"hostile_compact_v1_size_zero", "the compact layout holds 0 bytes for 12 elements"}}) {
    const std::string path = Path(c.name);
    std::string msg;
    EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({path}, {"x"}); }, &msg), ErrorCode::kCorruptData) << msg;
    EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("dataset /x"), HasSubstr(c.says)));
    // gpufeed inspect refuses the file the same way (it crashed with SIGSEGV).
    try {
      InspectHdf5(path, nullptr, uint64_t{1} << 30);
      ADD_FAILURE() << c.name << ": inspect did not refuse it";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr(path), HasSubstr(c.says)));
    }
  }
}

TEST_F(Hdf5UnusualTest, FloatLayoutOfNoDtypeIsRefusedNamingTheDataset) {
  const std::string path = Path("mantissa_float");
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({path}, {"x"}); }, &msg), ErrorCode::kUnsupported) << msg;
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("dataset x"),
                         HasSubstr("a 4-byte float with a 8-bit exponent and 20-bit mantissa")));
}

}  // namespace
}  // namespace gpufeed
