#include "remote/disk/disk_cache_layout.h"

#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/io/fd_io.h"
#include "core/text.h"

namespace gpufeed {
namespace {

constexpr char kBlockMagic[4] = {'G', 'F', 'B', 'K'};
constexpr std::string_view kObjectMagic = "GFOB 1\n";
// A block is hashed through a buffer of at most this many bytes.
constexpr uint64_t kChunkBytes = uint64_t{1} << 20;

void PutU32(char* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(v >> (8 * i));
}
void PutU64(char* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetU64(const char* at, int bytes = 8) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(at[i])} << (8 * i);
  return v;
}

BlockCheck Damaged(std::string what) { return {BlockState::kDamaged, std::move(what)}; }
BlockCheck Unreadable() { return {BlockState::kUnreadable, std::strerror(errno)}; }

// How many bytes at the end of the file are zeros (reads backwards until a byte is not).
uint64_t ZeroTail(int fd, uint64_t file_bytes) {
  std::vector<char> buf(64 << 10);
  uint64_t zeros = 0;
  while (zeros < file_bytes) {
    const uint64_t n = std::min<uint64_t>(buf.size(), file_bytes - zeros);
    if (!PreadAll(fd, buf.data(), n, file_bytes - zeros - n)) break;
    for (uint64_t i = n; i > 0; --i) {
      if (buf[i - 1] != 0) return zeros + (n - i);
    }
    zeros += n;
  }
  return zeros;
}

// The file's length against the one expected: a file of another length is damaged.
std::optional<BlockCheck> CheckLength(uint64_t file_bytes, std::optional<uint64_t> payload) {
  // A block without a trailer, of the layout before trailers; without the expected length, a
  // file too short for a trailer may be a small one.
  if (payload ? file_bytes == *payload : file_bytes < kBlockTrailerBytes) {
    return BlockCheck{BlockState::kOtherLayout, {}};
  }
  if (payload && file_bytes != BlockFileBytes(*payload)) {
    return Damaged(fmt::format("it holds {} bytes where {} were expected ({})", file_bytes,
                               BlockFileBytes(*payload),
                               file_bytes < BlockFileBytes(*payload) ? "cut short" : "too long"));
  }
  return std::nullopt;
}

// Hashes the payload (and hands it to `on_payload`); false when a read fails or ends early
// (`*err`: errno, 0 for an early end).
bool HashPayload(int fd, uint64_t payload, uint64_t* checksum, int* err,
                 const std::function<void(uint64_t, const char*, size_t)>& on_payload) {
  const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                              XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::vector<char> buf(std::min(payload, kChunkBytes));
  for (uint64_t at = 0; at < payload;) {
    const auto n = static_cast<size_t>(std::min<uint64_t>(buf.size(), payload - at));
    if (!PreadAll(fd, buf.data(), n, at)) {
      *err = errno;
      return false;
    }
    XXH3_64bits_update(state.get(), buf.data(), n);
    if (on_payload) on_payload(at, buf.data(), n);
    at += n;
  }
  *checksum = XXH3_64bits_digest(state.get());
  return true;
}

}  // namespace

uint64_t BlockChecksum(const void* payload, size_t n) { return XXH3_64bits(payload, n); }

std::array<char, kBlockTrailerBytes> EncodeBlockTrailer(uint64_t index, uint64_t payload_bytes,
                                                        uint64_t checksum) {
  std::array<char, kBlockTrailerBytes> t{};
  std::memcpy(t.data(), kBlockMagic, sizeof(kBlockMagic));
  PutU32(t.data() + 4, kBlockLayoutVersion);
  PutU64(t.data() + 8, index);
  PutU64(t.data() + 16, payload_bytes);
  PutU64(t.data() + 24, checksum);
  return t;
}

BlockCheck CheckBlockFile(
    int fd, uint64_t file_bytes, uint64_t index, std::optional<uint64_t> payload_bytes,
    const std::function<void(uint64_t offset, const char* data, size_t n)>& on_payload) {
  if (std::optional<BlockCheck> wrong = CheckLength(file_bytes, payload_bytes)) return *wrong;
  std::array<char, kBlockTrailerBytes> t{};
  const uint64_t payload = file_bytes - kBlockTrailerBytes;
  if (!PreadAll(fd, t.data(), t.size(), payload)) return Unreadable();
  if (std::memcmp(t.data(), kBlockMagic, sizeof(kBlockMagic)) != 0) {
    if (const uint64_t zeros = ZeroTail(fd, file_bytes); zeros >= kBlockTrailerBytes) {
      return Damaged(fmt::format(
          "its last {} of {} bytes are zeros (its writer's data never reached the disk)", zeros,
          file_bytes));
    }
    // Without the expected length, a file with no trailer may be a block of the old layout.
    if (!payload_bytes) return {BlockState::kOtherLayout, {}};
    return Damaged("it ends without a block trailer");
  }
  if (const uint64_t version = GetU64(t.data() + 4, 4); version != kBlockLayoutVersion) {
    return {BlockState::kOtherLayout, fmt::format("layout version {}", version)};
  }
  if (const uint64_t named = GetU64(t.data() + 8); named != index) {
    return Damaged(fmt::format("its trailer names block {}", named));
  }
  if (const uint64_t length = GetU64(t.data() + 16); length != payload) {
    return Damaged(fmt::format("its trailer counts {} payload bytes where the file holds {}",
                               length, payload));
  }
  uint64_t checksum = 0;
  int err = 0;
  if (!HashPayload(fd, payload, &checksum, &err, on_payload)) {
    if (err == 0) return Damaged("it was cut short while it was read");
    return {BlockState::kUnreadable, std::strerror(err)};
  }
  if (const uint64_t want = GetU64(t.data() + 24); checksum != want) {
    return Damaged(
        fmt::format("its payload does not match its checksum (XXH3-64 {:016x} in the "
                    "trailer, {:016x} read)",
                    want, checksum));
  }
  return {};
}

uint64_t ObjectInfo::blocks() const {
  return block_bytes == 0 ? 0 : size / block_bytes + (size % block_bytes != 0);
}

uint64_t ObjectInfo::BlockLength(uint64_t index) const {
  return std::min(block_bytes, size - index * block_bytes);
}

std::string EncodeObjectInfo(const ObjectInfo& info) {
  return fmt::format("{}{} {}\n{}", kObjectMagic, info.size, info.block_bytes, info.uri);
}

std::optional<ObjectInfo> DecodeObjectInfo(std::string_view text) {
  if (!text.starts_with(kObjectMagic)) return std::nullopt;
  text.remove_prefix(kObjectMagic.size());
  const size_t space = text.find(' ');
  const size_t newline = text.find('\n');
  if (space == std::string_view::npos || newline == std::string_view::npos || newline < space) {
    return std::nullopt;
  }
  const auto size = ParseNumber<uint64_t>(text.substr(0, space));
  const auto block = ParseNumber<uint64_t>(text.substr(space + 1, newline - space - 1));
  if (!size || !block || *block == 0) return std::nullopt;
  return ObjectInfo{*size, *block, std::string(text.substr(newline + 1))};
}

}  // namespace gpufeed
