// The pieces of `RechunkHdf5` (rechunk.h): the compression a user asks for, the walk that
// copies an HDF5 tree into a new file with whole-sample chunks, and the check of the result.
// Thread-safety: one thread at a time per copier; each libhdf5 call takes the libhdf5 lock.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpufeed/error.h"
#include "sources/hdf5/tools/rechunk.h"

namespace gpufeed {

// Errors of the rewrite: "rechunk: WHAT: <libhdf5's error stack>". The checks throw it for a
// negative id or status.
[[noreturn]] void ThrowRechunkError(ErrorCode code, const std::string& what);
hid_t CheckRechunkId(hid_t id, ErrorCode code, const std::string& what);
void CheckRechunkStatus(herr_t status, ErrorCode code, const std::string& what);

struct Hdf5Compression {
  enum class Kind { kKeep, kNone, kGzip, kLz4, kZstd };
  Kind kind = Kind::kKeep;
  int level = 0;
};

// "keep", "none", "gzip[:0-9]", "lz4", "zstd[:1-22]". Throws Error(kInvalidArgument) naming
// the accepted forms.
Hdf5Compression ParseHdf5Compression(const std::string& text);

class Hdf5TreeCopier {
 public:
  // `total_bytes`: the input's dataset bytes (CountDatasetBytes), what the progress counts to.
  Hdf5TreeCopier(hid_t input, hid_t output, const RechunkOptions& options,
                 Hdf5Compression compression, uint64_t total_bytes, RechunkProgress progress);

  // Copies the root group's attributes and everything below it.
  void CopyAll(RechunkReport* report);
  void Close() {}

 private:
  static herr_t VisitLink(hid_t group, const char* name, const H5L_info_t* info, void* self);
  void CopyGroup(hid_t src, hid_t dst, const std::string& path);
  void CopyLink(hid_t src, hid_t dst, const std::string& name, const H5L_info_t& info,
                const std::string& path);
  void CopyHardLink(hid_t src, hid_t dst, const std::string& name, const std::string& path);
  void CopyDataset(hid_t src, hid_t dst, const std::string& name, const std::string& path);
  void CopyAttributes(hid_t src, hid_t dst, const std::string& path);
  void CopyAsIs(hid_t src, hid_t dst, const std::string& name, const std::string& path,
                const std::string& why);
  hid_t NewCreateList(hid_t src_dataset, hid_t type, const std::vector<hsize_t>& chunks,
                      const std::string& path);
  void CopyRows(hid_t src, hid_t dst, hid_t type, const std::vector<hsize_t>& dims,
                hsize_t chunk_rows, const std::string& path);

  hid_t input_;
  hid_t output_;
  RechunkOptions options_;
  Hdf5Compression compression_;
  RechunkProgress progress_;
  RechunkReport* report_ = nullptr;
  uint64_t total_bytes_ = 0;
  // Objects already copied, by (file number, address), with their path in the output: a
  // second hard link to one becomes a hard link in the output too.
  std::map<std::pair<unsigned long, haddr_t>, std::string> copied_;
};

// The bytes of every dataset's elements in the file (what the progress counts to).
uint64_t CountDatasetBytes(hid_t file);

// Reopens the written file at `path` and compares `options.verify_rows` rows of every
// rechunked dataset of `report` with the input, byte for byte. Returns the rows compared.
// Throws Error(kCorruptData) naming the dataset and row on a difference.
int64_t VerifyRechunked(hid_t input, const std::string& path, const RechunkReport& report,
                        const RechunkOptions& options);

}  // namespace gpufeed
