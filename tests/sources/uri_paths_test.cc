// Every source opens and reads through its FileSystem alone: a file system whose paths are
// URIs (uri_file_system.h: a local folder served as s3://testbucket/root, never mapped) gives
// exactly the batches the local paths give, for a NumPy folder, HDF5 files of every storage
// gpufeed reads (contiguous, compact, gzip chunks, unfiltered chunks, big-endian, and
// datasets libhdf5 reads itself through gpufeed's file driver), with a batch's ranges read by
// one ReadMany; a failing read inside libhdf5 is a gpufeed::Error naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/io/fault_file.h"
#include "error_code_of.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/sources.h"
#include "sources/hdf5/test_files.h"
#include "sources/hdf5/tools/inspect.h"
#include "sources/hdf5/tools/rechunk.h"
#include "sources/open_path.h"
#include "sources/uri_file_system.h"

namespace gpufeed {
namespace {

using testing::ErrorCodeOf;
using ::testing::HasSubstr;
using testing::UriFileSystem;

constexpr const char* kMakeFiles = R"PY(
import os, sys, numpy as np, h5py
from h5py import h5d, h5p, h5s, h5t, h5z
d = sys.argv[1]
rng = np.random.default_rng(7)
os.makedirs(d + '/np')
np.save(d + '/np/mel.npy', rng.standard_normal((50, 2, 4)).astype('f4'))
np.save(d + '/np/label.npy', rng.integers(0, 10, 50).astype('i8'))
with h5py.File(d + '/plain.h5', 'w') as f:
    f['a'] = rng.standard_normal((100, 3)).astype('f4')
    f['b'] = np.arange(100, dtype='i8') * 3
with h5py.File(d + '/gzip.h5', 'w') as f:
    f.create_dataset('g', data=rng.standard_normal((100, 4, 5)).astype('f4'), chunks=(7, 4, 5),
                     compression='gzip', shuffle=True)
    f.create_dataset('h', data=np.arange(100, dtype='i2'), chunks=(10,), compression='gzip')
    f.create_dataset('u', data=rng.integers(0, 1000, (100, 6)).astype('i4'), chunks=(8, 3))
    f.create_dataset('sparse', shape=(100, 2), dtype='f8', chunks=(10, 2), compression='gzip',
                     fillvalue=1.5)
    f['sparse'][30:40] = 2.5
    v = f.create_dataset('v', shape=(100, 4, 6), dtype='i2', chunks=(5, 4, 3), fillvalue=7)
    v[0:60] = rng.integers(-999, 999, (60, 4, 6)).astype('i2')
with h5py.File(d + '/compact.h5', 'w') as f:
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_layout(h5d.COMPACT)
    c = h5d.create(f.id, b'c', h5t.STD_I32LE, h5s.create_simple((30, 2)), dcpl=dcpl)
    c.write(h5s.ALL, h5s.ALL, np.arange(60, dtype='<i4').reshape(30, 2))
    f['big'] = np.linspace(0, 1, 30).astype('>f8')
with h5py.File(d + '/library.h5', 'w') as f:
    f.create_dataset('s', data=np.arange(800, dtype='i4').reshape(200, 4) % 97, chunks=(20, 4),
                     scaleoffset=0)
with h5py.File(d + '/nbit.h5', 'w', libver='earliest') as f:
    t = h5t.STD_I32LE.copy()
    t.set_precision(3)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk((4,))
    dcpl.set_filter(h5z.FILTER_NBIT)
    x = h5d.create(f.id, b'x', t, h5s.create_simple((8,)), dcpl=dcpl)
    x.write(h5s.ALL, h5s.ALL, np.array([-4, -3, -2, -1, 0, 1, 2, 3], dtype='<i4'))
)PY";

// One buffer per field, as the loader lays out a batch.
struct Rows {
  std::vector<std::vector<std::byte>> fields;
  BatchView view;
};

Rows ReadAll(const Source& source, const std::vector<int64_t>& indices) {
  Rows rows;
  for (const auto& f : source.schema().fields) {
    rows.fields.emplace_back(f.SampleBytes() * indices.size(), std::byte{0xEE});
  }
  for (auto& buf : rows.fields) rows.view.fields.push_back(buf.data());
  rows.view.rows = static_cast<int64_t>(indices.size());
  const auto state = source.NewWorkerState();
  // In batches of 16, as workers read them.
  for (size_t at = 0; at < indices.size(); at += 16) {
    const size_t n = std::min<size_t>(16, indices.size() - at);
    BatchView part;
    for (size_t f = 0; f < rows.fields.size(); ++f) {
      part.fields.push_back(rows.fields[f].data() + at * source.schema().fields[f].SampleBytes());
    }
    part.rows = static_cast<int64_t>(n);
    source.Read(std::span(indices).subspan(at, n), part, state.get());
  }
  return rows;
}

// Every sample once, shuffled, then a few again: runs, repeats and scattered rows.
std::vector<int64_t> Plan(int64_t samples) {
  std::vector<int64_t> indices(static_cast<size_t>(samples));
  std::iota(indices.begin(), indices.end(), 0);
  std::shuffle(indices.begin(), indices.end(), std::mt19937(42));
  for (int64_t i = 0; i < std::min<int64_t>(samples, 12); ++i) indices.push_back(i);
  indices.push_back(samples - 1);
  indices.push_back(samples - 1);
  return indices;
}

// The two sources hold the same schema and give the same bytes for every field of every
// sample.
void ExpectSameSamples(const Source& local, const Source& remote) {
  ASSERT_EQ(local.schema(), remote.schema());
  ASSERT_EQ(local.size(), remote.size());
  const std::vector<int64_t> plan = Plan(local.size());
  const Rows a = ReadAll(local, plan);
  const Rows b = ReadAll(remote, plan);
  for (size_t f = 0; f < a.fields.size(); ++f) {
    const size_t rb = local.schema().fields[f].SampleBytes();
    for (size_t r = 0; r < plan.size(); ++r) {
      ASSERT_TRUE(std::equal(a.fields[f].begin() + r * rb, a.fields[f].begin() + (r + 1) * rb,
                             b.fields[f].begin() + r * rb))
          << local.schema().fields[f].name << " sample " << plan[r];
    }
  }
}

class UriPathsTest : public ::testing::Test {
 protected:
  // The files are written once per build tree (a Python start costs most of a second).
  static void SetUpTestSuite() {
    if (!testing::HaveH5py()) return;
    std::string error;
    root_ = new std::string(testing::SharedPythonOutput("uri_paths", kMakeFiles, &error));
  }
  static void TearDownTestSuite() {
    delete root_;
    root_ = nullptr;
  }
  void SetUp() override {
    if (root_ == nullptr || root_->empty()) GTEST_SKIP() << "h5py could not write the files";
    fs_ = std::make_shared<UriFileSystem>(*root_);
  }
  static std::string Local(const std::string& name) { return *root_ + "/" + name; }

