// NVTX ranges for gpufeed's stages, so Nsight Systems shows them beside the model's kernels.
// The NVTX library (libnvToolsExt.so.1, or the file GPUFEED_NVTX_LIBRARY names) is loaded
// with dlopen on first use, like the CUDA driver; when it is absent nothing happens and
// nothing is printed. Ranges nest per thread (push/pop).
//
// Also the thread's decode tally: sources that decode (HDF5 chunks) time each decode with a
// ScopedDecode, so the loader can show decode time inside a batch's read.
//
// Thread-safety: thread-safe; ranges belong to the thread that opened them.
#pragma once

#include <chrono>
#include <cstdint>

namespace gpufeed {

// True once the NVTX library loaded (the first call tries to load it).
bool NvtxEnabled();
// Push and pop one range on this thread. No-ops without the library.
void NvtxPush(const char* name);
void NvtxPop();

// Opens a range for its scope. `name` must outlive the constructor call only.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) : on_(NvtxEnabled()) {
    if (on_) NvtxPush(name);
  }
  ~NvtxRange() {
    if (on_) NvtxPop();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  const bool on_;
};

// Decodes this thread ran, and their time, since it started.
struct DecodeTally {
  int64_t ns = 0;
  int64_t count = 0;
};

inline DecodeTally& ThreadDecodeTally() {
  thread_local DecodeTally tally;
  return tally;
}

// Times one decode into the thread's tally, under an NVTX range "gpufeed.decode".
class ScopedDecode {
 public:
  ScopedDecode() : range_("gpufeed.decode"), start_(std::chrono::steady_clock::now()) {}
  ~ScopedDecode() {
    DecodeTally& t = ThreadDecodeTally();
    t.ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                 start_)
                .count();
    ++t.count;
  }
  ScopedDecode(const ScopedDecode&) = delete;
  ScopedDecode& operator=(const ScopedDecode&) = delete;

 private:
  NvtxRange range_;
  const std::chrono::steady_clock::time_point start_;
};

}  // namespace gpufeed
