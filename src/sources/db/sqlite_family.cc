// Registers SQLite with OpenDatabase and OpenPath (sources/families.h).
#include "gpufeed/database.h"
#include "sources/families.h"

namespace gpufeed {
namespace {

const bool registered = RegisterSourceFamily(
    SourceFamily::kSqlite, {.path = nullptr, .database = [](const std::string& target, DatabaseOptions options) {
      return OpenSqlite(target, std::move(options));
    }});

}  // namespace
}  // namespace gpufeed
