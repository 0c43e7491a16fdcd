// libFuzzer target: an HDF5 file as gpufeed meets it. Writes the input to a file, inspects it
// (`gpufeed inspect`: every dataset opened, its chunk index read) and opens every readable
// dataset as a source and reads its first rows (a compound dataset's members among them, as
// inspect lists them); then opens the file with no dataset named (every dataset, a compound
// one as its numeric members). Any gpufeed::Error is an accepted outcome;
// a crash, a sanitizer report, another exception, a hang or an allocation past libFuzzer's
// limit is a finding. libhdf5 itself is not instrumented, but it runs under ASan's
// interceptors and its crashes are crashes: gpufeed's checks must refuse what crashes it.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/tools/inspect.h"

namespace {

// Rows read per dataset, and a cap on the bytes they take (a crafted shape may promise huge
// samples; the source accepts them, the fuzzer does not allocate them).
constexpr int64_t kRows = 3;
constexpr size_t kMaxReadBytes = size_t{64} << 20;

const std::string& ScratchPath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr ? dir : "/tmp") + "/gpufeed-hdf5-fuzz-" +
           std::to_string(getpid()) + ".h5";
  }();
  return path;
}

void ReadFirstRows(const std::string& path, const std::string& dataset) {
  const auto source = gpufeed::OpenHdf5({path}, {dataset});
  const int64_t n = std::min<int64_t>(kRows, source->size());
  if (n == 0) return;
  const auto& field = source->schema().fields.at(0);
  if (field.SampleBytes() > kMaxReadBytes / static_cast<size_t>(n)) return;
  std::vector<std::byte> rows(static_cast<size_t>(n) * field.SampleBytes());
  gpufeed::BatchView view;
  view.rows = n;
  view.fields.push_back(rows.data());
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < n; ++i) indices.push_back(source->size() - 1 - i);  // last rows too
  const auto state = source->NewWorkerState();
  source->Read(indices, view, state.get());
}

}  // namespace

// libhdf5 1.10.8 leaks small allocations on some error paths of damaged files; those are its
// own (every frame of the leak's stack is inside it) and are not gpufeed's to fix. Leaks with
// a gpufeed frame are still reported.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5\n"; }
// libhdf5 is built without frame pointers: the fast unwinder loses its frames and the
// suppression above would not match its leaks.
extern "C" const char* __asan_default_options() { return "fast_unwind_on_malloc=0"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = ScratchPath();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  std::vector<std::string> readable;
  try {
    const gpufeed::Hdf5Inspection in = gpufeed::InspectHdf5(path, nullptr, uint64_t{1} << 30);
    (void)gpufeed::FormatHdf5Inspection(in);
    for (const auto& d : in.datasets) {
      if (d.unsupported.empty()) readable.push_back(d.dataset);
    }
  } catch (const gpufeed::Error&) {
  }
  for (const auto& dataset : readable) {
    try {
      ReadFirstRows(path, dataset);
    } catch (const gpufeed::Error&) {
    }
  }
  try {
    (void)gpufeed::OpenHdf5({path}, {});
  } catch (const gpufeed::Error&) {
  }
  return 0;
}
