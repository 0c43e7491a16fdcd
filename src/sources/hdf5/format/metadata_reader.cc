#include "sources/hdf5/format/metadata_reader.h"

#include <fmt/format.h>

#include "core/checked_math.h"
#include "gpufeed/error.h"

namespace gpufeed {

Hdf5MetadataReader::Hdf5MetadataReader(const File& file, const Hdf5ObjectLocation& where,
                                       std::string what)
    : file_(file),
      where_(where),
      what_(std::move(what)),
      // Each block is read once; blocks of a crafted file may overlap, but reading more than
      // a few times the file's size means the metadata overlaps itself.
      read_budget_(4 * file.Size() + (uint64_t{1} << 20)) {
  for (unsigned width : {where.sizeof_addr, where.sizeof_size}) {
    if (width != 2 && width != 4 && width != 8) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: the file's offsets or lengths are {} bytes wide (gpufeed "
                              "reads 2, 4 or 8)",
                              what_, width));
    }
  }
}

void Hdf5MetadataReader::Damaged(const std::string& message) const {
  throw Error(ErrorCode::kCorruptData, fmt::format("{}: {}", what_, message));
}

bool Hdf5MetadataReader::Undefined(uint64_t addr) const {
  return where_.sizeof_addr >= 8 ? addr == ~uint64_t{0}
                                 : addr == (uint64_t{1} << (8 * where_.sizeof_addr)) - 1;
}

uint64_t Hdf5MetadataReader::Absolute(uint64_t addr, std::string_view structure) const {
  const auto absolute = CheckedAdd(where_.base_address, addr);
  if (!absolute || *absolute >= file_.Size()) {
    Damaged(
        fmt::format("{} at offset {} lies past the end of the file ({} bytes): truncated "
                    "file?",
                    structure, addr, file_.Size()));
  }
  return *absolute;
}

std::vector<uint8_t> Hdf5MetadataReader::Read(uint64_t addr, uint64_t n,
                                              std::string_view structure) {
  const uint64_t absolute = Absolute(addr, structure);
  if (addr > where_.end_of_allocation || n > where_.end_of_allocation - addr) {
    // libhdf5 fails such a read, and in a dense group's link table that failure crashes it
    // (H5G__link_release_table frees the entries never filled).
    Damaged(fmt::format("{} at offset {} ({} bytes) lies past the file's end of allocation "
                        "({} bytes, from its superblock)",
                        structure, addr, n, where_.end_of_allocation));
  }
  if (n > file_.Size() - absolute) {
    Damaged(
        fmt::format("{} at offset {} ({} bytes) runs past the end of the file ({} bytes): "
                    "truncated file?",
                    structure, addr, n, file_.Size()));
  }
  if (n > read_budget_) {
    Damaged(
        fmt::format("{} at offset {}: the metadata overlaps itself (more than 4 times the "
                    "file's {} bytes read)",
                    structure, addr, file_.Size()));
  }
  read_budget_ -= n;
  std::vector<uint8_t> out(n);
  ReadFully(file_, absolute, out.data(), n, what_ + " metadata");
  return out;
}

void Hdf5MetadataReader::VisitOnce(uint64_t addr, std::string_view structure) {
  if (!visited_.insert(addr).second) {
    Damaged(fmt::format("{} at offset {} is reached twice (a damaged index)", structure, addr));
  }
}

std::vector<uint8_t> Hdf5MetadataReader::ReadChecked(uint64_t addr, uint64_t n,
                                                     const char* signature,
                                                     std::string_view structure) {
  std::vector<uint8_t> block = Read(addr, n, structure);
  const std::string name(structure);
  const Bytes b(block, &name);
  if (!b.Signature(0, signature)) {
    Damaged(fmt::format("{} at offset {} lacks its {} signature", structure, addr, signature));
  }
  if (b.Uint(4, 1) != 0) {
    Damaged(fmt::format("{} at offset {} has version {}", structure, addr, b.Uint(4, 1)));
  }
  if (!b.ChecksumHolds()) {
    Damaged(fmt::format("{} at offset {} fails its checksum", structure, addr));
  }
  return block;
}

}  // namespace gpufeed
