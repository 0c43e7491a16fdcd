#include "sources/hdf5/structure.h"

#include <fmt/format.h>

#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "sources/hdf5/dense_links.h"
#include "sources/hdf5/message_checks.h"
#include "sources/hdf5/metadata_bytes.h"
#include "sources/hdf5/metadata_reader.h"

namespace gpufeed {
namespace {

// Object header message types (HDF5 file format specification, section IV.A.2).
constexpr unsigned kDataspace = 0x0001;
constexpr unsigned kLinkInfo = 0x0002;
constexpr unsigned kDatatype = 0x0003;
constexpr unsigned kFillOld = 0x0004;
constexpr unsigned kFill = 0x0005;
constexpr unsigned kLink = 0x0006;
constexpr unsigned kExternalFiles = 0x0007;
constexpr unsigned kLayout = 0x0008;
constexpr unsigned kPipeline = 0x000B;
constexpr unsigned kContinuation = 0x0010;
constexpr unsigned kSymbolTable = 0x0011;
constexpr unsigned kBTreeK = 0x0013;
constexpr unsigned kAttributeInfo = 0x0015;
constexpr unsigned kRefCount = 0x0016;

constexpr uint64_t kMaxObjects = uint64_t{1} << 20;
constexpr int kMaxTreeLevel = 64;

class StructureWalker {
 public:
  StructureWalker(const File& file, const Hdf5Superblock& sb)
      : file_(file),
        sb_(sb),
        o_(sb.sizeof_addr),
        l_(sb.sizeof_size),
        ctx_{file.path(), sb.sizeof_addr, sb.sizeof_size},
        dense_(
            file,
            Hdf5ObjectLocation{0, sb.base_address, sb.sizeof_addr, sb.sizeof_size, sb.end_of_file},
            file.path()),
        // Each structure is read once; overlapping ones may share bytes, but not more than a
        // few times over in a file a library wrote.
        read_budget_(4 * file.Size() + (uint64_t{1} << 20)) {}

