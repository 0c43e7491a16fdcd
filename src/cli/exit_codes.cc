#include "cli/exit_codes.h"

#include <fmt/format.h>

#include <cstdio>
#include <exception>

namespace gpufeed::cli {

int ExitCodeFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return 2;
    case ErrorCode::kNotFound:
      return 3;
    case ErrorCode::kCorruptData:
      return 4;
    case ErrorCode::kIo:
      return 5;
    case ErrorCode::kDevice:
      return 6;
    case ErrorCode::kUnsupported:
      return 7;
    case ErrorCode::kPermissionDenied:
      return 8;
    case ErrorCode::kCancelled:
      return 130;
  }
  return 1;
}

int RunReportingErrors(const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    fmt::print(stderr, "gpufeed: {}: {}\n", ErrorCodeName(e.code()), e.what());
    return ExitCodeFor(e.code());
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpufeed: internal error: {}\n", e.what());
    return 1;
  }
}

}  // namespace gpufeed::cli
