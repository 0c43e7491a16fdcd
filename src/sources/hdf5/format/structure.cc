#include "sources/hdf5/format/structure.h"

#include <fmt/format.h>

#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/dense_links.h"
#include "sources/hdf5/format/message_checks.h"
#include "sources/hdf5/format/metadata_bytes.h"
#include "sources/hdf5/format/structure_walker.h"

namespace gpufeed {
namespace hdf5_structure {

Hdf5StructureSummary StructureWalker::Run() {
  if (sb_.extension_address != ~uint64_t{0}) {
    // The extension first: it may hold the symbol-table K values the groups use.
    extension_ = true;
    CheckHeader(sb_.extension_address, "the superblock extension");
    extension_ = false;
  }
  HardLink(sb_.root_header_address, "/");  // the superblock's pointer is the root's one link
  while (!pending_.empty()) {
    const auto [addr, path] = pending_.back();
    pending_.pop_back();
    CheckHeader(addr, path);
  }
  CheckLinkCounts();
  CheckCommittedTypeSizes();
  return summary_;
}

void StructureWalker::Damaged(const std::string& what) const {
  throw Error(ErrorCode::kCorruptData,
              fmt::format("{}: damaged HDF5 metadata: {}", file_.path(), what));
}

bool StructureWalker::Undefined(uint64_t addr) const {
  return o_ >= 8 ? addr == ~uint64_t{0} : addr == (uint64_t{1} << (8 * o_)) - 1;
}

std::vector<uint8_t> StructureWalker::Read(uint64_t addr, uint64_t n, const std::string& what) {
  const auto absolute = CheckedAdd(sb_.base_address, addr);
  if (!absolute || *absolute > file_.Size() || n > file_.Size() - *absolute) {
    Damaged(fmt::format("{} at offset {} ({} bytes) lies past the end of the file ({} bytes)", what,
                        addr, n, file_.Size()));
  }
  if (n > read_budget_) {
    Damaged(
        fmt::format("{} at offset {}: the metadata overlaps itself (more than {} bytes "
                    "read for a {}-byte file)",
                    what, addr, 4 * file_.Size() + (uint64_t{1} << 20), file_.Size()));
  }
  read_budget_ -= n;
  std::vector<uint8_t> out(n);
  ReadFully(file_, *absolute, out.data(), n, what);
  return out;
}

std::vector<uint8_t> StructureWalker::ReadPrefix(uint64_t addr, uint64_t n,
                                                 const std::string& what) {
  const auto absolute = CheckedAdd(sb_.base_address, addr);
  if (!absolute || *absolute >= file_.Size()) {
    Damaged(fmt::format("{} at offset {} lies past the end of the file ({} bytes)", what, addr,
                        file_.Size()));
  }
  return Read(addr, std::min<uint64_t>(n, file_.Size() - *absolute), what);
}

void StructureWalker::CheckAddressInFile(uint64_t addr, const std::string& what) {
  const auto absolute = CheckedAdd(sb_.base_address, addr);
  if (!absolute || *absolute >= file_.Size()) {
    Damaged(fmt::format("{} at offset {} lies past the end of the file ({} bytes)", what, addr,
                        file_.Size()));
  }
}

void StructureWalker::CheckSignatureAt(uint64_t addr, const char* sig, const std::string& what) {
  const std::vector<uint8_t> head = ReadPrefix(addr, 4, what);
  if (head.size() < 4 || std::memcmp(head.data(), sig, 4) != 0) {
    Damaged(fmt::format("{} at offset {} lacks its {} signature", what, addr, sig));
  }
}

void StructureWalker::HardLink(uint64_t addr, std::string path) {
  ++links_[addr];
  pending_.emplace_back(addr, std::move(path));
}

std::string StructureWalker::ChildPath(std::string_view name) const {
  return (path_ == "/" ? path_ : path_ + "/") + std::string(name);
}

void StructureWalker::CheckCommittedTypeSizes() const {
  for (const auto& [path, facts] : committed_compact_) {
    const auto size = type_sizes_.find(*facts.shared_type);
    if (size == type_sizes_.end()) continue;  // not a datatype: libhdf5 refuses to open it
    Hdf5DatasetMessages resolved = facts;
    resolved.type_size = size->second;
    WithObjectPath(path, true, [&] { CheckCompactLayout(ctx_, resolved); });
  }
}

void StructureWalker::CheckLinkCounts() const {
  for (const auto& [addr, links] : links_) {
    if (links < 2) continue;
    const auto rc = ref_counts_.find(addr);
    const uint64_t count = rc == ref_counts_.end() ? 1 : rc->second;
    if (count < 2) {
      Damaged(
          fmt::format("object header at offset {} is reached by {} hard links but its "
                      "reference count is {}",
                      addr, links, count));
    }
  }
}

void StructureWalker::CheckHeader(uint64_t addr, const std::string& path) {
  if (!headers_.insert(addr).second) return;  // hard links may share an object
  path_ = path;
  messages_ = Hdf5DatasetMessages();
  WithObjectPath(path, false, [&] {
    CheckHeaderMessages(addr);
    if (messages_.compact_size && messages_.shared_type) {
      committed_compact_.emplace_back(path, messages_);
    } else if (messages_.compact_size) {
      CheckCompactLayout(ctx_, messages_);
    }
  });
  if (messages_.type_size) type_sizes_[addr] = *messages_.type_size;
}

void StructureWalker::CheckHeaderMessages(uint64_t addr) {
  if (headers_.size() > kMaxObjects) {
    Damaged(fmt::format("more than {} object headers", kMaxObjects));
  }
  ++summary_.objects;
  const std::string what = fmt::format("object header at offset {}", addr);
  const std::vector<uint8_t> head = ReadPrefix(addr, 40, what);
  Bytes h(head, &what);
  struct Block {
    uint64_t address, length;
  };
  std::vector<Block> blocks;
  bool v2 = false, track_order = false;
  if (h.Signature(0, "OHDR")) {
    v2 = true;
    if (h.Uint(4, 1) != 2) Damaged(fmt::format("{} has version {}", what, h.Uint(4, 1)));
    const ObjectHeaderV2Prefix header = ParseObjectHeaderV2Prefix(h.Uint(5, 1));
    track_order = header.tracks_attribute_order;
    const size_t pos = header.chunk0_size_at;
    const size_t width = header.chunk0_size_width;
    blocks.push_back({AddOrDamaged(addr, pos + width, what), h.Uint(pos, width)});
  } else {
    if (h.Uint(0, 1) != 1) Damaged(fmt::format("{} has version {}", what, h.Uint(0, 1)));
    ref_counts_[addr] = h.Uint(4, 4);  // version 2 keeps it in a message (kRefCount)
    blocks.push_back({AddOrDamaged(addr, 16, what), h.Uint(8, 4)});
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    const std::string block_what = fmt::format("{} (block at offset {})", what, blocks[b].address);
    const std::vector<uint8_t> data = Read(blocks[b].address, blocks[b].length, block_what);
    Bytes block(data, &block_what);
    size_t pos = 0;
    size_t end = data.size();
    if (v2 && b > 0) {
      // A continuation block holds its signature and checksum; chunk 0's length counts
      // only its messages (the checksum follows it).
      if (!block.Signature(0, "OCHK")) Damaged(block_what + " lacks its OCHK signature");
      if (end < 8) Damaged(block_what + " is too short for its checksum");
      pos = 4;
      end -= 4;
    }
    const size_t prefix = v2 ? (track_order ? 6 : 4) : 8;
    while (pos + prefix <= end) {
      const unsigned type = static_cast<unsigned>(v2 ? block.Uint(pos, 1) : block.Uint(pos, 2));
      const size_t size = static_cast<size_t>(v2 ? block.Uint(pos + 1, 2) : block.Uint(pos + 2, 2));
      const unsigned flags = static_cast<unsigned>(block.Uint(pos + (v2 ? 3 : 4), 1));
      const size_t start = pos + prefix;
      if (size > end - start) {
        Damaged(
            fmt::format("{}: message type {} at {} ({} bytes) runs past its block ({} "
                        "bytes)",
                        block_what, type, start, size, end));
      }
      const std::string msg_what = fmt::format("{}: message type {}", what, type);
      const Bytes msg(std::span<const uint8_t>(data).subspan(start, size), &msg_what);
      if (type == kContinuation) {
        const uint64_t at = msg.Uint(0, o_);
        const uint64_t length = msg.Uint(o_, l_);
        if (!continuations_.insert(at).second) {
          Damaged(fmt::format("{}: continuation block at offset {} is reached twice", what, at));
        }
        blocks.push_back({at, length});
      } else {
        if (type == kRefCount) {
          if (flags & 0x02) Damaged(msg_what + ": a shared reference count");
          ref_counts_[addr] = msg.Uint(1, 4);  // version, count
        }
        CheckMessage(type, flags, msg, msg_what);
      }
      pos = start + size;
    }
  }
}

uint64_t StructureWalker::AddOrDamaged(uint64_t a, uint64_t b, const std::string& what) const {
  const auto sum = CheckedAdd(a, b);
  if (!sum) Damaged(fmt::format("{}: offset {} + {} overflows", what, a, b));
  return *sum;
}

void StructureWalker::CheckMessage(unsigned type, unsigned flags, const Bytes& m,
                                   const std::string& what) {
  if (flags & 0x02) {  // shared: the message body is elsewhere
    const uint64_t target = CheckSharedPointer(m, what);
    if (type == kDatatype) messages_.shared_type = target;
    return;
  }
  switch (type) {
    case kDataspace:
      messages_.elements = CheckDataspaceMessage(ctx_, m);
      messages_.has_dataspace = true;
      break;
    case kDatatype:
      CheckDatatypeMessage(ctx_, m, 0, 0);
      messages_.type_size = m.Uint(4, 4);
      break;
    case kFillOld:
      m.Need(4, m.Uint(0, 4));
      break;
    case kFill:
      CheckFillMessage(ctx_, m);
      break;
    case kLayout:
      messages_.compact_size = CheckLayoutMessage(ctx_, m);
      break;
    case kPipeline:
      CheckPipelineMessage(ctx_, m);
      break;
    case kGroupInfo:
      CheckGroupInfoMessage(ctx_, m);
      break;
    case kDriverInfo:
      CheckDriverInfoMessage(ctx_, m);
      break;
    case kSharedTable:
      CheckSharedTableMessage(ctx_, m);
      break;
    case kFileSpaceInfo:
      CheckFileSpaceInfoMessage(ctx_, m);
      break;
    case kCacheImage:
      // libhdf5 loads a metadata cache image (H5Pset_mdc_image_config) at open and trusts
      // every entry in it; gpufeed does not walk one.
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: {}: a metadata cache image is not supported; rewrite the file "
                              "without one (h5repack)",
                              file_.path(), what));
    case kExternalFiles:
      CheckExternalFileList(m, what);
      break;
    case kSymbolTable:
      CheckGroupTree(m.Uint(0, o_), m.Uint(o_, o_));
      break;
    case kLink:
      CheckLink(m);
      break;
    case kLinkInfo:
      CheckDenseIndex(m, "link", true);
      break;
    case kAttributeInfo:
      CheckDenseIndex(m, "attribute", false);
      break;
    case kBTreeK:
      if (extension_) {
        // version, chunk K, group internal K, group leaf K
        group_internal_k_ = static_cast<unsigned>(m.Uint(3, 2));
        group_leaf_k_ = static_cast<unsigned>(m.Uint(5, 2));
        if (group_internal_k_ == 0 || group_leaf_k_ == 0) Damaged(what + ": a B-tree K of 0");
      }
      break;
    default:
      break;
  }
}

