#include "sources/hdf5/format/library.h"

#include <fmt/format.h>

#include <exception>
#include <vector>

#include "sources/hdf5/format/file_driver.h"

namespace gpufeed {

std::recursive_mutex& Hdf5Mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

Hdf5Lock::Hdf5Lock() : guard_(Hdf5Mutex()) {
  // libhdf5 prints its error stack to stderr by default; gpufeed reports errors itself. The
  // threadsafe build keeps that setting per thread, hence once per thread.
  thread_local bool silenced = false;
  if (!silenced) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    silenced = true;
  }
}

Hdf5Id& Hdf5Id::operator=(Hdf5Id&& other) noexcept {
  if (this != &other) {
    Reset();
    id_ = other.id_;
    other.id_ = -1;
  }
  return *this;
}

void Hdf5Id::Reset() noexcept {
  if (id_ >= 0) {
    std::lock_guard<std::recursive_mutex> lock(Hdf5Mutex());
    H5Idec_ref(id_);
    id_ = -1;
  }
}

namespace {

herr_t CollectMessage(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  auto* messages = static_cast<std::vector<std::string>*>(data);
  if (err->desc != nullptr && err->desc[0] != '\0') {
    messages->push_back(fmt::format("{}: {}", err->func_name ? err->func_name : "?", err->desc));
  }
  return 0;
}

}  // namespace

std::string Hdf5ErrorMessage() {
  if (std::exception_ptr read_error = TakeHdf5DriverError()) {
    H5Eclear2(H5E_DEFAULT);
    std::rethrow_exception(read_error);
  }
  // Walked from the API call inwards: the last entries say what actually went wrong.
  std::vector<std::string> messages;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, CollectMessage, &messages);
  H5Eclear2(H5E_DEFAULT);
  if (messages.empty()) return "libhdf5 gave no reason";
  std::string out = "libhdf5: ";
  // The outermost entry names the API call; the two innermost give the cause.
  const size_t first_cause = messages.size() > 3 ? messages.size() - 2 : 1;
  out += messages.front();
  for (size_t i = first_cause; i < messages.size(); ++i) out += "; " + messages[i];
  return out;
}

std::string Hdf5LibraryDescription() {
  Hdf5Lock lock;
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  hbool_t threadsafe = false;
  H5is_library_threadsafe(&threadsafe);
  return fmt::format("{}.{}.{} ({} build)", major, minor, release,
                     threadsafe ? "threadsafe" : "not threadsafe");
}

}  // namespace gpufeed
