// Constructors of the built-in sources. Each returns a thread-safe Source.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/file.h"
#include "gpufeed/schema.h"
#include "gpufeed/source.h"

namespace gpufeed {

struct NumpyOptions {
  // Fields to read, in this order. Default: empty = every `*.npy` in the folder, by name.
  // (Members without a default get `= {}` so designated initializers that skip them do not
  // trip g++'s -Wmissing-field-initializers.)
  std::vector<std::string> fields = {};
  // Default: null = DefaultFileSystem() (local paths, s3:// and http(s):// URIs).
  std::shared_ptr<const FileSystem> file_system = nullptr;
  // Read through mmap where the file system allows it; pread otherwise. Default: true.
  bool use_mmap = true;
};

// A folder with one `.npy` file per field (`mel.npy`, `label.npy`), C order, samples along
// axis 0. dtypes: bool, int8..int64, uint8..uint64, float16/32/64. The header is parsed
// strictly. Throws Error naming the file for a missing folder or field, a truncated file, an
// unsupported dtype or order, or fields with different sample counts. The folder is listed
// and every byte read through `options.file_system`. A mapped file that
// shrinks while open is an Error(kIo) naming it ("changed size while being read") on the
// reading thread (use_mmap = false reads with pread and reports Error(kCorruptData) naming the
// sample instead).
//
// A variable-length field: `tokens.npy` (every sample's items end to end along axis 0) with
// `tokens.offsets.npy` beside it (1-D, any integer dtype, samples + 1 non-decreasing offsets
// into axis 0; the first may be above 0) is the field `tokens: dtype[*, ...]` (the rest of
// tokens.npy's shape per item), served by ReadLengths and ReadItems; the offsets file is not a
// field of its own. The offsets are read and checked at open (Error(kCorruptData) naming the
// file and the sample for one past the values or running backwards) and kept in memory.
std::shared_ptr<Source> OpenNumpy(const std::string& dir, NumpyOptions options = {});

// Writes one `.npy` file (the header and `bytes` of C-order data). Used by the demo and tests.
// Throws Error(kIo) naming the path.
void WriteNpy(const std::string& path, const FieldSpec& field, int64_t samples, const void* data);

// How many items each sample of a synthetic variable-length field holds: a distribution
// drawn per (seed, field, sample), so lengths cost no memory and any sample's can be checked.
// Spelled "uniform:MIN:MAX" (every length in [MIN, MAX] alike) or
// "lognormal:MEDIAN:SIGMA[:MAX]" (exp of a normal draw of mean ln(MEDIAN) and deviation SIGMA,
// rounded; above MAX drawn as MAX). Every length is bounded by kMaxSyntheticLength, checked
// where it is spelled: a lognormal without MAX whose largest possible draw (the normal draw
// is bounded, |z| < 8.6) exceeds it is refused.
struct SyntheticLengths {
  enum class Kind { kNone, kUniform, kLogNormal };
  Kind kind = Kind::kNone;       // Default: none; a schema with a variable-length field needs one
  double a = 0;                  // MIN, or MEDIAN
  double b = 0;                  // MAX, or SIGMA
  int64_t max = 0;               // the largest length it can draw (set by ParseSyntheticLengths)
  std::string ToString() const;  // the spelling it was parsed from, normalized
};
inline constexpr int64_t kMaxSyntheticLength = int64_t{1} << 31;
// Throws Error(kInvalidArgument) naming the spec for a malformed one or a distribution whose
// lengths could be negative or exceed kMaxSyntheticLength.
SyntheticLengths ParseSyntheticLengths(std::string_view spec);
// The length of `sample` of field number `field` drawn from `lengths` (in [0, lengths.max]).
int64_t SyntheticLength(const SyntheticLengths& lengths, uint64_t seed, int field, int64_t sample);

// Deterministic data of a given schema: the value of every element is a function of
// (seed, field, sample, element), so tests can check any row (see SyntheticValue). A
// variable-length field (`tokens: int32[*]`) holds SyntheticLength items per sample, drawn
// from `lengths` (required then, refused otherwise: Error(kInvalidArgument)); element e of a
// sample is SyntheticValue(seed, field, sample, e), as for a fixed field.
std::shared_ptr<Source> OpenSynthetic(Schema schema, int64_t samples, uint64_t seed = 0,
                                      SyntheticLengths lengths = {});
// The value OpenSynthetic stores at `element` of `sample` in field number `field`, as a
// double before conversion to the field's dtype. The conversion is exact, so this equals the
// stored element read back: floats lie on a grid their dtype represents exactly, in [-1, 1)
// (multiples of 2^-10 for float16, 2^-7 for bfloat16 -- stored with FloatToHalf and
// FloatToBFloat16 -- 2^-23 for float32, 2^-52 for float64); int8 and uint8 span their range,
// int16/int32 lie in [-1000, 1000), int64 and the wider unsigned types in [0, 1000) (label-like),
// bool is 0 or 1.
double SyntheticValue(uint64_t seed, int field, int64_t sample, int64_t element, DType dtype);

// Arrays already in memory (NumPy arrays, torch tensors): zero-copy. `owner` keeps the
// memory alive for as long as the source lives.
struct MemoryField {
  FieldSpec spec = {};
  const void* data = nullptr;  // C-order [samples, ...spec.shape]
  int64_t samples = 0;
};
std::shared_ptr<Source> OpenMemory(std::vector<MemoryField> fields,
                                   std::shared_ptr<const void> owner = nullptr);

// Opens whatever `path` holds: a folder -> OpenNumpy, an HDF5 file (.h5/.hdf5/.hdf or the HDF5
// signature) -> the HDF5 source. `fields` as in NumpyOptions::fields (empty = all). Throws
// Error(kNotFound) for a missing path, Error(kInvalidArgument) for a lone .npy file (naming
// its folder), Error(kUnsupported) for a format gpufeed does not read.
std::shared_ptr<Source> OpenPath(const std::string& path, const std::vector<std::string>& fields,
                                 std::shared_ptr<const FileSystem> fs = nullptr);

}  // namespace gpufeed
