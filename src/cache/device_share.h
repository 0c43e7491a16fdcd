// DeviceShare: one device-tier copy of a data set shared by every process using it on one GPU,
// through CUDA IPC. The first process allocates one block (every field's array at a
// 256-byte aligned offset), fills it and exports its handle; later processes import the
// handle and gather from the same VRAM.
//
// Files, in the user's shm folder (ShmUserDir: every file opened without following links and
// checked to be this user's, 0600), beside the shm caches, for key K and device ordinal D:
//   gpufeed-dev-K-cudaD.lock     flock(LOCK_EX) around every acquire and release decision
//   gpufeed-dev-K-cudaD.holders  each process using the copy holds flock(LOCK_SH) on it
//   gpufeed-dev-K-cudaD.ipc      the published handle: magic, version, key, device, owner pid,
//                                layout (per field: offset, bytes) and the 64-byte handle
// Acquire, under the lock: a .ipc that verifies (size, magic, version, key, device, and a
// layout equal to the one this process computes) and whose owner still holds .holders is
// imported; anything else (absent, damaged, planted, a dead owner's) is replaced by a new
// upload this process owns. Release, under the lock: an importer closes its mapping; the
// owner frees the block when no other process holds .holders. While others do, the block
// lingers: a thread of the owner's process frees it once they are gone. A holder killed
// with SIGKILL loses its flock with its life, so it never keeps the copy forever, and the
// owner never frees the block while a live process holds it.
//
// Limit (CUDA's, not ours): a cuMemAlloc block belongs to the process that made it. When the
// owner process exits while others still use the copy, the driver frees it with the
// process; the next process to open the cache sees the owner gone and uploads a new copy.
//
// Thread-safety: Acquire is thread-safe (one process-wide registry: two loaders of one
// process share one hold); a DeviceShare is immutable after Acquire.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/device.h"

namespace gpufeed {

struct DeviceShareRequest {
  std::string shm_dir = kShmRoot;  // the root of the user's shm folder
  std::optional<gid_t> group = std::nullopt;
  std::string key;                    // 16 hex digits: the uploaded rows' identity
  std::vector<uint64_t> array_bytes;  // per field
};

class DeviceShare {
 public:
  // Each field's array in the block.
  using Fill = std::function<void(const std::vector<std::byte*>& fields)>;

  // The copy for `request` on `device`: imported from the process that uploaded it, or
  // allocated here and filled by `fill` (then exported when IPC can be had). A process whose
  // device or driver cannot share still gets a private copy; shared() is then false and
  // note() says why. Throws what `fill` throws and Error(kDevice) when the block cannot be
  // allocated (nothing stays allocated or published then).
  static std::shared_ptr<DeviceShare> Acquire(const DeviceShareRequest& request,
                                              std::shared_ptr<Device> device, const Fill& fill);
  ~DeviceShare();
  DeviceShare(const DeviceShare&) = delete;
  DeviceShare& operator=(const DeviceShare&) = delete;

  const std::vector<std::byte*>& fields() const { return fields_; }
  bool imported() const { return imported_; }
  bool shared() const { return shared_; }
  pid_t owner() const { return owner_; }
  // "uploaded here, shared through CUDA IPC", "imported from process 1234 through CUDA IPC",
  // "a private copy: <why sharing is off>".
  const std::string& note() const { return note_; }

  // The offsets of `array_bytes` in one block (each 256-byte aligned) and its total size.
  // Throws Error(kInvalidArgument) on overflow.
  static std::vector<uint64_t> Layout(const std::vector<uint64_t>& array_bytes,
                                      uint64_t* total_bytes);

  // The share's files and this process's hold on them (device_share.cc); public only so the
  // lingering-copy reaper there can keep them.
  struct Files;

 private:
  DeviceShare() = default;
  // The steps of Acquire, each under the registry lock and the share's decision lock.
  // Points fields_ into `block` at `offsets`.
  void Place(std::byte* block, const std::vector<uint64_t>& offsets);
  // Takes back this process's own copy, lingering for other processes; false when none.
  bool ReclaimLingering();
  // Imports the copy another live process published for `request`; false (with `why`, and
  // `files` dropped when the copy could not be opened) when there is none to import.
  bool Import(const DeviceShareRequest& request, const std::vector<uint64_t>& offsets,
              uint64_t total, std::shared_ptr<Files>& files, std::string& why);
  // Allocates the block, fills it and, with `files`, publishes it; a private copy says `why`
  // (or why publishing failed) in note().
  void Upload(const DeviceShareRequest& request, const std::vector<uint64_t>& offsets,
              uint64_t total, const Fill& fill, std::shared_ptr<Files> files, std::string why);

  std::shared_ptr<Device> device_;
  std::byte* block_ = nullptr;
  std::vector<std::byte*> fields_;
  bool imported_ = false;
  bool shared_ = false;
  pid_t owner_ = 0;
  std::string note_;
  std::shared_ptr<Files> files_;  // null for a private copy
  std::string registry_key_;
};

}  // namespace gpufeed
