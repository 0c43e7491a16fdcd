#include "gpufeed/cancel.h"

#include <fmt/format.h>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// The token of the innermost CancelScope on this thread.
thread_local const CancelToken* current_token = nullptr;

}  // namespace

CancelScope::CancelScope(const CancelToken* token) noexcept : previous_(current_token) {
  current_token = token;
}

CancelScope::~CancelScope() { current_token = previous_; }

const CancelToken* CurrentCancelToken() noexcept { return current_token; }

bool CancelRequested() noexcept {
  const CancelToken* token = current_token;
  return token != nullptr && token->cancelled();
}

void ThrowIfCancelled(std::string_view what) {
  if (CancelRequested()) {
    throw Error(ErrorCode::kCancelled, fmt::format("{}: interrupted", what));
  }
}

}  // namespace gpufeed
