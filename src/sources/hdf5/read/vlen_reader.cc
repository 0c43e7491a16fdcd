#include "sources/hdf5/read/vlen_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/checked_math.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

uint64_t LoadLe(const std::byte* p, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= uint64_t{std::to_integer<uint8_t>(p[i])} << (8 * i);
  return v;
}

}  // namespace

std::shared_ptr<const Hdf5GlobalHeap> Hdf5HeapCache::Find(const File* file,
                                                          uint64_t address) const {
  const auto it = heaps_.find({file, address});
  return it == heaps_.end() ? nullptr : it->second;
}

void Hdf5HeapCache::Insert(const File* file, uint64_t address,
                           std::shared_ptr<const Hdf5GlobalHeap> heap) {
  const size_t size = heap->bytes.size();
  if (size > max_bytes_ || heaps_.count({file, address}) != 0) return;
  while (bytes_ + size > max_bytes_ && !order_.empty()) {
    const auto old = heaps_.find(order_.front());
    bytes_ -= old->second->bytes.size();
    heaps_.erase(old);
    order_.pop_front();
  }
  heaps_.emplace(Key{file, address}, std::move(heap));
  order_.push_back({file, address});
  bytes_ += size;
}

Hdf5VlenReader::Hdf5VlenReader(const Hdf5DatasetReader* references, const File* file)
    : references_(references),
      file_(file),
      vlen_(*references->dataset().vlen),
      item_bytes_(DTypeSize(vlen_.field.dtype)) {}

std::string Hdf5VlenReader::Sample(int64_t global) const {
  const Hdf5Dataset& ds = references_->dataset();
  return fmt::format("{}: dataset {}, sample {}", ds.path, ds.dataset, global);
}

Hdf5VlenReference Hdf5VlenReader::Decode(const std::byte* element, int64_t global) const {
  Hdf5VlenReference ref;
  ref.length = LoadLe(element, 4);
  ref.address = LoadLe(element + 4, vlen_.sizeof_addr);
  ref.object = static_cast<uint32_t>(LoadLe(element + 4 + vlen_.sizeof_addr, 4));
  // libhdf5 reads a reference to address 0 as a null sequence, whatever its length says.
  if (ref.address == 0) ref.length = 0;
  // The items lie in the file: more bytes than it holds is a damaged length, refused before
  // anyone sizes a row from it.
  const auto bytes = CheckedMul(ref.length, item_bytes_);
  if (!bytes || *bytes > file_->Size()) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: its reference says {} items of {} bytes, more than the file's "
                            "{} bytes hold (damaged file?)",
                            Sample(global), ref.length, item_bytes_, file_->Size()));
  }
  return ref;
}

void Hdf5VlenReader::ReadReferences(std::span<const int64_t> indices, int64_t first_sample,
                                    std::span<Hdf5VlenReference> refs,
                                    Hdf5ReadScratch& scratch) const {
  const size_t element = vlen_.reference_bytes();
  const int64_t end = first_sample + references_->dataset().samples;
  std::vector<Hdf5RowTarget> rows;
  std::vector<size_t> at;  // the position in `indices` of each row
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= first_sample && indices[i] < end) at.push_back(i);
  }
  if (at.empty()) return;
  std::vector<std::byte> elements(at.size() * element);
  for (size_t k = 0; k < at.size(); ++k) {
    const int64_t global = indices[at[k]];
    rows.push_back({global - first_sample, global, elements.data() + k * element});
  }
  // The reader walks the rows in file order.
  std::sort(rows.begin(), rows.end(),
            [](const Hdf5RowTarget& a, const Hdf5RowTarget& b) { return a.local < b.local; });
  references_->Read(rows, scratch);
  for (size_t k = 0; k < at.size(); ++k) {
    refs[at[k]] = Decode(elements.data() + k * element, indices[at[k]]);
  }
}

void Hdf5VlenReader::ReadLengths(std::span<const int64_t> indices, int64_t first_sample,
                                 std::span<int64_t> lengths, Hdf5ReadScratch& scratch) const {
  std::vector<Hdf5VlenReference> refs(indices.size());
  ReadReferences(indices, first_sample, refs, scratch);
  const int64_t end = first_sample + references_->dataset().samples;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] >= first_sample && indices[i] < end) {
      lengths[i] = static_cast<int64_t>(refs[i].length);
    }
  }
}

Hdf5VlenReference Hdf5VlenReader::Reference(int64_t local, int64_t global,
                                            Hdf5ReadScratch& scratch) const {
  std::byte element[4 + 8 + 4];
  const Hdf5RowTarget row{local, global, element};
  references_->Read({&row, 1}, scratch);
  return Decode(element, global);
}

std::shared_ptr<const Hdf5GlobalHeap> Hdf5VlenReader::Collection(uint64_t address, int64_t global,
                                                                 Hdf5HeapCache& heaps) const {
  if (auto heap = heaps.Find(file_, address)) return heap;
  const std::string where =
      fmt::format("{}: the global heap collection at address {}", Sample(global), address);
  const uint64_t file_size = file_->Size();
  const size_t header_bytes = Hdf5GlobalHeapHeaderBytes(vlen_.sizeof_size);
  const auto at = CheckedAdd(vlen_.base_address, address);
  if (!at || *at > file_size || file_size - *at < header_bytes) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{} lies past the end of the file ({} bytes)", where, file_size));
  }
  // One read for a collection of libhdf5's usual 4 KiB (its header says how much more).
  constexpr uint64_t kFirstRead = 4096;
  std::vector<uint8_t> bytes(std::min<uint64_t>(kFirstRead, file_size - *at));
  ReadFully(*file_, *at, bytes.data(), bytes.size(), where);
  const uint64_t size = ParseHdf5GlobalHeapSize(
      std::span<const uint8_t>(bytes.data(), header_bytes), vlen_.sizeof_size, where);
  if (size > file_size - *at) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{} says it holds {} bytes, past the end of the file ({} bytes)", where,
                            size, file_size));
  }
  const size_t have = bytes.size();
  bytes.resize(size);  // within the file: checked above
  if (size > have) ReadFully(*file_, *at + have, bytes.data() + have, size - have, where);
  auto heap = std::make_shared<const Hdf5GlobalHeap>(
      ParseHdf5GlobalHeap(std::move(bytes), vlen_.sizeof_size, where));
  heaps.Insert(file_, address, heap);
  return heap;
}

void Hdf5VlenReader::ReadItems(const Hdf5VlenReference& ref, int64_t global, int64_t first,
                               std::span<std::byte> out, Hdf5HeapCache& heaps) const {
  if (ref.length == 0) return;
  const auto heap = Collection(ref.address, global, heaps);
  const auto object = heap->Find(ref.object);
  if (!object) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: the global heap collection at address {} has no object {}",
                            Sample(global), ref.address, ref.object));
  }
  // Both within the file's size (Decode), so no overflow.
  if (object->size != ref.length * item_bytes_) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: heap object {} holds {} bytes, but its reference says {} items "
                            "of {} bytes",
                            Sample(global), ref.object, object->size, ref.length, item_bytes_));
  }
  std::memcpy(out.data(),
              heap->bytes.data() + object->offset + static_cast<uint64_t>(first) * item_bytes_,
              out.size());
  if (vlen_.big_endian && item_bytes_ > 1) {
    for (size_t i = 0; i + item_bytes_ <= out.size(); i += item_bytes_) {
      std::reverse(out.data() + i, out.data() + i + item_bytes_);
    }
  }
}

}  // namespace gpufeed
