// `gpufeed cache verify --disk`: every block of a node-local disk cache (disk_cache.h) read
// whole and checked against its trailer (disk_cache_layout.h), while processes may be using
// the cache: block files are only ever replaced whole, so one can be checked without a lock;
// removing one takes its write lock, without waiting.
// Thread-safety: VerifyDiskCache may run in any thread and in any process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpufeed {

// A block file that is not whole.
struct DiskBlockProblem {
  std::string path;    // the block file
  std::string object;  // the object's URI; empty when its folder does not say
  uint64_t index = 0;  // the block's index in its object
  std::string what;    // what is wrong, in words
  bool removed = false;
  std::string kept_why;  // when asked to remove it and it was not: why
};

struct DiskCacheVerifyReport {
  std::string dir;
  int64_t objects = 0;       // object folders
  int64_t blocks = 0;        // block files checked
  uint64_t bytes = 0;        // bytes of the block files checked
  int64_t other_layout = 0;  // blocks of another layout (each fetched again when it is read)
  int64_t temporaries = 0;   // blocks being written, or left by killed writers
  std::vector<DiskBlockProblem> damaged;

  bool ok() const { return damaged.empty(); }
};

// Checks every block in the disk cache folder `dir`; with `remove_damaged`, removes the
// damaged ones no process holds (readers fetch them again). Throws Error(kNotFound) when `dir`
// does not exist and Error(kIo) when it is refused (not this user's own, mode not 0700).
DiskCacheVerifyReport VerifyDiskCache(const std::string& dir, bool remove_damaged);

}  // namespace gpufeed
