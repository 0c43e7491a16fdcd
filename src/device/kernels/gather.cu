// The device tier's gather: batch row i of one field <- row rows[i] of that field's
// device-resident array. One kernel per word size (16, 4 or 1 bytes): the host picks the
// widest word that divides the row size and both base addresses, so rows of float32
// features move as 16-byte vector loads. Every thread copies words in a grid-stride loop,
// so any grid covers any batch.
//
// Compiled to PTX for compute_75 (the lowest virtual arch CUDA 13's nvcc accepts) by
// gen_gather_ptx.sh and checked in as gather_ptx.cc: the build needs no nvcc, and the driver
// JIT-compiles the PTX for whatever GPU it finds. The fake driver runs a host twin of each
// kernel, found by name (tests/device/fake_cuda/fake_cuda_kernels.cc).
//
// Parameters (40 bytes, each 8-byte aligned; CudaStream::GatherRows packs them):
//   dst        the batch's field region, count * row_words words
//   src        the field's resident array
//   row_words  words per row
//   rows       count row indices, in device memory
//   count      rows to gather

template <typename Word>
__device__ __forceinline__ void GatherRows(Word* __restrict__ dst, const Word* __restrict__ src,
                                           unsigned long long row_words,
                                           const long long* __restrict__ rows,
                                           unsigned long long count) {
  const unsigned long long total = row_words * count;
  const unsigned long long first = static_cast<unsigned long long>(blockIdx.x) * blockDim.x +
                                   threadIdx.x;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  if (total <= 0xffffffffull) {
    // 32-bit division is a few instructions; the 64-bit one is a call.
    const unsigned int words = static_cast<unsigned int>(row_words);
    for (unsigned long long i = first; i < total; i += stride) {
      const unsigned int index = static_cast<unsigned int>(i);
      const unsigned int r = index / words;
      const unsigned int w = index - r * words;
      dst[i] = src[static_cast<unsigned long long>(rows[r]) * row_words + w];
    }
    return;
  }
  for (unsigned long long i = first; i < total; i += stride) {
    const unsigned long long r = i / row_words;
    const unsigned long long w = i - r * row_words;
    dst[i] = src[static_cast<unsigned long long>(rows[r]) * row_words + w];
  }
}

extern "C" __global__ void gpufeed_gather_rows_16(uint4* dst, const uint4* src,
                                                  unsigned long long row_words,
                                                  const long long* rows,
                                                  unsigned long long count) {
  GatherRows(dst, src, row_words, rows, count);
}

extern "C" __global__ void gpufeed_gather_rows_4(unsigned int* dst, const unsigned int* src,
                                                 unsigned long long row_words,
                                                 const long long* rows,
                                                 unsigned long long count) {
  GatherRows(dst, src, row_words, rows, count);
}

extern "C" __global__ void gpufeed_gather_rows_1(unsigned char* dst, const unsigned char* src,
                                                 unsigned long long row_words,
                                                 const long long* rows,
                                                 unsigned long long count) {
  GatherRows(dst, src, row_words, rows, count);
}
