#include "gpufeed/error.h"

#include <cstdio>
#include <cstdlib>

namespace gpufeed {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kCorruptData:
      return "corrupt data";
    case ErrorCode::kIo:
      return "I/O error";
    case ErrorCode::kDevice:
      return "device error";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kPermissionDenied:
      return "permission denied";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

void AssertFailed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "gpufeed internal error at %s:%d: %s (%s)\n", file, line, msg, expr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace gpufeed
