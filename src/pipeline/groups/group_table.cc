// GroupTable (gpufeed/groups.h): the rows of each group, checked, and reading it from a file.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/checked_math.h"
#include "core/splitmix.h"
#include "gpufeed/error.h"
#include "gpufeed/groups.h"
#include "gpufeed/sources.h"

namespace gpufeed {

GroupKind ParseGroupKind(std::string_view text) {
  if (text == "offsets") return GroupKind::kOffsets;
  if (text == "ids") return GroupKind::kIds;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("unknown group kind '{}': expected \"offsets\" or \"ids\"", text));
}

std::string_view GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kOffsets:
      return "offsets";
    case GroupKind::kIds:
      return "ids";
  }
  return "unknown";
}

std::unique_ptr<GroupTable> GroupTable::From(GroupKind kind, std::span<const int64_t> values,
                                             int64_t rows, std::string name, int64_t groups) {
  switch (kind) {
    case GroupKind::kOffsets:
      return FromOffsets(values, rows, std::move(name));
    case GroupKind::kIds:
      return FromIds(values, std::move(name), groups);
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("unknown group kind {}", static_cast<int>(kind)));
}

std::unique_ptr<GroupTable> GroupTable::FromOffsets(std::span<const int64_t> offsets, int64_t rows,
                                                    std::string name) {
  const auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kCorruptData, fmt::format("group offsets {}: {}", name, what));
  };
  if (offsets.empty()) throw bad("no offsets (F+1 entries are needed, the first 0)");
  if (offsets[0] != 0) {
    throw bad(fmt::format("row 0 holds {}: offsets must start at 0", offsets[0]));
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      throw bad(fmt::format("row {} holds {}, less than row {} ({}): offsets must increase", i,
                            offsets[i], i - 1, offsets[i - 1]));
    }
    if (offsets[i] > rows) {
      throw bad(fmt::format("row {} holds {}, past the row count {}", i, offsets[i], rows));
    }
  }
  if (offsets.back() != rows) {
    throw bad(
        fmt::format("the last row ({}) holds {}, short of the row count {}: every row must "
                    "belong to a group",
                    offsets.size() - 1, offsets.back(), rows));
  }
  std::unique_ptr<GroupTable> table(new GroupTable());
  table->name_ = std::move(name);
  table->rows_ = rows;
  table->offsets_.assign(offsets.begin(), offsets.end());
  return table;
}

std::unique_ptr<GroupTable> GroupTable::FromIds(std::span<const int64_t> ids, std::string name,
                                                int64_t groups) {
  const auto rows = static_cast<int64_t>(ids.size());
  // Without a per-group field to size them, ids are 0..F-1 with F <= rows: a larger id would
  // make the table allocate for groups that hold no row (an id of 2^60 read from a file).
  const int64_t limit = groups >= 0 ? groups : rows;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t id = ids[static_cast<size_t>(r)];
    if (id < 0) {
      throw Error(
          ErrorCode::kCorruptData,
          fmt::format("group ids {}: row {} holds {}: group ids must be >= 0", name, r, id));
    }
    if (id >= limit) {
      throw Error(ErrorCode::kCorruptData,
                  groups >= 0
                      ? fmt::format("group ids {}: row {} holds {}, past the {} groups of the "
                                    "per-group fields",
                                    name, r, id, groups)
                      : fmt::format("group ids {}: row {} holds {}, not below the row count {} "
                                    "(ids are 0..F-1 for F groups)",
                                    name, r, id, rows));
    }
  }
  int64_t count = groups;
  if (count < 0) {
    count = 0;
    for (int64_t id : ids) count = std::max(count, id + 1);
  }
  std::unique_ptr<GroupTable> table(new GroupTable());
  table->name_ = std::move(name);
  table->rows_ = rows;
  table->offsets_.assign(static_cast<size_t>(count) + 1, 0);
  for (int64_t id : ids) ++table->offsets_[static_cast<size_t>(id) + 1];
  for (size_t g = 1; g < table->offsets_.size(); ++g) {
    table->offsets_[g] += table->offsets_[g - 1];
  }
  // A counting sort: rows of a group keep their row order.
  std::vector<int64_t> next(table->offsets_.begin(), table->offsets_.end() - 1);
  table->by_group_.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto id = static_cast<size_t>(ids[static_cast<size_t>(r)]);
    table->by_group_[static_cast<size_t>(next[id]++)] = r;
  }
  table->row_group_.assign(ids.begin(), ids.end());
  return table;
}

void GroupTable::AddField(FieldSpec spec, const void* data, int64_t rows, const std::string& what) {
  if (spec.name == kGroupField) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("per-group field {}: the name '{}' is the per-row group id the loader "
                            "adds; rename the field",
                            what, kGroupField));
  }
  if (field(spec.name) != nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("per-group field '{}' is named twice", spec.name));
  }
  const int64_t groups = num_groups();
  if (rows != groups) {
    throw Error(ErrorCode::kCorruptData,
                rows > groups
                    ? fmt::format("per-group field {} has {} rows, not one per group ({} groups "
                                  "in {}): row {} is the first without a group",
                                  what, rows, groups, name_, groups)
                    : fmt::format("per-group field {} has {} rows, not one per group ({} groups "
                                  "in {}): group {} is the first without a row",
                                  what, rows, groups, name_, rows));
  }
  const uint64_t bytes = MulOrThrow(static_cast<uint64_t>(rows), spec.SampleBytes(),
                                    "per-group field " + what + " size");
  Field f{std::move(spec), std::vector<std::byte>(static_cast<size_t>(bytes))};
  if (bytes > 0) std::memcpy(f.data.data(), data, static_cast<size_t>(bytes));
  fields_.push_back(std::move(f));
}

