// The HDF5 source: OpenHdf5 and the Source that concatenates files.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <new>
#include <numeric>
#include <set>
#include <stdexcept>

#include "core/log.h"
#include "core/path_names.h"
#include "core/system/system_memory.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/index/compound.h"
#include "sources/hdf5/index/dataset.h"
#include "sources/hdf5/read/chunk_prefetch.h"
#include "sources/hdf5/read/dataset_reader.h"
#include "sources/hdf5/read/source_parts.h"
#include "sources/hdf5/read/vlen_reader.h"

namespace gpufeed {
namespace {

class Hdf5Source final : public Source {
 public:
  Hdf5Source(std::vector<Hdf5FilePart> parts, Schema schema, std::vector<std::string> datasets,
             Hdf5Options options)
      : parts_(std::move(parts)),
        schema_(std::move(schema)),
        datasets_(std::move(datasets)),
        options_(std::move(options)) {
    for (const auto& p : parts_) samples_ += p.samples;
    for (const auto& r : parts_.front().readers) {
      if (!r->dataset().chunk_dims.empty()) {
        block_ = std::max<int64_t>(1, r->dataset().chunk_dims[0]);
        break;
      }
    }
    for (size_t f = 0; f < parts_.front().readers.size(); ++f) {
      const Hdf5Dataset& ds = parts_.front().readers[f]->dataset();
      if (ds.storage == Hdf5Storage::kChunked && ds.filtered()) {
        chunking_.compressed = true;
        chunking_.decoded_chunk_bytes +=
            block_ * static_cast<int64_t>(ds.field.SampleBytes());  // a reference when vlen
      }
    }
    chunking_.samples_per_chunk = block_;
    for (size_t f = 0; f < parts_.front().readers.size(); ++f) {
      const auto& reader = *parts_.front().readers[f];
      const auto columns = static_cast<int64_t>(reader.geometry().columns());
      if (reader.dataset().storage == Hdf5Storage::kChunked &&
          columns > chunking_.pieces_per_sample) {
        chunking_.pieces_per_sample = columns;
        chunking_.pieces_field = schema_.fields[f].name;
        chunking_.pieces_chunk_shape = reader.dataset().chunk_dims;
      }
    }
    // Every chunk the cache could keep, decoded (what growing it can reach), saturating.
    // Unfiltered chunks of a remote object are kept too (dataset_reader.h).
    for (const Hdf5FilePart& part : parts_) {
      for (const auto& reader : part.readers) {
        const Hdf5Dataset& ds = reader->dataset();
        if (ds.storage != Hdf5Storage::kChunked || !(ds.filtered() || reader->KeepsChunks())) {
          continue;
        }
        const uint64_t stored = ds.chunks.stored().size();
        const uint64_t each = ds.ChunkBytes();
        decoded_chunks_bytes_ = each != 0 && stored > (kNoMore - decoded_chunks_bytes_) / each
                                    ? kNoMore
                                    : decoded_chunks_bytes_ + stored * each;
      }
    }
    // The default budget: the decoded data set, as whole chunks (nothing more is ever worth
    // keeping; a last chunk only part-filled still decodes whole, so the samples' bytes alone
    // fell short of holding every chunk and an epoch kept evicting), within a 16th of the RAM
    // available now and [16 MiB, 1 GiB].
    size_t budget = options_.chunk_cache_bytes;
    if (budget == kAutoChunkCache) {
      const uint64_t ram =
          std::clamp<uint64_t>(AvailableRamBytes() / 16, uint64_t{16} << 20, uint64_t{1} << 30);
      budget = static_cast<size_t>(std::min(ram, std::max<uint64_t>(decoded_chunks_bytes_, 1)));
    }
    chunk_cache_ = std::make_shared<SharedChunkCache>(budget);
    for (const auto& reader : parts_.front().readers) keeps_chunks_ |= reader->KeepsChunks();
    int reads_in_flight = 1;
    for (const auto& part : parts_) {
      reads_in_flight = std::max(reads_in_flight, part.file->ReadsInFlight());
    }
    prefetcher_ = std::make_unique<ChunkPrefetcher>(reads_in_flight);
  }

