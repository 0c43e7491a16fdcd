// FaultInjectingFileSystem: EIO after N reads, short reads and delays on top of another
// FileSystem, for tests of every retry and error path.
#include "core/io/fault_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "gpufeed/error.h"

namespace gpufeed {

namespace internal {

// Shared by the file system and every file it opened, so the rules (and the counters) apply to
// files opened before a SetRules, and outlive the file system if a file does. A namespace-level
// type (State is private to the class) so the file class below can hold it.
struct FaultState {
  std::mutex mu;
  FaultInjectingFileSystem::Rules rules;  // guarded by mu
  int64_t succeeded = 0;  // guarded by mu; ReadAt calls let through since the last SetRules
  std::atomic<int64_t> reads{0};
};

}  // namespace internal

struct FaultInjectingFileSystem::State : internal::FaultState {};

namespace {

class FaultInjectingFile final : public File {
 public:
  FaultInjectingFile(std::unique_ptr<File> base, std::shared_ptr<internal::FaultState> state)
      : base_(std::move(base)), state_(std::move(state)) {}

  const std::string& path() const override { return base_->path(); }
  uint64_t Size() const override { return base_->Size(); }
  int64_t ModificationTimeNs() const override { return base_->ModificationTimeNs(); }
  std::string VersionStamp() const override { return base_->VersionStamp(); }
  int ReadsInFlight() const override { return base_->ReadsInFlight(); }
  // Never mapped: a mapping would let reads bypass the injected faults.
  const std::byte* Map() const override { return nullptr; }

  size_t ReadAt(uint64_t offset, void* buf, size_t n) const override {
    state_->reads.fetch_add(1, std::memory_order_relaxed);
    FaultInjectingFileSystem::Rules rules;
    bool fail = false;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      rules = state_->rules;
      // Deciding and counting under one lock keeps "EIO after N reads" exact when many
      // threads read at once.
      fail = (rules.eio_after_reads >= 0 && state_->succeeded >= rules.eio_after_reads) ||
             (n > 0 && offset < rules.eio_end && offset + n > rules.eio_begin);
      if (!fail) ++state_->succeeded;
    }
    if (rules.delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(rules.delay_us));
    if (fail) {
      throw Error(ErrorCode::kIo,
                  fmt::format("{}: read of {} bytes at offset {} failed: Input/output error "
                              "(injected)",
                              path(), n, offset));
    }
    if (rules.max_bytes_per_read > 0) n = std::min(n, rules.max_bytes_per_read);
    return base_->ReadAt(offset, buf, n);
  }

 private:
  const std::unique_ptr<File> base_;
  const std::shared_ptr<internal::FaultState> state_;
};

}  // namespace

FaultInjectingFileSystem::FaultInjectingFileSystem(std::shared_ptr<const FileSystem> base,
                                                   Rules rules)
    : state_(std::make_shared<State>()), base_(std::move(base)) {
  GPUFEED_ASSERT(base_ != nullptr, "FaultInjectingFileSystem needs a base file system");
  state_->rules = rules;
}

FaultInjectingFileSystem::~FaultInjectingFileSystem() = default;

std::unique_ptr<File> FaultInjectingFileSystem::Open(const std::string& path) const {
  return std::make_unique<FaultInjectingFile>(base_->Open(path), state_);
}

void FaultInjectingFileSystem::SetRules(const Rules& rules) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->rules = rules;
  state_->succeeded = 0;
}

FaultInjectingFileSystem::Rules FaultInjectingFileSystem::rules() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->rules;
}

int64_t FaultInjectingFileSystem::reads() const {
  return state_->reads.load(std::memory_order_relaxed);
}

}  // namespace gpufeed
