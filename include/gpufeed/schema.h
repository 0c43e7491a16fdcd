// A sample is a fixed set of named fields, each an element type and a per-sample shape
// (`mel: float32[1,64,32]`, `label: int64[]`). A batch holds one contiguous array per
// field, `[B, ...shape]`.
// Thread-safety: values; const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/dtype.h"

namespace gpufeed {

struct FieldSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // per sample; empty for a scalar

  int64_t ElementsPerSample() const;
  size_t SampleBytes() const { return static_cast<size_t>(ElementsPerSample()) * DTypeSize(dtype); }
  // "mel: float32[1,64,32]"
  std::string ToString() const;
  bool operator==(const FieldSpec&) const = default;
};

struct Schema {
  std::vector<FieldSpec> fields;

  // Index of the field named `name`, or -1.
  int IndexOf(std::string_view name) const;
  // REQUIRES: a field named `name` exists; throws Error(kNotFound) naming the fields otherwise.
  const FieldSpec& Field(std::string_view name) const;
  size_t SampleBytes() const;
  std::string ToString() const;
  bool operator==(const Schema&) const = default;
};

// Parses "mel:float32[1,64,32],label:int64[]" (the synthetic-source and CLI spelling).
// Throws Error(kInvalidArgument) naming the bad part.
Schema ParseSchema(std::string_view spec);

}  // namespace gpufeed