  SourceChunking chunking() const override {
    SourceChunking c = chunking_;
    c.cache_bytes = static_cast<int64_t>(chunk_cache_->capacity());  // it may have grown
    return c;
  }
  Hdf5ChunkCacheSize chunk_cache_size() const {
    return {chunk_cache_->capacity(), decoded_chunks_bytes_};
  }
  size_t GrowChunkCache(size_t bytes) const {
    chunk_cache_->Grow(bytes);
    return chunk_cache_->capacity();
  }

  const Schema& schema() const override { return schema_; }
  int64_t size() const override { return samples_; }
  int64_t PreferredBlock() const override { return block_; }

  std::string Describe() const override {
    const std::string more =
        parts_.size() > 1 ? fmt::format(" + {} more files", parts_.size() - 1) : "";
    return fmt::format("hdf5:{}{} ({} fields, {} samples)", parts_.front().file->path(), more,
                       schema_.fields.size(), samples_);
  }

  std::string Identity() const override {
    std::string id = fmt::format("hdf5:[{}]", fmt::join(datasets_, ","));
    for (const auto& p : parts_) {
      // A cache key must not depend on the working directory the file was named from (and
      // `gpufeed cache gc`, run from anywhere, must find the file to tell a stale cache).
      const std::string path = IdentityPath(p.file->path());
      id += fmt::format("|{}:{}:{}", path, p.file->Size(), p.file->ModificationTimeNs());
      // A rewrite that keeps the size and restores the mtime still changes these.
      if (const std::string stamp = p.file->VersionStamp(); !stamp.empty()) {
        id += fmt::format("|stamp:{}={}", path, stamp);
      }
    }
    return id + "|" + schema_.ToString();
  }

  std::unique_ptr<SourceWorkerState> NewWorkerState() const override {
    return std::make_unique<Hdf5WorkerState>(chunk_cache_);
  }

  // The whole chunks of a remote object later batches will read, claimed now and fetched on
  // the source's prefetch threads (chunk_prefetch.h). Bounded: the chunks claimed ahead and
  // not yet read stay within half the chunk cache.
  bool ReadsAhead() const override { return keeps_chunks_; }
  int64_t ReadAheadSamples() const override {
    if (!keeps_chunks_) return 0;
    const auto samples = static_cast<uint64_t>(std::max<int64_t>(1, samples_));
    return prefetcher_->ReachSamples(block_, decoded_chunks_bytes_ / samples,
                                     chunk_cache_->capacity());
  }
  void ReadAhead(std::span<const int64_t> indices, SourceWorkerState* state) const override {
    auto* ws = dynamic_cast<Hdf5WorkerState*>(state);
    if (ws == nullptr || !keeps_chunks_ || indices.empty()) return;
    ws->ahead.assign(indices.begin(), indices.end());
    std::sort(ws->ahead.begin(), ws->ahead.end());
    for (const Hdf5FilePart& part : parts_) {
      const auto first = std::lower_bound(ws->ahead.begin(), ws->ahead.end(), part.first_sample);
      const auto last = std::lower_bound(first, ws->ahead.end(), part.first_sample + part.samples);
      if (first == last) continue;
      const uint64_t budget = chunk_cache_->capacity() / 2;
      const uint64_t out = prefetcher_->outstanding();
      if (out >= budget) return;
      auto ahead = std::make_shared<Hdf5ReadAhead>();
      try {
        ws->targets.clear();
        for (auto it = first; it != last; ++it) {
          ws->targets.push_back({*it - part.first_sample, *it, nullptr});
        }
        for (const auto& reader : part.readers) {
          if (reader->KeepsChunks()) {
            reader->ClaimAhead(ws->targets, ws->scratch.cache, budget - out, *ahead);
          }
        }
        if (ahead->ranges.empty()) continue;
        prefetcher_->Submit(part.file, std::move(ahead), &bytes_read_);
      } catch (...) {
        // A hint: each batch fetches what it needs itself. (Dropped, the claims are abandoned.)
      }
    }
  }

