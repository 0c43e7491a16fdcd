// The one way gpufeed calls libhdf5: a process-wide lock, ids that close themselves, and the
// library's error stack turned into a message.
//
// Thread-safety: every libhdf5 call must hold Hdf5Lock() (a recursive mutex, so an Hdf5Id
// may be closed while the caller holds it). Debian's libhdf5 happens to be the threadsafe
// build, but that build serializes every call behind its own global lock anyway, and a
// non-threadsafe build would corrupt memory: the lock keeps either build correct. The hot
// path never takes it (see hdf5_source.cc).
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

namespace gpufeed {

std::recursive_mutex& Hdf5Mutex();

// Holds the libhdf5 lock; on first use also silences libhdf5's own printing of errors.
class Hdf5Lock {
 public:
  Hdf5Lock();
  Hdf5Lock(const Hdf5Lock&) = delete;
  Hdf5Lock& operator=(const Hdf5Lock&) = delete;

 private:
  std::lock_guard<std::recursive_mutex> guard_;
};

// An owned libhdf5 identifier (file, dataset, dataspace, type, property list), closed with
// H5Idec_ref under the lock. Invalid ids (< 0) are held as "none".
class Hdf5Id {
 public:
  Hdf5Id() = default;
  explicit Hdf5Id(hid_t id) : id_(id) {}
  ~Hdf5Id() { Reset(); }
  Hdf5Id(Hdf5Id&& other) noexcept : id_(other.id_) { other.id_ = -1; }
  Hdf5Id& operator=(Hdf5Id&& other) noexcept;
  Hdf5Id(const Hdf5Id&) = delete;
  Hdf5Id& operator=(const Hdf5Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void Reset() noexcept;

 private:
  hid_t id_ = -1;
};

// The messages on this thread's libhdf5 error stack, innermost last ("H5Fopen: unable to
// open file: truncated file: eof = 1000, stored_eof = 2000"), then clears it. Where the
// failure was a read of the file through gpufeed's file driver (file_driver.h), throws that
// read's Error instead (it names the file; an I/O error is no damage). REQUIRES: the lock is
// held.
std::string Hdf5ErrorMessage();

// "1.10.8 (threadsafe build)"
std::string Hdf5LibraryDescription();

}  // namespace gpufeed
