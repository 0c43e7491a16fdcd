#include "cache/device_share.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "cache/device_share_ipc.h"
#include "cache/shm/flock_holders.h"
#include "cache/shm/shm_user_dir.h"
#include "core/checked_math.h"
#include "device/device_features.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// The IPC feature of a device whose IpcUnavailable() was empty: only such a share exports or
// imports a block.
DeviceIpc& IpcOfShared(Device& device) {
  DeviceIpc* ipc = IpcOf(device);
  GPUFEED_ASSERT(ipc != nullptr, "a shared device block on a device without IPC");
  return *ipc;
}

constexpr uint32_t kMaxFields = 4096;
constexpr uint64_t kAlign = 256;  // every array starts where cuMemAlloc would align it

// The processes holding a flock on the file behind `fd`, or nullopt when /proc/locks cannot
// be read.
std::optional<std::vector<pid_t>> Holders(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return std::nullopt;
  const auto holders = FlockHolders(st.st_dev, st.st_ino);
  if (!holders) return std::nullopt;
  std::vector<pid_t> pids;
  for (const FlockHolder& h : *holders) pids.push_back(h.pid);
  return pids;
}

// Holders other than this process; nullopt when unknown.
std::optional<size_t> OtherHolders(int fd) {
  const auto pids = Holders(fd);
  if (!pids) return std::nullopt;
  const pid_t self = getpid();
  return static_cast<size_t>(
      std::count_if(pids->begin(), pids->end(), [&](pid_t p) { return p != self; }));
}

std::recursive_mutex& RegistryMutex() {
  static std::recursive_mutex mu;
  return mu;
}

}  // namespace

// The share's files and this process's hold on .holders (LOCK_SH while open).
struct DeviceShare::Files {
  std::shared_ptr<const ShmUserDir> dir;
  std::string base;  // "gpufeed-dev-<key>-cuda<ordinal>"
  int holders_fd = -1;
  uint64_t generation = 0;  // of the .ipc this process published; 0 = none

  ~Files() { CloseHolders(); }
  void CloseHolders() {
    if (holders_fd >= 0) close(holders_fd);
    holders_fd = -1;
  }
  // Removes .ipc when it is still the one this process published.
  void Unpublish() const {
    if (generation == 0) return;
    if (IsOwnIpc(*dir, base, generation)) unlinkat(dir->fd(), (base + ".ipc").c_str(), 0);
  }
};

namespace {

// flock(LOCK_EX) on .lock for one decision; released on destruction.
class DecisionLock {
 public:
  // Blocks until held, unless `try_only`; then held() says.
  DecisionLock(const ShmUserDir& dir, const std::string& base, bool try_only) {
    std::string why;
    fd_ = dir.OpenFile(base + ".lock", O_RDONLY | O_CREAT, &why);  // flock needs no write
    if (fd_ < 0) {
      throw Error(ErrorCode::kIo, fmt::format("the device-share lock {} is refused: {}",
                                              dir.PathOf(base + ".lock"), why));
    }
    int r;
    do {
      r = flock(fd_, LOCK_EX | (try_only ? LOCK_NB : 0));
    } while (r != 0 && errno == EINTR);
    held_ = r == 0;
    if (!held_ && !try_only) {
      const int err = errno;
      close(fd_);
      throw Error(ErrorCode::kIo, fmt::format("cannot lock {}: {}", dir.PathOf(base + ".lock"),
                                              std::strerror(err)));
    }
  }
  ~DecisionLock() { close(fd_); }
  DecisionLock(const DecisionLock&) = delete;
  DecisionLock& operator=(const DecisionLock&) = delete;
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

// An owner's block that other processes still held when its last local user let it go: freed
// by a thread of this process once they are gone.
struct Lingering {
  std::shared_ptr<Device> device;
  std::byte* block = nullptr;
  std::shared_ptr<DeviceShare::Files> files;
  std::string registry_key;
  std::vector<std::byte*> fields;
  std::string note;
};

class Lingerer {
 public:
  static Lingerer& Get() {
    // Never destroyed (a copy may linger until exit, when the driver frees it with the
    // process); the thread is stopped by the Stopper below, before exit tears anything down.
    static Lingerer* instance = new Lingerer();
    return *instance;
  }

  void Add(Lingering entry) {
    std::lock_guard lock(mu_);
    entries_.push_back(std::move(entry));
    if (!thread_.joinable() && !stopped_) {
      static Stopper stopper;
      thread_ = std::thread([this] { Run(); });
    }
  }

  // This process's lingering copy for `registry_key`, taken back into use.
  std::optional<Lingering> Reclaim(const std::string& registry_key) {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->registry_key != registry_key) continue;
      Lingering entry = std::move(*it);
      entries_.erase(it);
      return entry;
    }
    return std::nullopt;
  }

 private:
  struct Stopper {
    ~Stopper() { Get().Stop(); }
  };

