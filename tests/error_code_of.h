// ErrorCodeOf: the code of the gpufeed::Error a callable throws (and its message), for tests
// that assert on both. Records a test failure when nothing is thrown.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "gpufeed/error.h"

namespace gpufeed::testing {

template <typename F>
ErrorCode ErrorCodeOf(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no Error thrown";
  return ErrorCode::kCancelled;
}

}  // namespace gpufeed::testing
