// A read-only libhdf5 virtual file driver whose bytes come from a gpufeed::File, so libhdf5
// reads an HDF5 file (its metadata, and the data H5Dread reads) through the file seam: a
// local file, an object in a store, or a test's fault-injecting file alike.
//
// A read the File fails (Error) fails the libhdf5 call that made it, and Hdf5ErrorMessage()
// (library.h) then throws that Error, naming the file, instead of describing libhdf5's
// failure: an I/O error stays an I/O error, not "damaged file".
//
// libhdf5's file lock (a writer elsewhere holds the file) is kept for local paths: the
// driver takes a shared flock on the path, as libhdf5's own POSIX driver does; a URI has no
// lock.
//
// Thread-safety: libhdf5 calls the driver under its own global lock (and gpufeed's Hdf5Lock);
// the File it reads is thread-safe.
#pragma once

#include <memory>

#include "gpufeed/file.h"
#include "sources/hdf5/format/library.h"

namespace gpufeed {

// A file access property list that opens `file` through the driver: pass it to H5Fopen with
// file->path() as the name (the driver serves that name only). The list, and every file
// libhdf5 opens with it, keep `file` alive. REQUIRES: the libhdf5 lock is held.
Hdf5Id Hdf5FileAccessList(std::shared_ptr<const File> file);

// The Error of the driver read that failed this thread's last libhdf5 call, or null when the
// error stack holds no failed driver read; clears it either way. REQUIRES: the lock is held.
std::exception_ptr TakeHdf5DriverError();

}  // namespace gpufeed
