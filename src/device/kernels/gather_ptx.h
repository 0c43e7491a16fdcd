// The PTX of gather.cu (compute_75), checked in as text by gen_gather_ptx.sh so the build
// needs no CUDA compiler. CudaContext loads it once with cuModuleLoadData.
// Thread-safety: immutable.
#pragma once

namespace gpufeed::cuda {

// NUL-terminated PTX text, as cuModuleLoadData takes it.
extern const char kGatherPtx[];

// The kernels in it, by the word they copy: 16, 4 or 1 bytes.
inline constexpr const char* kGatherKernel16 = "gpufeed_gather_rows_16";
inline constexpr const char* kGatherKernel4 = "gpufeed_gather_rows_4";
inline constexpr const char* kGatherKernel1 = "gpufeed_gather_rows_1";
// Bytes of the packed parameters: dst, src, row_words, rows, count, 8 bytes each.
inline constexpr unsigned kGatherParamBytes = 40;

}  // namespace gpufeed::cuda
