#include "fake_cuda/fake_cuda_control.h"

#include "fake_cuda/fake_cuda_state.h"

using fake_cuda::GetState;
using fake_cuda::State;
using Lock = std::unique_lock<std::mutex>;
namespace fc = fake_cuda;

extern "C" {

void fake_cuda_reset(void) {
  State& s = GetState();
  Lock lock(s.mu);
  // Drained, and every destroyed stream's thread gone: ReapFinished then joins them all, so
  // no thread outlives the test (ThreadSanitizer reports a leak otherwise).
  s.cv.wait(lock, [&] {
    for (const auto& stream : s.workers) {
      if (!stream->queue.empty()) return false;
      if (stream->destroyed && !stream->finished) return false;
    }
    return true;
  });
  fc::ReapFinished(s, lock);
  s.config = fc::ConfigFromEnvironment();
  s.failures.clear();
  s.copies_started = 0;
  s.copies_completed = 0;
  s.pageable_copies = 0;
  s.launches_completed = 0;
  s.ipc_exports = 0;
  s.ipc_opens = 0;
  // A sticky error belongs to the test that injected it.
  if (s.default_stream) {
    s.default_stream->error_seq = 0;
    s.default_stream->error = fc::kSuccess;
  }
}

void fake_cuda_set_device_count(int count) {
  State& s = GetState();
  Lock lock(s.mu);
  s.config.device_count = count;
}

void fake_cuda_set_init_result(int result) {
  State& s = GetState();
  Lock lock(s.mu);
  s.config.init_result = result;
}

void fake_cuda_set_device_memory(uint64_t total_bytes) {
  State& s = GetState();
  Lock lock(s.mu);
  s.config.device_memory = total_bytes;
}

void fake_cuda_set_module_load_result(int result) {
  State& s = GetState();
  Lock lock(s.mu);
  s.config.module_load_result = result;
}

void fake_cuda_set_pinned_limit(uint64_t bytes) {
  State& s = GetState();
  Lock lock(s.mu);
  s.config.pinned_limit = bytes;
}

void fake_cuda_set_copy_delay_us(int64_t microseconds) {
  State& s = GetState();
  Lock lock(s.mu);
  s.config.copy_delay_us = microseconds;
}

void fake_cuda_fail_copy(int64_t nth, int result, int asynchronous) {
  State& s = GetState();
  Lock lock(s.mu);
  s.copies_started = 0;
  s.config.fail_copy_nth = nth;
  s.config.fail_copy_result = result;
  s.config.fail_copy_async = asynchronous != 0;
}

void fake_cuda_set_events_lie(int lie) {
  State& s = GetState();
  Lock lock(s.mu);
  s.config.events_lie = lie != 0;
  s.cv.notify_all();
}

int fake_cuda_failures(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return static_cast<int>(s.failures.size());
}

const char* fake_cuda_failure(int index) {
  State& s = GetState();
  Lock lock(s.mu);
  if (index < 0 || index >= static_cast<int>(s.failures.size())) return nullptr;
  return s.failures[static_cast<size_t>(index)].c_str();
}

void fake_cuda_set_ipc_supported(int supported) {
  State& s = GetState();
  Lock lock(s.mu);
  s.config.ipc_supported = supported != 0;
}

int64_t fake_cuda_ipc_exports(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return s.ipc_exports;
}

int64_t fake_cuda_ipc_opens(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return s.ipc_opens;
}

int64_t fake_cuda_outstanding_allocations(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return static_cast<int64_t>(s.allocations.size());
}

uint64_t fake_cuda_device_bytes_in_use(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return s.device_used;
}

int fake_cuda_live_streams(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return static_cast<int>(s.live_streams.size());
}

int fake_cuda_live_events(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return static_cast<int>(s.events.size());
}

int fake_cuda_primary_ctx_refs(int ordinal) {
  State& s = GetState();
  Lock lock(s.mu);
  if (ordinal < 0 || ordinal >= fc::kMaxDevices) return -1;
  return s.contexts[ordinal].refs;
}

int64_t fake_cuda_copies_completed(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return s.copies_completed;
}

int64_t fake_cuda_launches_completed(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return s.launches_completed;
}

int fake_cuda_live_modules(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return static_cast<int>(s.modules.size());
}

int64_t fake_cuda_pageable_copies(void) {
  State& s = GetState();
  Lock lock(s.mu);
  return s.pageable_copies;
}

int fake_cuda_pending_writes(const void* ptr, size_t bytes) {
  State& s = GetState();
  Lock lock(s.mu);
  return fc::UnfinishedCopies(s, ptr, bytes, false);
}

int fake_cuda_stream_probe(void* stream, const void* ptr, size_t bytes, int* out) {
  State& s = GetState();
  Lock lock(s.mu);
  fc::Stream* target = fc::FindStream(s, stream, "fake_cuda_stream_probe");
  if (target == nullptr || out == nullptr) return fc::kInvalidValue;
  *out = -1;
  fc::Op op;
  op.kind = fc::Op::Kind::kProbe;
  op.dst = const_cast<void*>(ptr);
  op.bytes = bytes;
  op.probe_out = out;
  fc::Enqueue(s, *target, std::move(op));
  return fc::kSuccess;
}

int fake_cuda_stream_sleep(void* stream, int64_t microseconds) {
  State& s = GetState();
  Lock lock(s.mu);
  fc::Stream* target = fc::FindStream(s, stream, "fake_cuda_stream_sleep");
  if (target == nullptr || microseconds < 0) return fc::kInvalidValue;
  fc::Op op;
  op.kind = fc::Op::Kind::kSleep;
  op.sleep_us = microseconds;
  fc::Enqueue(s, *target, std::move(op));
  return fc::kSuccess;
}

int fake_cuda_set_capturing(void* stream, int capturing) {
  State& s = GetState();
  Lock lock(s.mu);
  fc::Stream* target = fc::FindStream(s, stream, "fake_cuda_set_capturing");
  if (target == nullptr) return fc::kInvalidValue;
  target->capturing = capturing != 0;
  return fc::kSuccess;
}

void fake_cuda_synchronize_all(void) {
  State& s = GetState();
  Lock lock(s.mu);
  std::vector<std::pair<std::shared_ptr<fc::Stream>, uint64_t>> targets;
  for (const auto& stream : s.workers) targets.emplace_back(stream, stream->enqueued);
  s.cv.wait(lock, [&] {
    for (const auto& [stream, until] : targets) {
      if (stream->completed < until) return false;
    }
    return true;
  });
}

}  // extern "C"
