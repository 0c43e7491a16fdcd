// GroupIdSource: a source with one more field, "group" (int64 per row: the row's group in a
// GroupTable), read after the wrapped source's fields. What a grouped loader reads from, so
// the group id of every row travels with the batch to its device.
//
// Thread-safety: thread-safe, as the wrapped source.
#pragma once

#include <memory>

#include "gpufeed/groups.h"
#include "gpufeed/source.h"

namespace gpufeed {

// `source` with the per-row group id field appended. Throws Error(kInvalidArgument) when the
// source already has a field named "group" or the table's row count is not the source's.
std::shared_ptr<Source> WithGroupIds(std::shared_ptr<Source> source,
                                     std::shared_ptr<const GroupTable> groups);

}  // namespace gpufeed