  void Read(std::span<const int64_t> indices, const BatchView& out,
            SourceWorkerState* state) const override {
    CheckReadRequest(*this, indices, out);
    WithState(state, [&](Hdf5WorkerState& ws) {
      ws.order.resize(indices.size());
      for (size_t i = 0; i < indices.size(); ++i) ws.order[i] = {indices[i], int64_t(i)};
      // Sorted, a batch walks each file forwards and meets each chunk row once.
      std::sort(ws.order.begin(), ws.order.end());
      for (size_t k = 0, end = 0; k < ws.order.size(); k = end) {
        const Hdf5FilePart& part = parts_[PartOf(ws.order[k].first)];
        for (end = k;
             end < ws.order.size() && ws.order[end].first < part.first_sample + part.samples;) {
          ++end;
        }
        ReadPart(part, k, end, out, ws);
      }
    });
  }

  // Variable-length datasets (vlen_reader.h): the references alone for the lengths, the
  // global heap's objects for the items.
  void ReadLengths(int field, std::span<const int64_t> indices, std::span<int64_t> lengths,
                   SourceWorkerState* state) const override {
    CheckVariable(field, indices);
    WithState(state, [&](Hdf5WorkerState& ws) {
      for (const Hdf5FilePart& part : parts_) {
        part.vlen[size_t(field)]->ReadLengths(indices, part.first_sample, lengths, ws.scratch);
      }
    });
  }
  void ReadItems(int field, int64_t index, int64_t first, std::span<std::byte> out,
                 SourceWorkerState* state) const override {
    CheckVariable(field, {&index, 1});
    WithState(state, [&](Hdf5WorkerState& ws) {
      const Hdf5FilePart& part = parts_[PartOf(index)];
      const Hdf5VlenReader& reader = *part.vlen[size_t(field)];
      const Hdf5VlenReference ref = reader.Reference(index - part.first_sample, index, ws.scratch);
      CheckItemsRequest(*this, field, index, first, out, int64_t(ref.length));
      reader.ReadItems(ref, index, first, out, ws.heaps);
    });
  }

  // A batch's pieces: every reference read in one pass (a chunk row decoded once), then the
  // items from the heaps.
  void ReadItemsMany(int field, std::span<const ItemsRequest> requests,
                     SourceWorkerState* state) const override {
    std::vector<int64_t> indices;
    for (const ItemsRequest& r : requests) indices.push_back(r.index);
    CheckVariable(field, indices);
    WithState(state, [&](Hdf5WorkerState& ws) {
      std::vector<Hdf5VlenReference> refs(requests.size());
      for (const Hdf5FilePart& part : parts_) {
        part.vlen[size_t(field)]->ReadReferences(indices, part.first_sample, refs, ws.scratch);
      }
      for (size_t k = 0; k < requests.size(); ++k) {
        const ItemsRequest& r = requests[k];
        CheckItemsRequest(*this, field, r.index, r.first, r.out, int64_t(refs[k].length));
        parts_[PartOf(r.index)].vlen[size_t(field)]->ReadItems(refs[k], r.index, r.first, r.out,
                                                               ws.heaps);
      }
    });
  }

  // Runs `body` with the worker's state (a fresh one outside a loader's workers) inside one
  // batch of the chunk cache.
  template <class Body>
  void WithState(SourceWorkerState* state, Body&& body) const {
    std::unique_ptr<Hdf5WorkerState> local;
    auto* ws = dynamic_cast<Hdf5WorkerState*>(state);
    if (ws == nullptr) {
      local = std::make_unique<Hdf5WorkerState>(0);
      ws = local.get();
    }
    ws->scratch.cache.BeginBatch();
    try {
      body(*ws);
    } catch (...) {
      EndRead(*ws);
      throw;
    }
    EndRead(*ws);
  }

  void CheckVariable(int field, std::span<const int64_t> indices) const {
    if (field < 0 || size_t(field) >= schema_.fields.size() ||
        !schema_.fields[size_t(field)].variable()) {
      ThrowNoVariableField(*this, field);
    }
    for (int64_t index : indices) {
      if (index < 0 || index >= samples_) {
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("{}: sample index {} is out of range [0, {})", Describe(), index,
                                samples_));
      }
    }
  }

