// ReadAll and WriteAll: a whole buffer through read(2) or write(2) at a descriptor's position
// (PreadAll and PwriteAll: at an offset),
// for the small files gpufeed writes and reads back itself (cache secrets and handles, NumPy
// files). Large reads of data files go through the file seam (gpufeed/file.h) instead.
// Thread-safety: as safe as the descriptor; one thread per descriptor.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufeed {

// Reads or writes all `n` bytes at the descriptor's position, retrying after EINTR and short
// transfers; false on an error or an early end of file (errno says which error).
bool ReadAll(int fd, void* buf, size_t n);
bool WriteAll(int fd, const void* buf, size_t n);

// The same at `offset` through pread(2) / pwrite(2), leaving the descriptor's position alone.
// On false errno says why: 0 when the file ended first (PreadAll), ENOSPC when a write wrote
// nothing (PwriteAll).
bool PreadAll(int fd, void* buf, size_t n, uint64_t offset);
bool PwriteAll(int fd, const void* buf, size_t n, uint64_t offset);

}  // namespace gpufeed
