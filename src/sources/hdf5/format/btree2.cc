#include "sources/hdf5/format/btree2.h"

#include <fmt/format.h>

#include <bit>
#include <string>
#include <vector>

#include "core/checked_math.h"

namespace gpufeed {
namespace {

constexpr unsigned kMaxDepth = 32;
constexpr uint32_t kMaxNodeSize = uint32_t{1} << 20;
constexpr size_t kPrefix = 6;  // signature, version, type
constexpr size_t kChecksum = 4;

// Bytes libhdf5 uses to store a count up to `n` (H5VM_limit_enc_size).
size_t EncodedSize(uint64_t n) { return (n == 0 ? 0 : 63 - std::countl_zero(n)) / 8 + 1; }

class BTree2Walker {
 public:
  BTree2Walker(Hdf5MetadataReader& r, const Hdf5BTree2Header& h, uint64_t max_records,
               const std::function<void(const Bytes&)>& record)
      : r_(r), h_(h), max_records_(max_records), record_(record) {
    const uint64_t overhead = kPrefix + kChecksum;
    max_nrec_.push_back((h.node_size - overhead) / h.record_size);
    cum_max_.push_back(max_nrec_[0]);
    cum_size_.push_back(0);
    nrec_size_ = EncodedSize(max_nrec_[0]);
    for (unsigned u = 1; u <= h.depth; ++u) {
      const uint64_t ptr = PointerSize(u);
      if (h.node_size < overhead + ptr) r_.Damaged(Where("node size too small for its depth"));
      max_nrec_.push_back((h.node_size - overhead - ptr) / (h.record_size + ptr));
      const auto a = CheckedMul(max_nrec_[u] + 1, cum_max_[u - 1]);
      const auto cum = a ? CheckedAdd(*a, max_nrec_[u]) : std::nullopt;
      if (!cum) r_.Damaged(Where("is deeper than any tree of 2^64 records"));
      cum_max_.push_back(*cum);
      cum_size_.push_back(EncodedSize(*cum));
    }
  }

  void Run() {
    if (r_.Undefined(h_.root) || h_.total_records == 0) {
      if (h_.total_records != 0) r_.Damaged(Where("counts records but has no root"));
      return;
    }
    Node(h_.root, h_.depth, h_.root_records, h_.total_records);
    if (seen_ != h_.total_records) {
      r_.Damaged(Where(
          fmt::format("holds {} records where its header counts {}", seen_, h_.total_records)));
    }
  }

 private:
  std::string Where(const std::string& problem) const {
    return fmt::format("v2 B-tree at offset {} {}", h_.address, problem);
  }

  uint64_t PointerSize(unsigned depth) const {
    return r_.o() + nrec_size_ + (depth > 1 ? cum_size_[depth - 1] : 0);
  }

  void Node(uint64_t addr, unsigned depth, uint64_t nrec, uint64_t subtree_records) {
    const char* kind = depth == 0 ? "v2 B-tree leaf" : "v2 B-tree internal node";
    r_.VisitOnce(addr, kind);
    if (nrec > max_nrec_[depth] || (depth > 0 && subtree_records > cum_max_[depth])) {
      r_.Damaged(fmt::format("{} at offset {} holds {} records, more than its {} bytes allow", kind,
                             addr, nrec, h_.node_size));
    }
    const uint64_t pointers = depth == 0 ? 0 : (nrec + 1) * PointerSize(depth);
    const uint64_t n = kPrefix + nrec * h_.record_size + pointers + kChecksum;
    if (n > h_.node_size) {
      r_.Damaged(fmt::format("{} at offset {} overflows its node size", kind, addr));
    }
    const std::vector<uint8_t> block = r_.ReadChecked(addr, n, depth == 0 ? "BTLF" : "BTIN", kind);
    const std::string name = fmt::format("{} at offset {}", kind, addr);
    const Bytes b(block, &name);
    if (b.Uint(5, 1) != h_.type) r_.Damaged(name + fmt::format(" has type {}", b.Uint(5, 1)));
    size_t ptr = kPrefix + nrec * h_.record_size;
    for (uint64_t i = 0; i <= nrec; ++i) {
      if (depth > 0) {
        const uint64_t child = b.Uint(ptr, r_.o());
        const uint64_t child_nrec = b.Uint(ptr + r_.o(), nrec_size_);
        const uint64_t child_total =
            depth > 1 ? b.Uint(ptr + r_.o() + nrec_size_, cum_size_[depth - 1]) : child_nrec;
        ptr += PointerSize(depth);
        Node(child, depth - 1, child_nrec, child_total);
      }
      if (i == nrec) break;
      if (++seen_ > max_records_ || seen_ > h_.total_records) {
        r_.Damaged(Where(
            fmt::format("holds more than {} records", std::min(max_records_, h_.total_records))));
      }
      record_(b.Sub(kPrefix + i * h_.record_size, h_.record_size));
    }
  }

  Hdf5MetadataReader& r_;
  const Hdf5BTree2Header& h_;
  const uint64_t max_records_;
  const std::function<void(const Bytes&)>& record_;
  std::vector<uint64_t> max_nrec_, cum_max_, cum_size_;
  size_t nrec_size_ = 1;
  uint64_t seen_ = 0;
};

}  // namespace

Hdf5BTree2Header ReadHdf5BTree2Header(Hdf5MetadataReader& r, uint64_t address, unsigned type) {
  r.VisitOnce(address, "v2 B-tree header");
  const size_t n = 16 + r.o() + 2 + r.l() + kChecksum;
  const std::vector<uint8_t> block = r.ReadChecked(address, n, "BTHD", "v2 B-tree header");
  const std::string name = fmt::format("v2 B-tree header at offset {}", address);
  const Bytes b(block, &name);
  Hdf5BTree2Header h;
  h.address = address;
  h.type = static_cast<unsigned>(b.Uint(5, 1));
  h.node_size = static_cast<uint32_t>(b.Uint(6, 4));
  h.record_size = static_cast<uint32_t>(b.Uint(10, 2));
  h.depth = static_cast<unsigned>(b.Uint(12, 2));
  h.root = b.Uint(16, r.o());
  h.root_records = b.Uint(16 + r.o(), 2);
  h.total_records = b.Uint(18 + r.o(), r.l());
  if (h.type != type)
    r.Damaged(fmt::format("{} has record type {}, expected {}", name, h.type, type));
  if (h.record_size == 0 || h.node_size > kMaxNodeSize ||
      h.node_size < kPrefix + kChecksum + h.record_size || h.depth > kMaxDepth) {
    r.Damaged(fmt::format("{}: node size {}, record size {}, depth {}", name, h.node_size,
                          h.record_size, h.depth));
  }
  return h;
}

void WalkHdf5BTree2(Hdf5MetadataReader& r, const Hdf5BTree2Header& header, uint64_t max_records,
                    const std::function<void(const Bytes&)>& record) {
  BTree2Walker(r, header, max_records, record).Run();
}

}  // namespace gpufeed
