// Choosing a source from a path: what OpenPath (gpufeed/sources.h) looks at, exposed for the
// CLI's `inspect` and for tests. Thread-safety: pure functions over the file system.
#pragma once

#include <string>

#include "gpufeed/file.h"

namespace gpufeed {

enum class PathKind {
  kMissing,      // nothing at the path
  kNumpyFolder,  // a folder (of .npy files, one per field)
  kNpyFile,      // a single .npy file: one field, not a data set
  kHdf5,         // .h5/.hdf5/.hdf, or any file that starts with the HDF5 signature
  kImages,       // a folder of class sub-folders and no .npy file (ImageFolder layout), or a
                 // .csv image list: opened by OpenImages (gpufeed/images.h)
  kIndexed,      // a Megatron indexed data set: a prefix (or its .idx or .bin) with both
                 // prefix.idx and prefix.bin present, or with either (OpenIndexed names the
                 // one missing)
  kUnknown,      // a file of no format gpufeed reads
};

// What lies at `path`. Files are opened through `fs` to look for the HDF5 signature; for a
// path with nothing at it, `path`.idx and `path`.bin are looked for.
PathKind ClassifyPath(const std::string& path, const FileSystem& fs);

}  // namespace gpufeed
