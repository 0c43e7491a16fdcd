#include "sources/hdf5/tools/rechunk_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "gpufeed/cancel.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/library.h"

namespace gpufeed {
namespace {

std::string Join(const std::string& path, const std::string& name) {
  return fmt::format("{}/{}", path == "/" ? "" : path, name);
}

// The state an iteration callback needs, with the first exception it caught: an exception
// must not unwind through libhdf5's C frames.
struct CallbackState {
  Hdf5TreeCopier* copier;
  hid_t dst;
  std::string path;
  std::exception_ptr error;
};

}  // namespace

void ThrowRechunkError(ErrorCode code, const std::string& what) {
  throw Error(code, fmt::format("rechunk: {}: {}", what, Hdf5ErrorMessage()));
}

hid_t CheckRechunkId(hid_t id, ErrorCode code, const std::string& what) {
  if (id < 0) ThrowRechunkError(code, what);
  return id;
}

void CheckRechunkStatus(herr_t status, ErrorCode code, const std::string& what) {
  if (status < 0) ThrowRechunkError(code, what);
}

Hdf5Compression ParseHdf5Compression(const std::string& text) {
  using Kind = Hdf5Compression::Kind;
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const std::string level = colon == std::string::npos ? "" : text.substr(colon + 1);
  auto parse_level = [&](int low, int high, int fallback) {
    if (level.empty()) return fallback;
    int value = -1;
    if (level.size() <= 2 && std::all_of(level.begin(), level.end(), ::isdigit)) {
      value = std::stoi(level);
    }
    if (value < low || value > high) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("rechunk: compression level '{}' of {} must be {} to {}", level, name,
                              low, high));
    }
    return value;
  };
  if (name == "keep" && level.empty()) return {Kind::kKeep, 0};
  if (name == "none" && level.empty()) return {Kind::kNone, 0};
  if (name == "gzip") return {Kind::kGzip, parse_level(0, 9, 4)};
  if (name == "lz4" && level.empty()) return {Kind::kLz4, 0};
  if (name == "zstd") return {Kind::kZstd, parse_level(1, 22, 3)};
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("rechunk: unknown compression '{}': keep, none, gzip[:0-9], lz4 or "
                          "zstd[:1-22]",
                          text));
}

Hdf5TreeCopier::Hdf5TreeCopier(hid_t input, hid_t output, const RechunkOptions& options,
                               Hdf5Compression compression, uint64_t total_bytes,
                               RechunkProgress progress)
    : input_(input),
      output_(output),
      options_(options),
      compression_(compression),
      progress_(std::move(progress)),
      total_bytes_(total_bytes) {}

void Hdf5TreeCopier::CopyAll(RechunkReport* report) {
  report_ = report;
  Hdf5Id root(CheckRechunkId(H5Gopen2(input_, "/", H5P_DEFAULT), ErrorCode::kCorruptData, "/"));
  Hdf5Id out_root(CheckRechunkId(H5Gopen2(output_, "/", H5P_DEFAULT), ErrorCode::kIo, "/"));
  H5O_info_t info{};
  CheckRechunkStatus(H5Oget_info2(root.get(), &info, H5O_INFO_BASIC), ErrorCode::kIo, "/");
  const std::string root_path(1, '/');
  copied_.emplace(std::make_pair(info.fileno, info.addr), root_path);
  CopyAttributes(root.get(), out_root.get(), root_path);
  CopyGroup(root.get(), out_root.get(), root_path);
}

herr_t Hdf5TreeCopier::VisitLink(hid_t group, const char* name, const H5L_info_t* info,
                                 void* data) {
  auto* state = static_cast<CallbackState*>(data);
  try {
    state->copier->CopyLink(group, state->dst, name, *info, Join(state->path, name));
    return 0;
  } catch (...) {
    state->error = std::current_exception();
    return -1;
  }
}

void Hdf5TreeCopier::CopyGroup(hid_t src, hid_t dst, const std::string& path) {
  CallbackState state{this, dst, path, nullptr};
  const herr_t status = H5Literate(src, H5_INDEX_NAME, H5_ITER_INC, nullptr, VisitLink, &state);
  if (state.error) std::rethrow_exception(state.error);
  if (status < 0) ThrowRechunkError(ErrorCode::kCorruptData, fmt::format("listing {}", path));
}

void Hdf5TreeCopier::CopyLink(hid_t src, hid_t dst, const std::string& name, const H5L_info_t& info,
                              const std::string& path) {
  if (info.type == H5L_TYPE_HARD) return CopyHardLink(src, dst, name, path);
  std::vector<char> value(info.u.val_size + 1, '\0');
  CheckRechunkStatus(H5Lget_val(src, name.c_str(), value.data(), info.u.val_size, H5P_DEFAULT),
                     ErrorCode::kIo, path);
  if (info.type == H5L_TYPE_SOFT) {
    CheckRechunkStatus(H5Lcreate_soft(value.data(), dst, name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                       ErrorCode::kIo, path);
    return;
  }
  if (info.type == H5L_TYPE_EXTERNAL) {
    unsigned flags = 0;
    const char* file = nullptr;
    const char* object = nullptr;
    CheckRechunkStatus(H5Lunpack_elink_val(value.data(), info.u.val_size, &flags, &file, &object),
                       ErrorCode::kIo, path);
    CheckRechunkStatus(
        H5Lcreate_external(file, object, dst, name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
        ErrorCode::kIo, path);
    return;
  }
  report_->notes.push_back(fmt::format("{}: a user-defined link, not copied", path));
}

void Hdf5TreeCopier::CopyHardLink(hid_t src, hid_t dst, const std::string& name,
                                  const std::string& path) {
  ThrowIfCancelled("rechunk");
  H5O_info_t info{};
  CheckRechunkStatus(H5Oget_info_by_name2(src, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT),
                     ErrorCode::kIo, path);
  const auto key = std::make_pair(info.fileno, info.addr);
  if (const auto it = copied_.find(key); it != copied_.end()) {
    CheckRechunkStatus(
        H5Lcreate_hard(output_, it->second.c_str(), dst, name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
        ErrorCode::kIo, path);
    return;
  }
  copied_[key] = path;
  if (info.type == H5O_TYPE_GROUP) {
    Hdf5Id in(
        CheckRechunkId(H5Gopen2(src, name.c_str(), H5P_DEFAULT), ErrorCode::kCorruptData, path));
    Hdf5Id out(CheckRechunkId(H5Gcreate2(dst, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              ErrorCode::kIo, path));
    CopyAttributes(in.get(), out.get(), path);
    CopyGroup(in.get(), out.get(), path);
  } else if (info.type == H5O_TYPE_DATASET) {
    CopyDataset(src, dst, name, path);
  } else {
    CopyAsIs(src, dst, name, path, "a named datatype");
  }
}

void Hdf5TreeCopier::CopyAsIs(hid_t src, hid_t dst, const std::string& name,
                              const std::string& path, const std::string& why) {
  CheckRechunkStatus(H5Ocopy(src, name.c_str(), dst, name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                     ErrorCode::kIo, path);
  report_->datasets.push_back({path, {}, fmt::format("copied as is: {}", why)});
}

}  // namespace gpufeed