  std::shared_ptr<UriFileSystem> fs_;
  static std::string* root_;
};

std::string* UriPathsTest::root_ = nullptr;

TEST_F(UriPathsTest, NumpyFolderReadsTheSameThroughUris) {
  const std::string uri = fs_->Uri("np");
  EXPECT_EQ(ClassifyPath(uri, *fs_), PathKind::kNumpyFolder);
  const auto local = OpenNumpy(Local("np"), {.use_mmap = false});
  const auto remote = OpenPath(uri, {}, fs_);
  EXPECT_EQ(remote->schema().ToString(), "label: int64[], mel: float32[2,4]");
  ExpectSameSamples(*local, *remote);
  // The rows of a batch are one ReadMany per field, not one read per run.
  EXPECT_GT(fs_->counters().read_many, 0);
  EXPECT_LT(fs_->counters().read_many, fs_->counters().read_many_ranges);
  // Named fields, and the cache key names the URI as given.
  const auto named = OpenNumpy(uri + "/", {.fields = {"mel"}, .file_system = fs_});
  EXPECT_THAT(named->Identity(), HasSubstr("numpy:s3://testbucket/root/np|"));
  ExpectSameSamples(*OpenNumpy(Local("np"), {.fields = {"mel"}}), *named);
}

TEST_F(UriPathsTest, NumpyErrorsNameTheUri) {
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(fs_->Uri("np/mel.npy"), {}, fs_); }, &message),
            ErrorCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("open s3://testbucket/root/np instead"));
  EXPECT_EQ(ErrorCodeOf([&] { OpenNumpy(fs_->Uri("np"), {.fields = {"x"}, .file_system = fs_}); },
                        &message),
            ErrorCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("s3://testbucket/root/np/x.npy does not exist"));
  EXPECT_THAT(message, HasSubstr("the fields there are: label, mel"));
  EXPECT_EQ(ErrorCodeOf([&] { OpenPath(fs_->Uri("nothing"), {}, fs_); }), ErrorCode::kNotFound);
}

TEST_F(UriPathsTest, Hdf5FilesReadTheSameThroughUris) {
  for (const char* name : {"plain.h5", "gzip.h5", "compact.h5", "library.h5", "nbit.h5"}) {
    SCOPED_TRACE(name);
    const std::string uri = fs_->Uri(name);
    EXPECT_EQ(ClassifyPath(uri, *fs_), PathKind::kHdf5);
    const auto local = OpenHdf5({Local(name)}, {}, {});
    const auto remote = OpenPath(uri, {}, fs_);
    ExpectSameSamples(*local, *remote);
    EXPECT_THAT(remote->Describe(), HasSubstr("hdf5:s3://testbucket/root/"));
    EXPECT_THAT(remote->Identity(), HasSubstr(uri + ":"));
  }
}

