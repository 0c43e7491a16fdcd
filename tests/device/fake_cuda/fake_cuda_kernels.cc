// Host twins of the kernels in gpufeed's PTX (src/device/kernels/gather.cu), and the module
// and launch entry points that find them by name. A twin does what its kernel does, with
// the checks a GPU makes for free: every address it reads or writes lies in a live device
// allocation (else CUDA_ERROR_ILLEGAL_ADDRESS) and is aligned to the word it moves (else
// CUDA_ERROR_MISALIGNED_ADDRESS); both are sticky errors of the stream, as on a GPU.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>

#include "fake_cuda/fake_cuda_state.h"

using fake_cuda::CUresult;
using fake_cuda::Function;
using fake_cuda::GetState;
using fake_cuda::KernelTwin;
using fake_cuda::Module;
using fake_cuda::Op;
using fake_cuda::State;
using fake_cuda::Stream;
using Lock = std::unique_lock<std::mutex>;
namespace fc = fake_cuda;

namespace {

uint64_t Param(const unsigned char* params, int index) {
  uint64_t value;
  std::memcpy(&value, params + 8 * index, sizeof(value));
  return value;
}

CUresult Illegal(State& s, const char* kernel, const char* what, uint64_t address, size_t bytes) {
  char text[200];
  std::snprintf(text, sizeof(text), "%s: %s [0x%llx, +%zu) is not inside a live device allocation",
                kernel, what, static_cast<unsigned long long>(address), bytes);
  fc::RecordFailure(s, text);
  return fc::kIllegalAddress;
}

// gather.cu: dst[i] = row rows[i] of src, row_words words of Word each.
template <size_t Word>
CUresult GatherTwin(State& s, const unsigned char* params, const char* name) {
  const uint64_t dst = Param(params, 0);
  const uint64_t src = Param(params, 1);
  const uint64_t row_words = Param(params, 2);
  const uint64_t rows = Param(params, 3);
  const uint64_t count = Param(params, 4);
  const size_t row_bytes = row_words * Word;
  if (dst % Word != 0 || src % Word != 0) {
    fc::RecordFailure(s, std::string(name) + ": dst or src not aligned to the kernel's word");
    return fc::kMisalignedAddress;
  }
  const auto* dst_ptr = reinterpret_cast<unsigned char*>(dst);
  const auto* src_ptr = reinterpret_cast<const unsigned char*>(src);
  const auto* rows_ptr = reinterpret_cast<const int64_t*>(rows);
  if (fc::FindAllocation(s, dst_ptr, count * row_bytes, true) == nullptr) {
    return Illegal(s, name, "dst", dst, count * row_bytes);
  }
  if (fc::FindAllocation(s, rows_ptr, count * sizeof(int64_t), true) == nullptr) {
    return Illegal(s, name, "rows", rows, count * sizeof(int64_t));
  }
  // Rows are read from the one allocation `src` points into: a row index past the array
  // that happens to land in another allocation (the next field's array, a batch buffer) is
  // as wrong as one in unmapped memory, though a real GPU would not fault on it.
  if (fc::FindAllocation(s, src_ptr, 1, true) == nullptr) return Illegal(s, name, "src", src, 1);
  auto base = std::prev(s.allocations.upper_bound(src));
  const uint64_t src_end = base->first + base->second.bytes;
  for (uint64_t i = 0; i < count; ++i) {
    const int64_t row = rows_ptr[i];
    if (row < 0 ||
        static_cast<uint64_t>(row) >= (src_end - src) / std::max<uint64_t>(1, row_bytes)) {
      return Illegal(s, name, "a source row (index out of the src array)",
                     row < 0 ? src : src + static_cast<uint64_t>(row) * row_bytes, row_bytes);
    }
    const unsigned char* from = src_ptr + static_cast<uint64_t>(row) * row_bytes;
    std::memcpy(const_cast<unsigned char*>(dst_ptr) + i * row_bytes, from, row_bytes);
  }
  return fc::kSuccess;
}

bool Overlaps(uint64_t a, uint64_t a_bytes, const void* b, size_t b_bytes) {
  const auto b0 = reinterpret_cast<uint64_t>(b);
  return a < b0 + b_bytes && b0 < a + a_bytes;
}

// A gather writes its batch rows and reads the indices and the source array (from its base:
// the rows it reads are only known when it runs).
template <size_t Word>
bool GatherTouches(const unsigned char* params, const void* ptr, size_t bytes, bool reads_too) {
  const uint64_t row_bytes = Param(params, 2) * Word;
  const uint64_t count = Param(params, 4);
  if (Overlaps(Param(params, 0), count * row_bytes, ptr, bytes)) return true;
  return reads_too && (Overlaps(Param(params, 3), count * sizeof(int64_t), ptr, bytes) ||
                       Overlaps(Param(params, 1), std::max<uint64_t>(1, row_bytes), ptr, bytes));
}

constexpr KernelTwin kTwins[] = {
    {"gpufeed_gather_rows_16", 40,
     [](State& s, const unsigned char* p) {
       return GatherTwin<16>(s, p, "gpufeed_gather_rows_16");
     },
     GatherTouches<16>},
    {"gpufeed_gather_rows_4", 40,
     [](State& s, const unsigned char* p) { return GatherTwin<4>(s, p, "gpufeed_gather_rows_4"); },
     GatherTouches<4>},
    {"gpufeed_gather_rows_1", 40,
     [](State& s, const unsigned char* p) { return GatherTwin<1>(s, p, "gpufeed_gather_rows_1"); },
     GatherTouches<1>},
};

// The `.entry NAME(` names of a PTX text.
std::vector<std::string> EntryNames(const char* ptx) {
  std::vector<std::string> names;
  const std::string text(ptx);
  const std::string marker = ".entry ";
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at)) {
    at += marker.size();
    const size_t end = text.find_first_of("( \n", at);
    if (end == std::string::npos) break;
    names.push_back(text.substr(at, end - at));
  }
  return names;
}

}  // namespace