  void EndRead(Hdf5WorkerState& ws) const {
    ws.scratch.cache.EndBatch();
    Collect(ws.scratch.counters);
  }

  // Reads rows [k, end) of the worker's order, all in `part`, into every field of `out`.
  void ReadPart(const Hdf5FilePart& part, size_t k, size_t end, const BatchView& out,
                Hdf5WorkerState& ws) const {
    auto targets_of = [&](size_t f, std::vector<Hdf5RowTarget>& targets) {
      const size_t bytes = schema_.fields[f].SampleBytes();
      targets.clear();
      for (size_t j = k; j < end; ++j) {
        targets.push_back({ws.order[j].first - part.first_sample, ws.order[j].first,
                           out.fields[f] + static_cast<size_t>(ws.order[j].second) * bytes});
      }
    };
    // The fields whose reads can be planned go to the file with one ReadMany: a remote file
    // has every field's requests in flight at once, instead of one field's after another's.
    ws.plans.resize(part.readers.size());
    std::vector<size_t> planned;
    for (size_t f = 0; f < part.readers.size(); ++f) {
      if (part.readers[f]->PlansPieces() && !schema_.fields[f].variable()) planned.push_back(f);
    }
    if (planned.size() > 1) {
      if (!ReadPlanned(part, planned, targets_of, ws)) planned.clear();
    } else {
      planned.clear();
    }
    for (size_t f = 0; f < part.readers.size(); ++f) {
      if (std::find(planned.begin(), planned.end(), f) != planned.end()) continue;
      if (schema_.fields[f].variable()) continue;  // ReadItems serves it
      targets_of(f, ws.targets);
      part.readers[f]->Read(ws.targets, ws.scratch);
    }
  }

  // The planned fields' pieces with one ReadMany. False when it failed: every claim of the
  // plans is then abandoned, and each field reads again, its error naming the chunk and sample.
  template <class TargetsOf>
  bool ReadPlanned(const Hdf5FilePart& part, const std::vector<size_t>& planned,
                   const TargetsOf& targets_of, Hdf5WorkerState& ws) const {
    const auto drop = [&] {
      for (size_t f : planned) Hdf5DatasetReader::DropPieces(ws.plans[f]);
    };
    try {
      std::vector<ReadRange> ranges;
      for (size_t f : planned) {
        targets_of(f, ws.targets);
        part.readers[f]->PlanPieces(ws.targets, ws.plans[f], ws.scratch);
        ranges.insert(ranges.end(), ws.plans[f].ranges.begin(), ws.plans[f].ranges.end());
      }
      try {
        part.file->ReadMany(ranges, "chunk data");
      } catch (const Error&) {
        drop();
        return false;
      }
      // Every field's own fetches end before any field waits for another worker's.
      for (size_t f : planned) part.readers[f]->PlacePieces(ws.plans[f], ws.scratch);
      for (size_t f : planned) part.readers[f]->FinishPieces(ws.plans[f], ws.scratch);
    } catch (...) {
      drop();
      throw;
    }
    return true;
  }

  // The chunk counters, with the default's tier (this source is the data, never a copy).
  SourceStats Stats() const override {
    const Hdf5Counters c = counters();
    return {.cache_tier = cache_tier(),
            .cache_built_fraction = -1,
            .chunks_decoded = c.chunks_decoded,
            .chunk_cache_hits = c.chunk_cache_hits,
            .chunk_cache_bytes = static_cast<int64_t>(c.chunk_cache_bytes)};
  }

  Hdf5Counters counters() const {
    Hdf5Counters c;
    c.chunks_decoded = chunks_decoded_.load(std::memory_order_relaxed);
    c.chunk_cache_hits = chunk_cache_hits_.load(std::memory_order_relaxed);
    c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
    c.library_reads = library_reads_.load(std::memory_order_relaxed);
    c.chunk_cache_bytes = chunk_cache_->capacity();
    c.chunk_fetch_waits = chunk_cache_->fetch_waits();
    return c;
  }

