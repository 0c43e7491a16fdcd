// The driver entry points the fake exports, under the exact names gpufeed dlsyms (the
// `_v2` ones where cuda.h maps the base name to them). Signatures follow cuda.h; handles
// are the fake's own objects, device pointers are host addresses.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "fake_cuda/fake_cuda_state.h"

using fake_cuda::Allocation;
using fake_cuda::Context;
using fake_cuda::CUresult;
using fake_cuda::Event;
using fake_cuda::GetState;
using fake_cuda::Op;
using fake_cuda::State;
using fake_cuda::Stream;
using Lock = std::unique_lock<std::mutex>;
namespace fc = fake_cuda;

namespace {

constexpr size_t kAlign = 256;  // cuMemAlloc's documented alignment

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

constexpr ErrorText kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* FindError(CUresult code) {
  for (const ErrorText& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

uint64_t NewToken() {
  static std::atomic<uint64_t> counter{0};
  std::random_device random;
  return (uint64_t{random()} << 32 | random()) ^ (counter.fetch_add(1) + 1);
}

// The fake's IPC handle: which process exported which memfd, as a real handle is opaque.
struct FakeIpcHandle {
  char magic[8];  // "FAKEIPC"
  int32_t pid;
  int32_t fd;
  uint64_t bytes;
  uint64_t token;
  char unused[32];
};
static_assert(sizeof(FakeIpcHandle) == 64);
constexpr char kIpcMagic[8] = "FAKEIPC";

struct IpcHandle {
  char reserved[64];
};

void LedgerTouch(const char* kind, uint64_t token, bool create) {
  const std::string dir = fc::IpcLedgerDir();
  if (dir.empty()) return;
  const std::string name =
      dir + "/" + kind + "-" + std::to_string(token) + "-" + std::to_string(getpid());
  if (create) {
    const int fd = open(name.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  } else {
    unlink(name.c_str());
  }
}

CUresult Allocate(void** out, size_t bytes, bool device, const char* call) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, call); r != fc::kSuccess) return r;
  if (out == nullptr || bytes == 0) return fc::kInvalidValue;
  if (device ? s.device_used + bytes > s.config.device_memory
             : s.config.pinned_limit != 0 && s.pinned_used + bytes > s.config.pinned_limit) {
    return fc::kOutOfMemory;
  }
  Allocation a{bytes, device};
  void* p = nullptr;
  if (device) {
    // In a memfd so that cuIpcOpenMemHandle in another process can map the same pages.
    a.token = NewToken();
    const std::string name = "fake_cuda_" + std::to_string(a.token);
    a.fd = memfd_create(name.c_str(), MFD_CLOEXEC);
    const long page = sysconf(_SC_PAGESIZE);
    a.mapped = (bytes + static_cast<size_t>(page) - 1) / static_cast<size_t>(page) *
               static_cast<size_t>(page);
    if (a.fd < 0 || ftruncate(a.fd, static_cast<off_t>(a.mapped)) != 0) {
      if (a.fd >= 0) close(a.fd);
      return fc::kOutOfMemory;
    }
    p = mmap(nullptr, a.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
    if (p == MAP_FAILED) {
      close(a.fd);
      return fc::kOutOfMemory;
    }
  } else {
    p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (p == nullptr) return fc::kOutOfMemory;
  }
  // Garbage, not zeros: a batch whose copy never ran must not read as valid data.
  std::memset(p, 0xA5, bytes);
  s.allocations[reinterpret_cast<uintptr_t>(p)] = a;
  (device ? s.device_used : s.pinned_used) += bytes;
  *out = p;
  return fc::kSuccess;
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (flags != 0) return fc::kInvalidValue;
  if (s.config.init_result != fc::kSuccess) return s.config.init_result;
  s.initialized = true;
  return fc::kSuccess;
}

CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return fc::kInvalidValue;
  *version = 12040;
  return fc::kSuccess;
}

CUresult cuDeviceGetCount(int* count) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return fc::kNotInitialized;
  if (count == nullptr) return fc::kInvalidValue;
  *count = s.config.device_count;
  return fc::kSuccess;
}

CUresult cuDeviceGet(int* device, int ordinal) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return fc::kNotInitialized;
  if (device == nullptr) return fc::kInvalidValue;
  if (ordinal < 0 || ordinal >= s.config.device_count || ordinal >= fc::kMaxDevices) {
    return fc::kInvalidDevice;
  }
  *device = ordinal;
  return fc::kSuccess;
}