uint64_t StructureWalker::CheckSharedPointer(const Bytes& m, const std::string& what) {
  const uint64_t version = m.Uint(0, 1);
  const uint64_t kind = m.Uint(1, 1);
  uint64_t addr = 0;
  if (version == 1) {
    addr = m.Uint(8, o_);
  } else if (version == 2) {
    addr = m.Uint(2, o_);
  } else if (version == 3) {
    if (kind == 1) {
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: {}: shared object header messages (kept in a shared-message "
                              "table) are not supported",
                              file_.path(), what));
    }
    if (kind != 2) Damaged(fmt::format("{}: shared message of kind {}", what, kind));
    addr = m.Uint(2, o_);
  } else {
    Damaged(fmt::format("{}: shared message version {}", what, version));
  }
  // A committed datatype: an object header libhdf5 reads to decode the message.
  CheckAddressInFile(addr, what + ": shared message");
  pending_.emplace_back(addr, path_ + " (its committed datatype)");
  return addr;
}

std::string StructureWalker::CheckLink(const Bytes& m) {
  if (m.Uint(0, 1) != 1) Damaged(fmt::format("link message version {}", m.Uint(0, 1)));
  const uint64_t flags = m.Uint(1, 1);
  if (flags & ~uint64_t{0x1f}) Damaged(fmt::format("link message flags 0x{:02x}", flags));
  size_t pos = 2;
  uint64_t kind = 0;
  if (flags & 0x08) kind = m.Uint(pos++, 1);
  if (flags & 0x04) pos += 8;
  if (flags & 0x10) {
    const uint64_t cset = m.Uint(pos++, 1);
    if (cset > 1) Damaged(fmt::format("link name character set {}", cset));
  }
  const size_t width = size_t{1} << (flags & 0x03);
  const uint64_t name = m.Uint(pos, width);
  pos += width;
  if (name == 0) Damaged("link with an empty name");
  m.Need(pos, name);
  std::string link_name(reinterpret_cast<const char*>(m.span().data() + pos), name);
  CheckLinkName(link_name, "link message");
  pos += name;
  if (kind == 0) {
    const uint64_t addr = m.Uint(pos, o_);
    CheckAddressInFile(addr, "hard link target");
    HardLink(addr, ChildPath(link_name));
  } else if (kind == 1 || kind >= 64) {
    const uint64_t len = m.Uint(pos, 2);
    if (kind == 1 && len == 0) Damaged("soft link with an empty target");
    if (kind == 64 && len < 3) Damaged(fmt::format("external link of {} bytes", len));
    m.Need(pos + 2, len);
  } else {
    Damaged(fmt::format("link of type {}", kind));
  }
  return link_name;
}