int64_t GroupTable::GroupOf(int64_t row) const {
  if (!row_group_.empty()) return row_group_[static_cast<size_t>(row)];
  // The last group whose first row is <= row (empty groups share an offset with the next).
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end() - 1, row);
  return static_cast<int64_t>(it - offsets_.begin()) - 1;
}

const GroupTable::Field* GroupTable::field(const std::string& name) const {
  for (const Field& f : fields_) {
    if (f.spec.name == name) return &f;
  }
  return nullptr;
}

std::string GroupTable::Identity() const {
  uint64_t hash = Mix64(static_cast<uint64_t>(rows_));
  for (int64_t o : offsets_) hash = Mix64(hash ^ static_cast<uint64_t>(o));
  for (int64_t r : by_group_) hash = Mix64(hash ^ static_cast<uint64_t>(r));
  return fmt::format("groups:{}:{}:{}:{:016x}", name_, num_groups(), rows_, hash);
}

namespace {

// Every row of a one-field source of integers, one per row, as int64. `what` names it.
std::vector<int64_t> ReadIntegers(const Source& source, const std::string& what) {
  const FieldSpec& spec = source.schema().fields.at(0);
  if (IsFloating(spec.dtype) || spec.dtype == DType::kBool || spec.ElementsPerSample() != 1) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{} is {}: it must be an integer dataset of one value per row", what,
                            spec.ToString()));
  }
  const int64_t rows = source.size();
  const size_t width = DTypeSize(spec.dtype);
  std::vector<std::byte> raw(
      static_cast<size_t>(MulOrThrow(static_cast<uint64_t>(rows), width, what + " size")));
  std::vector<int64_t> indices(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) indices[static_cast<size_t>(i)] = i;
  source.Read(indices, BatchView{{raw.data()}, rows}, source.NewWorkerState().get());
  std::vector<int64_t> out(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    const std::byte* p = raw.data() + static_cast<size_t>(i) * width;
    int64_t v = 0;
    switch (spec.dtype) {
      case DType::kInt8:
        v = *reinterpret_cast<const int8_t*>(p);
        break;
      case DType::kInt16: {
        int16_t x;
        std::memcpy(&x, p, 2);
        v = x;
        break;
      }
      case DType::kInt32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        v = x;
        break;
      }
      case DType::kInt64:
        std::memcpy(&v, p, 8);
        break;
      case DType::kUInt8:
        v = *reinterpret_cast<const uint8_t*>(p);
        break;
      case DType::kUInt16: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        v = x;
        break;
      }
      case DType::kUInt32: {
        uint32_t x;
        std::memcpy(&x, p, 4);
        v = x;
        break;
      }
      case DType::kUInt64: {
        uint64_t x;
        std::memcpy(&x, p, 8);
        if (x > static_cast<uint64_t>(INT64_MAX)) {
          throw Error(ErrorCode::kCorruptData,
                      fmt::format("{}: row {} holds {}, past the int64 range", what, i, x));
        }
        v = static_cast<int64_t>(x);
        break;
      }
      default:
        GPUFEED_ASSERT(false, "integer dtype");
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

}  // namespace

std::shared_ptr<const GroupTable> ReadGroups(const std::string& path, const GroupOptions& options,
                                             int64_t rows, std::shared_ptr<const FileSystem> fs) {
  if (options.id_field.empty() == options.offsets.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "groups are declared by exactly one of a per-row id field (group=) and an "
                "offsets dataset (group_offsets=)");
  }
  // Per-group fields first: with ids, they say how many groups there are.
  std::vector<std::shared_ptr<Source>> field_sources;
  for (const std::string& name : options.fields) {
    field_sources.push_back(OpenPath(path, {name}, fs));
  }
  std::unique_ptr<GroupTable> table;
  if (!options.offsets.empty()) {
    const std::string what = fmt::format("'{}' ({})", options.offsets, path);
    table = GroupTable::FromOffsets(ReadIntegers(*OpenPath(path, {options.offsets}, fs), what),
                                    rows, what);
  } else {
    const std::string what = fmt::format("'{}' ({})", options.id_field, path);
    const auto source = OpenPath(path, {options.id_field}, fs);
    if (source->size() != rows) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("group ids {} has {} rows, the data {}", what, source->size(), rows));
    }
    const int64_t groups = field_sources.empty() ? -1 : field_sources[0]->size();
    table = GroupTable::FromIds(ReadIntegers(*source, what), what, groups);
  }
  for (size_t i = 0; i < field_sources.size(); ++i) {
    const Source& source = *field_sources[i];
    const FieldSpec& spec = source.schema().fields.at(0);
    const std::string what = fmt::format("'{}' ({})", options.fields[i], path);
    const int64_t n = source.size();
    if (n != table->num_groups()) {
      table->AddField(spec, nullptr, n, what);  // throws, naming the first unmatched row
    }
    std::vector<std::byte> data(static_cast<size_t>(
        MulOrThrow(static_cast<uint64_t>(n), spec.SampleBytes(), what + " size")));
    std::vector<int64_t> indices(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) indices[static_cast<size_t>(r)] = r;
    source.Read(indices, BatchView{{data.data()}, n}, source.NewWorkerState().get());
    table->AddField(spec, data.data(), n, what);
  }
  return table;
}

}  // namespace gpufeed
