// The memory source under a name and an identity of its own: rows the process loaded itself
// (a database query's table) rather than arrays a caller lent. The identity says where the
// rows came from, so unlike OpenMemory's arrays they may be cached across processes.
// Thread-safety: the source is thread-safe like every Source.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpufeed/sources.h"

namespace gpufeed {

// Describe() is "<what> (N fields, M samples)"; Identity() is `identity`. `owner` keeps the
// fields' memory alive. REQUIRES: fields as OpenMemory checks them (the caller built them),
// a non-empty identity.
std::shared_ptr<Source> NewNamedMemorySource(std::vector<MemoryField> fields,
                                             std::shared_ptr<const void> owner, std::string what,
                                             std::string identity);

}  // namespace gpufeed
