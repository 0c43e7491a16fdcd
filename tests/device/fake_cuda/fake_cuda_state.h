// The fake driver's state: contexts, allocations, streams (one worker thread each) and
// events, all behind one mutex. The fake is a test double, so simplicity of its locking
// beats speed: every API call takes the lock, and only the stream workers' delays and
// memcpy run outside it.
//
// Thread-safety: everything here is used with State::mu held unless a comment says so.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fake_cuda {

using CUresult = int;

// Result codes (cuda.h's values).
inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kInvalidValue = 1;
inline constexpr CUresult kOutOfMemory = 2;
inline constexpr CUresult kNotInitialized = 3;
inline constexpr CUresult kInvalidDevice = 101;
inline constexpr CUresult kInvalidContext = 201;
inline constexpr CUresult kInvalidHandle = 400;
inline constexpr CUresult kNotFound = 500;
inline constexpr CUresult kNotReady = 600;
inline constexpr CUresult kStreamCaptureUnsupported = 900;
inline constexpr CUresult kIllegalAddress = 700;
inline constexpr CUresult kMisalignedAddress = 716;
inline constexpr CUresult kNotSupported = 801;

inline constexpr int kMaxDevices = 16;

struct Context {
  int ordinal = 0;
  int refs = 0;
};

struct Stream;
struct State;

// The host twin of a kernel in gpufeed's PTX, found by the kernel's name: what a launch runs
// on the stream's thread. `run` gets the packed parameters (checked to be `param_bytes`)
// and returns kSuccess or the sticky error a real launch would leave (illegal address).
// REQUIRES for run: State::mu held.
struct KernelTwin {
  const char* name;
  size_t param_bytes;
  CUresult (*run)(State& s, const unsigned char* params);
  // Whether a launch with `params` writes (or, when `reads_too`, also reads) bytes in
  // [ptr, ptr + bytes): so a free or a probe sees unfinished launches as it sees copies.
  bool (*touches)(const unsigned char* params, const void* ptr, size_t bytes, bool reads_too);
};
// The twin called `name`, or null.
const KernelTwin* FindKernelTwin(const char* name);

struct Module {
  std::vector<std::string> entries;  // `.entry` names in the image
};

struct Function {
  Module* module = nullptr;
  const KernelTwin* twin = nullptr;
};

struct Op {
  enum class Kind { kCopy, kWait, kProbe, kSleep, kHostFunc, kLaunch };
  Kind kind = Kind::kCopy;
  uint64_t seq = 0;  // 1-based position on its stream
  // kCopy (and the probed range for kProbe)
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  CUresult fail_result = kSuccess;  // an injected asynchronous failure
  // kWait: run once `wait_stream` has completed `wait_seq` operations.
  std::shared_ptr<Stream> wait_stream;
  uint64_t wait_seq = 0;
  // kProbe
  int* probe_out = nullptr;
  // kSleep: the stream is busy this long (a consumer's kernel, for tests)
  int64_t sleep_us = 0;
  // kHostFunc (cuLaunchHostFunc)
  void (*host_fn)(void*) = nullptr;
  void* host_data = nullptr;
  // kLaunch
  const KernelTwin* twin = nullptr;
  std::vector<unsigned char> params;
};

struct Stream {
  bool is_default = false;
  bool destroyed = false;  // by cuStreamDestroy: the worker drains the queue and exits
  bool finished = false;   // the worker has exited
  bool capturing = false;  // fake_cuda_set_capturing: a CUDA graph capture is under way
  std::deque<Op> queue;    // the front is running while `running`
  bool running = false;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  uint64_t error_seq = 0;  // first failed operation (0 = none); sticky like a real error
  CUresult error = kSuccess;
  // When recent operations completed (steady clock, ns): done_ns[k] is operation
  // done_base + k. Bounded; events are timed long before their entry drops out.
  std::deque<int64_t> done_ns;
  uint64_t done_base = 1;
  std::thread worker;
};

struct Event {
  std::shared_ptr<Stream> stream;  // of the last record; null = never recorded
  uint64_t seq = 0;                // complete once stream->completed >= seq
  bool timing = true;              // false: created with CU_EVENT_DISABLE_TIMING
  int64_t recorded_ns = 0;         // when cuEventRecord ran
};

struct Allocation {
  size_t bytes = 0;
  bool device = false;  // else pinned host memory
  // Device memory lives in a memfd mapped MAP_SHARED, so another process can map it through
  // cuIpcOpenMemHandle (the handle names this process, the descriptor and the token, which
  // is also the memfd's name). `fd` is -1 for host memory and for imported mappings.
  int fd = -1;
  size_t mapped = 0;  // bytes mapped (whole pages); 0 for host memory
  uint64_t token = 0;
  bool exported = false;  // cuIpcGetMemHandle was called on it
  bool imported = false;  // a mapping of another process's allocation (cuIpcOpenMemHandle)
  int import_refs = 0;    // cuIpcOpenMemHandle calls not yet closed
};