namespace fake_cuda {

const KernelTwin* FindKernelTwin(const char* name) {
  for (const KernelTwin& twin : kTwins) {
    if (std::strcmp(twin.name, name) == 0) return &twin;
  }
  return nullptr;
}

}  // namespace fake_cuda

extern "C" {

CUresult cuModuleLoadData(void** module, const void* image) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuModuleLoadData"); r != fc::kSuccess) return r;
  if (module == nullptr || image == nullptr) return fc::kInvalidValue;
  if (s.config.module_load_result != fc::kSuccess) return s.config.module_load_result;
  auto loaded = std::make_unique<Module>();
  loaded->entries = EntryNames(static_cast<const char*>(image));
  // A PTX without kernels is not what gpufeed ships: a real driver would reject garbage.
  if (loaded->entries.empty()) return fc::kInvalidValue;
  *module = loaded.get();
  s.modules[loaded.get()] = std::move(loaded);
  return fc::kSuccess;
}

CUresult cuModuleUnload(void* module) {
  State& s = GetState();
  Lock lock(s.mu);
  auto it = s.modules.find(static_cast<Module*>(module));
  if (it == s.modules.end()) {
    fc::RecordFailure(s, "cuModuleUnload of an unknown or unloaded module");
    return fc::kInvalidHandle;
  }
  for (auto f = s.functions.begin(); f != s.functions.end();) {
    f = f->second->module == it->first ? s.functions.erase(f) : std::next(f);
  }
  s.modules.erase(it);
  return fc::kSuccess;
}

CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuModuleGetFunction"); r != fc::kSuccess) return r;
  if (function == nullptr || name == nullptr) return fc::kInvalidValue;
  auto it = s.modules.find(static_cast<Module*>(module));
  if (it == s.modules.end()) return fc::kInvalidHandle;
  bool in_image = false;
  for (const std::string& entry : it->second->entries) in_image |= entry == name;
  const KernelTwin* twin = fc::FindKernelTwin(name);
  if (!in_image || twin == nullptr) return fc::kNotFound;
  auto created = std::make_unique<Function>();
  created->module = it->second.get();
  created->twin = twin;
  *function = created.get();
  s.functions[created.get()] = std::move(created);
  return fc::kSuccess;
}

CUresult cuLaunchKernel(void* function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                        unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                        void* stream, void** kernel_params, void** extra) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuLaunchKernel"); r != fc::kSuccess) return r;
  auto f = s.functions.find(static_cast<Function*>(function));
  if (f == s.functions.end()) {
    fc::RecordFailure(s, "cuLaunchKernel of an unknown function (or its module was unloaded)");
    return fc::kInvalidHandle;
  }
  const KernelTwin& twin = *f->second->twin;
  Stream* target = fc::FindStream(s, stream, "cuLaunchKernel");
  if (target == nullptr) return fc::kInvalidHandle;
  const uint64_t threads = uint64_t{block_x} * block_y * block_z;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || threads == 0 || threads > 1024 ||
      grid_y > 65535 || grid_z > 65535 || shared_bytes > 48 * 1024) {
    return fc::kInvalidValue;
  }
  Op op;
  op.kind = Op::Kind::kLaunch;
  op.twin = &twin;
  op.params.resize(twin.param_bytes);
  // Exactly one way of passing parameters, as the driver requires.
  if ((kernel_params == nullptr) == (extra == nullptr)) return fc::kInvalidValue;
  if (kernel_params != nullptr) {
    // One pointer per 8-byte parameter (gpufeed's kernels take only 8-byte ones).
    for (size_t i = 0; i < twin.param_bytes / 8; ++i) {
      if (kernel_params[i] == nullptr) return fc::kInvalidValue;
      std::memcpy(op.params.data() + 8 * i, kernel_params[i], 8);
    }
  } else {
    const void* buffer = nullptr;
    const size_t* size = nullptr;
    for (size_t i = 0; extra[i] != nullptr; i += 2) {
      const auto key = reinterpret_cast<uintptr_t>(extra[i]);
      if (key == 1) {
        buffer = extra[i + 1];
      } else if (key == 2) {
        size = static_cast<const size_t*>(extra[i + 1]);
      } else {
        return fc::kInvalidValue;
      }
    }
    if (buffer == nullptr || size == nullptr || *size != twin.param_bytes) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "cuLaunchKernel(%s): a parameter buffer of %zu bytes, "
                    "the kernel takes %zu",
                    twin.name, size != nullptr ? *size : size_t{0}, twin.param_bytes);
      fc::RecordFailure(s, text);
      return fc::kInvalidValue;
    }
    std::memcpy(op.params.data(), buffer, twin.param_bytes);
  }
  fc::Enqueue(s, *target, std::move(op));
  return fc::kSuccess;
}

}  // extern "C"
