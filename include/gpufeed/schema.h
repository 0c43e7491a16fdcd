// A sample is a fixed set of named fields, each an element type and a per-sample shape
// (`mel: float32[1,64,32]`, `label: int64[]`). A batch holds one contiguous array per
// field, `[B, ...shape]`.
//
// A field may instead have a variable first dimension, written `*`: `tokens: int32[*]` (token
// ids, a different count per sample), `jpeg: uint8[*]` (encoded bytes), `boxes: float32[*,4]`
// (ragged rows of a fixed width). Each step along it is an item (`float32[4]` for boxes). Such
// a field has no fixed size per sample: its source serves it as lengths and items
// (Source::ReadLengths, ReadItems), and a loader batches it through an adaptor that makes rows
// of one size again, padded or packed (gpufeed/varlen.h).
// Thread-safety: values; const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/dtype.h"

namespace gpufeed {

// The first dimension of a variable-length field's shape.
inline constexpr int64_t kVariableDim = -1;

struct FieldSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // per sample; empty for a scalar; kVariableDim first: variable

  // Whether the first dimension is kVariableDim.
  bool variable() const { return !shape.empty() && shape.front() == kVariableDim; }
  // One item of a variable-length field (the shape after the first dimension: 1 for
  // `int32[*]`, 4 for `float32[*,4]`), in elements and in bytes, checked like the sample's.
  // REQUIRES: variable().
  int64_t ElementsPerItem() const;
  size_t ItemBytes() const;

  // The product of `shape` and that times the dtype's size, each checked: a negative
  // dimension, or a count or byte size past INT64_MAX (torch's limit for a tensor), throws
  // Error(kCorruptData) naming the field. Shapes come from files and headers, so they are
  // untrusted until one of these has accepted them. A variable-length field has neither:
  // Error(kUnsupported) naming it.
  int64_t ElementsPerSample() const;
  size_t SampleBytes() const;
  // "mel: float32[1,64,32]", "tokens: int32[*]"
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
  // Whether any field is variable-length.
  bool HasVariable() const;
  std::string ToString() const;
  bool operator==(const Schema&) const = default;
};

// Parses "mel:float32[1,64,32],label:int64[]" (the synthetic-source and CLI spelling); a
// first dimension `*` makes a variable-length field ("tokens:int32[*]").
// Throws Error(kInvalidArgument) naming the bad part.
Schema ParseSchema(std::string_view spec);

}  // namespace gpufeed
