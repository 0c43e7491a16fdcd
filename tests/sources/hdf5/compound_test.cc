// Compound (struct) datasets, as PyTables and pandas format="table" write them
// (make_unusual_hdf5.py's compound.h5): each numeric member is a field "dataset.member" whose
// values equal h5py's f[dataset][member], big- or little-endian, contiguous or chunked and
// compressed; PyTables' bool (an 8-bit bitfield) and array members too; string,
// variable-length and nested compound members are refused by name; inspect lists members.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

class Hdf5CompoundTest : public testing::UnusualHdf5Files {
 protected:
  static std::string Path() { return UnusualHdf5Files::Path("compound"); }
  static std::string PyTablesPath() { return UnusualHdf5Files::Path("compound_pt"); }

  // Every sample of the fields, in reverse order (a plan, not a scan), as gpufeed reads them;
  // returned in sample order.
  static std::vector<std::string> ReadAll(const std::string& path,
                                          const std::vector<std::string>& fields,
                                          std::vector<FieldSpec>* specs) {
    const auto source = OpenHdf5({path}, fields);
    const auto state = source->NewWorkerState();
    const int64_t n = source->size();
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = n - 1 - i;
    std::vector<std::string> out;
    // Reserved: a short string's bytes move with it.
    out.reserve(source->schema().fields.size());
    BatchView view;
    view.rows = n;
    for (const FieldSpec& f : source->schema().fields) {
      specs->push_back(f);
      out.emplace_back(static_cast<size_t>(n) * f.SampleBytes(), '\0');
      view.fields.push_back(reinterpret_cast<std::byte*>(out.back().data()));
    }
    source->Read(idx, view, state.get());
    for (size_t f = 0; f < out.size(); ++f) {
      const size_t rb = source->schema().fields[f].SampleBytes();
      std::string ordered(out[f].size(), '\0');
      for (int64_t i = 0; i < n; ++i) ordered.replace(i * rb, rb, out[f], (n - 1 - i) * rb, rb);
      out[f] = ordered;
    }
    return out;
  }
};

TEST_F(Hdf5CompoundTest, EveryNumericMemberReadsAsH5pyReadsIt) {
  struct Case {
    std::string file;
    std::vector<std::string> fields;
    std::vector<FieldSpec> specs;
  };
  const std::vector<Case> cases = {
      {"compound",
       {"table.a", "table.b", "table.c", "table.flag"},
       {{"table.a", DType::kInt64, {}},
        {"table.b", DType::kFloat32, {}},
        {"table.c", DType::kInt16, {}},
        {"table.flag", DType::kBool, {}}}},
      {"compound",
       {"chunked.x", "chunked.y"},
       {{"chunked.x", DType::kFloat64, {2}}, {"chunked.y", DType::kUInt16, {2}}}},
      // PyTables: bool as an 8-bit bitfield, a big-endian array member of shape (3,).
      {"compound_pt",
       {"pt.ok", "pt.vec", "pt.n"},
       {{"pt.ok", DType::kBool, {}},
        {"pt.vec", DType::kFloat32, {3}},
        {"pt.n", DType::kInt32, {}}}},
      // No fields named: the numeric members (the nested compound 'pos' left out).
      {"compound_pt",
       {},
       {{"pt.ok", DType::kBool, {}},
        {"pt.vec", DType::kFloat32, {3}},
        {"pt.n", DType::kInt32, {}}}},
  };
  for (const Case& c : cases) {
    std::vector<FieldSpec> specs;
    const auto got = ReadAll(dir_ + "/" + c.file + ".h5", c.fields, &specs);
    EXPECT_EQ(specs, c.specs) << c.file;
    for (size_t f = 0; f < specs.size(); ++f) {
      const std::string want = dir_ + "/" + c.file + "." + specs[f].name + ".bin";
      EXPECT_TRUE(got[f] == testing::ReadWholeFile(want)) << specs[f].name;
    }
  }
}

TEST_F(Hdf5CompoundTest, StringVariableLengthAndMissingMembersAreRefusedByName) {
  struct Case {
    const char* field;
    ErrorCode code;
    const char* says;
  };
  for (const Case& c :
       {Case{"table.name", ErrorCode::kUnsupported, "member 'name' holds fixed-length strings"},
        Case{"table.v", ErrorCode::kUnsupported, "member 'v' holds variable-length sequences"},
        Case{"table.nope", ErrorCode::kNotFound, "its members are: a, b, c, flag, name, v"},
        Case{"table", ErrorCode::kUnsupported, "'table.a', 'table.b'"}}) {
    std::string msg;
    EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({Path()}, {c.field}); }, &msg), c.code) << msg;
    EXPECT_THAT(msg, AllOf(HasSubstr(Path()), HasSubstr(c.field), HasSubstr(c.says)));
  }
  std::string msg;
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({PyTablesPath()}, {"pt.pos"}); }, &msg),
            ErrorCode::kUnsupported);
  EXPECT_THAT(msg, AllOf(HasSubstr(PyTablesPath()), HasSubstr("member 'pos' holds a nested "
                                                              "compound")));
}

TEST_F(Hdf5CompoundTest, InspectListsTheMembersAsFields) {
  const Hdf5Inspection in = InspectHdf5(Path(), nullptr, uint64_t{1} << 30);
  std::vector<std::string> names;
  for (const auto& d : in.datasets) names.push_back(d.dataset);
  EXPECT_EQ(names,
            (std::vector<std::string>{"/chunked.x", "/chunked.y", "/table.a", "/table.b",
                                      "/table.c", "/table.flag", "/table.name", "/table.v"}));
  for (const auto& d : in.datasets) {
    if (d.dataset == "/table.name" || d.dataset == "/table.v") {
      EXPECT_EQ(d.access, "refused") << d.dataset;
    } else if (d.dataset == "/chunked.y") {
      EXPECT_EQ(d.access, "cast");
      EXPECT_THAT(d.access_detail, HasSubstr("dtype={'chunked.y': 'int32'}"));
    } else {
      EXPECT_EQ(d.access, "libhdf5") << d.dataset;
      EXPECT_THAT(d.access_detail, HasSubstr("of a compound")) << d.dataset;
    }
  }
  std::vector<std::string> pt;
  for (const auto& d : InspectHdf5(PyTablesPath(), nullptr, uint64_t{1} << 30).datasets) {
    pt.push_back(d.dataset + " " + d.access);
    if (d.dataset == "/pt.vec") EXPECT_EQ(d.shape, (std::vector<int64_t>{10, 3}));
  }
  EXPECT_EQ(pt, (std::vector<std::string>{"/pt.ok libhdf5", "/pt.vec libhdf5", "/pt.pos refused",
                                          "/pt.n libhdf5"}));
}

}  // namespace
}  // namespace gpufeed
