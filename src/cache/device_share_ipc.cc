#include "cache/device_share_ipc.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/io/fd_io.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

constexpr char kMagic[8] = {'G', 'F', 'D', 'V', 'I', 'P', 'C', '1'};
constexpr uint32_t kVersion = 1;

uint64_t RandomGeneration() {
  uint64_t value = 0;
  if (getrandom(&value, sizeof(value), 0) != static_cast<ssize_t>(sizeof(value))) {
    value = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
            (static_cast<uint64_t>(getpid()) << 32);
  }
  return value;
}

}  // namespace

std::optional<IpcHeader> ReadPublishedIpc(const ShmUserDir& dir, const std::string& base,
                                          const DeviceShareRequest& request, int ordinal,
                                          const std::vector<uint64_t>& offsets,
                                          uint64_t total_bytes) {
  std::string refused;
  const int fd = dir.OpenFile(base + ".ipc", O_RDONLY, &refused);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  IpcHeader h{};
  std::vector<IpcField> fields(request.array_bytes.size());
  const uint64_t expected_size = sizeof(IpcHeader) + fields.size() * sizeof(IpcField);
  bool valid = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == expected_size &&
               ReadAll(fd, &h, sizeof(h)) &&
               ReadAll(fd, fields.data(), fields.size() * sizeof(IpcField));
  close(fd);
  valid = valid && std::memcmp(h.magic, kMagic, sizeof(kMagic)) == 0 && h.version == kVersion &&
          h.fields == fields.size() && h.owner_pid > 0 && h.ordinal == ordinal &&
          h.total_bytes == total_bytes &&
          std::memcmp(h.key, request.key.data(), std::min<size_t>(16, request.key.size())) == 0 &&
          request.key.size() == 16;
  for (size_t f = 0; valid && f < fields.size(); ++f) {
    valid = fields[f].offset == offsets[f] && fields[f].bytes == request.array_bytes[f];
  }
  if (!valid) return std::nullopt;
  return h;
}

uint64_t PublishIpc(const ShmUserDir& dir, const std::string& base,
                    const DeviceShareRequest& request, int ordinal,
                    const std::vector<uint64_t>& offsets, uint64_t total_bytes,
                    const std::array<std::byte, 64>& handle) {
  IpcHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.fields = static_cast<uint32_t>(offsets.size());
  h.owner_pid = getpid();
  h.ordinal = ordinal;
  h.total_bytes = total_bytes;
  h.generation = RandomGeneration();
  std::memcpy(h.key, request.key.data(), std::min<size_t>(16, request.key.size()));
  std::memcpy(h.handle, handle.data(), handle.size());
  std::vector<IpcField> records;
  for (size_t f = 0; f < offsets.size(); ++f) {
    records.push_back({offsets[f], request.array_bytes[f]});
  }
  const std::string tmp = fmt::format("{}.ipc.tmp-{}", base, getpid());
  unlinkat(dir.fd(), tmp.c_str(), 0);
  const int out = dir.CreateFile(tmp);
  const bool written = out >= 0 && WriteAll(out, &h, sizeof(h)) &&
                       WriteAll(out, records.data(), records.size() * sizeof(IpcField));
  const int err = errno;
  if (out >= 0) close(out);
  if (!written || renameat(dir.fd(), tmp.c_str(), dir.fd(), (base + ".ipc").c_str()) != 0) {
    unlinkat(dir.fd(), tmp.c_str(), 0);
    throw Error(ErrorCode::kIo, fmt::format("cannot publish {}: {}", dir.PathOf(base + ".ipc"),
                                            std::strerror(written ? errno : err)));
  }
  return h.generation;
}

bool IsOwnIpc(const ShmUserDir& dir, const std::string& base, uint64_t generation) {
  std::string why;
  const int fd = dir.OpenFile(base + ".ipc", O_RDONLY, &why);
  if (fd < 0) return false;
  IpcHeader h{};
  const bool ours =
      ReadAll(fd, &h, sizeof(h)) && h.owner_pid == getpid() && h.generation == generation;
  close(fd);
  return ours;
}

}  // namespace gpufeed
