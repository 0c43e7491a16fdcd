// Grouped data: rows that belong together (the segments of one recording), for whole-file
// evaluation and training on whole files.
//
// A GroupTable says which rows form each group, declared one of two ways: an offsets dataset
// of F+1 row offsets (group g is rows [offsets[g], offsets[g+1]); HDF5 or NumPy), or a
// per-row integer group id (rows of one group need not be contiguous; group g is every row
// whose id is g, in row order). Groups may carry per-group fields (a file label) read from
// datasets of F rows. Everything read from a file is checked before it is used; each bad
// input is an Error naming the dataset and its first offending row.
//
// With LoaderOptions::groups and pack = true the loader delivers packed batches of whole
// groups (see GroupPacker in src/pipeline/group_packer.h): each batch lists the parts of
// groups it holds (Batch::groups()) and carries a per-row int64 field "group".
//
// Thread-safety: a GroupTable is immutable once made (the factories return it const);
// const methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/file.h"
#include "gpufeed/schema.h"

namespace gpufeed {

// The name of the per-row group id field a grouped loader adds to its batches.
inline constexpr const char* kGroupField = "group";

// How a group table is declared (see above).
enum class GroupKind {
  kOffsets,  // "offsets": F+1 row offsets; group g is rows [offsets[g], offsets[g+1])
  kIds,      // "ids": one group id per row; group g is every row whose id is g
};

// The names Python spells ("offsets", "ids"). ParseGroupKind throws Error(kInvalidArgument)
// naming the accepted values for any other text.
GroupKind ParseGroupKind(std::string_view text);
std::string_view GroupKindName(GroupKind kind);

// How a data set on disk declares its groups.
struct GroupOptions {
  std::string id_field = {};             // a per-row integer dataset (exclusive with `offsets`)
  std::string offsets = {};              // a dataset of F+1 row offsets (exclusive with `id_field`)
  std::vector<std::string> fields = {};  // per-group datasets of F rows. Default: none
};

// One group's rows within one batch: rows [begin, end) of the batch are rows
// [offset, offset + end - begin) of group `id` (in the group's row order). `complete` is
// true on the part holding the group's last row (a group longer than a batch is split into
// parts in consecutive batches, in order; every other group has one part).
struct BatchGroup {
  int64_t id = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t offset = 0;
  bool complete = true;
};

class GroupTable {
 public:
  // One per-group field: `spec` per group, `data` holds num_groups() of them, C order.
  struct Field {
    FieldSpec spec;
    std::vector<std::byte> data;
  };

  // Groups from F+1 offsets over `rows` rows. `name` names the dataset in messages (with
  // its file). Throws Error(kCorruptData) naming it and the first offending entry for
  // offsets that are empty, do not start at 0, decrease, pass `rows`, or end before it.
  static std::unique_ptr<GroupTable> FromOffsets(std::span<const int64_t> offsets, int64_t rows,
                                                 std::string name);
  // Groups from one id per row: group g holds the rows whose id is g. There are `groups`
  // groups (-1: the largest id + 1). Throws Error(kCorruptData) naming `name` and the first
  // offending row for a negative id, and for an id >= `groups` (or, with groups = -1, an id
  // past the row count: ids are 0..F-1).
  static std::unique_ptr<GroupTable> FromIds(std::span<const int64_t> ids, std::string name,
                                             int64_t groups = -1);
  // FromOffsets(values, rows, name) or FromIds(values, name, groups), as `kind` says.
  static std::unique_ptr<GroupTable> From(GroupKind kind, std::span<const int64_t> values,
                                          int64_t rows, std::string name, int64_t groups = -1);

  // Adds a per-group field from `rows` rows of `spec` at `data`. Throws Error(kCorruptData)
  // naming `what` when rows != num_groups() (with the first row or group that has no match),
  // Error(kInvalidArgument) for a field named twice or named "group".
  void AddField(FieldSpec spec, const void* data, int64_t rows, const std::string& what);

  int64_t num_groups() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t num_rows() const { return rows_; }
  int64_t GroupSize(int64_t group) const {
    return offsets_[static_cast<size_t>(group) + 1] - offsets_[static_cast<size_t>(group)];
  }
  // Row `k` of group `group`, in the group's row order.
  int64_t Row(int64_t group, int64_t k) const {
    const int64_t at = offsets_[static_cast<size_t>(group)] + k;
    return by_group_.empty() ? at : by_group_[static_cast<size_t>(at)];
  }
  // The group of row `row`. REQUIRES: 0 <= row < num_rows().
  int64_t GroupOf(int64_t row) const;
  const std::vector<Field>& fields() const { return fields_; }
  // The per-group field named `name`, or null.
  const Field* field(const std::string& name) const;
  // What declared the groups ("offsets file_offsets (a.h5)"), for messages and cache keys.
  const std::string& name() const { return name_; }
  // Identifies the grouping for a loader state and cache keys: the name, the counts and a
  // hash of the offsets.
  std::string Identity() const;

 private:
  GroupTable() = default;

  std::string name_;
  int64_t rows_ = 0;
  std::vector<int64_t> offsets_;    // F+1 offsets into the rows in group order
  std::vector<int64_t> by_group_;   // ids: the rows in group order; empty for offsets
  std::vector<int64_t> row_group_;  // ids: the group of each row; empty for offsets
  std::vector<Field> fields_;
};

// Reads the groups of the data set at `path` (an HDF5 file or a NumPy folder, as OpenPath
// takes it), whose data has `rows` rows: the offsets or id dataset and the per-group fields,
// each through the same checked readers as the data. Integer datasets of any width are
// accepted for offsets and ids. Throws Error(kInvalidArgument) unless exactly one of
// id_field and offsets is given, Error(kNotFound) for a missing dataset, Error(kUnsupported)
// for offsets or ids that are not integers of one value per row, and what FromOffsets,
// FromIds and AddField throw.
std::shared_ptr<const GroupTable> ReadGroups(const std::string& path, const GroupOptions& options,
                                             int64_t rows,
                                             std::shared_ptr<const FileSystem> fs = nullptr);

}  // namespace gpufeed
