// The source families OpenPath (gpufeed/sources.h) can hand a path to. NumPy, synthetic and
// in-memory sources are always built; HDF5 and the databases are families of their own, each
// a build target with its own libraries (libhdf5 and the codecs; SQLite; libpq), turned off
// with GPUFEED_WITH_HDF5=OFF, GPUFEED_WITH_SQLITE=OFF, GPUFEED_WITH_POSTGRES=OFF. A family
// registers its opener when its target is linked into the program (its family.cc is compiled
// into every program that links it), so a program that reads only NumPy files links none of
// those libraries, and a path of a family left out is refused naming the build option.
//
// Thread-safety: registration runs during static initialization; lookups afterwards are
// read-only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/file.h"
#include "gpufeed/source.h"

namespace gpufeed {

struct DatabaseOptions;

enum class SourceFamily { kHdf5, kSqlite, kPostgres };

// Opens `path` (a file or URI of the family) with `fields` (empty = all) through `fs` (null =
// DefaultFileSystem()).
using PathOpener = std::function<std::shared_ptr<Source>(
    const std::string& path, const std::vector<std::string>& fields,
    std::shared_ptr<const FileSystem> fs)>;
// Opens a database target (a file path for SQLite, a conninfo for PostgreSQL).
using DatabaseOpener =
    std::function<std::shared_ptr<Source>(const std::string& target, DatabaseOptions options)>;

struct FamilyOpeners {
  PathOpener path;          // HDF5
  DatabaseOpener database;  // SQLite, PostgreSQL
};

// Called once per family from its family.cc, at static initialization.
bool RegisterSourceFamily(SourceFamily family, FamilyOpeners openers);

// The family's openers; throws Error(kUnsupported) naming `what` ("s.h5: an HDF5 file"), the
// family and the build option when the family was not built into this program.
const FamilyOpeners& SourceFamilyOpeners(SourceFamily family, const std::string& what);

// True when the family is built into this program.
bool HasSourceFamily(SourceFamily family);

}  // namespace gpufeed
