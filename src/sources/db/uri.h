// The database URI's parts: which database, its target (a SQLite path or a libpq connection
// string) and gpufeed's parameters taken out of it. OpenDatabase opens what this returns;
// parsing is apart so that it can be tested and fuzzed without a server.
// Thread-safety: pure function.
#pragma once

#include <string>

#include "gpufeed/database.h"

namespace gpufeed {

struct DatabaseUriParts {
  enum class Kind { kSqlite, kPostgres };
  Kind kind = Kind::kSqlite;
  std::string target = {};  // the decoded SQLite path, or the libpq connection string
  DatabaseOptions options = {};
};

// Splits `uri` (OpenDatabase's spelling) into its parts, `options` overridden by the URI's
// parameters. Throws Error(kInvalidArgument) for a bad %-escape (exactly two hex digits after
// '%'), a bad parameter value or a URI that names no database.
DatabaseUriParts ParseDatabaseUri(const std::string& uri, DatabaseOptions options);

}  // namespace gpufeed