  void Stop() {
    std::thread thread;
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
      cv_.notify_all();
      thread = std::move(thread_);
    }
    if (thread.joinable()) thread.join();
  }

  void Run() {
    std::unique_lock lock(mu_);
    while (!stopped_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (stopped_) break;
      std::vector<Lingering> entries = std::move(entries_);
      entries_.clear();
      lock.unlock();
      std::vector<Lingering> kept;
      {
        std::lock_guard registry(RegistryMutex());
        for (Lingering& e : entries) {
          if (!TryFree(e)) kept.push_back(std::move(e));
        }
      }
      lock.lock();
      for (Lingering& e : kept) entries_.push_back(std::move(e));
    }
  }

  // Frees `e` when no other process holds it. REQUIRES: RegistryMutex held.
  static bool TryFree(Lingering& e) {
    try {
      DecisionLock decision(*e.files->dir, e.files->base, /*try_only=*/true);
      if (!decision.held()) return false;
      const auto others = OtherHolders(e.files->holders_fd);
      if (!others || *others > 0) return false;
      e.device->FreeDevice(e.block);
      e.files->Unpublish();
      e.files->CloseHolders();
      return true;
    } catch (const Error&) {
      return false;  // the folder or lock went away: try again later
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Lingering> entries_;
  std::thread thread_;
  bool stopped_ = false;
};

std::map<std::string, std::weak_ptr<DeviceShare>>& Registry() {
  static auto* registry = new std::map<std::string, std::weak_ptr<DeviceShare>>();
  return *registry;
}

std::string DescribeError(const std::exception& e) { return e.what(); }

}  // namespace

std::vector<uint64_t> DeviceShare::Layout(const std::vector<uint64_t>& array_bytes,
                                          uint64_t* total_bytes) {
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (const uint64_t bytes : array_bytes) {
    offsets.push_back(offset);
    // One byte for an empty array keeps every field's pointer distinct and valid.
    const uint64_t end = AddOrThrow(offset, std::max<uint64_t>(1, bytes), "device cache layout",
                                    ErrorCode::kInvalidArgument);
    offset = AddOrThrow(end, kAlign - 1, "device cache layout", ErrorCode::kInvalidArgument) /
             kAlign * kAlign;
  }
  *total_bytes = std::max<uint64_t>(1, offset);
  return offsets;
}

namespace {

// The share's files for `base` in the user's shm folder, with .holders open and the decision
// lock taken into `decision`; null, with `why`, when they cannot be had (no sharing then).
std::shared_ptr<DeviceShare::Files> OpenFiles(const DeviceShareRequest& request,
                                              const std::string& base,
                                              std::optional<DecisionLock>& decision,
                                              std::string& why) {
  try {
    auto files = std::make_shared<DeviceShare::Files>();
    files->dir = ShmUserDir::Open(request.shm_dir, /*create=*/true, request.group);
    files->base = base;
    std::string refused;
    files->holders_fd = files->dir->OpenFile(base + ".holders", O_RDONLY | O_CREAT, &refused);
    if (files->holders_fd < 0) {
      throw Error(ErrorCode::kIo,
                  fmt::format("{} is refused: {}", files->dir->PathOf(base + ".holders"), refused));
    }
    if (!Holders(files->holders_fd)) {
      throw Error(ErrorCode::kIo, "/proc/locks cannot be read, so holders cannot be counted");
    }
    decision.emplace(*files->dir, base, /*try_only=*/false);
    return files;
  } catch (const Error& e) {
    why = DescribeError(e);
    return nullptr;
  }
}

// flock(LOCK_SH) on .holders: this process uses the copy. Throws Error(kIo).
void HoldShare(const DeviceShare::Files& files) {
  if (flock(files.holders_fd, LOCK_SH) != 0) {
    throw Error(ErrorCode::kIo,
                fmt::format("cannot lock {}: {}", files.dir->PathOf(files.base + ".holders"),
                            std::strerror(errno)));
  }
}

}  // namespace

std::shared_ptr<DeviceShare> DeviceShare::Acquire(const DeviceShareRequest& request,
                                                  std::shared_ptr<Device> device,
                                                  const Fill& fill) {
  GPUFEED_ASSERT(device != nullptr, "DeviceShare::Acquire: device");
  if (request.array_bytes.size() > kMaxFields) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("device cache: {} fields (at most {})",
                                                         request.array_bytes.size(), kMaxFields));
  }
  std::lock_guard registry_lock(RegistryMutex());
  const std::string base = fmt::format("gpufeed-dev-{}-cuda{}", request.key, device->ordinal());
  const std::string registry_key =
      fmt::format("{}|{}|{}", request.shm_dir, request.group ? *request.group : -1, base);
  if (auto existing = Registry()[registry_key].lock()) return existing;

  std::shared_ptr<DeviceShare> share(new DeviceShare());
  share->device_ = device;
  share->registry_key_ = registry_key;
  uint64_t total = 0;
  const std::vector<uint64_t> offsets = Layout(request.array_bytes, &total);

  std::string why = IpcUnavailable(*device);
  std::shared_ptr<Files> files;
  std::optional<DecisionLock> decision;
  if (why.empty()) files = OpenFiles(request, base, decision, why);
  if (files && (share->ReclaimLingering() || share->Import(request, offsets, total, files, why))) {
    Registry()[registry_key] = share;
    return share;
  }
  share->Upload(request, offsets, total, fill, std::move(files), std::move(why));
  Registry()[registry_key] = share;
  return share;
}

