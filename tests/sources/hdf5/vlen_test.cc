// Variable-length datasets written by h5py, read through OpenHdf5's ReadLengths and ReadItems
// (contiguous, gzip-compressed chunks, strings); and a file whose references and global heap
// are patched, each damage an Error(kCorruptData) naming the file, the dataset and the sample.
// (python/tests/test_hdf5_vlen.py compares whole loaders with h5py; this suite runs in the
// sanitizer tree too.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <vector>

#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/test_files.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using testing::ErrorCodeOf;
using ::testing::HasSubstr;

constexpr const char* kMake = R"(
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(d + '/v.h5', 'w') as f:
    t = f.create_dataset('tokens', (4,), dtype=h5py.vlen_dtype(np.int32))
    t[0] = [1, 2, 3]; t[1] = np.arange(10, dtype=np.int32); t[3] = [7]
    offset = t.id.get_offset()
with h5py.File(d + '/z.h5', 'w') as f:
    t = f.create_dataset('tokens', (40,), dtype=h5py.vlen_dtype(np.dtype('>i8')), chunks=(8,),
                         compression='gzip')
    for i in range(0, 40, 3):
        t[i] = np.full(i, i, dtype='>i8')
    s = f.create_dataset('text', (40,), dtype=h5py.string_dtype())
    s[5] = 'h\u00e9'
data = open(d + '/v.h5', 'rb').read()
open(d + '/offsets.txt', 'w').write('%d %d' % (offset, data.find(b'GCOL')))
)";

class Hdf5VlenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::RunPython(dir_.path(), "make.py", kMake, dir_.path())) {
      GTEST_SKIP() << "needs /usr/bin/python3 with h5py";
    }
    std::ifstream(dir_.Path("offsets.txt")) >> refs_ >> heap_;
    std::ifstream in(dir_.Path("v.h5"), std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
  }

  // v.h5 with `patch` applied, as a new file.
  std::string Patched(const std::function<void(std::vector<char>&)>& patch) {
    std::vector<char> b = bytes_;
    patch(b);
    const std::string path = dir_.Path("bad.h5");
    std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
    return path;
  }

  template <typename T>
  static void Put(std::vector<char>& b, size_t at, T v) {
    std::memcpy(b.data() + at, &v, sizeof v);
  }

  testing::ScratchDir dir_;
  std::vector<char> bytes_;
  size_t refs_ = 0;  // sample 0's reference: length u32, heap address u64, object u32
  size_t heap_ = 0;  // the collection
};

std::vector<int64_t> Lengths(const Source& s) {
  std::vector<int64_t> indices(static_cast<size_t>(s.size()));
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  std::vector<int64_t> lengths(indices.size());
  s.ReadLengths(0, indices, lengths, nullptr);
  return lengths;
}

TEST_F(Hdf5VlenTest, LengthsAndItemsAsH5pyWroteThem) {
  const auto source = OpenHdf5({dir_.Path("v.h5")}, {"tokens"});
  EXPECT_EQ(source->schema().ToString(), "tokens: int32[*]");
  EXPECT_THAT(Lengths(*source), ElementsAre(3, 10, 0, 1));
  std::vector<int32_t> items(5);
  auto state = source->NewWorkerState();
  source->ReadItems(0, 1, 2, std::as_writable_bytes(std::span(items)), state.get());
  EXPECT_THAT(items, ElementsAre(2, 3, 4, 5, 6));
  source->ReadItems(0, 0, 0, std::as_writable_bytes(std::span(items).first(3)), state.get());
  EXPECT_THAT(std::vector<int32_t>(items.begin(), items.begin() + 3), ElementsAre(1, 2, 3));
  // Past the sample's items: the caller's mistake.
  EXPECT_EQ(ErrorCodeOf([&] {
              source->ReadItems(0, 3, 0, std::as_writable_bytes(std::span(items).first(2)),
                                state.get());
            }),
            ErrorCode::kInvalidArgument);
}

TEST_F(Hdf5VlenTest, CompressedChunksBigEndianItemsAndStrings) {
  const auto source = OpenHdf5({dir_.Path("z.h5")}, {"tokens", "text"});
  EXPECT_EQ(source->schema().ToString(), "tokens: int64[*], text: uint8[*]");
  const auto lengths = Lengths(*source);
  auto state = source->NewWorkerState();
  for (int64_t i = 0; i < 40; ++i) {
    ASSERT_EQ(lengths[static_cast<size_t>(i)], i % 3 == 0 ? i : 0) << i;
    std::vector<int64_t> items(static_cast<size_t>(lengths[static_cast<size_t>(i)]));
    source->ReadItems(0, i, 0, std::as_writable_bytes(std::span(items)), state.get());
    for (int64_t v : items) ASSERT_EQ(v, i) << i;
  }
  std::vector<int64_t> text(40);
  source->ReadLengths(1, {std::vector<int64_t>{5, 6}}, {text.data(), 2}, nullptr);
  EXPECT_EQ(text[0], 3);  // "hé" in UTF-8
  EXPECT_EQ(text[1], 0);  // never written
  std::vector<uint8_t> bytes(3);
  source->ReadItems(1, 5, 0, std::as_writable_bytes(std::span(bytes)), state.get());
  EXPECT_THAT(bytes, ElementsAre('h', 0xC3, 0xA9));
}

