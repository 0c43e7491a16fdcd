#include "sources/hdf5/tools/inspect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>

#include "core/checked_math.h"
#include "core/format.h"
#include "core/path_names.h"
#include "core/system/system_memory.h"
#include "gpufeed/dtype.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/index/compound.h"
#include "sources/hdf5/index/dataset.h"
#include "sources/hdf5/index/geometry.h"

namespace gpufeed {
namespace {

// A random sample that decodes more than this many times its own size is costly enough to
// deserve a change; below it, a full shuffle is fine.
constexpr double kAcceptableAmplification = 8;
// ... unless the decoded bytes are few anyway (a chunk of 256 int64 labels is 2 KB).
constexpr uint64_t kAcceptableDecodedBytes = 64 << 10;

bool Costly(const Hdf5DatasetInspection& d) {
  return d.unsupported.empty() && d.decoded_bytes_per_sample > kAcceptableDecodedBytes &&
         static_cast<double>(d.decoded_bytes_per_sample) >
             kAcceptableAmplification * static_cast<double>(std::max<uint64_t>(1, d.sample_bytes));
}
// The decoded set "fits" when it takes at most this share of the available RAM.
constexpr double kRamShare = 0.8;

std::string ShapeText(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Bytes the reader moves from disk for one sample of an unfiltered chunked dataset: per
// chunk, the span from its first to its last run.
uint64_t UnfilteredReadBytes(const Hdf5Dataset& ds) {
  const Hdf5ChunkGeometry geo(ds.dims, ds.chunk_dims, ds.element_size);
  uint64_t total = 0;
  for (size_t c = 0; c < geo.columns(); ++c) {
    const auto& runs = geo.runs(c);
    if (!runs.empty()) total += runs.back().src + runs.back().len - runs.front().src;
  }
  return total;
}

void Describe(const Hdf5Dataset& ds, Hdf5DatasetInspection& out) {
  out.dtype = std::string(DTypeName(ds.vlen ? ds.vlen->field.dtype : ds.field.dtype));
  out.variable_length = ds.vlen.has_value();
  // The samples and the field's shape: an array member's dimensions follow the dataset's.
  out.shape = {ds.samples};
  if (!ds.vlen) out.shape.insert(out.shape.end(), ds.field.shape.begin(), ds.field.shape.end());
  out.layout = ds.layout_name;
  out.chunk_shape = ds.chunk_dims;
  out.filters = DescribeHdf5Filters(ds.filters);
  out.sample_bytes = ds.field.SampleBytes();
  out.logical_bytes = static_cast<uint64_t>(ds.samples) * out.sample_bytes;
  out.storage_bytes = ds.storage_bytes;
  out.compression_ratio = ds.storage_bytes > 0 ? static_cast<double>(out.logical_bytes) /
                                                     static_cast<double>(ds.storage_bytes)
                                               : 1.0;
  out.index_method = ds.index_method;
  out.index_seconds = ds.index_seconds;
  out.compound_member = !ds.member.empty();
  if (!ds.chunk_dims.empty()) {
    out.chunks_per_sample = ds.ChunksPerSample();
    out.chunks_stored = static_cast<int64_t>(ds.chunks.stored().size());
  }
  const uint64_t avg_stored = out.chunks_stored > 0
                                  ? ds.storage_bytes / static_cast<uint64_t>(out.chunks_stored)
                                  : ds.ChunkBytes();
  switch (ds.storage) {
    case Hdf5Storage::kContiguous:
      out.read_path = "read at its file offset (pread or the memory map)";
      out.read_bytes_per_sample = out.sample_bytes;
      break;
    case Hdf5Storage::kInMemory:
      out.read_path = "held in memory (compact: stored in the object header)";
      break;
    case Hdf5Storage::kFill:
      out.read_path = "never written: every element is the fill value";
      break;
    case Hdf5Storage::kChunked:
      if (ds.filtered()) {
        out.read_path = "whole chunks read and decoded in the workers, once per batch";
        out.read_bytes_per_sample = static_cast<uint64_t>(out.chunks_per_sample) * avg_stored;
        out.decoded_bytes_per_sample =
            static_cast<uint64_t>(out.chunks_per_sample) * ds.ChunkBytes();
      } else {
        out.read_path = "each sample read at its offset inside its chunks";
        out.read_bytes_per_sample = UnfilteredReadBytes(ds);
      }
      break;
    case Hdf5Storage::kLibrary:
      out.read_path = fmt::format("through libhdf5 under its global lock ({})", ds.library_reason);
      if (!ds.chunk_dims.empty()) {
        size_t chunk_bytes = ds.element_size;
        for (int64_t c : ds.chunk_dims) chunk_bytes *= static_cast<size_t>(c);
        out.read_bytes_per_sample = static_cast<uint64_t>(out.chunks_per_sample) * chunk_bytes;
        out.decoded_bytes_per_sample = out.read_bytes_per_sample;
      } else {
        out.read_bytes_per_sample = out.sample_bytes;
      }
      break;
  }
}

// torch 1.13 has no unsigned dtype wider than a byte: the Loader refuses such a field unless
// dtype= reads it as one torch has. uint16 and uint32 fit the cast entirely; uint64 narrows,
// and a value above int64's range is refused as it is read.
void DescribeAccess(const Hdf5Dataset& ds, Hdf5DatasetInspection& out) {
  const std::string field = out.dataset.starts_with('/') ? out.dataset.substr(1) : out.dataset;
  const char* fits = nullptr;
  switch (ds.field.dtype) {
    case DType::kUInt16:
      out.cast_dtype = "int32";
      fits = "every uint16 fits; 'int64' and 'float32' also hold every value";
      break;
    case DType::kUInt32:
      out.cast_dtype = "int64";
      fits = "every uint32 fits";
      break;
    case DType::kUInt64:
      out.cast_dtype = "int64";
      fits = "range-checked: a value above 2^63-1 is refused as it is read, naming the sample";
      break;
    default:
      break;
  }
  const std::string how =
      ds.storage == Hdf5Storage::kLibrary
          ? fmt::format("read through libhdf5 (slow: every read takes its global lock; {})",
                        ds.library_reason)
          : "read directly by gpufeed (libhdf5 stays off the hot path)";
  if (fits != nullptr) {
    out.access = "cast";
    out.access_detail = fmt::format(
        "needs a cast for PyTorch (torch 1.13 has no {} dtype): pass dtype={{'{}': '{}'}} to "
        "gpufeed.Loader ({}); {}",
        DTypeName(ds.field.dtype), field, out.cast_dtype, fits, how);
  } else if (ds.storage == Hdf5Storage::kLibrary) {
    out.access = "libhdf5";
    out.access_detail = how;
  } else {
    out.access = "direct";
    out.access_detail = how;
  }
}

// Decodes a sample of the dataset's stored chunks on this thread (up to 8, spread over the
// index, about 64 MiB of output at most, repeated until 50 ms were spent) and records the
// output rate. A chunk that does not decode is reported, not thrown.
void MeasureDecode(const Hdf5Dataset& ds, const File& file, Hdf5DatasetInspection& out) {
  if (ds.storage != Hdf5Storage::kChunked || !ds.filtered()) return;
  std::vector<size_t> stored;
  for (const auto& [linear, entry] : ds.chunks.stored()) stored.push_back(linear);
  const size_t chunk_bytes = ds.ChunkBytes();
  if (stored.empty() || chunk_bytes == 0) return;
  const size_t want = std::clamp<size_t>((size_t{64} << 20) / chunk_bytes, 1, 8);
  std::vector<size_t> picks;
  for (size_t k = 0; k < std::min(want, stored.size()); ++k) {
    picks.push_back(stored[k * stored.size() / std::min(want, stored.size())]);
  }
  std::vector<std::vector<std::byte>> raw(picks.size());
  std::vector<std::byte> decoded(chunk_bytes), scratch;
  try {
    for (size_t k = 0; k < picks.size(); ++k) {
      const Hdf5ChunkEntry& e = ds.chunks.at(picks[k]);
      raw[k].resize(e.size);  // inside the file (checked at open)
      size_t done = 0;
      while (done < e.size) {
        const size_t got = file.ReadAt(e.address + done, raw[k].data() + done, e.size - done);
        if (got == 0) throw Error(ErrorCode::kIo, "the file changed size while being read");
        done += got;
      }
    }
    using Clock = std::chrono::steady_clock;
    Clock::duration spent{};
    int64_t chunks = 0;
    for (int round = 0; round < 100 && spent < std::chrono::milliseconds(50); ++round) {
      for (size_t k = 0; k < picks.size(); ++k) {
        const auto t0 = Clock::now();
        DecodeHdf5Chunk(raw[k], ds.filters, ds.chunks.at(picks[k]).filter_mask, ds.element_size,
                        decoded, scratch);
        spent += Clock::now() - t0;
        ++chunks;
      }
    }
    const double seconds = std::chrono::duration<double>(spent).count();
    out.decode_chunks_sampled = static_cast<int64_t>(picks.size());
    out.decode_mb_per_s =
        seconds > 0 ? static_cast<double>(chunks) * static_cast<double>(chunk_bytes) / seconds / 1e6
                    : 0;
  } catch (const Error& e) {
    out.decode_error = e.what();
  }
}

std::string ChunkRows(const Hdf5DatasetInspection& d) {
  const int64_t k = d.chunk_shape.empty() ? 1 : d.chunk_shape[0];
  return fmt::format("chunks of {} sample{}", k, k == 1 ? "" : "s");
}

std::string Recommend(const Hdf5DatasetInspection& d, const Hdf5Storage storage,
                      uint64_t decoded_set, uint64_t mem_available) {
  if (!d.unsupported.empty()) {
    return "gpufeed cannot read this dataset; leave it out of the fields";
  }
  const std::string sample = FormatBytes(d.sample_bytes);
  switch (storage) {
    case Hdf5Storage::kContiguous:
      return fmt::format(
          "contiguous: a random sample reads its {} at one offset; random access "
          "costs nothing extra",
          sample);
    case Hdf5Storage::kInMemory:
    case Hdf5Storage::kFill:
      return "nothing to read from disk";
    case Hdf5Storage::kLibrary:
      if (d.compound_member) {
        // A member reads through libhdf5 whatever its storage: only a dataset per column
        // takes libhdf5 off the path.
        return fmt::format(
            "{}: every read takes libhdf5's global lock, so workers do not help; for speed, "
            "store each column as a dataset of its own (h5py: f[name] = table[member])",
            d.read_path);
      }
      return fmt::format(
          "{}: every read takes libhdf5's global lock, so workers do not help; "
          "rewrite with gzip or no compression (gpufeed rechunk FILE OUT.h5 --compression "
          "gzip:1)",
          d.read_path);
    case Hdf5Storage::kChunked:
      break;
  }
  if (d.decoded_bytes_per_sample == 0) {
    if (d.chunks_per_sample <= 1) {
      return fmt::format(
          "unfiltered {}: a random sample reads just its {}; random access is "
          "cheap",
          ChunkRows(d), sample);
    }
    std::vector<int64_t> better(d.shape);
    better[0] = d.chunk_shape.empty() ? 1 : d.chunk_shape[0];
    return fmt::format(
        "a sample spans {} chunks ({} reads, {} per sample); rewrite with "
        "chunks={} so one read fetches a sample (gpufeed rechunk FILE OUT.h5)",
        d.chunks_per_sample, d.chunks_per_sample, FormatBytes(d.read_bytes_per_sample),
        fmt::format("({})", fmt::join(better, ", ")));
  }
  const double amplification =
      static_cast<double>(d.decoded_bytes_per_sample) / std::max<uint64_t>(1, d.sample_bytes);
  const std::string head =
      fmt::format("{}, {}: a random sample decodes {} ({:.0f}x its {})", ChunkRows(d), d.filters,
                  FormatBytes(d.decoded_bytes_per_sample), amplification, sample);
  if (!Costly(d)) {
    return head + "; cheap enough for a full shuffle";
  }
  const bool fits = mem_available > 0 && static_cast<double>(decoded_set) <=
                                             kRamShare * static_cast<double>(mem_available);
  if (fits) {
    return fmt::format(
        "{}; the decoded set ({}) fits in RAM ({} available) — cache it, use "
        "block shuffle (each chunk decoded once per epoch), or rewrite with "
        "chunks of 1–8 samples (gpufeed rechunk FILE OUT.h5 --samples-per-chunk 8)",
        head, FormatBytes(decoded_set), FormatBytes(mem_available));
  }
  return fmt::format(
      "{}; the decoded set ({}) does not fit in RAM ({} available) — use block "
      "shuffle (each chunk decoded once per epoch), or rewrite with chunks of "
      "1–8 samples or without compression (gpufeed rechunk FILE OUT.h5 --samples-per-chunk 8)",
      head, FormatBytes(decoded_set), FormatBytes(mem_available));
}

// What the whole file asks of a reader, from its datasets' recommendations.
std::string OverallRecommendation(const Hdf5Inspection& out, const std::string& path,
                                  const std::string& external_links, size_t readable,
                                  bool any_costly) {
  if (out.datasets.empty()) {
    return external_links.empty() ? "the file holds no datasets"
                                  : "the file holds no datasets of its own: " + external_links;
  }
  if (readable == 0) return "gpufeed can read none of its datasets (each says why)";
  if (!any_costly && IsUriPath(path)) {
    // Over a network each sample read at random is a request of its own.
    return "each random sample is a request to the store: block shuffle "
           "(shuffle=gpufeed.BlockShuffle()) reads a chunk's rows in one request; a full "
           "shuffle pays one round trip per sample";
  }
  if (!any_costly) return "random access is cheap: read it with a full shuffle";
  if (static_cast<double>(out.decoded_set_bytes) <=
      kRamShare * static_cast<double>(out.mem_available_bytes)) {
    return fmt::format(
        "random samples decode whole compressed chunks; the decoded set ({}) fits in RAM: "
        "cache it after the first epoch, or use block shuffle",
        FormatBytes(out.decoded_set_bytes));
  }
  return fmt::format(
      "random samples decode whole compressed chunks and the decoded set ({}) does not fit in "
      "RAM: use block shuffle, or rewrite with small chunks or no compression",
      FormatBytes(out.decoded_set_bytes));
}

}  // namespace

Hdf5Inspection InspectHdf5(const std::string& path, std::shared_ptr<const FileSystem> fs,
                           std::optional<uint64_t> mem_available) {
  if (fs == nullptr) fs = DefaultFileSystem();
  Hdf5Inspection out;
  out.path = path;
  const std::shared_ptr<const File> file = fs->Open(path);
  out.file_bytes = file->Size();
  out.library = Hdf5LibraryDescription();
  out.mem_available_bytes = mem_available ? *mem_available : AvailableRamBytes();

  std::vector<Hdf5Storage> storage;
  std::string external_links;
  try {
    Hdf5Lock lock;
    Hdf5Id h5 = OpenHdf5File(file);
    // A compound dataset is inspected member by member, as the fields that read it.
    std::vector<std::string> names;
    for (const std::string& dataset : ListHdf5Datasets(h5.get())) {
      const auto members = Hdf5CompoundMembers(h5.get(), dataset);
      if (members.empty()) names.push_back(dataset);
      for (const std::string& m : members) names.push_back(dataset + "." + m);
    }
    for (const std::string& name : names) {
      Hdf5DatasetInspection d;
      d.dataset = name;
      try {
        const Hdf5Dataset ds = OpenHdf5Dataset(h5.get(), *file, name);
        Describe(ds, d);
        DescribeAccess(ds, d);
        MeasureDecode(ds, *file, d);
        storage.push_back(ds.storage);
        // Each below 2^64 (checked at open); a sum past it saturates.
        out.decoded_set_bytes =
            CheckedAdd(out.decoded_set_bytes, d.logical_bytes).value_or(UINT64_MAX);
      } catch (const Error& e) {
        d.unsupported = e.what();
        d.access = "refused";
        d.access_detail = fmt::format("refused: {}", d.unsupported);
        storage.push_back(Hdf5Storage::kFill);
      }
      out.datasets.push_back(std::move(d));
    }
    if (out.datasets.empty()) external_links = DescribeHdf5ExternalLinks(h5.get());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: inspecting it asks for more memory than there is (damaged "
                            "file?)",
                            path));
  } catch (const std::length_error&) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: inspecting it asks for an impossible size (damaged file?)", path));
  }
  bool any_costly = false;
  size_t readable = 0;
  for (size_t i = 0; i < out.datasets.size(); ++i) {
    auto& d = out.datasets[i];
    d.recommendation = Recommend(d, storage[i], out.decoded_set_bytes, out.mem_available_bytes);
    any_costly = any_costly || Costly(d);
    readable += d.unsupported.empty() ? 1 : 0;
  }
  out.recommendation = OverallRecommendation(out, path, external_links, readable, any_costly);
  return out;
}

