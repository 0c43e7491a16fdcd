#include "core/io/mapped_read_guard.h"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "gpufeed/error.h"

namespace gpufeed {
namespace mapped_read_internal {
namespace {

// Guards active in any thread. The handler reads thread-local state only when this is
// non-zero: a thread that never entered a guard never touches its TLS from the handler
// (TLS in a dlopen'ed library may allocate on a thread's first access).
std::atomic<int> active_guards{0};
thread_local ThreadGuard* current = nullptr;
struct sigaction previous_action;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (active_guards.load(std::memory_order_acquire) > 0) {
    ThreadGuard* guard = current;
    if (guard != nullptr) siglongjmp(guard->env, 1);
  }
  // Not ours: hand it to whoever had it before.
  if (previous_action.sa_flags & SA_SIGINFO) {
    if (previous_action.sa_sigaction != nullptr) {
      previous_action.sa_sigaction(sig, info, context);
      return;
    }
  } else if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN &&
             previous_action.sa_handler != nullptr) {
    previous_action.sa_handler(sig);
    return;
  }
  // Default (or ignored, which for a fault would loop forever): die as the default would.
  // Returning re-runs the faulting access, which now gets the default action.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(SIGBUS);  // sent by kill: re-send it
}

void InstallOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &previous_action);
  });
}

}  // namespace

void Enter(ThreadGuard* guard) {
  InstallOnce();
  GPUFEED_ASSERT(current == nullptr, "guarded mapped reads do not nest");
  current = guard;
  active_guards.fetch_add(1, std::memory_order_acq_rel);
}

void Leave() {
  active_guards.fetch_sub(1, std::memory_order_acq_rel);
  current = nullptr;
}

void ThrowChangedSize(const std::string& path) {
  throw Error(ErrorCode::kIo,
              path +
                  ": changed size while being read (the file was truncated or rewritten in "
                  "place while gpufeed had it mapped; write a new file and rename it over the "
                  "old one instead)");
}

}  // namespace mapped_read_internal
}  // namespace gpufeed