struct Config {
  int device_count = 1;
  CUresult init_result = kSuccess;
  CUresult module_load_result = kSuccess;  // cuModuleLoadData's answer when not success
  uint64_t device_memory = uint64_t{1} << 30;
  uint64_t pinned_limit = 0;  // 0 = unlimited
  int64_t copy_delay_us = 0;
  int64_t fail_copy_nth = 0;  // 0 = none
  CUresult fail_copy_result = kSuccess;
  bool fail_copy_async = false;
  bool events_lie = false;
  bool ipc_supported = true;  // else cuIpcGetMemHandle answers CUDA_ERROR_NOT_SUPPORTED
};

struct State {
  std::mutex mu;
  std::condition_variable cv;  // any stream progress, destroy or free
  Config config;
  bool initialized = false;
  Context contexts[kMaxDevices];
  std::map<uintptr_t, Allocation> allocations;  // by base address
  uint64_t device_used = 0;
  uint64_t pinned_used = 0;
  std::map<Stream*, std::shared_ptr<Stream>> live_streams;
  std::vector<std::shared_ptr<Stream>> workers;  // streams whose thread is not joined yet
  std::shared_ptr<Stream> default_stream;
  std::map<Event*, std::unique_ptr<Event>> events;
  std::map<Module*, std::unique_ptr<Module>> modules;
  std::map<Function*, std::unique_ptr<Function>> functions;
  int64_t launches_completed = 0;
  std::deque<std::string> failures;  // deque: c_str() stays valid as it grows
  int64_t copies_started = 0;        // for fail_copy_nth
  int64_t copies_completed = 0;
  int64_t pageable_copies = 0;
  int64_t ipc_exports = 0;  // cuIpcGetMemHandle calls that succeeded
  int64_t ipc_opens = 0;    // cuIpcOpenMemHandle calls that succeeded
};

// The one state, never destroyed (stream threads may still run at exit).
State& GetState();
Config ConfigFromEnvironment();

// --- helpers; REQUIRES: State::mu held by `lock` ---------------------------------------------
void RecordFailure(State& s, std::string message);
// INVALID_CONTEXT (recorded as a failure naming `call`) unless the calling thread has a
// current, retained context; NOT_INITIALIZED before cuInit.
CUresult RequireContext(State& s, const char* call);
// The stream behind a handle (0, 1 and 2 are the default stream), or null after recording
// a failure naming `call`.
Stream* FindStream(State& s, void* handle, const char* call);
Event* FindEvent(State& s, void* handle, const char* call);
// The live allocation holding [ptr, ptr + bytes) of the given kind, or null.
const Allocation* FindAllocation(const State& s, const void* ptr, size_t bytes, bool device);
// Unfinished copies and kernel launches (on any stream) writing, or when `reads_too` also
// reading, bytes in [ptr, ptr + bytes).
int UnfinishedCopies(const State& s, const void* ptr, size_t bytes, bool reads_too);
uint64_t Enqueue(State& s, Stream& stream, Op op);
std::shared_ptr<Stream> StartStream(State& s, bool is_default);
// Joins the threads of destroyed streams that have drained.
void ReapFinished(State& s, std::unique_lock<std::mutex>& lock);
CUresult EventStatus(const State& s, const Event& event);
// When the event completed on its stream's clock (ns), or -1 when not complete or unknown.
int64_t EventTime(const State& s, const Event& event);
int64_t NowNs();
// Frees a tracked allocation at base `ptr` after the unfinished copies using it (a failure:
// a real driver need not wait for them).
CUresult Free(State& s, std::unique_lock<std::mutex>& lock, void* ptr, bool device,
              const char* call);

// Cross-process bookkeeping of IPC, when $FAKE_CUDA_IPC_DIR names a folder: an exported
// allocation is the file export-<token>-<pid> there until freed, an open mapping the file
// open-<token>-<pid> until closed, so a test sees across processes what is alive, and a
// cuMemFree of an allocation a live process still has open is recorded as a failure (the
// driver documents it as undefined behaviour). Empty when unset.
std::string IpcLedgerDir();
// Processes (other than dead ones) with `token` open, from the ledger.
std::vector<int> LiveOpeners(uint64_t token);

// The calling thread's current context (cuCtxSetCurrent).
Context*& CurrentContext();

}  // namespace fake_cuda
