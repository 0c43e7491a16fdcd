// Control and inspection functions of the fake libcuda.so.1 (fake_cuda_*.cc): the test
// double of the CUDA driver that proves gpufeed's CUDA backend without a GPU.
//
// Host memory stands in for device memory; every allocation is tracked and a free, copy or
// call that a real driver would reject (unknown or freed pointer, no current context,
// released context) is recorded as a failure the test reads back. Each stream is one thread
// that runs its operations in order, every copy after a configurable delay, so a buffer
// reused before its copy ran shows up as wrong data. Events and stream waits behave as the
// driver documents them; an event is stamped with the steady clock when its stream gets
// there, which cuEventElapsedTime_v2 reports, and fake_cuda_stream_sleep stands in for a
// consumer's kernels.
//
// Thread-safety: every function is thread-safe. fake_cuda_reset() requires no streams or
// events alive.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Restores the defaults below and forgets failures and counters. Environment variables
// read at load time: FAKE_CUDA_COPY_DELAY_US, FAKE_CUDA_DEVICE_COUNT.
void fake_cuda_reset(void);

// --- configuration -------------------------------------------------------------------------
void fake_cuda_set_device_count(int count);              // default 1
void fake_cuda_set_init_result(int result);              // cuInit's answer; default 0
// cuModuleLoadData's answer (222: a driver older than the PTX); default 0: it loads.
void fake_cuda_set_module_load_result(int result);
void fake_cuda_set_device_memory(uint64_t total_bytes);  // per device; default 1 GiB
void fake_cuda_set_pinned_limit(uint64_t bytes);         // default: unlimited (0)
void fake_cuda_set_copy_delay_us(int64_t microseconds);  // before each copy runs; default 0
// The `nth` host-to-device copy from now (1 = the next) fails with `result`: at the call
// when `asynchronous` is 0, else when its stream runs it (then every later event and
// synchronize on that stream reports it, as a real sticky error does).
void fake_cuda_fail_copy(int64_t nth, int result, int asynchronous);
// Deliberately broken ordering: events report complete at once (cuEventQuery succeeds,
// cuEventSynchronize returns) whatever their stream has done. For tests that prove a
// premature reuse is caught; cuStreamSynchronize stays truthful.
void fake_cuda_set_events_lie(int lie);

// cuIpcGetMemHandle answers CUDA_ERROR_NOT_SUPPORTED when 0 (a driver or setup without
// IPC); default 1. Device memory is always a shared mapping another process can open (see
// fake_cuda_state.h for the ledger $FAKE_CUDA_IPC_DIR keeps across processes).
void fake_cuda_set_ipc_supported(int supported);

// --- inspection ------------------------------------------------------------------------------
// Calls a real driver would reject; each one is described by fake_cuda_failure(i).
int fake_cuda_failures(void);
const char* fake_cuda_failure(int index);         // valid until the next reset
int64_t fake_cuda_outstanding_allocations(void);  // device + pinned
uint64_t fake_cuda_device_bytes_in_use(void);
int fake_cuda_live_streams(void);  // created and not destroyed
int fake_cuda_live_events(void);
int fake_cuda_primary_ctx_refs(int ordinal);
int64_t fake_cuda_copies_completed(void);
int64_t fake_cuda_pageable_copies(void);  // copies whose source was not pinned memory
int64_t fake_cuda_launches_completed(void);  // kernels (host twins) run by streams
int fake_cuda_live_modules(void);           // loaded and not unloaded
int64_t fake_cuda_ipc_exports(void);        // cuIpcGetMemHandle calls that succeeded
int64_t fake_cuda_ipc_opens(void);          // cuIpcOpenMemHandle calls that succeeded
// Copies and kernel launches enqueued (on any stream) but not finished that write
// [ptr, ptr + bytes).
int fake_cuda_pending_writes(const void* ptr, size_t bytes);
// Enqueues on `stream` an operation that, when the stream reaches it, stores into *out the
// number of unfinished copies writing [ptr, ptr + bytes): 0 proves the stream was ordered
// after them. *out is -1 until then.
int fake_cuda_stream_probe(void* stream, const void* ptr, size_t bytes, int* out);
// Enqueues on `stream` an operation that keeps it busy for `microseconds` (a consumer's
// kernel): work enqueued after it starts that much later. 0 on success.
int fake_cuda_stream_sleep(void* stream, int64_t microseconds);
// Puts `stream` in (1) or out of (0) a CUDA graph capture, as cuStreamBeginCapture and
// cuStreamEndCapture would: cuStreamIsCapturing reports it, and, as on a real driver,
// cuStreamQuery on it fails (and would invalidate the capture); recording a timing event on
// it, which would put gpufeed's event into the user's graph, counts as a failure too.
int fake_cuda_set_capturing(void* stream, int capturing);
// Blocks until every stream has run everything enqueued so far.
void fake_cuda_synchronize_all(void);

#ifdef __cplusplus
}
#endif
