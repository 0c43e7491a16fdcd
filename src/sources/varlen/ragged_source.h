// The ragged source under a name and an identity of its own: values and offsets the process
// loaded itself (a database query's BLOBs) rather than arrays a caller lent. The identity says
// where the rows came from, so unlike OpenRagged's arrays they may be cached across processes.
// Thread-safety: the source is thread-safe like every Source.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpufeed/varlen.h"

namespace gpufeed {

// Describe() is "<what> (N fields, M samples)"; Identity() is `identity`. The schema lists the
// fields in `order` (their names, each once). `owner` keeps the arrays alive. Checks the fields
// as OpenRagged does (and throws as it does). REQUIRES: a non-empty identity.
std::shared_ptr<Source> NewNamedRaggedSource(std::vector<RaggedField> ragged,
                                             std::vector<MemoryField> fixed,
                                             std::shared_ptr<const void> owner,
                                             const std::vector<std::string>& order,
                                             std::string what, std::string identity);

}  // namespace gpufeed
