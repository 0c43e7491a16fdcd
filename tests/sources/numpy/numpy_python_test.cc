// Interoperability with real NumPy (Debian's, under /usr/bin/python3): files NumPy writes
// read back right, and files WriteNpy writes are byte-identical to NumPy's own.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/numpy/npy_test_util.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::ScratchDir;

constexpr const char* kPython = "/usr/bin/python3";
constexpr int64_t kSamples = 13;
constexpr int64_t kElements = 6;  // per-sample shape (2, 3)

// Shared by both directions: the value of flat element i of the array of `dtype`.
constexpr const char* kValues = R"(
import sys, numpy as np
N, K = 13, 6
DTYPES = ['bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64',
          'float16', 'float32', 'float64']
def values(dt):
    i = np.arange(N * K).reshape(N, 2, 3)
    if dt == 'bool': return i % 3 == 1
    if dt.startswith('float'): return ((i % 100) * 0.5 - 20).astype(dt)
    if dt.startswith('int'): return ((i % 100) - 50).astype(dt)
    return (i % 200).astype(dt)
)";

constexpr const char* kWrite = R"(
import os
d = sys.argv[1]
for sub in ['np', 'v2', 'v3', 'fortran', 'big']: os.makedirs(os.path.join(d, sub))
for dt in DTYPES: np.save(os.path.join(d, 'np', dt + '.npy'), values(dt))
for v in [2, 3]:
    with open(os.path.join(d, 'v%d' % v, 'v.npy'), 'wb') as f:
        np.lib.format.write_array(f, np.arange(N, dtype='<i4'), version=(v, 0))
np.save(os.path.join(d, 'fortran', 'f.npy'), np.asfortranarray(values('float32')[:, :, 0]))
np.save(os.path.join(d, 'big', 'b.npy'), np.arange(N, dtype='>f4'))
)";

constexpr const char* kCheck = R"(
import io
d = sys.argv[1]
for dt in DTYPES:
    path = d + '/' + dt + '.npy'
    a = np.load(path)
    assert a.dtype == np.dtype(dt) and a.shape == (N, 2, 3), (dt, a.dtype, a.shape)
    assert (a == values(dt)).all(), dt
    mine = open(path, 'rb').read()
    theirs = io.BytesIO()
    np.save(theirs, values(dt))
    assert mine == theirs.getvalue(), (dt, mine[:128], theirs.getvalue()[:128])
print('ok')
)";

bool PythonHasNumpy() {
  return std::system(fmt::format("{} -c 'import numpy' >/dev/null 2>&1", kPython).c_str()) == 0;
}

// The bytes of flat element i, as the Python `values` makes it.
std::vector<std::byte> ExpectedElement(DType dtype, int64_t i) {
  std::vector<std::byte> out(DTypeSize(dtype));
  auto put = [&](auto v) { std::memcpy(out.data(), &v, sizeof(v)); };
  const double f = static_cast<double>(i % 100) * 0.5 - 20;
  switch (dtype) {
    case DType::kBool:
      put(static_cast<uint8_t>(i % 3 == 1));
      break;
    case DType::kInt8:
      put(static_cast<int8_t>(i % 100 - 50));
      break;
    case DType::kInt16:
      put(static_cast<int16_t>(i % 100 - 50));
      break;
    case DType::kInt32:
      put(static_cast<int32_t>(i % 100 - 50));
      break;
    case DType::kInt64:
      put(static_cast<int64_t>(i % 100 - 50));
      break;
    case DType::kUInt8:
      put(static_cast<uint8_t>(i % 200));
      break;
    case DType::kUInt16:
      put(static_cast<uint16_t>(i % 200));
      break;
    case DType::kUInt32:
      put(static_cast<uint32_t>(i % 200));
      break;
    case DType::kUInt64:
      put(static_cast<uint64_t>(i % 200));
      break;
    case DType::kFloat16:
      put(FloatToHalf(static_cast<float>(f)));
      break;
    case DType::kFloat32:
      put(static_cast<float>(f));
      break;
    case DType::kFloat64:
      put(f);
      break;
    case DType::kBFloat16:
      ADD_FAILURE();
      break;
  }
  return out;
}

class NumpyPythonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PythonHasNumpy()) GTEST_SKIP() << kPython << " has no numpy";
  }
  // Runs kValues + `body` with the argument `arg`; true when Python exits 0.
  bool RunPython(const char* body, const std::string& arg) {
    const std::string script = dir_.Write("script.py", std::string(kValues) + body);
    return std::system(fmt::format("{} {} {}", kPython, script, arg).c_str()) == 0;
  }
  ScratchDir dir_;
};

const std::vector<std::string> kNames = {"bool",   "int8",    "int16",   "int32",
                                         "int64",  "uint8",   "uint16",  "uint32",
                                         "uint64", "float16", "float32", "float64"};

TEST_F(NumpyPythonTest, ReadsWhatNumpyWrites) {
  const std::string out = dir_.path() + "/py";
  ASSERT_TRUE(RunPython(kWrite, out));
  const auto source = OpenNumpy(out + "/np", {.fields = kNames});
  ASSERT_EQ(source->size(), kSamples);
  const std::vector<int64_t> indices{12, 0, 5, 5, 6, 7, 1};
  std::vector<std::vector<std::byte>> buffers;
  BatchView view{.rows = static_cast<int64_t>(indices.size())};
  for (const auto& f : source->schema().fields) {
    EXPECT_EQ(f.shape, (std::vector<int64_t>{2, 3}));
    buffers.emplace_back(f.SampleBytes() * indices.size());
    view.fields.push_back(buffers.back().data());
  }
  source->Read(indices, view, nullptr);
  for (size_t f = 0; f < kNames.size(); ++f) {
    const DType dtype = *ParseDType(kNames[f]);
    ASSERT_EQ(source->schema().fields[f].dtype, dtype) << kNames[f];
    const size_t es = DTypeSize(dtype);
    for (size_t r = 0; r < indices.size(); ++r) {
      for (int64_t e = 0; e < kElements; ++e) {
        const auto expected = ExpectedElement(dtype, indices[r] * kElements + e);
        ASSERT_EQ(0, std::memcmp(buffers[f].data() + (r * kElements + e) * es, expected.data(), es))
            << kNames[f] << " row " << r << " element " << e;
      }
    }
  }

  for (const char* v : {"v2", "v3"}) {
    const auto vs = OpenNumpy(out + "/" + v);
    ASSERT_EQ(vs->size(), kSamples) << v;
    std::vector<int32_t> got(2);
    const std::vector<int64_t> two{11, 4};
    vs->Read(two, {.fields = {reinterpret_cast<std::byte*>(got.data())}, .rows = 2}, nullptr);
    EXPECT_EQ(got, (std::vector<int32_t>{11, 4})) << v;
  }

  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(out + "/fortran"); }, &message), ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("f.npy"));
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(out + "/big"); }, &message), ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr(">f4"));
}

TEST_F(NumpyPythonTest, NumpyReadsWhatWriteNpyWritesByteForByte) {
  const std::string out = dir_.path() + "/cpp";
  std::filesystem::create_directories(out);
  for (const auto& name : kNames) {
    const DType dtype = *ParseDType(name);
    std::vector<std::byte> data;
    for (int64_t i = 0; i < kSamples * kElements; ++i) {
      const auto e = ExpectedElement(dtype, i);
      data.insert(data.end(), e.begin(), e.end());
    }
    WriteNpy(out + "/" + name + ".npy", {name, dtype, {2, 3}}, kSamples, data.data());
  }
  EXPECT_TRUE(RunPython(kCheck, out));
}

}  // namespace
}  // namespace gpufeed
