// The bytes of the disk cache's files (disk_cache_store.h has the folder they live in).
//
// A block file, <dir>/<key>/<index>, is the block's payload followed by a 32-byte trailer,
// every number little-endian:
//   0  "GFBK"            magic
//   4  uint32 version    kBlockLayoutVersion
//   8  uint64 index      the block's index in its object
//  16  uint64 length     payload bytes
//  24  uint64 checksum   XXH3-64 of the payload
// A file is written whole under a temporary name, fdatasync'ed, then renamed into place; the
// trailer lets a reader tell a whole block from one whose tail never reached the disk (a node
// that lost power before a writer's data did, a file cut short or rewritten by hand).
//
// The object's description, <dir>/<key>/object, says which object the folder holds, so that
// `gpufeed cache verify --disk` can name it and knows each block's length:
//   "GFOB 1\n<size> <block_bytes>\n<uri>"   (the URI runs to the end of the file)
//
// Thread-safety: pure functions; CheckBlockFile reads its descriptor with pread only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gpufeed {

inline constexpr uint32_t kBlockLayoutVersion = 1;
inline constexpr uint64_t kBlockTrailerBytes = 32;
inline constexpr char kObjectInfoName[] = "object";

// Bytes on disk of a block of `payload` bytes.
constexpr uint64_t BlockFileBytes(uint64_t payload) { return payload + kBlockTrailerBytes; }

uint64_t BlockChecksum(const void* payload, size_t n);
std::array<char, kBlockTrailerBytes> EncodeBlockTrailer(uint64_t index, uint64_t payload_bytes,
                                                        uint64_t checksum);

enum class BlockState {
  kWhole,        // trailer and checksum match
  kOtherLayout,  // written by a gpufeed of another layout (before trailers, or a newer one)
  kDamaged,      // cut short, a zero-filled tail, a bad trailer or a checksum mismatch
  kUnreadable,   // a read failed (`what` holds strerror)
};

struct BlockCheck {
  BlockState state = BlockState::kWhole;
  std::string what;  // for kDamaged and kUnreadable: what is wrong, in words
};

// Checks the block file `fd` of `file_bytes` bytes, block `index` of its object, reading it
// whole. `payload_bytes`: the block's length when the caller knows it (then a file of exactly
// that length is a block without a trailer: kOtherLayout); unknown, the trailer's is used.
// `on_payload` (may be empty) sees the payload in order, in pieces, before the checksum is
// known: the caller uses the bytes only once the result is kWhole.
BlockCheck CheckBlockFile(
    int fd, uint64_t file_bytes, uint64_t index, std::optional<uint64_t> payload_bytes,
    const std::function<void(uint64_t offset, const char* data, size_t n)>& on_payload);

// The object an object folder holds, as its `object` file says.
struct ObjectInfo {
  uint64_t size = 0;
  uint64_t block_bytes = 0;
  std::string uri;

  // The length of block `index` (REQUIRES: index < blocks()).
  uint64_t BlockLength(uint64_t index) const;
  uint64_t blocks() const;
};

std::string EncodeObjectInfo(const ObjectInfo& info);
// Nullopt when `text` is not an object description (cut short, another layout).
std::optional<ObjectInfo> DecodeObjectInfo(std::string_view text);

}  // namespace gpufeed