nlohmann::json Hdf5InspectionToJson(const Hdf5Inspection& in) {
  nlohmann::json j;
  j["path"] = in.path;
  j["file_bytes"] = in.file_bytes;
  j["library"] = in.library;
  j["mem_available_bytes"] = in.mem_available_bytes;
  j["decoded_set_bytes"] = in.decoded_set_bytes;
  j["recommendation"] = in.recommendation;
  j["datasets"] = nlohmann::json::array();
  for (const auto& d : in.datasets) {
    nlohmann::json e;
    e["dataset"] = d.dataset;
    e["access"] = d.access;
    e["access_detail"] = d.access_detail;
    if (!d.cast_dtype.empty()) e["cast_dtype"] = d.cast_dtype;
    if (!d.unsupported.empty()) {
      e["unsupported"] = d.unsupported;
    } else {
      e["dtype"] = d.dtype;
      e["shape"] = d.shape;
      e["variable_length"] = d.variable_length;
      e["layout"] = d.layout;
      e["chunk_shape"] = d.chunk_shape;
      e["filters"] = d.filters;
      e["read_path"] = d.read_path;
      e["chunks_stored"] = d.chunks_stored;
      e["chunks_per_sample"] = d.chunks_per_sample;
      e["index_method"] = d.index_method;
      e["index_seconds"] = d.index_seconds;
      e["sample_bytes"] = d.sample_bytes;
      e["logical_bytes"] = d.logical_bytes;
      e["storage_bytes"] = d.storage_bytes;
      e["compression_ratio"] = d.compression_ratio;
      e["read_bytes_per_sample"] = d.read_bytes_per_sample;
      e["decoded_bytes_per_sample"] = d.decoded_bytes_per_sample;
      if (d.decode_chunks_sampled > 0) {
        e["decode_mb_per_s"] = d.decode_mb_per_s;
        e["decode_chunks_sampled"] = d.decode_chunks_sampled;
      }
      if (!d.decode_error.empty()) e["decode_error"] = d.decode_error;
    }
    e["recommendation"] = d.recommendation;
    j["datasets"].push_back(std::move(e));
  }
  return j;
}

