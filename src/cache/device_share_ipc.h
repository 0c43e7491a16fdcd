// The .ipc file of a device share (device_share.h): the copy's published CUDA IPC handle, with
// what an importer checks before it maps anything: magic, version, key, device ordinal, owner
// pid, the block's size, every field's offset and size, and a random generation per upload so
// an owner removes only the file it wrote. Every byte read back is untrusted: a file that is
// short, long, planted or stale reads as no file.
// Thread-safety: pure functions over files.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/device_share.h"
#include "cache/shm/shm_user_dir.h"

namespace gpufeed {

// The .ipc file: this header, then `fields` IpcField records; nothing else.
struct IpcHeader {
  char magic[8];
  uint32_t version;
  uint32_t fields;
  int32_t owner_pid;
  int32_t ordinal;
  uint64_t total_bytes;
  uint64_t generation;  // random per upload: a lingering owner removes only its own file
  char key[16];
  std::byte handle[64];
};
static_assert(sizeof(IpcHeader) == 120);
struct IpcField {
  uint64_t offset;
  uint64_t bytes;
};

// The header of `base`.ipc in `dir` when the file is there and verifies against the copy this
// process would make for `request` on device `ordinal` (`offsets` in a block of `total_bytes`);
// nullopt otherwise.
std::optional<IpcHeader> ReadPublishedIpc(const ShmUserDir& dir, const std::string& base,
                                          const DeviceShareRequest& request, int ordinal,
                                          const std::vector<uint64_t>& offsets,
                                          uint64_t total_bytes);

// Publishes `handle` as `base`.ipc, owned by this process (written aside, then renamed over
// the file). Returns the upload's generation. Throws Error(kIo) naming the file.
uint64_t PublishIpc(const ShmUserDir& dir, const std::string& base,
                    const DeviceShareRequest& request, int ordinal,
                    const std::vector<uint64_t>& offsets, uint64_t total_bytes,
                    const std::array<std::byte, 64>& handle);

// Whether `base`.ipc is the one this process published as `generation`.
bool IsOwnIpc(const ShmUserDir& dir, const std::string& base, uint64_t generation);

}  // namespace gpufeed
