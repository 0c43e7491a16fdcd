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
  const int64_t samples = source.size();
  for (int64_t index : indices) {
    if (index < 0 || index >= samples) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: sample index {} is out of range [0, {})", source.Describe(),
                              index, samples));
    }
  }
}

}  // namespace gpufeed
