// libFuzzer target: a shared-memory cache header, decoded and checked against a schema as a
// reader does before it maps the file. The input's checksum field is overwritten with the
// right keyed checksum first, so the fuzzer reaches the structure behind it (an attacker
// cannot, lacking the key, but the decoder must hold even then). The first input byte picks
// the file size the header is checked against (the real size, or off by a little).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cache/shm/shm_format.h"
#include "gpufeed/error.h"
#include "gpufeed/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::vector<std::byte> key(192, std::byte{0x5a});
  static const gpufeed::Schema schema =
      gpufeed::ParseSchema("mel:float32[1,8,4],label:int64[],mask:bool[3]");
  const int size_delta = static_cast<int>(data[0] % 5) - 2;
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1),
                               reinterpret_cast<const std::byte*>(data + size));
  if (bytes.size() >= gpufeed::kShmFixedHeaderBytes) {
    const uint64_t sum = gpufeed::ShmHeaderChecksum(bytes, key);
    std::memcpy(bytes.data() + gpufeed::kShmHeaderChecksumAt, &sum, sizeof(sum));
  }
  // The file is the header followed by a data region the header claims; the decoder sees
  // the header bytes and the claimed file size.
  uint64_t file_size = 0;
  if (bytes.size() >= 32) std::memcpy(&file_size, bytes.data() + 24, sizeof(file_size));
  file_size += static_cast<uint64_t>(size_delta);
  try {
    const uint64_t header_bytes = gpufeed::ShmHeaderBytes(bytes, file_size, "fuzz");
    if (header_bytes > bytes.size()) return 0;
    std::span<const std::byte> header(bytes.data(), header_bytes);
    // The checksum covers exactly the header's bytes: recompute over that span.
    std::vector<std::byte> exact(header.begin(), header.end());
    const uint64_t sum = gpufeed::ShmHeaderChecksum(exact, key);
    std::memcpy(exact.data() + gpufeed::kShmHeaderChecksumAt, &sum, sizeof(sum));
    const gpufeed::ShmHeader h = gpufeed::DecodeShmHeader(exact, file_size, "fuzz", key);
    gpufeed::CheckShmHeaderFor(h, schema, h.layout.samples, h.identity, "fuzz");
    // Accepted: every row of every field must lie inside the data region.
    for (size_t f = 0; f < h.layout.row_bytes.size(); ++f) {
      if (h.layout.samples > 0 &&
          h.layout.RowBegin(f, h.layout.samples - 1) + h.layout.row_bytes[f] >
              h.layout.data_bytes) {
        __builtin_trap();
      }
    }
  } catch (const gpufeed::Error&) {
  }
  return 0;
}
