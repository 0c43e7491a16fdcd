#include "gpufeed/source.h"

#include <fmt/format.h>

#include "gpufeed/error.h"

namespace gpufeed {

void CheckReadRequest(const Source& source, std::span<const int64_t> indices,
                      const BatchView& out) {
  GPUFEED_ASSERT(out.rows == static_cast<int64_t>(indices.size()),
                 "BatchView rows differ from the number of indices");
  GPUFEED_ASSERT(out.fields.size() == source.schema().fields.size(),
                 "BatchView has the wrong field count");
  for (int64_t index : indices) CheckSampleIndex(source, index);
}

int64_t CheckSampleIndex(const Source& source, int64_t index) {
  const int64_t samples = source.size();
  if (index < 0 || index >= samples) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: sample index {} is out of range [0, {})", source.Describe(),
                            index, samples));
  }
  return index;
}

void ThrowNoVariableField(const Source& source, int field) {
  throw Error(ErrorCode::kUnsupported,
              fmt::format("{}: field number {} has no variable-length items to read",
                          source.Describe(), field));
}

int64_t CheckItemsRequest(const Source& source, int field, int64_t index, int64_t first,
                          std::span<const std::byte> out, int64_t length) {
  const auto& fields = source.schema().fields;
  if (field < 0 || static_cast<size_t>(field) >= fields.size() ||
      !fields[static_cast<size_t>(field)].variable()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: field number {} is not a variable-length field",
                            source.Describe(), field));
  }
  const FieldSpec& spec = fields[static_cast<size_t>(field)];
  const size_t item = spec.ItemBytes();
  if (item == 0 ? !out.empty() : out.size() % item != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: field {}: {} bytes are not whole items of {} bytes",
                            source.Describe(), spec.name, out.size(), item));
  }
  const int64_t count = item == 0 ? 0 : static_cast<int64_t>(out.size() / item);
  if (first < 0 || first > length || count > length - first) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: field {}, sample {}: {} items from item {} are not within its {} items",
                            source.Describe(), spec.name, index, count, first, length));
  }
  return count;
}

}  // namespace gpufeed
