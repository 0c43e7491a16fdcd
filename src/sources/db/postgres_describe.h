// What a PostgreSQL query returns, asked of the server before any row is read: the columns'
// names and types (DescribeQuery), the ones a load reads (LoadedColumns: supported types,
// declared shapes applied) and the key's checks.
// Thread-safety: functions over one connection, used by one thread.
#pragma once

#include <string>
#include <vector>

#include "gpufeed/database.h"
#include "sources/db/postgres_connection.h"
#include "sources/db/postgres_copy.h"

namespace gpufeed {

// Every column of `query` in order, with its type; `supported` false for a type gpufeed does
// not read (refused only if the load reads the column). Throws Error for a query the server
// rejects or one with no columns or two of one name.
std::vector<PgColumn> DescribeQuery(PgConnection& conn, const std::string& query);

// The columns of `all` named in `load` (in that order), with `options.fields` applied.
// Throws Error(kUnsupported) for a type gpufeed does not read and Error(kNotFound /
// kInvalidArgument) for a declared field that names no loaded column or does not fit it.
std::vector<PgColumn> LoadedColumns(const std::vector<PgColumn>& all,
                                    const std::vector<std::string>& load,
                                    const DatabaseOptions& options, const std::string& context);

// Throws Error(kInvalidArgument) unless `key_name` is an integer column of `columns`.
void CheckKeyColumn(const std::vector<PgColumn>& columns, const std::string& key_name,
                    const std::string& context);

}  // namespace gpufeed
