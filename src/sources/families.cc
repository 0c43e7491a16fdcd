#include "sources/families.h"

#include <fmt/format.h>

#include <array>

#include "gpufeed/error.h"

namespace gpufeed {
namespace {

struct FamilyName {
  const char* name;
  const char* option;
  const char* target;
};
constexpr std::array<FamilyName, 3> kNames = {{
    {"HDF5", "GPUFEED_WITH_HDF5", "gpufeed_hdf5"},
    {"SQLite", "GPUFEED_WITH_SQLITE", "gpufeed_sqlite"},
    {"PostgreSQL", "GPUFEED_WITH_POSTGRES", "gpufeed_postgres"},
}};

// Filled during static initialization, before main: a function-local static, so a family
// registered from another translation unit never sees it unconstructed.
std::array<FamilyOpeners, kNames.size()>& Registered() {
  static std::array<FamilyOpeners, kNames.size()> openers;
  return openers;
}

size_t IndexOf(SourceFamily family) { return static_cast<size_t>(family); }

}  // namespace

bool RegisterSourceFamily(SourceFamily family, FamilyOpeners openers) {
  Registered()[IndexOf(family)] = std::move(openers);
  return true;
}

bool HasSourceFamily(SourceFamily family) {
  const FamilyOpeners& o = Registered()[IndexOf(family)];
  return o.path != nullptr || o.database != nullptr;
}

const FamilyOpeners& SourceFamilyOpeners(SourceFamily family, const std::string& what) {
  if (!HasSourceFamily(family)) {
    const FamilyName& n = kNames[IndexOf(family)];
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}, but this build of gpufeed has no {} support (it was built "
                            "with -D{}=OFF, or the program does not link {})",
                            what, n.name, n.option, n.target));
  }
  return Registered()[IndexOf(family)];
}

}  // namespace gpufeed
