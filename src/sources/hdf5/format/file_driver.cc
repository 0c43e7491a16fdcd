#include "sources/hdf5/format/file_driver.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>

#include "core/path_names.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

// The name of the driver's read in libhdf5's error stack: how TakeHdf5DriverError knows the
// failure on the stack is the one it holds.
constexpr const char* kReadFunction = "gpufeed_file_driver_read";

// What the file access list carries: the File to read.
struct DriverInfo {
  std::shared_ptr<const File> file;
};

struct DriverFile {
  H5FD_t pub;  // first: libhdf5 hands the driver this pointer
  std::shared_ptr<const File> file;
  haddr_t eoa = 0;
  int lock_fd = -1;  // the path's flock while libhdf5 holds it (local paths only)
};

// The Error of this thread's last failed driver read (libhdf5 runs the driver on the thread
// that called it).
thread_local std::exception_ptr pending_error;

void Push(const char* function, hid_t minor, const std::string& message) {
  H5Epush2(H5E_DEFAULT, __FILE__, function, __LINE__, H5E_ERR_CLS, H5E_VFL, minor, "%s",
           message.c_str());
}

void* FaplCopy(const void* info) {
  try {
    return new DriverInfo(*static_cast<const DriverInfo*>(info));
  } catch (...) {
    return nullptr;
  }
}

herr_t FaplFree(void* info) {
  delete static_cast<DriverInfo*>(info);
  return 0;
}

void* FaplGet(H5FD_t* file) {
  try {
    return new DriverInfo{reinterpret_cast<DriverFile*>(file)->file};
  } catch (...) {
    return nullptr;
  }
}

H5FD_t* Open(const char* name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  (void)maxaddr;
  if ((flags & (H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC | H5F_ACC_EXCL)) != 0) {
    Push("gpufeed_file_driver_open", H5E_CANTOPENFILE,
         fmt::format("{}: gpufeed's file driver only reads", name));
    return nullptr;
  }
  const auto* info = static_cast<const DriverInfo*>(H5Pget_driver_info(fapl));
  if (info == nullptr || info->file == nullptr) {
    Push("gpufeed_file_driver_open", H5E_CANTOPENFILE,
         fmt::format("{}: no file given to gpufeed's file driver", name));
    return nullptr;
  }
  // The list serves one file: another name (an external link's target opened with the
  // parent's list) must not read this file's bytes.
  if (name == nullptr || info->file->path() != name) {
    Push("gpufeed_file_driver_open", H5E_CANTOPENFILE,
         fmt::format("{}: gpufeed's file driver serves {} only", name ? name : "?",
                     info->file->path()));
    return nullptr;
  }
  try {
    auto* f = new DriverFile{};
    f->file = info->file;
    return &f->pub;
  } catch (...) {
    return nullptr;
  }
}

void ReleaseLock(DriverFile* f) {
  if (f->lock_fd < 0) return;
  flock(f->lock_fd, LOCK_UN);
  close(f->lock_fd);
  f->lock_fd = -1;
}

herr_t Close(H5FD_t* file) {
  auto* f = reinterpret_cast<DriverFile*>(file);
  ReleaseLock(f);
  delete f;
  return 0;
}

int Compare(const H5FD_t* a, const H5FD_t* b) {
  const File* fa = reinterpret_cast<const DriverFile*>(a)->file.get();
  const File* fb = reinterpret_cast<const DriverFile*>(b)->file.get();
  return fa < fb ? -1 : (fa > fb ? 1 : 0);
}

