// A fake NVTX library (libnvToolsExt.so.1's two entry points gpufeed uses) that records every
// range push and pop with its thread, for tests: loaded by the code under test through
// GPUFEED_NVTX_LIBRARY, read back by the test through fake_nvtx_* (dlsym on the same handle).
// Thread-safety: thread-safe (one mutex).
#include <pthread.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Event {
  uint64_t thread;
  bool push;
  std::string name;
};

std::mutex mu;
std::vector<Event>& Events() {
  static std::vector<Event> events;
  return events;
}

uint64_t ThisThread() { return static_cast<uint64_t>(pthread_self()); }

}  // namespace

extern "C" {

int nvtxRangePushA(const char* message) {
  std::lock_guard<std::mutex> lock(mu);
  Events().push_back({ThisThread(), true, message != nullptr ? message : ""});
  return 0;
}

int nvtxRangePop() {
  std::lock_guard<std::mutex> lock(mu);
  Events().push_back({ThisThread(), false, ""});
  return 0;
}

// The recorded events: their count, then each as (thread, 1 = push / 0 = pop, name).
int fake_nvtx_count() {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<int>(Events().size());
}

const char* fake_nvtx_event(int i, uint64_t* thread, int* push) {
  std::lock_guard<std::mutex> lock(mu);
  const Event& e = Events().at(static_cast<size_t>(i));
  *thread = e.thread;
  *push = e.push ? 1 : 0;
  return e.name.c_str();  // stable: events are never removed
}

}  // extern "C"
