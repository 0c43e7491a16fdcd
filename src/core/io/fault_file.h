// FaultInjectingFileSystem: the file seam's fake, for tests (EIO after N reads, short reads,
// slow disks). Not part of the public API: the tests and benchmarks include it from src/.
// Thread-safety: see the class.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gpufeed/file.h"

namespace gpufeed {

// The faults a FaultInjectingFileSystem injects. (At namespace scope because g++ rejects a
// nested struct with member initializers as a default argument of its enclosing class.)
struct FaultRules {
  // Fail every ReadAt with EIO once this many ReadAt calls have succeeded (-1: never),
  // counted from construction or the last SetRules.
  int64_t eio_after_reads = -1;
  // Fail every ReadAt whose range meets [eio_begin, eio_end) of any file with EIO, however
  // often it is read again: a bad sector (empty, the default: none).
  uint64_t eio_begin = 0;
  uint64_t eio_end = 0;
  // Return at most this many bytes per ReadAt (0: no limit), to exercise retry loops.
  size_t max_bytes_per_read = 0;
  // Sleep this long in every ReadAt, to simulate a slow disk.
  int64_t delay_us = 0;
};

// A FileSystem that wraps another and injects faults. Thread-safe; the rules may be
// changed while readers run. Its files never map (Map() is nullptr), so every read sees the
// faults.
class FaultInjectingFileSystem : public FileSystem {
 public:
  using Rules = FaultRules;

  explicit FaultInjectingFileSystem(std::shared_ptr<const FileSystem> base, Rules rules = {});
  ~FaultInjectingFileSystem() override;

  std::unique_ptr<File> Open(const std::string& path) const override;
  PathType Type(const std::string& path) const override { return base_->Type(path); }
  std::vector<DirEntry> List(const std::string& path) const override { return base_->List(path); }
  std::string WhyMissing(const std::string& path) const override { return base_->WhyMissing(path); }
  void SetRules(const Rules& rules);
  Rules rules() const;
  // ReadAt calls seen so far, over all files.
  int64_t reads() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::shared_ptr<const FileSystem> base_;
};

}  // namespace gpufeed
