#include "cli/sigint_cancel.h"

#include <fmt/format.h>

#include <atomic>

#include "gpufeed/error.h"

namespace gpufeed::cli {
namespace {

// The token the handler cancels: a lock-free atomic pointer, so reading it is
// async-signal-safe.
std::atomic<CancelToken*> sigint_token{nullptr};
static_assert(std::atomic<CancelToken*>::is_always_lock_free);

void CancelOnSigint(int) {
  if (CancelToken* token = sigint_token.load()) token->Cancel();
}

}  // namespace

SigintCancels::SigintCancels() : scope_(&token_) {
  struct sigaction current {};
  if (sigaction(SIGINT, nullptr, &current) != 0 || current.sa_handler == SIG_IGN) return;
  sigint_token.store(&token_);
  struct sigaction action {};
  action.sa_handler = CancelOnSigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // a second Ctrl-C: the default, which ends the process
  installed_ = sigaction(SIGINT, &action, &previous_) == 0;
  if (!installed_) sigint_token.store(nullptr);
}

SigintCancels::~SigintCancels() {
  if (!installed_) return;
  sigaction(SIGINT, &previous_, nullptr);
  sigint_token.store(nullptr);
}

void SigintCancels::ThrowIfInterrupted(std::string_view what) const {
  if (token_.cancelled()) throw Error(ErrorCode::kCancelled, fmt::format("{}: interrupted", what));
}

}  // namespace gpufeed::cli