  Hdf5StructureSummary Run() {
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

 private:
  [[noreturn]] void Damaged(const std::string& what) const {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: damaged HDF5 metadata: {}", file_.path(), what));
  }

  bool Undefined(uint64_t addr) const {
    return o_ >= 8 ? addr == ~uint64_t{0} : addr == (uint64_t{1} << (8 * o_)) - 1;
  }

  // `n` bytes of the structure `what` at relative address `addr`, inside the file.
  std::vector<uint8_t> Read(uint64_t addr, uint64_t n, const std::string& what) {
    const auto absolute = CheckedAdd(sb_.base_address, addr);
    if (!absolute || *absolute > file_.Size() || n > file_.Size() - *absolute) {
      Damaged(fmt::format("{} at offset {} ({} bytes) lies past the end of the file ({} bytes)",
                          what, addr, n, file_.Size()));
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

  // Up to `n` bytes at `addr` (fewer at the end of the file), for prefixes of unknown length.
  std::vector<uint8_t> ReadPrefix(uint64_t addr, uint64_t n, const std::string& what) {
    const auto absolute = CheckedAdd(sb_.base_address, addr);
    if (!absolute || *absolute >= file_.Size()) {
      Damaged(fmt::format("{} at offset {} lies past the end of the file ({} bytes)", what, addr,
                          file_.Size()));
    }
    return Read(addr, std::min<uint64_t>(n, file_.Size() - *absolute), what);
  }

  void CheckAddressInFile(uint64_t addr, const std::string& what) {
    const auto absolute = CheckedAdd(sb_.base_address, addr);
    if (!absolute || *absolute >= file_.Size()) {
      Damaged(fmt::format("{} at offset {} lies past the end of the file ({} bytes)", what, addr,
                          file_.Size()));
    }
  }

  void CheckSignatureAt(uint64_t addr, const char* sig, const std::string& what) {
    const std::vector<uint8_t> head = ReadPrefix(addr, 4, what);
    if (head.size() < 4 || std::memcmp(head.data(), sig, 4) != 0) {
      Damaged(fmt::format("{} at offset {} lacks its {} signature", what, addr, sig));
    }
  }

  // ---- object headers -------------------------------------------------------------------

  // A hard link to the object header at `addr` (a group's entry, a link message, the root's
  // pointer): counted, and the header queued for checking.
  void HardLink(uint64_t addr, std::string path) {
    ++links_[addr];
    pending_.emplace_back(addr, std::move(path));
  }

  // The path of link `name` in the group being checked.
  std::string ChildPath(std::string_view name) const {
    return (path_ == "/" ? path_ : path_ + "/") + std::string(name);
  }

  // Compact data whose dataset's type is a committed one: checked once every header is read.
  void CheckCommittedTypeSizes() const {
    for (const auto& [path, facts] : committed_compact_) {
      const auto size = type_sizes_.find(*facts.shared_type);
      if (size == type_sizes_.end()) continue;  // not a datatype: libhdf5 refuses to open it
      Hdf5DatasetMessages resolved = facts;
      resolved.type_size = size->second;
      WithObjectPath(path, true, [&] { CheckCompactLayout(ctx_, resolved); });
    }
  }

  // Runs `check`; an error it throws names the object at `path` after the file.
  template <typename F>
  void WithObjectPath(const std::string& path, bool dataset, F&& check) const {
    try {
      check();
    } catch (const Error& e) {
      std::string_view rest = e.what();
      const std::string prefix = file_.path() + ": ";
      if (rest.starts_with(prefix)) rest.remove_prefix(prefix.size());
      throw Error(e.code(), fmt::format("{}: {} {}: {}", file_.path(),
                                        dataset || messages_.has_dataspace ? "dataset" : "object",
                                        path, rest));
    }
  }

  // libhdf5's visit of a group tree (H5Ovisit2, which lists the datasets) remembers an object
  // only when its reference count says more than one link reaches it: an object reached by
  // more links than that is visited once per path, endlessly around a cycle (a group linking
  // to itself: the stack overflows; found by hdf5_fuzz), exponentially along chains.
  void CheckLinkCounts() const {
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

  void CheckHeader(uint64_t addr, const std::string& path) {
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

  void CheckHeaderMessages(uint64_t addr) {
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
      const uint64_t flags = h.Uint(5, 1);
      track_order = (flags & 0x04) != 0;
      size_t pos = 6;
      if (flags & 0x20) pos += 16;
      if (flags & 0x10) pos += 4;
      const size_t width = size_t{1} << (flags & 0x03);
      blocks.push_back({AddOrDamaged(addr, pos + width, what), h.Uint(pos, width)});
    } else {
      if (h.Uint(0, 1) != 1) Damaged(fmt::format("{} has version {}", what, h.Uint(0, 1)));
      ref_counts_[addr] = h.Uint(4, 4);  // version 2 keeps it in a message (kRefCount)
      blocks.push_back({AddOrDamaged(addr, 16, what), h.Uint(8, 4)});
    }
    for (size_t b = 0; b < blocks.size(); ++b) {
      const std::string block_what =
          fmt::format("{} (block at offset {})", what, blocks[b].address);
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
        const size_t size =
            static_cast<size_t>(v2 ? block.Uint(pos + 1, 2) : block.Uint(pos + 2, 2));
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

  uint64_t AddOrDamaged(uint64_t a, uint64_t b, const std::string& what) const {
    const auto sum = CheckedAdd(a, b);
    if (!sum) Damaged(fmt::format("{}: offset {} + {} overflows", what, a, b));
    return *sum;
  }

  void CheckMessage(unsigned type, unsigned flags, const Bytes& m, const std::string& what) {
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

  // Returns the address of the object header that holds the message.
  uint64_t CheckSharedPointer(const Bytes& m, const std::string& what) {
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

  // Checks a link message; returns the link's name.
  // Everything libhdf5's link decoder (H5O__link_decode) refuses is refused here first: in a
  // dense group, libhdf5 1.10.8 builds a table of the group's links and, when one fails to
  // decode, frees the table's never-filled entries (H5G__link_release_table), which crashes.
  std::string CheckLink(const Bytes& m) {
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

  // Link info / attribute info: dense storage is a fractal heap and a v2 B-tree name index.
  void CheckDenseIndex(const Bytes& m, const char* what, bool links) {
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

  // ---- old-style groups -------------------------------------------------------------------

  // The data segment of the local heap at `addr`, read and checked once.
  const std::vector<uint8_t>& LocalHeap(uint64_t addr) {
    auto it = heaps_.find(addr);
    if (it != heaps_.end()) return it->second;
    const std::string what = fmt::format("local heap at offset {}", addr);
    const std::vector<uint8_t> head = Read(addr, 8 + 2 * l_ + o_, what);
    Bytes h(head, &what);
    if (!h.Signature(0, "HEAP") || h.Uint(4, 1) != 0) Damaged(what + " lacks its signature");
    const uint64_t size = h.Uint(8, l_);
    const uint64_t free_list = h.Uint(8 + l_, l_);
    const uint64_t data_addr = h.Uint(8 + 2 * l_, o_);
    std::vector<uint8_t> data = Read(data_addr, size, what + " data");
    // The free list: blocks inside the segment, no block twice (libhdf5 follows it blindly).
    std::unordered_set<uint64_t> seen;
    const uint64_t kFreeNull = 1;
    Bytes d(data, &what);
    for (uint64_t at = free_list; at != kFreeNull;) {
      if (!seen.insert(at).second) Damaged(what + ": its free list loops");
      if (at > size || 2 * l_ > size - at) Damaged(what + ": a free block lies outside the heap");
      const uint64_t next = d.Uint(at, l_);
      const uint64_t length = d.Uint(at + l_, l_);
      if (length > size - at) Damaged(what + ": a free block runs past the heap");
      at = next;
    }
    return heaps_.emplace(addr, std::move(data)).first->second;
  }

  void CheckName(const std::vector<uint8_t>& heap, uint64_t offset, const std::string& what) {
    if (offset >= heap.size() ||
        std::memchr(heap.data() + offset, 0, heap.size() - offset) == nullptr) {
      Damaged(
          fmt::format("{}: name at heap offset {} is not a terminated string inside the "
                      "heap ({} bytes)",
                      what, offset, heap.size()));
    }
  }

  // The external file list of a dataset whose data lies in other files: libhdf5 reads its
  // local heap (allocating the heap's stated size) and each used slot's file name from it
  // when it opens the dataset. Version, slot counts, the heap and every name checked.
  void CheckExternalFileList(const Bytes& m, const std::string& what) {
    const uint64_t version = m.Uint(0, 1);
    if (version != 1) Damaged(fmt::format("{}: external file list version {}", what, version));
    const uint64_t allocated = m.Uint(4, 2);
    const uint64_t used = m.Uint(6, 2);
    if (used > allocated) {
      Damaged(fmt::format("{}: external file list uses {} of its {} slots", what, used, allocated));
    }
    const uint64_t heap_addr = m.Uint(8, o_);
    const size_t slots = 8 + o_;
    m.Need(slots, used * 3 * l_);  // name offset, file offset, size: used <= 65535
    const std::vector<uint8_t>& heap = LocalHeap(heap_addr);
    for (uint64_t i = 0; i < used; ++i) {
      CheckName(heap, m.Uint(slots + i * 3 * l_, l_), what + ": external file name");
    }
  }

  // A link's name: libhdf5 resolves names as paths, so one holding a '/' or one that is "."
  // names another object than the link's (the root, the group itself): its visit of the
  // tree then recurses without end (a link named "/": the stack overflowed; found by
  // hdf5_fuzz). h5py and libhdf5 refuse to create such names.
  void CheckLinkName(std::string_view name, const std::string& what) const {
    if (name.find('/') != std::string_view::npos || name == ".") {
      Damaged(fmt::format("{}: a link named '{}' (names hold no '/' and are not '.')", what, name));
    }
  }

  void CheckGroupTree(uint64_t btree, uint64_t heap_addr) {
    const std::vector<uint8_t>& heap = LocalHeap(heap_addr);
    CheckGroupNode(btree, -1, heap, 0);
  }

  void CheckGroupNode(uint64_t addr, int expected_level, const std::vector<uint8_t>& heap,
                      int depth) {
    const std::string what = fmt::format("group B-tree node at offset {}", addr);
    if (!nodes_.insert(addr).second) Damaged(what + " is reached twice");
    if (depth > kMaxTreeLevel) Damaged(what + " lies too deep");
    const size_t header = 8 + 2 * o_;
    const std::vector<uint8_t> head = Read(addr, header, what);
    Bytes h(head, &what);
    if (!h.Signature(0, "TREE") || h.Uint(4, 1) != 0) Damaged(what + " lacks its signature");
    const int level = static_cast<int>(h.Uint(5, 1));
    const uint64_t entries = h.Uint(6, 2);
    if (level > kMaxTreeLevel || (expected_level >= 0 && level != expected_level)) {
      Damaged(fmt::format("{} has level {}, expected {}", what, level, expected_level));
    }
    if (entries > 2 * uint64_t{group_internal_k_}) {
      Damaged(fmt::format("{} has {} entries, more than 2K = {}", what, entries,
                          2 * group_internal_k_));
    }
    const std::vector<uint8_t> body =
        Read(AddOrDamaged(addr, header, what), entries * (l_ + o_) + l_, what);
    Bytes b(body, &what);
    for (uint64_t i = 0; i <= entries; ++i) CheckName(heap, b.Uint(i * (l_ + o_), l_), what);
    for (uint64_t i = 0; i < entries; ++i) {
      const uint64_t child = b.Uint(i * (l_ + o_) + l_, o_);
      if (level > 0) {
        CheckGroupNode(child, level - 1, heap, depth + 1);
      } else {
        CheckSymbolNode(child, heap);
      }
    }
  }

  void CheckSymbolNode(uint64_t addr, const std::vector<uint8_t>& heap) {
    const std::string what = fmt::format("symbol table node at offset {}", addr);
    if (!nodes_.insert(addr).second) Damaged(what + " is reached twice");
    const std::vector<uint8_t> head = Read(addr, 8, what);
    Bytes h(head, &what);
    if (!h.Signature(0, "SNOD") || h.Uint(4, 1) != 1) Damaged(what + " lacks its signature");
    const uint64_t symbols = h.Uint(6, 2);
    if (symbols > 2 * uint64_t{group_leaf_k_}) {
      Damaged(
          fmt::format("{} has {} entries, more than 2K = {}", what, symbols, 2 * group_leaf_k_));
    }
    const size_t entry = l_ + o_ + 24;
    const std::vector<uint8_t> body = Read(AddOrDamaged(addr, 8, what), symbols * entry, what);
    Bytes b(body, &what);
    for (uint64_t i = 0; i < symbols; ++i) {
      const size_t at = i * entry;
      const uint64_t name = b.Uint(at, l_);
      CheckName(heap, name, what);  // terminated inside the heap
      CheckLinkName(reinterpret_cast<const char*>(heap.data() + name), what);
      const uint64_t header = b.Uint(at + l_, o_);
      const uint64_t cache = b.Uint(at + l_ + o_, 4);
      if (cache > 2) Damaged(fmt::format("{}: entry {} has cache type {}", what, i, cache));
      if (cache == 1) {  // a cached symbol table: B-tree and heap addresses
        CheckAddressInFile(b.Uint(at + l_ + o_ + 8, o_), what + ": cached B-tree");
        CheckAddressInFile(b.Uint(at + l_ + o_ + 8 + o_, o_), what + ": cached heap");
      }
      if (cache == 2) {  // a soft link: its value in the heap, no object header
        CheckName(heap, b.Uint(at + l_ + o_ + 8, 4), what + ": soft link");
        continue;
      }
      CheckAddressInFile(header, what + ": object header");
      HardLink(header, ChildPath(reinterpret_cast<const char*>(heap.data() + name)));
    }
  }

  const File& file_;
  const Hdf5Superblock& sb_;
  const size_t o_, l_;
  const Hdf5MessageContext ctx_;
  Hdf5MetadataReader dense_;  // dense link storage: heaps and name indexes, each block once
  uint64_t read_budget_;
  unsigned group_leaf_k_ = sb_.group_leaf_k;
  unsigned group_internal_k_ = sb_.group_internal_k;
  bool extension_ = false;
  std::vector<std::pair<uint64_t, std::string>> pending_;  // headers to check, and their paths
  std::string path_;                                       // of the header being checked
  Hdf5DatasetMessages messages_;                           // what its messages said
  std::unordered_map<uint64_t, uint64_t> type_sizes_;      // each header's datatype size
  std::vector<std::pair<std::string, Hdf5DatasetMessages>> committed_compact_;
  std::unordered_set<uint64_t> headers_, continuations_, nodes_;
  std::unordered_map<uint64_t, uint64_t> links_;       // hard links reaching each header
  std::unordered_map<uint64_t, uint64_t> ref_counts_;  // each header's reference count
  std::unordered_map<uint64_t, std::vector<uint8_t>> heaps_;
  Hdf5StructureSummary summary_;
};

}  // namespace

Hdf5StructureSummary CheckHdf5Structure(const File& file, const Hdf5Superblock& sb) {
  return StructureWalker(file, sb).Run();
}

}  // namespace gpufeed
