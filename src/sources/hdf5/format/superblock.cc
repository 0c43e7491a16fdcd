#include "sources/hdf5/format/superblock.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/metadata_bytes.h"

namespace gpufeed {
namespace {

constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

class SuperblockReader {
 public:
  explicit SuperblockReader(const File& file)
      : file_(file), name_(fmt::format("{}: the HDF5 superblock", file.path())) {}

  Hdf5Superblock Read() {
    Hdf5Superblock sb;
    sb.signature_offset = FindSignature();
    // The longest superblock (version 1 with 8-byte fields) is under 128 bytes.
    bytes_ = ReadUpTo(sb.signature_offset, 128);
    sb.version = Byte(8);
    if (sb.version > 3) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: HDF5 superblock version {} is not supported (0 to 3 are)",
                              file_.path(), sb.version));
    }
    size_t pos = 0;
    if (sb.version <= 1) {
      sb.sizeof_addr = Byte(13);
      sb.sizeof_size = Byte(14);
      CheckWidths(sb);
      sb.group_leaf_k = static_cast<unsigned>(Uint(16, 2));
      sb.group_internal_k = static_cast<unsigned>(Uint(18, 2));
      if (sb.group_leaf_k == 0 || sb.group_internal_k == 0) Damaged("a group B-tree K of 0");
      pos = 24;
      if (sb.version == 1) {
        if (Uint(24, 2) == 0) Damaged("a chunk B-tree K of 0");
        pos = 28;
      }
      const unsigned a = sb.sizeof_addr;
      sb.base_address = Base(sb, Uint(pos, a));
      const uint64_t free_space = Uint(pos + a, a);
      sb.end_of_file = EndOfFile(sb, Uint(pos, a), Uint(pos + 2 * a, a));
      const uint64_t driver_info = Uint(pos + 3 * a, a);
      // The root group's symbol table entry: link name offset, then the object header.
      sb.root_header_address = Uint(pos + 4 * a + sb.sizeof_size, a);
      CheckAddress(sb, free_space, "free-space info", true);
      CheckAddress(sb, driver_info, "driver info block", true);
    } else {
      sb.sizeof_addr = Byte(9);
      sb.sizeof_size = Byte(10);
      CheckWidths(sb);
      const unsigned a = sb.sizeof_addr;
      pos = 12;
      sb.base_address = Base(sb, Uint(pos, a));
      const uint64_t extension = Uint(pos + a, a);
      sb.end_of_file = EndOfFile(sb, Uint(pos, a), Uint(pos + 2 * a, a));
      sb.root_header_address = Uint(pos + 3 * a, a);
      CheckAddress(sb, extension, "superblock extension", true);
      if (!Undefined(sb, extension)) {
        CheckObjectHeader(sb, extension, "superblock extension");
        sb.extension_address = extension;
      }
    }
    CheckAddress(sb, sb.root_header_address, "root group object header", false);
    CheckObjectHeader(sb, sb.root_header_address, "root group object header");
    return sb;
  }

 private:
  [[noreturn]] void Damaged(const std::string& what) const {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: damaged HDF5 superblock: {}", file_.path(), what));
  }

  uint64_t FindSignature() const {
    // libhdf5 looks at 0, 512, 1024, 2048, ...: the user block is a power of two >= 512.
    for (uint64_t at = 0; at < file_.Size(); at = at == 0 ? 512 : at * 2) {
      const std::vector<unsigned char> head = ReadUpTo(at, 8);
      if (head.size() == 8 && std::memcmp(head.data(), kSignature, 8) == 0) return at;
    }
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: not an HDF5 file (no HDF5 signature)", file_.path()));
  }

  std::vector<unsigned char> ReadUpTo(uint64_t at, size_t n) const {
    std::vector<unsigned char> out(n, 0);
    if (at >= file_.Size()) return out;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, file_.Size() - at));
    size_t done = 0;
    while (done < want) {
      const size_t got = file_.ReadAt(at + done, out.data() + done, want - done);
      if (got == 0) break;
      done += got;
    }
    out.resize(done);
    return out;
  }

  unsigned Byte(size_t pos) const { return static_cast<unsigned>(Uint(pos, 1)); }

  // A field of the superblock, read through the one bounded reader of metadata bytes.
  uint64_t Uint(size_t pos, size_t width) const { return Bytes(bytes_, &name_).Uint(pos, width); }

  void CheckWidths(const Hdf5Superblock& sb) const {
    for (unsigned w : {sb.sizeof_addr, sb.sizeof_size}) {
      if (w != 2 && w != 4 && w != 8) {
        throw Error(ErrorCode::kUnsupported,
                    fmt::format("{}: the HDF5 file's offsets or lengths are {} bytes wide "
                                "(gpufeed reads 2, 4 or 8)",
                                file_.path(), w));
      }
    }
  }

  static bool Undefined(const Hdf5Superblock& sb, uint64_t addr) {
    return sb.sizeof_addr >= 8 ? addr == ~uint64_t{0}
                               : addr == (uint64_t{1} << (8 * sb.sizeof_addr)) - 1;
  }

  // libhdf5 takes the signature's offset as the base when the stored base differs (a user
  // block added after writing), so addresses are checked against that.
  // The end of allocation libhdf5 enforces on every read: like libhdf5 (H5F__super_read), a
  // stored base address other than the signature's offset moves the base to the signature and
  // the stored end-of-file address by the difference (unsigned arithmetic, as libhdf5's).
  static uint64_t EndOfFile(const Hdf5Superblock& sb, uint64_t stored_base, uint64_t stored_eof) {
    return stored_eof - (stored_base - sb.signature_offset);
  }

  uint64_t Base(const Hdf5Superblock& sb, uint64_t stored) const {
    if (stored != sb.signature_offset && stored > file_.Size()) {
      Damaged(fmt::format("base address {} lies past the end of the file ({} bytes)", stored,
                          file_.Size()));
    }
    return sb.signature_offset;
  }

  void CheckAddress(const Hdf5Superblock& sb, uint64_t addr, const char* what,
                    bool may_be_undefined) const {
    if (Undefined(sb, addr)) {
      if (may_be_undefined) return;
      Damaged(fmt::format("the {} address is undefined", what));
    }
    const auto absolute = CheckedAdd(sb.base_address, addr);
    if (!absolute || *absolute >= file_.Size()) {
      Damaged(fmt::format("the {} at offset {} lies past the end of the file ({} bytes)", what,
                          addr, file_.Size()));
    }
  }

  // The object header prefix at `addr`: a known version, and its first block inside the file.
  void CheckObjectHeader(const Hdf5Superblock& sb, uint64_t addr, const char* what) const {
    const uint64_t at = sb.base_address + addr;  // checked by CheckAddress
    const std::vector<unsigned char> head = ReadUpTo(at, 32);
    const std::string name = fmt::format("{}: the {}", file_.path(), what);
    const Bytes b(head, &name);
    uint64_t block_start = 0, block_bytes = 0;
    if (b.Signature(0, "OHDR")) {
      if (b.Uint(4, 1) != 2) Damaged(fmt::format("the {} has version {}", what, b.Uint(4, 1)));
      const ObjectHeaderV2Prefix prefix = ParseObjectHeaderV2Prefix(b.Uint(5, 1));
      block_bytes = b.Uint(prefix.chunk0_size_at, prefix.chunk0_size_width);
      block_start = prefix.chunk0_size_at + prefix.chunk0_size_width;
    } else {
      if (b.Uint(0, 1) != 1) Damaged(fmt::format("the {} has version {}", what, b.Uint(0, 1)));
      block_bytes = b.Uint(8, 4);
      block_start = 16;
    }
    const auto end = CheckedAdd(at + block_start, block_bytes);
    if (!end || *end > file_.Size()) {
      Damaged(
          fmt::format("the {} at offset {} ({} bytes) runs past the end of the file ({} "
                      "bytes)",
                      what, addr, block_bytes, file_.Size()));
    }
  }

  const File& file_;
  const std::string name_;  // names the superblock in errors
  std::vector<unsigned char> bytes_;
};

}  // namespace

Hdf5Superblock CheckHdf5Superblock(const File& file) {
  Hdf5Superblock sb = SuperblockReader(file).Read();
  return sb;
}

}  // namespace gpufeed