CUresult cuDeviceGetName(char* name, int length, int device) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return fc::kNotInitialized;
  if (name == nullptr || length <= 0) return fc::kInvalidValue;
  if (device < 0 || device >= s.config.device_count) return fc::kInvalidDevice;
  std::snprintf(name, static_cast<size_t>(length), "Fake GPU %d (gpufeed test double)", device);
  return fc::kSuccess;
}

CUresult cuDevicePrimaryCtxRetain(void** context, int device) {
  State& s = GetState();
  Lock lock(s.mu);
  if (!s.initialized) return fc::kNotInitialized;
  if (context == nullptr) return fc::kInvalidValue;
  if (device < 0 || device >= s.config.device_count || device >= fc::kMaxDevices) {
    return fc::kInvalidDevice;
  }
  ++s.contexts[device].refs;
  *context = &s.contexts[device];
  return fc::kSuccess;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  State& s = GetState();
  Lock lock(s.mu);
  if (device < 0 || device >= fc::kMaxDevices) return fc::kInvalidDevice;
  if (s.contexts[device].refs == 0) {
    fc::RecordFailure(s, "cuDevicePrimaryCtxRelease_v2 of a primary context not retained");
    return fc::kInvalidContext;
  }
  --s.contexts[device].refs;
  return fc::kSuccess;
}

CUresult cuCtxSetCurrent(void* context) {
  State& s = GetState();
  Lock lock(s.mu);
  if (context != nullptr) {
    auto* c = static_cast<Context*>(context);
    if (c < s.contexts || c >= s.contexts + fc::kMaxDevices) {
      fc::RecordFailure(s, "cuCtxSetCurrent of an unknown context");
      return fc::kInvalidContext;
    }
  }
  fc::CurrentContext() = static_cast<Context*>(context);
  return fc::kSuccess;
}

CUresult cuCtxGetCurrent(void** context) {
  if (context == nullptr) return fc::kInvalidValue;
  *context = fc::CurrentContext();
  return fc::kSuccess;
}

CUresult cuMemHostAlloc(void** out, size_t bytes, unsigned int /*flags*/) {
  return Allocate(out, bytes, false, "cuMemHostAlloc");
}

CUresult cuMemFreeHost(void* ptr) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuMemFreeHost"); r != fc::kSuccess) return r;
  return fc::Free(s, lock, ptr, false, "cuMemFreeHost");
}

CUresult cuMemAlloc_v2(unsigned long long* out, size_t bytes) {
  void* p = nullptr;
  const CUresult r = Allocate(&p, bytes, true, "cuMemAlloc_v2");
  if (r == fc::kSuccess) *out = reinterpret_cast<uintptr_t>(p);
  return r;
}

CUresult cuMemFree_v2(unsigned long long ptr) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuMemFree_v2"); r != fc::kSuccess) return r;
  return fc::Free(s, lock, reinterpret_cast<void*>(ptr), true, "cuMemFree_v2");
}

CUresult cuIpcGetMemHandle(IpcHandle* handle, unsigned long long dptr) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuIpcGetMemHandle"); r != fc::kSuccess) return r;
  if (!s.config.ipc_supported) return fc::kNotSupported;
  auto it = s.allocations.find(static_cast<uintptr_t>(dptr));
  if (handle == nullptr || it == s.allocations.end() || !it->second.device || it->second.imported) {
    fc::RecordFailure(s, "cuIpcGetMemHandle: not the base of a live cuMemAlloc allocation");
    return fc::kInvalidValue;
  }
  Allocation& a = it->second;
  FakeIpcHandle h{};
  std::memcpy(h.magic, kIpcMagic, sizeof(h.magic));
  h.pid = getpid();
  h.fd = a.fd;
  h.bytes = a.bytes;
  h.token = a.token;
  std::memcpy(handle, &h, sizeof(h));
  if (!a.exported) LedgerTouch("export", a.token, true);
  a.exported = true;
  ++s.ipc_exports;
  return fc::kSuccess;
}

