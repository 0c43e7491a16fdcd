// The parts of the HDF5 source (source.cc): a worker's state, one file's readers, and the
// opening of one file of those OpenHdf5 concatenates.
//
// Thread-safety: an Hdf5FilePart is immutable once opened; an Hdf5WorkerState belongs to one
// worker at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpufeed/file.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/schema.h"
#include "gpufeed/source.h"
#include "sources/hdf5/read/dataset_reader.h"
#include "sources/hdf5/read/vlen_reader.h"

namespace gpufeed {

class Hdf5WorkerState final : public SourceWorkerState {
 public:
  explicit Hdf5WorkerState(size_t cache_bytes) : scratch(cache_bytes) {}
  explicit Hdf5WorkerState(std::shared_ptr<SharedChunkCache> chunks) : scratch(std::move(chunks)) {}
  Hdf5ReadScratch scratch;
  std::vector<std::pair<int64_t, int64_t>> order;  // (sample, batch row), sorted
  std::vector<Hdf5RowTarget> targets;
  std::vector<Hdf5PiecePlan> plans;  // by field
  std::vector<int64_t> ahead;        // ReadAhead's samples, sorted
  Hdf5HeapCache heaps;               // variable-length data's global heap collections
};

// One file: its handle for the hot path and a reader per field.
struct Hdf5FilePart {
  std::shared_ptr<const File> file;  // shared with libhdf5's open file (file_driver.h)
  std::vector<std::unique_ptr<Hdf5DatasetReader>> readers;  // by field
  std::vector<std::unique_ptr<Hdf5VlenReader>> vlen;        // by field; null when fixed-size
  int64_t first_sample = 0;                                 // in the whole source
  int64_t samples = 0;
};

// OpenHdf5 for file number `p` of `paths` (`path`) and its datasets (`datasets`: filled with the
// file's own when empty): its readers into `part`, its fields into `schema` (file 0), or checked
// against it (the others). Throws Error naming the file and the dataset.
void OpenHdf5Part(const std::string& path, std::vector<std::string>& datasets,
                  const Hdf5Options& options, int64_t first_sample, size_t p,
                  const std::vector<std::string>& paths, Schema& schema, Hdf5FilePart& part);

}  // namespace gpufeed