void DeviceShare::Place(std::byte* block, const std::vector<uint64_t>& offsets) {
  block_ = block;
  fields_.clear();
  for (const uint64_t offset : offsets) fields_.push_back(block + offset);
}

bool DeviceShare::ReclaimLingering() {
  // This process's own copy, lingering for other processes: back in use.
  std::optional<Lingering> entry = Lingerer::Get().Reclaim(registry_key_);
  if (!entry) return false;
  block_ = entry->block;
  fields_ = entry->fields;
  files_ = entry->files;
  shared_ = true;
  owner_ = getpid();
  note_ = entry->note;
  return true;
}

bool DeviceShare::Import(const DeviceShareRequest& request, const std::vector<uint64_t>& offsets,
                         uint64_t total, std::shared_ptr<Files>& files, std::string& why) {
  // A published copy whose owner is alive: import it.
  const std::optional<IpcHeader> h =
      ReadPublishedIpc(*files->dir, files->base, request, device_->ordinal(), offsets, total);
  const auto holders = Holders(files->holders_fd);
  const bool owner_alive =
      h && holders && std::find(holders->begin(), holders->end(), h->owner_pid) != holders->end();
  if (!owner_alive || h->owner_pid == getpid()) return false;
  std::array<std::byte, 64> handle{};
  std::memcpy(handle.data(), h->handle, handle.size());
  try {
    size_t mapped = 0;
    auto* block = static_cast<std::byte*>(IpcOfShared(*device_).OpenIpc(handle, &mapped));
    // The handle must map at least the block the file claims (a planted or stale handle of a
    // smaller allocation would let gathers read past its end).
    if (mapped < total) {
      IpcOfShared(*device_).CloseIpc(block);
      throw Error(ErrorCode::kDevice,
                  mapped == 0
                      ? std::string("the driver cannot tell the mapped size")
                      : fmt::format("the handle maps {} bytes, the copy needs {}", mapped, total));
    }
    try {
      HoldShare(*files);
    } catch (const Error&) {
      IpcOfShared(*device_).CloseIpc(block);
      throw;
    }
    Place(block, offsets);
    imported_ = true;
    shared_ = true;
    owner_ = h->owner_pid;
    files_ = files;
    note_ = fmt::format("imported the copy process {} uploaded (CUDA IPC)", h->owner_pid);
    return true;
  } catch (const Error& e) {
    // Another GPU behind the same ordinal, or a driver that refuses: this process keeps a
    // private copy and leaves the owner's published copy alone.
    why = fmt::format("the copy process {} published could not be opened: {}", h->owner_pid,
                      e.what());
    files.reset();
    return false;
  }
}

void DeviceShare::Upload(const DeviceShareRequest& request, const std::vector<uint64_t>& offsets,
                         uint64_t total, const Fill& fill, std::shared_ptr<Files> files,
                         std::string why) {
  auto* block = static_cast<std::byte*>(device_->AllocDevice(total));
  try {
    Place(block, offsets);
    fill(fields_);
  } catch (...) {
    device_->FreeDevice(block);
    block_ = nullptr;
    throw;
  }
  owner_ = getpid();
  if (files) {
    try {
      const std::array<std::byte, 64> handle = IpcOfShared(*device_).ExportIpc(block);
      HoldShare(*files);
      files->generation =
          PublishIpc(*files->dir, files->base, request, device_->ordinal(), offsets, total, handle);
      files_ = files;
      shared_ = true;
      note_ = "uploaded here and shared with this GPU's other processes (CUDA IPC)";
    } catch (const Error& e) {
      why = fmt::format("the copy cannot be shared: {}", e.what());
      files->CloseHolders();
      files.reset();
    }
  }
  if (!shared_) note_ = "a private copy: " + why;
}

DeviceShare::~DeviceShare() {
  if (block_ == nullptr) return;
  if (files_ == nullptr) {
    device_->FreeDevice(block_);
    return;
  }
  std::lock_guard registry_lock(RegistryMutex());
  try {
    DecisionLock decision(*files_->dir, files_->base, /*try_only=*/false);
    if (imported_) {
      IpcOfShared(*device_).CloseIpc(block_);
      files_->CloseHolders();
      return;
    }
    const auto others = OtherHolders(files_->holders_fd);
    if (others && *others == 0) {
      device_->FreeDevice(block_);
      files_->Unpublish();
      files_->CloseHolders();
      return;
    }
  } catch (const Error&) {
    if (imported_) {
      IpcOfShared(*device_).CloseIpc(block_);
      files_->CloseHolders();
      return;
    }
  }
  // Other processes use the copy (or that cannot be told): it lingers until they are gone.
  Lingerer::Get().Add({device_, block_, files_, registry_key_, fields_, note_});
}

}  // namespace gpufeed
