#include "fake_cuda/fake_cuda_state.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fake_cuda {
namespace {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoll(value, nullptr, 10) : fallback;
}

bool Overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a);
  const auto b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

// Runs one operation with the lock held on entry and exit; delays and data movement run
// without it so streams overlap each other and the host, as a real GPU's do.
void Run(State& s, Stream& stream, std::unique_lock<std::mutex>& lock) {
  const Op op = stream.queue.front();  // stays queued (counted as unfinished) until done
  switch (op.kind) {
    case Op::Kind::kCopy: {
      const int64_t delay = s.config.copy_delay_us;
      if (delay > 0) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(delay));
        lock.lock();
      }
      if (op.fail_result != kSuccess) {
        if (stream.error_seq == 0) {
          stream.error_seq = op.seq;
          stream.error = op.fail_result;
        }
      } else if (stream.error_seq == 0) {
        // Free() waits for unfinished copies, so both ranges stay allocated meanwhile.
        lock.unlock();
        std::memcpy(op.dst, op.src, op.bytes);
        lock.lock();
      }
      ++s.copies_completed;
      break;
    }
    case Op::Kind::kWait:
      s.cv.wait(lock, [&] { return op.wait_stream->completed >= op.wait_seq; });
      break;
    case Op::Kind::kSleep:
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(op.sleep_us));
      lock.lock();
      break;
    case Op::Kind::kHostFunc:
      lock.unlock();  // the function may take its time; it must not call the driver
      op.host_fn(op.host_data);
      lock.lock();
      break;
    case Op::Kind::kLaunch: {
      const int64_t delay = s.config.copy_delay_us;
      if (delay > 0) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(delay));
        lock.lock();
      }
      // Runs with the lock held: no free can pull memory from under the twin.
      if (stream.error_seq == 0) {
        const CUresult result = op.twin->run(s, op.params.data());
        if (result != kSuccess) {
          stream.error_seq = op.seq;
          stream.error = result;
        }
      }
      ++s.launches_completed;
      break;
    }
    case Op::Kind::kProbe:
      // This probe is the front of its own stream: only other streams' copies can count.
      *op.probe_out = UnfinishedCopies(s, op.dst, op.bytes, false);
      break;
  }
}

void WorkerLoop(State& s, Stream& stream) {
  std::unique_lock lock(s.mu);
  for (;;) {
    s.cv.wait(lock, [&] { return !stream.queue.empty() || stream.destroyed; });
    if (stream.queue.empty()) break;  // destroyed and drained
    stream.running = true;
    Run(s, stream, lock);
    stream.queue.pop_front();
    stream.running = false;
    ++stream.completed;
    constexpr size_t kDoneKept = size_t{1} << 16;
    stream.done_ns.push_back(NowNs());
    if (stream.done_ns.size() > kDoneKept) {
      stream.done_ns.pop_front();
      ++stream.done_base;
    }
    s.cv.notify_all();
  }
  stream.finished = true;
  s.cv.notify_all();
}

}  // namespace

State& GetState() {
  static State* state = [] {
    auto* s = new State();
    s->config = ConfigFromEnvironment();
    for (int i = 0; i < kMaxDevices; ++i) s->contexts[i].ordinal = i;
    return s;
  }();
  return *state;
}

Config ConfigFromEnvironment() {
  Config c;
  c.copy_delay_us = EnvInt("FAKE_CUDA_COPY_DELAY_US", 0);
  c.device_count = static_cast<int>(EnvInt("FAKE_CUDA_DEVICE_COUNT", 1));
  return c;
}

Context*& CurrentContext() {
  thread_local Context* current = nullptr;
  return current;
}

void RecordFailure(State& s, std::string message) {
  std::fprintf(stderr, "fake libcuda: %s\n", message.c_str());
  s.failures.push_back(std::move(message));
}

CUresult RequireContext(State& s, const char* call) {
  if (!s.initialized) return kNotInitialized;
  Context* current = CurrentContext();
  if (current == nullptr) {
    RecordFailure(s, std::string(call) + " called on a thread with no current context");
    return kInvalidContext;
  }
  if (current->refs == 0) {
    RecordFailure(s, std::string(call) + " called in a released primary context");
    return kInvalidContext;
  }
  return kSuccess;
}

Stream* FindStream(State& s, void* handle, const char* call) {
  const auto value = reinterpret_cast<uintptr_t>(handle);
  if (value <= 2) {  // NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
    if (!s.default_stream) s.default_stream = StartStream(s, true);
    return s.default_stream.get();
  }
  auto it = s.live_streams.find(static_cast<Stream*>(handle));
  if (it == s.live_streams.end()) {
    RecordFailure(s, std::string(call) + " on an unknown or destroyed stream");
    return nullptr;
  }
  return it->second.get();
}

Event* FindEvent(State& s, void* handle, const char* call) {
  auto it = s.events.find(static_cast<Event*>(handle));
  if (it == s.events.end()) {
    RecordFailure(s, std::string(call) + " on an unknown or destroyed event");
    return nullptr;
  }
  return it->second.get();
}

const Allocation* FindAllocation(const State& s, const void* ptr, size_t bytes, bool device) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = s.allocations.upper_bound(p);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  if (a.device != device || p + bytes > it->first + a.bytes) return nullptr;
  return &a;
}

