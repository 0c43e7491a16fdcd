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

  // The product of `shape` and that times the dtype's size, each checked: a negative
  // dimension, or a count or byte size past INT64_MAX (torch's limit for a tensor), throws
  // Error(kCorruptData) naming the field. Shapes come from files and headers, so they are
  // untrusted until one of these has accepted them.
  int64_t ElementsPerSample() const;
  size_t SampleBytes() const;
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
  // The sum of the fields' SampleBytes(), checked like them.
  size_t SampleBytes() const;
  std::string ToString() const;
  bool operator==(const Schema&) const = default;
};

// Parses "mel:float32[1,64,32],label:int64[]" (the synthetic-source and CLI spelling).
// Throws Error(kInvalidArgument) naming the bad part.
Schema ParseSchema(std::string_view spec);

}  // namespace gpufeed