CUresult cuIpcOpenMemHandle_v2(unsigned long long* dptr, IpcHandle handle, unsigned int flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuIpcOpenMemHandle_v2"); r != fc::kSuccess) return r;
  // As the real driver: CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (1) must be given.
  if (dptr == nullptr || flags != 1) return fc::kInvalidValue;
  FakeIpcHandle h{};
  std::memcpy(&h, &handle, sizeof(h));
  if (std::memcmp(h.magic, kIpcMagic, sizeof(h.magic)) != 0) return fc::kInvalidValue;
  // A real driver refuses a handle this context exported itself.
  if (h.pid == getpid()) return fc::kInvalidContext;
  for (auto& [base, a] : s.allocations) {
    if (a.imported && a.token == h.token) {
      ++a.import_refs;
      *dptr = base;
      return fc::kSuccess;
    }
  }
  // The exporter's descriptor, checked to be the memfd the token names (not a reused number).
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  char target[256] = {};
  const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  const std::string expected = "/memfd:fake_cuda_" + std::to_string(h.token);
  if (n <= 0 || std::string(target, static_cast<size_t>(n)).rfind(expected, 0) != 0) {
    return fc::kInvalidHandle;  // the exporter is gone or freed the allocation
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return fc::kInvalidHandle;
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < h.bytes || h.bytes == 0) {
    close(fd);
    return fc::kInvalidHandle;
  }
  const size_t mapped = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return fc::kOutOfMemory;
  Allocation a{h.bytes, true};
  a.mapped = mapped;
  a.token = h.token;
  a.imported = true;
  a.import_refs = 1;
  s.allocations[reinterpret_cast<uintptr_t>(p)] = a;
  LedgerTouch("open", h.token, true);
  ++s.ipc_opens;
  *dptr = reinterpret_cast<uintptr_t>(p);
  return fc::kSuccess;
}

CUresult cuIpcCloseMemHandle(unsigned long long dptr) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuIpcCloseMemHandle"); r != fc::kSuccess) return r;
  auto it = s.allocations.find(static_cast<uintptr_t>(dptr));
  if (it == s.allocations.end() || !it->second.imported) {
    fc::RecordFailure(s, "cuIpcCloseMemHandle: not a pointer cuIpcOpenMemHandle returned");
    return fc::kInvalidValue;
  }
  if (--it->second.import_refs > 0) return fc::kSuccess;
  const void* p = reinterpret_cast<void*>(dptr);
  if (const int unfinished = fc::UnfinishedCopies(s, p, it->second.bytes, true); unfinished > 0) {
    fc::RecordFailure(s, "cuIpcCloseMemHandle while unfinished work reads the mapping");
    s.cv.wait(lock, [&] { return fc::UnfinishedCopies(s, p, it->second.bytes, true) == 0; });
  }
  const Allocation closed = it->second;
  s.allocations.erase(it);
  munmap(reinterpret_cast<void*>(dptr), closed.mapped);
  LedgerTouch("open", closed.token, false);
  s.cv.notify_all();
  return fc::kSuccess;
}

CUresult cuMemGetAddressRange_v2(unsigned long long* base, size_t* size, unsigned long long ptr) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuMemGetAddressRange_v2"); r != fc::kSuccess) return r;
  const fc::Allocation* a = fc::FindAllocation(s, reinterpret_cast<void*>(ptr), 1, true);
  if (a == nullptr) return fc::kNotFound;
  auto it = s.allocations.upper_bound(static_cast<uintptr_t>(ptr));
  --it;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = a->bytes;
  return fc::kSuccess;
}

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuMemGetInfo_v2"); r != fc::kSuccess) return r;
  if (free_bytes == nullptr || total_bytes == nullptr) return fc::kInvalidValue;
  *total_bytes = s.config.device_memory;
  *free_bytes = s.config.device_memory - s.device_used;
  return fc::kSuccess;
}

CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t bytes, void* stream) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuMemcpyHtoDAsync_v2"); r != fc::kSuccess) return r;
  Stream* target = fc::FindStream(s, stream, "cuMemcpyHtoDAsync_v2");
  if (target == nullptr) return fc::kInvalidHandle;
  void* dst_ptr = reinterpret_cast<void*>(dst);
  if (fc::FindAllocation(s, dst_ptr, bytes, true) == nullptr) {
    char text[160];
    std::snprintf(text, sizeof(text),
                  "cuMemcpyHtoDAsync_v2: destination [%p, +%zu) is not inside a live device "
                  "allocation",
                  dst_ptr, bytes);
    fc::RecordFailure(s, text);
    return fc::kInvalidValue;
  }
  if (fc::FindAllocation(s, src, bytes, false) == nullptr) ++s.pageable_copies;
  Op op;
  op.kind = Op::Kind::kCopy;
  op.dst = dst_ptr;
  op.src = src;
  op.bytes = bytes;
  if (s.config.fail_copy_nth > 0 && ++s.copies_started == s.config.fail_copy_nth) {
    s.config.fail_copy_nth = 0;
    if (!s.config.fail_copy_async) return s.config.fail_copy_result;
    op.fail_result = s.config.fail_copy_result;
  }
  fc::Enqueue(s, *target, std::move(op));
  return fc::kSuccess;
}