int UnfinishedCopies(const State& s, const void* ptr, size_t bytes, bool reads_too) {
  int count = 0;
  for (const auto& stream : s.workers) {
    for (const Op& op : stream->queue) {
      if (op.kind == Op::Kind::kLaunch) {
        if (op.twin->touches(op.params.data(), ptr, bytes, reads_too)) ++count;
        continue;
      }
      if (op.kind != Op::Kind::kCopy) continue;
      if (Overlaps(op.dst, op.bytes, ptr, bytes) ||
          (reads_too && Overlaps(op.src, op.bytes, ptr, bytes))) {
        ++count;
      }
    }
  }
  return count;
}

uint64_t Enqueue(State& s, Stream& stream, Op op) {
  op.seq = ++stream.enqueued;
  stream.queue.push_back(std::move(op));
  s.cv.notify_all();
  return stream.enqueued;
}

std::shared_ptr<Stream> StartStream(State& s, bool is_default) {
  auto stream = std::make_shared<Stream>();
  stream->is_default = is_default;
  Stream* raw = stream.get();
  stream->worker = std::thread([&s, raw] { WorkerLoop(s, *raw); });
  s.workers.push_back(stream);
  return stream;
}

void ReapFinished(State& s, std::unique_lock<std::mutex>& lock) {
  std::vector<std::shared_ptr<Stream>> done;
  for (auto it = s.workers.begin(); it != s.workers.end();) {
    if ((*it)->finished) {
      done.push_back(*it);
      it = s.workers.erase(it);
    } else {
      ++it;
    }
  }
  if (done.empty()) return;
  lock.unlock();
  for (auto& stream : done) stream->worker.join();
  lock.lock();
}

CUresult EventStatus(const State& s, const Event& event) {
  if (s.config.events_lie || !event.stream) return kSuccess;
  const Stream& stream = *event.stream;
  if (stream.completed < event.seq) return kNotReady;
  if (stream.error_seq != 0 && stream.error_seq <= event.seq) return stream.error;
  return kSuccess;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t EventTime(const State& s, const Event& event) {
  (void)s;
  if (!event.stream) return -1;
  const Stream& stream = *event.stream;
  if (stream.completed < event.seq) return -1;
  // Recorded on a stream with nothing pending: complete when recorded. A real GPU takes a
  // few microseconds to get there; nothing here depends on that.
  if (event.seq < stream.done_base) return event.recorded_ns;
  const int64_t done = stream.done_ns[static_cast<size_t>(event.seq - stream.done_base)];
  return std::max(done, event.recorded_ns);
}

CUresult Free(State& s, std::unique_lock<std::mutex>& lock, void* ptr, bool device,
              const char* call) {
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end() || it->second.device != device) {
    char text[160];
    std::snprintf(text, sizeof(text),
                  "%s(%p): not a live %s allocation (freed twice, or never "
                  "allocated)",
                  call, ptr, device ? "device" : "pinned host");
    RecordFailure(s, text);
    return kInvalidValue;
  }
  const size_t bytes = it->second.bytes;
  if (const int unfinished = UnfinishedCopies(s, ptr, bytes, true); unfinished > 0) {
    char text[160];
    std::snprintf(text, sizeof(text), "%s(%p) while %d unfinished copies use it", call, ptr,
                  unfinished);
    RecordFailure(s, text);
    s.cv.wait(lock, [&] { return UnfinishedCopies(s, ptr, bytes, true) == 0; });
    it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  }
  if (it->second.imported) {
    RecordFailure(
        s, std::string(call) + ": an imported IPC mapping (release it with cuIpcCloseMemHandle)");
    return kInvalidValue;
  }
  if (it->second.exported) {
    for (const int pid : LiveOpeners(it->second.token)) {
      char text[200];
      std::snprintf(text, sizeof(text),
                    "%s(%p): an exported allocation that process %d still has open "
                    "(undefined behaviour on a real driver)",
                    call, ptr, pid);
      RecordFailure(s, text);
    }
    if (const std::string dir = IpcLedgerDir(); !dir.empty()) {
      const std::string name =
          dir + "/export-" + std::to_string(it->second.token) + "-" + std::to_string(getpid());
      unlink(name.c_str());
    }
  }
  (device ? s.device_used : s.pinned_used) -= bytes;
  const Allocation freed = it->second;
  s.allocations.erase(it);
  if (freed.fd >= 0) {
    munmap(ptr, freed.mapped);
    close(freed.fd);
  } else {
    std::free(ptr);
  }
  s.cv.notify_all();
  return kSuccess;
}

std::string IpcLedgerDir() {
  const char* dir = std::getenv("FAKE_CUDA_IPC_DIR");
  return dir != nullptr ? dir : "";
}

std::vector<int> LiveOpeners(uint64_t token) {
  std::vector<int> pids;
  const std::string dir = IpcLedgerDir();
  if (dir.empty()) return pids;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return pids;
  const std::string prefix = "open-" + std::to_string(token) + "-";
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const int pid = std::atoi(name.c_str() + prefix.size());
    if (pid > 0 && (kill(pid, 0) == 0 || errno == EPERM)) pids.push_back(pid);
  }
  closedir(d);
  return pids;
}

}  // namespace fake_cuda
