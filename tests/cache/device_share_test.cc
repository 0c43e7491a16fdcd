// The device tier shared across processes through CUDA IPC, on the fake driver (its device
// memory is a shared mapping another process opens; FAKE_CUDA_IPC_DIR keeps a ledger of
// exports and open mappings across processes, and a free of a copy a live process still has
// open is a recorded failure). Each holder is a separate process (device_share_holder) that
// gathers an epoch through a Loader and compares every row with the source.
//
// Shown here: two processes share one copy (one upload: the second copies nothing to the
// device) and both gather correct rows; the copy is freed when the last holder lets go,
// whichever goes first (the owner's copy lingers while an importer uses it); a holder killed
// with SIGKILL does not keep it; an owner killed with SIGKILL is replaced by a fresh upload;
// a driver without IPC gets a private copy and says why; planted files are refused, and a
// handle that maps less than the copy it claims is never used.
#include "cache/device_share.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "device/cuda_device.h"
#include "device/fake_cuda_fixture.h"
#include "gpufeed/cache.h"
#include "gpufeed/sources.h"
#include "sources/scratch_dir.h"

extern char** environ;

namespace gpufeed {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A device_share_holder process, spoken to line by line.
class Holder {
 public:
  explicit Holder(const std::string& shm_dir) {
    int in[2];
    int out[2];
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    std::string program = GPUFEED_SHARE_HOLDER;
    std::vector<char*> argv = {program.data(), const_cast<char*>(shm_dir.c_str()), nullptr};
    EXPECT_EQ(posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Holder() {
    if (to_ >= 0) close(to_);
    if (from_ >= 0) close(from_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // The next line it prints; empty after 60 s (a loaded machine, sanitizers) or at EOF.
  std::string Line() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (true) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return {};
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[512];
      const ssize_t n = read(from_, chunk, sizeof(chunk));
      if (n <= 0) return {};
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  std::string Ask(const std::string& command) {
    const std::string line = command + "\n";
    EXPECT_EQ(write(to_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    return Line();
  }
  // Its exit status (0: no failure recorded by its fake driver).
  int Quit() {
    const std::string line = "quit\n";
    EXPECT_EQ(write(to_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    return Wait();
  }
  void Kill() {
    kill(pid_, SIGKILL);
    Wait();
  }
  pid_t pid() const { return pid_; }

 private:
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int to_ = -1;
  int from_ = -1;
  std::string buffer_;
};

struct Ready {
  bool imported = false;
  long upload_copies = -1;
  bool rows_ok = false;
  std::string note;
};

Ready ParseReady(const std::string& line) {
  Ready r;
  char note[512] = {};
  int imported = 0;
  int ok = 0;
  if (std::sscanf(line.c_str(), "READY %d %ld %d %511[^\n]", &imported, &r.upload_copies, &ok,
                  note) >= 3) {
    r.imported = imported != 0;
    r.rows_ok = ok != 0;
    r.note = note;
  }
  return r;
}

class DeviceShareTest : public testing::FakeCudaTest {
 protected:
  void SetUp() override {
    FakeCudaTest::SetUp();
    setenv("FAKE_CUDA_IPC_DIR", ledger_.path().c_str(), 1);
  }
  void TearDown() override {
    unsetenv("FAKE_CUDA_IPC_DIR");
    FakeCudaTest::TearDown();
  }

  // Live exported copies in the ledger (their exporter still alive).
  int LiveExports() const {
    int count = 0;
    DIR* d = opendir(ledger_.path().c_str());
    if (d == nullptr) return -1;
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("export-", 0) != 0) continue;
      const pid_t pid = std::atoi(name.substr(name.rfind('-') + 1).c_str());
      if (pid > 0 && kill(pid, 0) == 0) ++count;
    }
    closedir(d);
    return count;
  }
  // Waits (up to 30 s: the owner's reaper polls every 0.2 s) for no live export.
  bool NoLiveExportWithin30s() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (LiveExports() != 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  testing::ScratchDir shm_;
  testing::ScratchDir ledger_;
};

TEST_F(DeviceShareTest, TwoProcessesShareOneUploadAndTheLastToLeaveFreesIt) {
  Holder a(shm_.path());
  const Ready ra = ParseReady(a.Line());
  EXPECT_FALSE(ra.imported);
  EXPECT_GT(ra.upload_copies, 0);  // a uploaded
  EXPECT_TRUE(ra.rows_ok);
  EXPECT_THAT(ra.note, StartsWith("uploaded here and shared"));
  Holder b(shm_.path());
  const Ready rb = ParseReady(b.Line());
  EXPECT_TRUE(rb.imported);
  EXPECT_EQ(rb.upload_copies, 0);  // b copied nothing to the device: one upload in all
  EXPECT_TRUE(rb.rows_ok);         // and gathers the right rows from a's copy
  EXPECT_THAT(rb.note, HasSubstr(fmt::format("process {} uploaded", a.pid())));
  EXPECT_EQ(LiveExports(), 1);

  // The importer leaves first: the owner's copy stays, then goes with the owner's release.
  EXPECT_EQ(b.Ask("release"), "RELEASED 0");
  EXPECT_EQ(LiveExports(), 1);
  EXPECT_EQ(a.Ask("check"), "CHECK 1");
  EXPECT_EQ(a.Ask("release"), "RELEASED 0");
  EXPECT_EQ(LiveExports(), 0);
  EXPECT_EQ(b.Quit(), 0);
  EXPECT_EQ(a.Quit(), 0);
}

TEST_F(DeviceShareTest, AnOwnerThatLeavesFirstKeepsTheCopyForTheImporterThenFreesIt) {
  Holder a(shm_.path());
  ASSERT_FALSE(ParseReady(a.Line()).imported);
  Holder b(shm_.path());
  ASSERT_TRUE(ParseReady(b.Line()).imported);
  EXPECT_EQ(a.Ask("release"), "RELEASED 0");
  // b still gathers correct rows from the lingering copy (a free under it would be a
  // recorded failure in a, and garbage rows here).
  EXPECT_EQ(b.Ask("check"), "CHECK 1");
  EXPECT_EQ(LiveExports(), 1);
  // A third process still imports it.
  Holder c(shm_.path());
  const Ready rc = ParseReady(c.Line());
  EXPECT_TRUE(rc.imported);
  EXPECT_TRUE(rc.rows_ok);
  EXPECT_EQ(c.Quit(), 0);
  EXPECT_EQ(b.Ask("release"), "RELEASED 0");
  EXPECT_TRUE(NoLiveExportWithin30s());  // a's reaper freed it once nobody held it
  EXPECT_EQ(b.Quit(), 0);
  EXPECT_EQ(a.Quit(), 0);  // no free while b had it open
}

TEST_F(DeviceShareTest, AHolderKilledWithSigkillDoesNotKeepTheCopy) {
  Holder a(shm_.path());
  ASSERT_FALSE(ParseReady(a.Line()).imported);
  Holder b(shm_.path());
  ASSERT_TRUE(ParseReady(b.Line()).imported);
  b.Kill();  // no release: its flock on .holders goes with it
  EXPECT_EQ(a.Ask("release"), "RELEASED 0");
  EXPECT_EQ(LiveExports(), 0);  // freed at once, not left to linger
  EXPECT_EQ(a.Quit(), 0);
}

TEST_F(DeviceShareTest, AnOwnerKilledWithSigkillIsReplacedByAFreshUpload) {
  Holder a(shm_.path());
  ASSERT_FALSE(ParseReady(a.Line()).imported);
  a.Kill();  // its .ipc stays behind, naming a dead owner
  Holder c(shm_.path());
  const Ready rc = ParseReady(c.Line());
  EXPECT_FALSE(rc.imported);  // never imports a dead owner's handle
  EXPECT_GT(rc.upload_copies, 0);
  EXPECT_TRUE(rc.rows_ok);
  Holder d(shm_.path());
  EXPECT_TRUE(ParseReady(d.Line()).imported);  // the new copy is shared again
  EXPECT_EQ(d.Quit(), 0);
  EXPECT_EQ(c.Ask("release"), "RELEASED 0");
  EXPECT_EQ(LiveExports(), 0);
  EXPECT_EQ(c.Quit(), 0);
}

TEST_F(DeviceShareTest, AHandleMappingLessThanTheCopyItClaimsIsNeverUsed) {
  Holder a(shm_.path());
  ASSERT_FALSE(ParseReady(a.Line()).imported);
  // The published handle, rewritten (by its own user, as a bug or a hostile process of the
  // same user could) to name only 1000 bytes of a's block: the fake maps what the handle says.
  const std::string folder = shm_.path() + "/gpufeed-user-" + std::to_string(getuid());
  std::string ipc;
  DIR* d = opendir(folder.c_str());
  ASSERT_NE(d, nullptr);
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 4 && name.substr(name.size() - 4) == ".ipc") ipc = folder + "/" + name;
  }
  closedir(d);
  ASSERT_FALSE(ipc.empty());
  const int fd = open(ipc.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const uint64_t small = 1000;
  // The header's handle starts at byte 56; the fake's handle keeps the size at its byte 16.
  ASSERT_EQ(pwrite(fd, &small, sizeof(small), 56 + 16), static_cast<ssize_t>(sizeof(small)));
  close(fd);
  Holder b(shm_.path());
  const Ready rb = ParseReady(b.Line());
  EXPECT_FALSE(rb.imported);
  EXPECT_GT(rb.upload_copies, 0);  // its own private copy instead
  EXPECT_TRUE(rb.rows_ok);
  EXPECT_THAT(rb.note, HasSubstr("the handle maps 1000 bytes, the copy needs 67328"));
  EXPECT_EQ(b.Quit(), 0);
  EXPECT_EQ(a.Ask("release"), "RELEASED 0");
  EXPECT_EQ(LiveExports(), 0);
  EXPECT_EQ(a.Quit(), 0);
}

Schema TestSchema() { return ParseSchema("y:float32[8],x:float32[6],b:uint8[3],label:int64"); }

CacheOptions Options(const std::string& tier, std::shared_ptr<Device> device,
                     const std::string& shm) {
  CacheOptions o;
  o.tier = ParseCacheTier(tier);
  o.device = std::move(device);
  o.shm_dir = shm;
  o.verbose = false;
  o.threads = 1;
  return o;
}

TEST_F(DeviceShareTest, WithoutIpcDeviceAndAutoKeepAPrivateCopyAndSayWhy) {
  fake_cuda_set_ipc_supported(0);
  auto device = cuda::OpenCudaDevice();
  auto base = OpenSynthetic(TestSchema(), 1000, 11);
  for (const char* tier : {"device", "auto"}) {
    SCOPED_TRACE(tier);
    CacheInfo info;
    auto cached = OpenCached(base, Options(tier, device, shm_.path()), &info);
    EXPECT_EQ(info.tier, CacheTier::kDevice);
    EXPECT_THAT(info.device_share, StartsWith("a private copy: the copy cannot be shared"));
    EXPECT_THAT(info.device_share, HasSubstr("CUDA_ERROR_NOT_SUPPORTED"));
    EXPECT_THAT(info.reason, HasSubstr(info.device_share));
    EXPECT_NE(cached->device_rows(), nullptr);
  }
  EXPECT_EQ(fake_cuda_ipc_exports(), 0);
}

TEST_F(DeviceShareTest, PlantedOrDamagedHandleFilesAreNeverImported) {
  auto device = cuda::OpenCudaDevice();
  auto base = OpenSynthetic(TestSchema(), 1000, 11);
  CacheInfo info;
  // A first open leaves the share's files; find their names.
  OpenCached(base, Options("device", device, shm_.path()), &info).reset();
  ASSERT_THAT(info.device_share, StartsWith("uploaded here"));
  const std::string folder = shm_.path() + "/gpufeed-user-" + std::to_string(getuid());
  std::string ipc;
  DIR* d = opendir(folder.c_str());
  ASSERT_NE(d, nullptr);
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 8 && name.substr(name.size() - 8) == ".holders") {
      ipc = folder + "/" + name.substr(0, name.size() - 8) + ".ipc";
    }
  }
  closedir(d);
  ASSERT_FALSE(ipc.empty());
  struct stat st {};
  EXPECT_NE(stat(ipc.c_str(), &st), 0) << "the last holder removes the published handle";

  const auto plant = [&](const std::string& bytes, mode_t mode) {
    unlink(ipc.c_str());
    const int fd = open(ipc.c_str(), O_CREAT | O_WRONLY | O_TRUNC, mode);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    fchmod(fd, mode);
    close(fd);
  };
  // The magic and a claimed owner (this test process, which holds no lock), padded to the
  // size of a real file: refused as a dead owner's; truncated, garbage, open to others, or a
  // symlink: refused before anything is read.
  std::string fake_header(120 + 4 * 16, '\0');
  std::memcpy(fake_header.data(), "GFDVIPC1", 8);
  const int32_t me = getpid();
  std::memcpy(fake_header.data() + 16, &me, sizeof(me));
  for (const auto& [bytes, mode] :
       std::vector<std::pair<std::string, mode_t>>{{fake_header, 0600},
                                                   {fake_header.substr(0, 50), 0600},
                                                   {std::string(400, 'x'), 0600},
                                                   {fake_header, 0666}}) {
    plant(bytes, mode);
    auto cached = OpenCached(base, Options("device", device, shm_.path()), &info);
    EXPECT_THAT(info.device_share, StartsWith("uploaded here"));
    EXPECT_EQ(fake_cuda_ipc_opens(), 0);
  }
  unlink(ipc.c_str());
  ASSERT_EQ(symlink("/etc/passwd", ipc.c_str()), 0);
  auto cached = OpenCached(base, Options("device", device, shm_.path()), &info);
  EXPECT_THAT(info.device_share, StartsWith("uploaded here"));
  EXPECT_EQ(fake_cuda_ipc_opens(), 0);
}

}  // namespace
}  // namespace gpufeed