CUresult cuStreamCreate(void** stream, unsigned int /*flags*/) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuStreamCreate"); r != fc::kSuccess) return r;
  if (stream == nullptr) return fc::kInvalidValue;
  fc::ReapFinished(s, lock);
  std::shared_ptr<Stream> created = fc::StartStream(s, false);
  s.live_streams[created.get()] = created;
  *stream = created.get();
  return fc::kSuccess;
}

CUresult cuStreamDestroy_v2(void* stream) {
  State& s = GetState();
  Lock lock(s.mu);
  auto it = s.live_streams.find(static_cast<Stream*>(stream));
  if (it == s.live_streams.end()) {
    fc::RecordFailure(s, "cuStreamDestroy_v2 of an unknown or destroyed stream");
    return fc::kInvalidHandle;
  }
  // Returns at once, as the real one does: queued work still runs, then the thread exits.
  it->second->destroyed = true;
  s.live_streams.erase(it);
  s.cv.notify_all();
  return fc::kSuccess;
}

// Synchronous device-to-host copy: the product never calls it; the real-GPU test reads
// batches back with it, and runs against this fake in rehearsal. The caller synchronizes
// the batch first, so no pending stream work is waited for here.
CUresult cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t bytes) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuMemcpyDtoH_v2"); r != fc::kSuccess) return r;
  const void* src_ptr = reinterpret_cast<const void*>(src);
  if (dst == nullptr || fc::FindAllocation(s, src_ptr, bytes, true) == nullptr) {
    fc::RecordFailure(s, "cuMemcpyDtoH_v2: source is not inside a live device allocation");
    return fc::kInvalidValue;
  }
  std::memcpy(dst, src_ptr, bytes);
  return fc::kSuccess;
}

CUresult cuStreamSynchronize(void* stream) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* target = fc::FindStream(s, stream, "cuStreamSynchronize");
  if (target == nullptr) return fc::kInvalidHandle;
  const uint64_t until = target->enqueued;
  s.cv.wait(lock, [&] { return target->completed >= until; });
  if (target->error_seq != 0 && target->error_seq <= until) return target->error;
  return fc::kSuccess;
}

CUresult cuStreamQuery(void* stream) {
  State& s = GetState();
  Lock lock(s.mu);
  Stream* target = fc::FindStream(s, stream, "cuStreamQuery");
  if (target == nullptr) return fc::kInvalidHandle;
  if (target->capturing) {
    fc::RecordFailure(s, "cuStreamQuery on a capturing stream (invalidates the capture)");
    return fc::kStreamCaptureUnsupported;
  }
  if (target->completed < target->enqueued) return fc::kNotReady;
  if (target->error_seq != 0) return target->error;
  return fc::kSuccess;
}

CUresult cuStreamIsCapturing(void* stream, int* status) {
  State& s = GetState();
  Lock lock(s.mu);
  if (status == nullptr) return fc::kInvalidValue;
  Stream* target = fc::FindStream(s, stream, "cuStreamIsCapturing");
  if (target == nullptr) return fc::kInvalidHandle;
  *status = target->capturing ? 1 : 0;  // CU_STREAM_CAPTURE_STATUS_ACTIVE : _NONE
  return fc::kSuccess;
}

CUresult cuLaunchHostFunc(void* stream, void (*fn)(void*), void* data) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuLaunchHostFunc"); r != fc::kSuccess) return r;
  if (fn == nullptr) return fc::kInvalidValue;
  Stream* target = fc::FindStream(s, stream, "cuLaunchHostFunc");
  if (target == nullptr) return fc::kInvalidHandle;
  Op op;
  op.kind = Op::Kind::kHostFunc;
  op.host_fn = fn;
  op.host_data = data;
  fc::Enqueue(s, *target, std::move(op));
  return fc::kSuccess;
}

CUresult cuStreamWaitEvent(void* stream, void* event, unsigned int flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuStreamWaitEvent"); r != fc::kSuccess) return r;
  if (flags != 0) return fc::kInvalidValue;
  Stream* target = fc::FindStream(s, stream, "cuStreamWaitEvent");
  Event* e = fc::FindEvent(s, event, "cuStreamWaitEvent");
  if (target == nullptr || e == nullptr) return fc::kInvalidHandle;
  // Uses the event's state now: a later re-record does not change what this wait waits for.
  if (!e->stream) return fc::kSuccess;
  Op op;
  op.kind = Op::Kind::kWait;
  op.wait_stream = e->stream;
  op.wait_seq = e->seq;
  fc::Enqueue(s, *target, std::move(op));
  return fc::kSuccess;
}