std::string FormatHdf5Inspection(const Hdf5Inspection& in) {
  std::ostringstream o;
  o << fmt::format("{}: {} on disk, {} datasets; libhdf5 {}; {} RAM available\n", in.path,
                   FormatBytes(in.file_bytes), in.datasets.size(), in.library,
                   FormatBytes(in.mem_available_bytes));
  for (const auto& d : in.datasets) {
    if (!d.unsupported.empty()) {
      o << fmt::format("\n{}: unsupported: {}\n  -> {}\n", d.dataset, d.unsupported,
                       d.recommendation);
      continue;
    }
    std::string layout = d.layout;
    if (!d.chunk_shape.empty()) {
      layout += fmt::format(" {}, {} stored chunks", ShapeText(d.chunk_shape), d.chunks_stored);
      if (d.chunks_per_sample > 1) layout += fmt::format(", {} per sample", d.chunks_per_sample);
    }
    o << fmt::format("\n{}: {}{} {}\n", d.dataset, d.dtype, d.variable_length ? "[*]" : "",
                     ShapeText(d.shape));
    if (d.variable_length) {
      o << "  items:       variable-length: each sample a reference (below) to its items in "
           "the global heap\n";
    }
    o << fmt::format("  layout:      {}; filters: {}\n", layout, d.filters);
    o << fmt::format("  size:        {} logical, {} stored (compression ratio {:.2f})\n",
                     FormatBytes(d.logical_bytes), FormatBytes(d.storage_bytes),
                     d.compression_ratio);
    if (!d.index_method.empty()) {
      o << fmt::format("  chunk index: {} chunks in {:.1f} ms ({})\n", d.chunks_stored,
                       d.index_seconds * 1e3, d.index_method);
    }
    o << fmt::format("  read path:   {}\n", d.read_path);
    o << fmt::format("  gpufeed:     {}\n", d.access_detail);
    o << fmt::format("  per random sample ({}): reads {}, decodes {}\n",
                     FormatBytes(d.sample_bytes), FormatBytes(d.read_bytes_per_sample),
                     FormatBytes(d.decoded_bytes_per_sample));
    if (d.decode_chunks_sampled > 0) {
      o << fmt::format(
          "  decode:      {:.0f} MB/s of output on one thread ({}; {} chunk{} "
          "sampled)\n",
          d.decode_mb_per_s, d.filters, d.decode_chunks_sampled,
          d.decode_chunks_sampled == 1 ? "" : "s");
    }
    if (!d.decode_error.empty()) o << fmt::format("  decode:      failed: {}\n", d.decode_error);
    o << fmt::format("  -> {}\n", d.recommendation);
  }
  o << fmt::format("\noverall: {}\n", in.recommendation);
  return o.str();
}

}  // namespace gpufeed
