// Fields made of several columns: a table of 35 `real` feature columns read as one
// `x: float32[35]` field instead of 35 scalar fields the training loop stacks per batch.
//
// A StackedField names the columns it takes -- names, or glob patterns (`*`, `?`, `[...]`)
// matched against the column names in table order -- and stacks them along a new axis after
// the batch axis: K columns of per-sample shape S make a field of shape [K, ...S] (scalar
// columns: [K]). With `stack = false` it takes exactly one column, as is, under its own name.
// The databases stack when they load (OpenPostgres / OpenSqlite, DatabaseOptions::select), so
// an epoch copies one contiguous row per sample; StackFields does the same for any other
// source (HDF5, NumPy, memory) as each batch is read.
//
// dtype: the stacked columns must share a dtype unless `dtype` is given; then every value is
// converted to it and checked. A value converts when it is exact, with one exception: a
// float64 (or float32) value into a narrower float dtype rounds to the nearest value (that is
// what asking for float32 means) but a finite value beyond the narrower dtype's range is
// refused. Integers into a narrower integer dtype (or bool: 0 or 1), integers into a float
// dtype and floats into an integer dtype are refused for any value that does not convert
// exactly. A refused value throws Error(kCorruptData) naming the column and the row.
//
// Thread-safety: values and pure functions; StackFields returns a thread-safe Source.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/dtype.h"
#include "gpufeed/schema.h"
#include "gpufeed/source.h"

namespace gpufeed {

struct StackedField {
  std::string name;  // the field it makes
  // Column (field) names or glob patterns, in order; a pattern's matches come in table
  // order. A name that equals a column is that column even when it holds `*`.
  std::vector<std::string> columns = {};
  // Default: true = the columns stacked into [K, ...]. False: exactly one column, as is.
  bool stack = true;
  // Default: nullopt = the columns' own dtype (they must agree). Otherwise converted and
  // checked as the file comment says.
  std::optional<DType> dtype = std::nullopt;
};

// The fields `select` makes from columns of `schema`: per output field, its spec and the
// indices (into schema.fields) of its columns, in stacking order.
struct StackPlan {
  struct Field {
    FieldSpec spec;
    std::vector<int> columns;
  };
  std::vector<Field> fields;
  // Every column some field takes, each once, in schema order.
  std::vector<int> used_columns;
};

// Resolves `select` against `schema` (the columns); no pattern matches the column named
// `unmatched` (a database key), only its own name does. `what` prefixes messages. Throws
// Error(kNotFound) for a name or pattern that matches no column (listing the columns),
// Error(kInvalidArgument) for an empty or duplicated output name, a stack=false field that
// does not name exactly one column, columns of different shapes, or of different dtypes
// without `dtype`.
StackPlan PlanStack(const Schema& schema, const std::vector<StackedField>& select,
                    const std::string& what, const std::string& unmatched = {});

// A source whose fields are `select` made from `inner`'s fields, stacked as each batch is
// read (inner fields no StackedField takes are read and dropped: open `inner` with only the
// fields needed). Throws as PlanStack; a value the dtype refuses throws from Read, naming
// the field and the sample.
std::shared_ptr<Source> StackFields(std::shared_ptr<Source> inner,
                                    std::vector<StackedField> select);

}  // namespace gpufeed
