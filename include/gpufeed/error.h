// gpufeed::Error: the one exception type for user-facing failures.
//
// Every failure a user can act on (bad argument, missing or corrupt file, I/O error, device
// error, cancellation) is thrown as an Error carrying a code and a message that names the
// file, field and sample involved. The Python layer maps each code to one exception class
// and the CLI to one exit code. Broken invariants are not Errors: they are GPUFEED_ASSERT.
// Thread-safety: Error is an immutable value; copy it freely across threads.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace gpufeed {

enum class ErrorCode {
  kInvalidArgument = 1,  // a bad option or argument; the caller must change it
  kNotFound = 2,         // a file, field, dataset, device or library that does not exist
  kCorruptData = 3,      // a file whose content contradicts its format
  kIo = 4,               // the OS failed a read or write (EIO, ENOSPC, ...)
  kDevice = 5,           // the GPU driver failed or is missing
  kCancelled = 6,        // the operation was stopped by its owner
  kUnsupported = 7,      // valid input that gpufeed cannot handle (a dtype, a filter)
  kPermissionDenied = 8,  // the store or the OS refused access (HTTP 403, EACCES)
};

// "invalid argument", "not found", ...
std::string_view ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);

  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Aborts with file:line and the message: for broken invariants, never for user input.
[[noreturn]] void AssertFailed(const char* expr, const char* file, int line, const char* msg);

}  // namespace gpufeed

#define GPUFEED_ASSERT(expr, msg)                                    \
  do {                                                               \
    if (!(expr)) ::gpufeed::AssertFailed(#expr, __FILE__, __LINE__, msg); \
  } while (0)