CUresult cuEventCreate(void** event, unsigned int flags) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuEventCreate"); r != fc::kSuccess) return r;
  if (event == nullptr) return fc::kInvalidValue;
  auto created = std::make_unique<Event>();
  created->timing = (flags & 0x2) == 0;  // CU_EVENT_DISABLE_TIMING
  *event = created.get();
  s.events[created.get()] = std::move(created);
  return fc::kSuccess;
}

CUresult cuEventRecord(void* event, void* stream) {
  State& s = GetState();
  Lock lock(s.mu);
  if (CUresult r = fc::RequireContext(s, "cuEventRecord"); r != fc::kSuccess) return r;
  Event* e = fc::FindEvent(s, event, "cuEventRecord");
  Stream* target = fc::FindStream(s, stream, "cuEventRecord");
  if (e == nullptr || target == nullptr) return fc::kInvalidHandle;
  if (target->capturing && e->timing) {
    fc::RecordFailure(s,
                      "cuEventRecord of a timing event on a capturing stream (it becomes a "
                      "node of the user's graph)");
  }
  // Captures the stream's work at this moment.
  e->stream = target == s.default_stream.get() ? s.default_stream : s.live_streams.at(target);
  e->seq = target->enqueued;
  e->recorded_ns = fc::NowNs();
  return fc::kSuccess;
}

// cuda.h (12.8+) maps cuEventElapsedTime here. As the real one: INVALID_HANDLE for an event
// never recorded or made with DISABLE_TIMING, NOT_READY while either is pending.
// Built with FAKE_CUDA_NO_V2 (fake_cuda_no_v2), it exports the name drivers before 12.8 have
// instead, so the driver table's fallback is tested.
#ifdef FAKE_CUDA_NO_V2
CUresult cuEventElapsedTime(float* ms, void* start, void* end) {
#else
CUresult cuEventElapsedTime_v2(float* ms, void* start, void* end) {
#endif
  State& s = GetState();
  Lock lock(s.mu);
  if (ms == nullptr) return fc::kInvalidValue;
  Event* a = fc::FindEvent(s, start, "cuEventElapsedTime_v2");
  Event* b = fc::FindEvent(s, end, "cuEventElapsedTime_v2");
  if (a == nullptr || b == nullptr) return fc::kInvalidHandle;
  if (!a->timing || !b->timing || !a->stream || !b->stream) return fc::kInvalidHandle;
  for (const Event* e : {a, b}) {
    const CUresult status = fc::EventStatus(s, *e);
    if (status != fc::kSuccess) return status;
  }
  const int64_t t0 = fc::EventTime(s, *a);
  const int64_t t1 = fc::EventTime(s, *b);
  if (t0 < 0 || t1 < 0) return fc::kNotReady;  // events_lie: complete in name only
  *ms = static_cast<float>(static_cast<double>(t1 - t0) * 1e-6);
  return fc::kSuccess;
}

CUresult cuEventQuery(void* event) {
  State& s = GetState();
  Lock lock(s.mu);
  Event* e = fc::FindEvent(s, event, "cuEventQuery");
  if (e == nullptr) return fc::kInvalidHandle;
  return fc::EventStatus(s, *e);
}

CUresult cuEventSynchronize(void* event) {
  State& s = GetState();
  Lock lock(s.mu);
  Event* e = fc::FindEvent(s, event, "cuEventSynchronize");
  if (e == nullptr) return fc::kInvalidHandle;
  s.cv.wait(lock, [&] { return fc::EventStatus(s, *e) != fc::kNotReady; });
  return fc::EventStatus(s, *e);
}

CUresult cuEventDestroy_v2(void* event) {
  State& s = GetState();
  Lock lock(s.mu);
  auto it = s.events.find(static_cast<Event*>(event));
  if (it == s.events.end()) {
    fc::RecordFailure(s, "cuEventDestroy_v2 of an unknown or destroyed event");
    return fc::kInvalidHandle;
  }
  s.events.erase(it);  // may be pending: the real one does not wait either
  return fc::kSuccess;
}

CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return fc::kInvalidValue;
  const ErrorText* e = FindError(error);
  *name = e != nullptr ? e->name : nullptr;
  return e != nullptr ? fc::kSuccess : fc::kInvalidValue;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return fc::kInvalidValue;
  const ErrorText* e = FindError(error);
  *text = e != nullptr ? e->text : nullptr;
  return e != nullptr ? fc::kSuccess : fc::kInvalidValue;
}

}  // extern "C"
