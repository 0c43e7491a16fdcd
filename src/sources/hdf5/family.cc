// Registers the HDF5 family with OpenPath (sources/families.h).
#include "gpufeed/hdf5.h"
#include "sources/families.h"

namespace gpufeed {
namespace {

const bool registered = RegisterSourceFamily(
    SourceFamily::kHdf5,
    {.path = [](const std::string& path, const std::vector<std::string>& fields,
                std::shared_ptr<const FileSystem> fs) {
       return OpenHdf5({path}, fields, {.file_system = std::move(fs)});
     },
     .database = nullptr});

}  // namespace
}  // namespace gpufeed