void StructureWalker::CheckDenseIndex(const Bytes& m, const char* what, bool links) {
  if (m.Uint(0, 1) != 0) Damaged(fmt::format("{} info version {}", what, m.Uint(0, 1)));
  const uint64_t flags = m.Uint(1, 1);
  size_t pos = 2;
  if (flags & 0x01) pos += links ? 8 : 2;
  const uint64_t heap = m.Uint(pos, o_);
  const uint64_t names = m.Uint(pos + o_, o_);
  if (flags & 0x02) m.Need(pos + 2 * o_, o_);
  if (Undefined(heap)) return;
  if (links) {
    // libhdf5 walks the links' fractal heap and v2 B-tree blindly (a crafted one crashes
    // H5Ovisit2 in H5G__dense_iterate): gpufeed reads and checks them first.
    const uint64_t none = o_ >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * o_)) - 1;
    const uint64_t order = (flags & 0x02) ? m.Uint(pos + 2 * o_, o_) : none;
    const Hdf5DenseLinks where{heap, names, order};
    ReadHdf5DenseLinks(dense_, where, [&](const Bytes& link) { return CheckLink(link); });
    return;
  }
  // Attributes: libhdf5 only reads the name index's header (to count them).
  CheckSignatureAt(heap, "FRHP", fmt::format("{} heap", what));
  CheckSignatureAt(names, "BTHD", fmt::format("{} name index", what));
}

}  // namespace hdf5_structure

Hdf5StructureSummary CheckHdf5Structure(const File& file, const Hdf5Superblock& sb) {
  return hdf5_structure::StructureWalker(file, sb).Run();
}

}  // namespace gpufeed
