// `gpufeed cache verify KEY`: re-hashes a published cache against the block hashes its builder
// wrote at publication, and names the first block that differs.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "cache/shm/shm_format.h"
#include "cache/shm/shm_user_dir.h"
#include "core/io/fd_io.h"
#include "gpufeed/cache.h"
#include "gpufeed/error.h"
#include "gpufeed/shm_caches.h"

namespace gpufeed {
namespace {

// Each read covers whole blocks of one field, about this many bytes.
constexpr uint64_t kReadBytes = uint64_t{4} << 20;

class VerifyFile {
 public:
  VerifyFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~VerifyFile() { close(fd_); }
  VerifyFile(const VerifyFile&) = delete;
  VerifyFile& operator=(const VerifyFile&) = delete;
  int fd() const { return fd_; }

  // Exactly `n` bytes at `offset`; Error(kIo) naming the file otherwise.
  void Read(std::byte* dst, uint64_t n, uint64_t offset) const {
    if (!PreadAll(fd_, dst, n, offset)) {
      throw Error(ErrorCode::kIo,
                  errno == 0 ? fmt::format("shared-memory cache {} changed size while being "
                                           "verified (it ends before offset {})",
                                           path_, offset + n)
                             : fmt::format("shared-memory cache {}: read at offset {} failed: {}",
                                           path_, offset, std::strerror(errno)));
    }
  }

 private:
  int fd_;
  std::string path_;
};

std::string FieldName(const ShmHeader& header, size_t f) {
  try {
    const Schema schema = ParseSchema(header.schema_text);
    if (schema.fields.size() == header.layout.row_bytes.size()) {
      return fmt::format("'{}'", schema.fields[f].name);
    }
  } catch (const Error&) {
  }
  return std::to_string(f);
}

ShmHeader ReadHeader(const VerifyFile& file, uint64_t size, const std::string& path,
                     const ShmUserDir& dir) {
  std::vector<std::byte> bytes(kShmFixedHeaderBytes);
  if (size < kShmFixedHeaderBytes) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("shared-memory cache {}: {} bytes is too short", path, size));
  }
  file.Read(bytes.data(), bytes.size(), 0);
  bytes.resize(ShmHeaderBytes(bytes, size, path));
  file.Read(bytes.data(), bytes.size(), 0);
  return DecodeShmHeader(bytes, size, path, dir.secret());
}

// Hashes field f's blocks from its first; sets the report's first bad block, if any.
void VerifyField(const VerifyFile& file, const ShmHeader& header, size_t f,
                 ShmVerifyReport& report) {
  const ShmLayout& layout = header.layout;
  const uint64_t row = layout.row_bytes[f];
  if (row == 0 || layout.samples == 0) return;
  const uint64_t per = layout.rows_per_block[f];
  const uint64_t field_blocks = (static_cast<uint64_t>(layout.samples) + per - 1) / per;
  const uint64_t blocks_per_read = std::max<uint64_t>(1, kReadBytes / (per * row));
  std::vector<std::byte> buffer(static_cast<size_t>(blocks_per_read * per * row));
  for (uint64_t k = 0; k < field_blocks; k += blocks_per_read) {
    const uint64_t end_block = std::min(field_blocks, k + blocks_per_read);
    const int64_t first_row = layout.BlockFirstRow(f, k);
    const int64_t end_row = layout.BlockEndRow(f, end_block - 1);
    const uint64_t begin = layout.header_bytes + layout.RowBegin(f, first_row);
    file.Read(buffer.data(), static_cast<uint64_t>(end_row - first_row) * row, begin);
    for (uint64_t b = k; b < end_block; ++b) {
      const int64_t r0 = layout.BlockFirstRow(f, b);
      const int64_t r1 = layout.BlockEndRow(f, b);
      const uint64_t at = static_cast<uint64_t>(r0 - first_row) * row;
      const uint64_t bytes = static_cast<uint64_t>(r1 - r0) * row;
      const uint64_t block = layout.first_block[f] + b;
      ++report.checked;
      if (HashShmBlock(buffer.data() + at, bytes) == header.block_hashes[block]) continue;
      report.first_bad_block = static_cast<int64_t>(block);
      report.first_bad = fmt::format(
          "block {} of {}: field {}, samples {} to {}, file bytes {} to {}", block, layout.blocks,
          FieldName(header, f), r0, r1 - 1, begin + at, begin + at + bytes);
      return;
    }
  }
}

}  // namespace

ShmVerifyReport VerifyShmCache(const std::string& key, const std::string& root,
                               const std::string& group) {
  if (key.size() != 16 || key.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("'{}' is not a cache key (16 hex digits, see `gpufeed cache ls`)", key));
  }
  std::optional<gid_t> gid;
  if (!group.empty()) gid = ResolveShmGroup(group);
  const auto dir = ShmUserDir::Open(root, /*create=*/false, gid);
  const std::string name = "gpufeed-" + key;
  ShmVerifyReport report;
  report.key = key;
  report.path = dir->PathOf(name);
  std::string why;
  ShmUserDir::FileState state;
  // O_NOATIME: verifying is no use of the cache.
  const int fd = dir->OpenFile(name, O_RDONLY | O_NOATIME, &why, &state);
  if (fd < 0) {
    if (state == ShmUserDir::FileState::kAbsent) {
      throw Error(ErrorCode::kNotFound, fmt::format("no cache {} in {}", key, dir->path()));
    }
    throw Error(ErrorCode::kIo, fmt::format("the cache {} is refused: {}", report.path, why));
  }
  const VerifyFile file(fd, report.path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    throw Error(ErrorCode::kIo, fmt::format("{}: {}", report.path, std::strerror(errno)));
  }
  report.bytes = static_cast<uint64_t>(st.st_size);
  const ShmHeader header = ReadHeader(file, report.bytes, report.path, *dir);
  if (ShmCacheKey(header.identity, header.schema_text) != key) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("shared-memory cache {}: its header describes another source (key "
                            "{})",
                            report.path, ShmCacheKey(header.identity, header.schema_text)));
  }
  report.description = header.description;
  report.blocks = header.layout.blocks;
  for (size_t f = 0; f < header.layout.row_bytes.size() && report.first_bad_block < 0; ++f) {
    VerifyField(file, header, f, report);
  }
  report.ok = report.first_bad_block < 0;
  return report;
}

}  // namespace gpufeed