TEST_F(UriPathsTest, Hdf5ChunksOfABatchAreOneReadMany) {
  // Compressed chunks (fetched whole, then decoded) and unfiltered ones (each sample's piece
  // of each chunk read, some in several runs), with never-written chunks among them.
  for (const std::vector<std::string> datasets :
       {std::vector<std::string>{"g", "h", "sparse"}, std::vector<std::string>{"u", "v"}}) {
    const auto remote =
        OpenHdf5({fs_->Uri("gzip.h5")}, datasets, {.file_system = fs_, .chunk_cache_bytes = 0});
    const int64_t ranges = fs_->counters().read_many_ranges;
    const int64_t calls = fs_->counters().read_many;
    ExpectSameSamples(*OpenHdf5({Local("gzip.h5")}, datasets, {}), *remote);
    EXPECT_GT(fs_->counters().read_many, calls);
    // Several ranges per call: a batch of 16 shuffled rows meets many chunks.
    EXPECT_GT(fs_->counters().read_many_ranges - ranges, 2 * (fs_->counters().read_many - calls));
  }
}

TEST_F(UriPathsTest, InspectReadsThroughTheFileSystem) {
  const Hdf5Inspection local = InspectHdf5(Local("gzip.h5"), nullptr, uint64_t{1} << 30);
  const Hdf5Inspection remote = InspectHdf5(fs_->Uri("gzip.h5"), fs_, uint64_t{1} << 30);
  ASSERT_EQ(local.datasets.size(), remote.datasets.size());
  for (size_t i = 0; i < local.datasets.size(); ++i) {
    EXPECT_EQ(local.datasets[i].dataset, remote.datasets[i].dataset);
    EXPECT_EQ(local.datasets[i].access, remote.datasets[i].access);
    EXPECT_EQ(local.datasets[i].unsupported, remote.datasets[i].unsupported);
  }
  EXPECT_EQ(local.decoded_set_bytes, remote.decoded_set_bytes);
}

TEST_F(UriPathsTest, AFailingReadInsideLibhdf5IsAnErrorNamingTheFile) {
  auto faults = std::make_shared<FaultInjectingFileSystem>(fs_);
  const std::string uri = fs_->Uri("library.h5");
  const auto source = OpenHdf5({uri}, {}, {.file_system = faults});
  faults->SetRules({.eio_after_reads = 0});
  const std::vector<int64_t> indices{150, 3};
  std::string message;
  EXPECT_EQ(ErrorCodeOf([&] { ReadAll(*source, indices); }, &message), ErrorCode::kIo);
  EXPECT_THAT(message, HasSubstr(uri));
  EXPECT_THAT(message, HasSubstr("dataset /s: cannot read sample"));
  EXPECT_THAT(message, HasSubstr("injected"));
  // The store recovers: the same read succeeds and matches the local file.
  faults->SetRules({});
  ExpectSameSamples(*OpenHdf5({Local("library.h5")}, {}, {}), *source);
  // A read failing at any point of the open (gpufeed's checks, then libhdf5's own reads of
  // the metadata through the driver) is an I/O error naming the file, until none fails.
  int failures = 0;
  for (int64_t n = 0;; ++n) {
    faults->SetRules({.eio_after_reads = n});
    try {
      OpenHdf5({uri}, {}, {.file_system = faults});
      break;
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::kIo) << "after " << n << " reads: " << e.what();
      ASSERT_THAT(e.what(), HasSubstr(uri));
    }
    ASSERT_LT(++failures, 10000);
  }
  EXPECT_GT(failures, 3);
}

TEST_F(UriPathsTest, Libhdf5NeverOpensAnotherFileThroughTheDriver) {
  // The driver serves the one file it was given: a local path is not there for this file
  // system, and a URI outside its root neither.
  EXPECT_EQ(ErrorCodeOf([&] { OpenHdf5({Local("plain.h5")}, {}, {.file_system = fs_}); }),
            ErrorCode::kNotFound);
  EXPECT_EQ(ErrorCodeOf([&] { InspectHdf5("s3://elsewhere/plain.h5", fs_); }),
            ErrorCode::kNotFound);
}

TEST_F(UriPathsTest, RechunkRefusesUris) {
  std::string message;
  EXPECT_EQ(
      ErrorCodeOf([&] { RechunkHdf5({.input = fs_->Uri("gzip.h5"), .output = Local("o.h5")}); },
                  &message),
      ErrorCode::kUnsupported);
  EXPECT_THAT(message, HasSubstr("rechunk reads and writes local files; copy the object first"));
}

}  // namespace
}  // namespace gpufeed
