// What `gpufeed inspect` says about an HDF5 file: per dataset its shape, dtype, layout,
// chunking, filters, compression ratio, what one randomly accessed sample costs to read and
// decode, the measured decode throughput of its filter chain, what gpufeed will do with it
// (read it itself, through libhdf5, with a dtype= PyTorch needs, or refuse it), and a
// recommendation computed from those figures and the machine's free RAM.
//
// Thread-safety: pure functions (InspectHdf5 takes the libhdf5 lock while it opens the file).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/file.h"

namespace gpufeed {

struct Hdf5DatasetInspection {
  std::string dataset;               // "/mel"
  std::string unsupported;           // non-empty: why gpufeed cannot read it (then little else)
  std::string dtype;                 // "float32"
  std::vector<int64_t> shape;        // samples first
  // A variable-length dataset (`tokens: int32[*]`): dtype is its items'; the sizes below are
  // those of its references.
  bool variable_length = false;
  std::string layout;                // "contiguous", "chunked", "compact"
  std::vector<int64_t> chunk_shape;  // chunked only
  std::string filters;               // "gzip level 1 + shuffle", "none"
  std::string read_path;             // how gpufeed reads it
  bool compound_member = false;      // a member of a compound (table) dataset
  int64_t chunks_stored = 0;         // chunks written (chunked)
  int64_t chunks_per_sample = 0;     // chunks one sample spans (chunked)
  std::string index_method;          // how the chunk index was read
  double index_seconds = 0;          // and how long that took
  uint64_t sample_bytes = 0;
  uint64_t logical_bytes = 0;             // samples x sample_bytes
  uint64_t storage_bytes = 0;             // bytes the file spends on it
  double compression_ratio = 1;           // logical / storage (1 when nothing stored)
  uint64_t read_bytes_per_sample = 0;     // from disk, for one random sample
  uint64_t decoded_bytes_per_sample = 0;  // decompressed, for one random sample
  // Filtered chunks gpufeed decodes: its filter chain's measured decode throughput on this
  // machine, one thread, in MB (1e6 bytes) of output per second, from a sample of chunks.
  double decode_mb_per_s = 0;
  int64_t decode_chunks_sampled = 0;
  std::string decode_error;  // a sampled chunk did not decode: why
  // What gpufeed will do with it: "direct" (its own reader), "libhdf5" (through libhdf5 under
  // its global lock: slow), "cast" (a dtype torch 1.13 has none of: the Loader needs
  // dtype={field: cast_dtype}), "refused". access_detail says why and how, in words.
  std::string access;
  std::string access_detail;
  std::string cast_dtype;  // "cast": the dtype= that reads it for PyTorch
  std::string recommendation;
};

struct Hdf5Inspection {
  std::string path;
  uint64_t file_bytes = 0;
  std::string library;  // "1.10.8 (threadsafe build)"
  uint64_t mem_available_bytes = 0;
  uint64_t decoded_set_bytes = 0;  // logical bytes of every readable dataset
  std::vector<Hdf5DatasetInspection> datasets;
  std::string recommendation;  // for the file as a whole
};

// Inspects every dataset of the file at `path`. `mem_available_bytes` defaults to
// /proc/meminfo's MemAvailable. Throws Error naming the file when it cannot be opened;
// unreadable datasets are reported, not thrown.
Hdf5Inspection InspectHdf5(const std::string& path,
                           std::shared_ptr<const FileSystem> file_system = nullptr,
                           std::optional<uint64_t> mem_available_bytes = std::nullopt);

nlohmann::json Hdf5InspectionToJson(const Hdf5Inspection& inspection);
// The human-readable report, several lines per dataset.
std::string FormatHdf5Inspection(const Hdf5Inspection& inspection);

}  // namespace gpufeed