TEST_F(Hdf5VlenTest, ManyRequestsAtOnceMatchOneByOne) {
  const auto source = OpenHdf5({dir_.Path("z.h5")}, {"tokens"});
  auto state = source->NewWorkerState();
  // Samples out of order, one twice, pieces from the middle: as a packed batch asks.
  const std::vector<std::pair<int64_t, int64_t>> asked = {{39, 5}, {3, 0},  {21, 20},
                                                          {0, 0},  {39, 0}, {12, 11}};
  std::vector<std::vector<int64_t>> outs;
  std::vector<Source::ItemsRequest> requests;
  for (const auto& [index, first] : asked) {
    const int64_t length = index % 3 == 0 ? index : 0;
    outs.emplace_back(static_cast<size_t>(length - first));
  }
  for (size_t k = 0; k < asked.size(); ++k) {
    requests.push_back(
        {asked[k].first, asked[k].second, std::as_writable_bytes(std::span(outs[k]))});
  }
  source->ReadItemsMany(0, requests, state.get());
  for (size_t k = 0; k < asked.size(); ++k) {
    EXPECT_EQ(outs[k], std::vector<int64_t>(outs[k].size(), asked[k].first)) << k;
  }
  requests[1].out = std::as_writable_bytes(std::span(outs[0]));  // 34 items of a 3-item sample
  EXPECT_EQ(ErrorCodeOf([&] { source->ReadItemsMany(0, requests, state.get()); }),
            ErrorCode::kInvalidArgument);
}

struct Damage {
  const char* name;
  std::function<void(std::vector<char>&, size_t refs, size_t heap)> patch;
  const char* says;
};

TEST_F(Hdf5VlenTest, DamagedReferencesAndHeapsNameTheSample) {
  const Damage damages[] = {
      {"address past the end", [](auto& b, size_t r, size_t) { Put<uint64_t>(b, r + 4, 1 << 30); },
       "past the end of the file"},
      {"address wraps", [](auto& b, size_t r, size_t) { Put<uint64_t>(b, r + 4, ~uint64_t{0}); },
       "past the end of the file"},
      {"object not there", [](auto& b, size_t r, size_t) { Put<uint32_t>(b, r + 12, 999); },
       "has no object 999"},
      {"length disagrees", [](auto& b, size_t r, size_t) { Put<uint32_t>(b, r, 2); },
       "holds 12 bytes, but its reference says 2 items"},
      {"length 2^31", [](auto& b, size_t r, size_t) { Put<uint32_t>(b, r, 1u << 31); },
       "more than the file's"},
      {"signature", [](auto& b, size_t, size_t h) { b[h] = 'X'; }, "signature (GCOL)"},
      {"size past the file", [](auto& b, size_t, size_t h) { Put<uint64_t>(b, h + 8, 1 << 30); },
       "past the end of the file"},
      {"size below header", [](auto& b, size_t, size_t h) { Put<uint64_t>(b, h + 8, 8); },
       "smaller than its header"},
      {"object past collection",
       [](auto& b, size_t, size_t h) { Put<uint64_t>(b, h + 24, uint64_t{1} << 40); },
       "does not fit"},
  };
  for (const Damage& d : damages) {
    const std::string path = Patched([&](std::vector<char>& b) { d.patch(b, refs_, heap_); });
    std::string message;
    const ErrorCode code = ErrorCodeOf(
        [&] {
          const auto source = OpenHdf5({path}, {"tokens"});
          // As many items as the reference says: the damage is the file's, not the caller's.
          std::vector<std::byte> out(static_cast<size_t>(Lengths(*source)[0]) * 4);
          source->ReadItems(0, 0, 0, out, nullptr);
        },
        &message);
    EXPECT_EQ(code, ErrorCode::kCorruptData) << d.name << ": " << message;
    EXPECT_THAT(message,
                AllOf(HasSubstr(path), HasSubstr("dataset tokens, sample 0"), HasSubstr(d.says)))
        << d.name;
  }
}

}  // namespace
}  // namespace gpufeed
