// Old-style groups (a v1 B-tree of symbol nodes, names in a local heap) and external file
// lists, as gpufeed's structure walk checks them (structure_walker.h).
#include <fmt/format.h>

#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "gpufeed/error.h"
#include "sources/hdf5/format/metadata_bytes.h"
#include "sources/hdf5/format/structure_walker.h"

namespace gpufeed::hdf5_structure {

const std::vector<uint8_t>& StructureWalker::LocalHeap(uint64_t addr) {
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

void StructureWalker::CheckName(const std::vector<uint8_t>& heap, uint64_t offset,
                                const std::string& what) {
  if (offset >= heap.size() ||
      std::memchr(heap.data() + offset, 0, heap.size() - offset) == nullptr) {
    Damaged(
        fmt::format("{}: name at heap offset {} is not a terminated string inside the "
                    "heap ({} bytes)",
                    what, offset, heap.size()));
  }
}

void StructureWalker::CheckExternalFileList(const Bytes& m, const std::string& what) {
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

void StructureWalker::CheckLinkName(std::string_view name, const std::string& what) const {
  if (name.find('/') != std::string_view::npos || name == ".") {
    Damaged(fmt::format("{}: a link named '{}' (names hold no '/' and are not '.')", what, name));
  }
}

void StructureWalker::CheckGroupTree(uint64_t btree, uint64_t heap_addr) {
  const std::vector<uint8_t>& heap = LocalHeap(heap_addr);
  CheckGroupNode(btree, -1, heap, 0);
}

void StructureWalker::CheckGroupNode(uint64_t addr, int expected_level,
                                     const std::vector<uint8_t>& heap, int depth) {
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
    Damaged(
        fmt::format("{} has {} entries, more than 2K = {}", what, entries, 2 * group_internal_k_));
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

void StructureWalker::CheckSymbolNode(uint64_t addr, const std::vector<uint8_t>& heap) {
  const std::string what = fmt::format("symbol table node at offset {}", addr);
  if (!nodes_.insert(addr).second) Damaged(what + " is reached twice");
  const std::vector<uint8_t> head = Read(addr, 8, what);
  Bytes h(head, &what);
  if (!h.Signature(0, "SNOD") || h.Uint(4, 1) != 1) Damaged(what + " lacks its signature");
  const uint64_t symbols = h.Uint(6, 2);
  if (symbols > 2 * uint64_t{group_leaf_k_}) {
    Damaged(fmt::format("{} has {} entries, more than 2K = {}", what, symbols, 2 * group_leaf_k_));
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

}  // namespace gpufeed::hdf5_structure
