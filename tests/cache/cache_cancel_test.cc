// Cancelling the long phases of a cache open (gpufeed/cancel.h): an shm build, the wait for
// another builder, a RAM preload. Each is cancelled from another thread once it has started,
// throws Error(kCancelled) and leaves nothing behind that a later open would trust.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_test_util.h"
#include "cache/ram_cache.h"
#include "cache/shm/shm_open.h"
#include "cache/shm/shm_user_dir.h"
#include "error_code_of.h"
#include "gpufeed/cache.h"
#include "gpufeed/cancel.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

namespace gpufeed {
namespace {

namespace fs = std::filesystem;
using testing::ErrorCodeOf;
using testing::Names;
using testing::ReadAll;
using testing::ScratchDir;

// 3000 samples of 4 KiB + 8 bytes: about 12 MB, three 4 MB tasks of a build or a preload.
std::shared_ptr<Source> Synthetic() {
  return OpenSynthetic(ParseSchema("mel:float32[1,32,32],label:int64[]"), 3000, 11);
}

// A source whose reads hold (while `hold`) until their thread's cancellation token is
// cancelled: a build over it can only end by being cancelled, and a read that ends proves the
// token reached the thread reading (a worker of the build's thread pool). The wait is bounded
// so that a broken cancel fails the test instead of hanging it.
class HeldUntilCancelled : public Source {
 public:
  explicit HeldUntilCancelled(std::shared_ptr<Source> base) : base_(std::move(base)) {}
  const Schema& schema() const override { return base_->schema(); }
  int64_t size() const override { return base_->size(); }
  std::string Describe() const override { return "held " + base_->Describe(); }
  std::string Identity() const override { return base_->Identity(); }
  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    reads_started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (hold.load() && !CancelRequested() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (CancelRequested()) reads_cancelled.fetch_add(1);
    base_->Read(indices, out, state);
  }

  std::atomic<bool> hold{true};
  mutable std::atomic<int> reads_started{0};
  mutable std::atomic<int> reads_cancelled{0};

 private:
  std::shared_ptr<Source> base_;
};

// Cancels `token` once `started` is non-zero; joined by its destructor.
class CancelWhenStarted {
 public:
  CancelWhenStarted(CancelToken& token, const std::atomic<int>& started)
      : thread_([&token, &started] {
          while (started.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          token.Cancel();
        }) {}
  ~CancelWhenStarted() { thread_.join(); }

 private:
  std::thread thread_;
};

// Whether nobody holds the flock on `path` (it can be taken at once).
bool Unlocked(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool free = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return free;
}

CacheOptions ShmOptions(const std::string& dir) {
  return {
      .tier = CacheTier::kShm, .shm_dir = dir, .threads = 2, .verbose = false, .background = false};
}

TEST(CacheCancelTest, ACancelledShmBuildLeavesNoFileAndTheNextOpenRebuilds) {
  ScratchDir dir;
  auto held = std::make_shared<HeldUntilCancelled>(Synthetic());
  const std::string key = CacheKey(*held);
  CancelToken token;
  std::string message;
  {
    CancelWhenStarted canceller(token, held->reads_started);
    CancelScope scope(&token);
    EXPECT_EQ(ErrorCodeOf([&] { OpenCached(held, ShmOptions(dir.path())); }, &message),
              ErrorCode::kCancelled);
  }
  EXPECT_NE(message.find("building the shared-memory cache"), std::string::npos) << message;
  EXPECT_NE(message.find("interrupted"), std::string::npos) << message;
  // Two threads, three tasks: the reads under way when the cancel came finished (and saw it);
  // the third task never started.
  EXPECT_GE(held->reads_started.load(), 1);
  EXPECT_LE(held->reads_started.load(), 2);
  EXPECT_EQ(held->reads_cancelled.load(), held->reads_started.load());
  // Neither the tmp file nor a published cache: only the lock file, and nobody holds it.
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"gpufeed-" + key + ".lock"});
  EXPECT_TRUE(Unlocked(ShmCachePath(dir.path(), key) + ".lock"));

  // The next open (no token) builds the cache from scratch and serves the right samples.
  CacheInfo info;
  auto cached = OpenCached(Synthetic(), ShmOptions(dir.path()), &info);
  EXPECT_EQ(info.tier, CacheTier::kShm);
  EXPECT_TRUE(info.built);
  EXPECT_EQ(ReadAll(*cached), ReadAll(*Synthetic()));
}

TEST(CacheCancelTest, WaitingForAnotherBuilderIsCancelled) {
  ScratchDir dir;
  auto source = Synthetic();
  const std::string key = CacheKey(*source);
  // Another builder: the key's build lock, held through a descriptor of its own.
  ShmUserDir::Open(dir.path(), /*create=*/true, std::nullopt);
  const std::string lock_path = ShmCachePath(dir.path(), key) + ".lock";
  const int lock = open(lock_path.c_str(), O_RDONLY | O_CREAT, 0600);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(flock(lock, LOCK_EX | LOCK_NB), 0);

  CancelToken token;
  std::thread canceller([&] {
    // The open polls the lock every 50 ms; give it a few polls before cancelling.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    token.Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  {
    CancelScope scope(&token);
    // Only the cancel can end the wait within the test.
    const ShmOpenOptions options{
        .dir = dir.path(), .threads = 2, .verbose = false, .lock_timeout_s = 600};
    EXPECT_EQ(ErrorCodeOf([&] { OpenShmCache(source, options); }, &message), ErrorCode::kCancelled);
  }
  canceller.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 60) << "the wait ran on after the cancel";
  EXPECT_NE(message.find("waiting for"), std::string::npos) << message;
  EXPECT_NE(message.find("interrupted"), std::string::npos) << message;
  close(lock);
}

TEST(CacheCancelTest, ACancelledPreloadThrowsAndALaterPreloadCompletes) {
  auto held = std::make_shared<HeldUntilCancelled>(Synthetic());
  RamCachedSource ram(held);
  CancelToken token;
  std::string message;
  {
    CancelWhenStarted canceller(token, held->reads_started);
    CancelScope scope(&token);
    EXPECT_EQ(ErrorCodeOf([&] { ram.Preload(2, /*verbose=*/false); }, &message),
              ErrorCode::kCancelled);
  }
  EXPECT_NE(message.find("preloading"), std::string::npos) << message;
  EXPECT_LE(held->reads_started.load(), 2);
  EXPECT_LT(ram.filled_samples(), ram.size());  // the third task never ran
  // Without a token the rest is read; every sample is right, whichever read filled it.
  held->hold = false;
  ram.Preload(2, false);
  EXPECT_EQ(ram.filled_samples(), ram.size());
  EXPECT_EQ(ReadAll(ram), ReadAll(*Synthetic()));
}

TEST(CacheCancelTest, ACancelledOpenCachedRamPreloadThrows) {
  auto held = std::make_shared<HeldUntilCancelled>(Synthetic());
  CancelToken token;
  CancelWhenStarted canceller(token, held->reads_started);
  CancelScope scope(&token);
  EXPECT_EQ(ErrorCodeOf([&] {
              OpenCached(held, {.tier = CacheTier::kRam,
                                .preload = true,
                                .threads = 2,
                                .verbose = false,
                                .background = false});
            }),
            ErrorCode::kCancelled);
}

}  // namespace
}  // namespace gpufeed