 private:
  size_t PartOf(int64_t sample) const {
    const auto it =
        std::upper_bound(parts_.begin(), parts_.end(), sample,
                         [](int64_t s, const Hdf5FilePart& p) { return s < p.first_sample; });
    return static_cast<size_t>(it - parts_.begin()) - 1;
  }

  // Adds a worker's counts to the source's once per batch, not once per chunk.
  void Collect(Hdf5Counters& c) const {
    chunks_decoded_.fetch_add(c.chunks_decoded, std::memory_order_relaxed);
    chunk_cache_hits_.fetch_add(c.chunk_cache_hits, std::memory_order_relaxed);
    bytes_read_.fetch_add(c.bytes_read, std::memory_order_relaxed);
    library_reads_.fetch_add(c.library_reads, std::memory_order_relaxed);
    c = Hdf5Counters{};
  }

  const std::vector<Hdf5FilePart> parts_;
  const Schema schema_;
  const std::vector<std::string> datasets_;
  const Hdf5Options options_;
  int64_t samples_ = 0;
  int64_t block_ = 1;
  SourceChunking chunking_;
  std::shared_ptr<SharedChunkCache> chunk_cache_;  // decoded chunks, shared by the workers
  static constexpr uint64_t kNoMore = uint64_t{1} << 62;
  uint64_t decoded_chunks_bytes_ = 0;  // at most kNoMore
  mutable std::atomic<int64_t> chunks_decoded_{0};
  mutable std::atomic<int64_t> chunk_cache_hits_{0};
  mutable std::atomic<int64_t> bytes_read_{0};
  mutable std::atomic<int64_t> library_reads_{0};
  bool keeps_chunks_ = false;  // some reader keeps whole chunks of a remote object
  // Last: destroyed first, its threads finishing their fetches while the rest still lives.
  std::unique_ptr<ChunkPrefetcher> prefetcher_;
};

}  // namespace

std::shared_ptr<Source> OpenHdf5(std::vector<std::string> paths, std::vector<std::string> datasets,
                                 Hdf5Options options) {
  if (paths.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "OpenHdf5: no files given");
  }
  if (options.file_system == nullptr) options.file_system = DefaultFileSystem();
  if (std::set<std::string>(datasets.begin(), datasets.end()).size() != datasets.size()) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: a dataset is named twice in [{}]",
                                                         paths.front(), fmt::join(datasets, ", ")));
  }
  std::vector<Hdf5FilePart> parts;
  Schema schema;
  int64_t first_sample = 0;
  for (size_t p = 0; p < paths.size(); ++p) {
    const std::string& path = paths[p];
    Hdf5FilePart part;
    try {
      OpenHdf5Part(path, datasets, options, first_sample, p, paths, schema, part);
    } catch (const std::bad_alloc&) {
      // Every size is checked against the file before it is allocated; this is the backstop
      // that keeps a damaged file an Error naming it.
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: opening it asks for more memory than there is (damaged "
                              "file?)",
                              path));
    } catch (const std::length_error&) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: opening it asks for an impossible size (damaged file?)", path));
    }
    first_sample += part.samples;
    parts.push_back(std::move(part));
  }
  return std::make_shared<Hdf5Source>(std::move(parts), std::move(schema), std::move(datasets),
                                      std::move(options));
}

bool IsHdf5Source(const Source& source) {
  return dynamic_cast<const Hdf5Source*>(&source) != nullptr;
}

namespace {

const Hdf5Source& AsHdf5(const Source& source) {
  const auto* hdf5 = dynamic_cast<const Hdf5Source*>(&source);
  if (hdf5 == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} is not an HDF5 source", source.Describe()));
  }
  return *hdf5;
}

}  // namespace

Hdf5ChunkCacheSize Hdf5ChunkCacheOf(const Source& source) {
  return AsHdf5(source).chunk_cache_size();
}

size_t GrowHdf5ChunkCache(const Source& source, size_t bytes) {
  return AsHdf5(source).GrowChunkCache(bytes);
}

Hdf5Counters Hdf5SourceCounters(const Source& source) { return AsHdf5(source).counters(); }

}  // namespace gpufeed
