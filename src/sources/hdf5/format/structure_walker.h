// The walker behind CheckHdf5Structure (structure.h), private to this folder: object headers,
// their messages and links in structure.cc, old-style groups (symbol tables, local heaps) and
// external file lists in structure_groups.cc.
//
// Thread-safety: one thread at a time.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpufeed/error.h"
#include "gpufeed/file.h"
#include "sources/hdf5/format/message_checks.h"
#include "sources/hdf5/format/metadata_bytes.h"
#include "sources/hdf5/format/metadata_reader.h"
#include "sources/hdf5/format/structure.h"
#include "sources/hdf5/format/superblock.h"

namespace gpufeed::hdf5_structure {

// Object header message types (HDF5 file format specification, section IV.A.2).
constexpr unsigned kDataspace = 0x0001;
constexpr unsigned kLinkInfo = 0x0002;
constexpr unsigned kDatatype = 0x0003;
constexpr unsigned kFillOld = 0x0004;
constexpr unsigned kFill = 0x0005;
constexpr unsigned kLink = 0x0006;
constexpr unsigned kExternalFiles = 0x0007;
constexpr unsigned kLayout = 0x0008;
constexpr unsigned kGroupInfo = 0x000A;
constexpr unsigned kPipeline = 0x000B;
constexpr unsigned kSharedTable = 0x000F;
constexpr unsigned kContinuation = 0x0010;
constexpr unsigned kSymbolTable = 0x0011;
constexpr unsigned kBTreeK = 0x0013;
constexpr unsigned kDriverInfo = 0x0014;
constexpr unsigned kAttributeInfo = 0x0015;
constexpr unsigned kRefCount = 0x0016;
constexpr unsigned kFileSpaceInfo = 0x0017;
constexpr unsigned kCacheImage = 0x0018;

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

  Hdf5StructureSummary Run();

 private:
  [[noreturn]] void Damaged(const std::string& what) const;
  bool Undefined(uint64_t addr) const;

  // `n` bytes of the structure `what` at relative address `addr`, inside the file.
  std::vector<uint8_t> Read(uint64_t addr, uint64_t n, const std::string& what);

  // Up to `n` bytes at `addr` (fewer at the end of the file), for prefixes of unknown length.
  std::vector<uint8_t> ReadPrefix(uint64_t addr, uint64_t n, const std::string& what);
  void CheckAddressInFile(uint64_t addr, const std::string& what);
  void CheckSignatureAt(uint64_t addr, const char* sig, const std::string& what);

  // ---- object headers -------------------------------------------------------------------

  // A hard link to the object header at `addr` (a group's entry, a link message, the root's
  // pointer): counted, and the header queued for checking.
  void HardLink(uint64_t addr, std::string path);

  // The path of link `name` in the group being checked.
  std::string ChildPath(std::string_view name) const;

  // Compact data whose dataset's type is a committed one: checked once every header is read.
  void CheckCommittedTypeSizes() const;

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
  void CheckLinkCounts() const;
  void CheckHeader(uint64_t addr, const std::string& path);
  void CheckHeaderMessages(uint64_t addr);
  uint64_t AddOrDamaged(uint64_t a, uint64_t b, const std::string& what) const;
  void CheckMessage(unsigned type, unsigned flags, const Bytes& m, const std::string& what);

  // Returns the address of the object header that holds the message.
  uint64_t CheckSharedPointer(const Bytes& m, const std::string& what);

  // Checks a link message; returns the link's name.
  // Everything libhdf5's link decoder (H5O__link_decode) refuses is refused here first: in a
  // dense group, libhdf5 1.10.8 builds a table of the group's links and, when one fails to
  // decode, frees the table's never-filled entries (H5G__link_release_table), which crashes.
  std::string CheckLink(const Bytes& m);

  // Link info / attribute info: dense storage is a fractal heap and a v2 B-tree name index.
  void CheckDenseIndex(const Bytes& m, const char* what, bool links);

  // ---- old-style groups -------------------------------------------------------------------

  // The data segment of the local heap at `addr`, read and checked once.
  const std::vector<uint8_t>& LocalHeap(uint64_t addr);
  void CheckName(const std::vector<uint8_t>& heap, uint64_t offset, const std::string& what);

  // The external file list of a dataset whose data lies in other files: libhdf5 reads its
  // local heap (allocating the heap's stated size) and each used slot's file name from it
  // when it opens the dataset. Version, slot counts, the heap and every name checked.
  void CheckExternalFileList(const Bytes& m, const std::string& what);

  // A link's name: libhdf5 resolves names as paths, so one holding a '/' or one that is "."
  // names another object than the link's (the root, the group itself): its visit of the
  // tree then recurses without end (a link named "/": the stack overflowed; found by
  // hdf5_fuzz). h5py and libhdf5 refuse to create such names.
  void CheckLinkName(std::string_view name, const std::string& what) const;
  void CheckGroupTree(uint64_t btree, uint64_t heap_addr);
  void CheckGroupNode(uint64_t addr, int expected_level, const std::vector<uint8_t>& heap,
                      int depth);
  void CheckSymbolNode(uint64_t addr, const std::vector<uint8_t>& heap);

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

}  // namespace gpufeed::hdf5_structure