herr_t Query(const H5FD_t*, unsigned long* flags) {
  // As libhdf5's POSIX driver: metadata read in large blocks and raw data sieved, which
  // keeps the number of reads (requests, for an object) low.
  *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
           H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

haddr_t GetEoa(const H5FD_t* file, H5FD_mem_t) {
  return reinterpret_cast<const DriverFile*>(file)->eoa;
}

herr_t SetEoa(H5FD_t* file, H5FD_mem_t, haddr_t addr) {
  reinterpret_cast<DriverFile*>(file)->eoa = addr;
  return 0;
}

haddr_t GetEof(const H5FD_t* file, H5FD_mem_t) {
  return static_cast<haddr_t>(reinterpret_cast<const DriverFile*>(file)->file->Size());
}

// As libhdf5's POSIX driver: a range past the end of the allocated space is an error, and
// bytes past the end of the file read as zeros (libhdf5 itself compares the file's size
// with the superblock's end-of-file address).
herr_t Read(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  auto* f = reinterpret_cast<DriverFile*>(file);
  if (addr == HADDR_UNDEF || addr > f->eoa || size > f->eoa - addr) {
    pending_error = nullptr;
    Push(kReadFunction, H5E_OVERFLOW,
         fmt::format("{}: read of {} bytes at {} past the end of the allocated space ({})",
                     f->file->path(), size, addr, f->eoa));
    return -1;
  }
  try {
    auto* out = static_cast<char*>(buf);
    size_t done = 0;
    while (done < size) {
      const size_t got = f->file->ReadAt(addr + done, out + done, size - done);
      if (got == 0) {
        std::memset(out + done, 0, size - done);
        break;
      }
      done += got;
    }
    return 0;
  } catch (const std::exception& e) {
    pending_error = std::current_exception();
    Push(kReadFunction, H5E_READERROR, e.what());
    return -1;
  }
}

herr_t Write(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t, size_t, const void*) {
  Push("gpufeed_file_driver_write", H5E_WRITEERROR,
       fmt::format("{}: gpufeed's file driver only reads",
                   reinterpret_cast<DriverFile*>(file)->file->path()));
  return -1;
}

// HDF5's file lock, as its POSIX driver takes it: shared, not waiting, so that a writer
// elsewhere (which holds it exclusively) is reported instead of read mid-write. Only a local
// path can be locked; where flock is not supported the read goes on, as libhdf5's does.
herr_t Lock(H5FD_t* file, hbool_t rw) {
  auto* f = reinterpret_cast<DriverFile*>(file);
  const std::string& path = f->file->path();
  if (rw || f->lock_fd >= 0 || IsUriPath(path)) return 0;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;  // not a local file (a test's name for one): nothing to lock
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    if (err != EWOULDBLOCK) return 0;
    Push("gpufeed_file_driver_lock", H5E_CANTLOCKFILE,
         fmt::format("unable to lock file, errno = {}, error message = '{}'", err,
                     std::generic_category().message(err)));
    return -1;
  }
  f->lock_fd = fd;
  return 0;
}

herr_t Unlock(H5FD_t* file) {
  ReleaseLock(reinterpret_cast<DriverFile*>(file));
  return 0;
}

H5FD_class_t MakeClass() {
  H5FD_class_t c{};
  c.name = "gpufeed_file";
  c.maxaddr = (haddr_t{1} << 63) - 1;
  c.fc_degree = H5F_CLOSE_WEAK;
  c.fapl_size = sizeof(DriverInfo);
  c.fapl_get = FaplGet;
  c.fapl_copy = FaplCopy;
  c.fapl_free = FaplFree;
  c.open = Open;
  c.close = Close;
  c.cmp = Compare;
  c.query = Query;
  c.get_eoa = GetEoa;
  c.set_eoa = SetEoa;
  c.get_eof = GetEof;
  c.read = Read;
  c.write = Write;
  c.lock = Lock;
  c.unlock = Unlock;
  for (auto& type : c.fl_map) type = H5FD_MEM_DEFAULT;
  const H5FD_mem_t dichotomy[H5FD_MEM_NTYPES] = H5FD_FLMAP_DICHOTOMY;
  std::copy(std::begin(dichotomy), std::end(dichotomy), std::begin(c.fl_map));
  return c;
}

// The driver's id, registered on first use (and again should libhdf5 have been closed and
// reopened, which drops it). REQUIRES: the lock is held.
hid_t DriverId() {
  static const H5FD_class_t kClass = MakeClass();
  static hid_t id = -1;
  if (id < 0 || H5Iis_valid(id) <= 0) {
    id = H5FDregister(&kClass);
    if (id < 0) {
      throw Error(ErrorCode::kIo, fmt::format("cannot register gpufeed's file driver with "
                                              "libhdf5: {}",
                                              Hdf5ErrorMessage()));
    }
  }
  return id;
}

herr_t FindRead(unsigned, const H5E_error2_t* err, void* found) {
  if (err->func_name != nullptr && std::strcmp(err->func_name, kReadFunction) == 0) {
    *static_cast<bool*>(found) = true;
  }
  return 0;
}

}  // namespace

Hdf5Id Hdf5FileAccessList(std::shared_ptr<const File> file) {
  Hdf5Lock lock;
  const hid_t driver = DriverId();
  Hdf5Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  DriverInfo info{std::move(file)};
  if (!fapl.valid() || H5Pset_driver(fapl.get(), driver, &info) < 0) {
    throw Error(ErrorCode::kIo, fmt::format("{}: cannot make a file access list: {}",
                                            info.file->path(), Hdf5ErrorMessage()));
  }
  return fapl;
}

std::exception_ptr TakeHdf5DriverError() {
  std::exception_ptr error = std::exchange(pending_error, nullptr);
  bool found = false;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, FindRead, &found);
  return found ? error : nullptr;
}

}  // namespace gpufeed
