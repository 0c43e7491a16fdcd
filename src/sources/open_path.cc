#include "sources/open_path.h"

#include <fmt/format.h>

#include <cstring>

#include "core/io/missing_path.h"
#include "core/path_names.h"
#include "gpufeed/database.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "gpufeed/varlen.h"
#include "sources/families.h"

namespace gpufeed {
namespace {

// The HDF5 superblock signature; a file may also start with a user block, but then it keeps
// one of the HDF5 extensions in practice.
constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

bool StartsWithHdf5Signature(const std::string& path, const FileSystem& fs) {
  try {
    auto file = fs.Open(path);
    char head[sizeof(kHdf5Signature)] = {};
    return file->ReadAt(0, head, sizeof(head)) == sizeof(head) &&
           std::memcmp(head, kHdf5Signature, sizeof(head)) == 0;
  } catch (const Error&) {
    return false;  // unreadable: reported by whoever opens it for real
  }
}

// ImageFolder layout: sub-folders and no .npy file (a NumPy folder holds .npy files).
bool IsImageFolder(const std::string& path, const FileSystem& fs) {
  std::vector<DirEntry> entries;
  try {
    entries = fs.List(path);
  } catch (const Error&) {
    return false;  // unreadable: reported by whoever opens it for real
  }
  bool has_folder = false;
  for (const DirEntry& entry : entries) {
    if (LowerExtension(entry.name) == ".npy") return false;
    has_folder = has_folder || entry.type == PathType::kDirectory;
  }
  return has_folder;
}

// A Megatron indexed data set's prefix: `prefix`.idx or `prefix`.bin is a file.
bool IsIndexedPrefix(const std::string& prefix, const FileSystem& fs) {
  try {
    return fs.Type(prefix + ".idx") == PathType::kFile ||
           fs.Type(prefix + ".bin") == PathType::kFile;
  } catch (const Error&) {
    return false;  // unreadable: reported by whoever opens it for real
  }
}

// A .idx beside its .bin, or a .bin beside its .idx (a .bin alone is any binary file).
bool IsIndexedFile(const std::string& path, const std::string& ext, const FileSystem& fs) {
  if (ext != ".idx" && ext != ".bin") return false;
  const std::string prefix = path.substr(0, path.size() - 4);
  try {
    return fs.Type(prefix + (ext == ".idx" ? ".bin" : ".idx")) == PathType::kFile;
  } catch (const Error&) {
    return ext == ".idx";
  }
}

// OpenIndexed, with `fields` (empty or {"tokens"}: its one field) checked.
std::shared_ptr<Source> OpenIndexedFields(const std::string& path,
                                          const std::vector<std::string>& fields,
                                          std::shared_ptr<const FileSystem> fs) {
  for (const std::string& field : fields) {
    if (field != "tokens") {
      throw Error(ErrorCode::kNotFound,
                  fmt::format("{}: a Megatron indexed data set has no field '{}'; its one field "
                              "is 'tokens'",
                              path, field));
    }
  }
  return OpenIndexed(path, std::move(fs));
}

}  // namespace

PathKind ClassifyPath(const std::string& path, const FileSystem& fs) {
  const PathType type = fs.Type(path);
  if (type == PathType::kMissing) {
    return IsIndexedPrefix(path, fs) ? PathKind::kIndexed : PathKind::kMissing;
  }
  const std::string ext = LowerExtension(path);
  if (type == PathType::kDirectory) {
    return IsImageFolder(path, fs) ? PathKind::kImages : PathKind::kNumpyFolder;
  }
  if (ext == ".csv") return PathKind::kImages;
  if (ext == ".h5" || ext == ".hdf5" || ext == ".hdf") return PathKind::kHdf5;
  if (ext == ".npy") return PathKind::kNpyFile;
  if (IsIndexedFile(path, ext, fs)) return PathKind::kIndexed;
  return StartsWithHdf5Signature(path, fs) ? PathKind::kHdf5 : PathKind::kUnknown;
}

std::shared_ptr<Source> OpenPath(const std::string& path, const std::vector<std::string>& fields,
                                 std::shared_ptr<const FileSystem> fs) {
  if (IsDatabaseUri(path)) {
    DatabaseOptions options;
    options.columns = fields;
    return OpenDatabase(path, options);
  }
  if (fs == nullptr) fs = DefaultFileSystem();
  switch (ClassifyPath(path, *fs)) {
    case PathKind::kMissing:
      ThrowMissing(*fs, path, fmt::format("{}: no such file or folder", path));
    case PathKind::kNumpyFolder:
      return OpenNumpy(path, {.fields = fields, .file_system = fs});
    case PathKind::kHdf5:
      return SourceFamilyOpeners(SourceFamily::kHdf5, path + ": an HDF5 file").path(path, fields, fs);
    case PathKind::kNpyFile: {
      const std::string folder = ParentPath(path);
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{} is a single .npy file; a NumPy data set is the folder that "
                              "holds one .npy per field: open {} instead",
                              path, folder.empty() ? std::string(".") : folder));
    }
    case PathKind::kIndexed:
      return OpenIndexedFields(path, fields, fs);
    case PathKind::kImages:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{} is an image folder or list: open it with OpenImages "
                              "(gpufeed/images.h) or gpufeed.images() in Python",
                              path));
    case PathKind::kUnknown:
      break;
  }
  throw Error(
      ErrorCode::kUnsupported,
      fmt::format("{}: unknown format; expected a folder of .npy files (one per field) "
                  "an HDF5 file (.h5, .hdf5, .hdf) or a Megatron indexed data set (prefix.idx + "
                  "prefix.bin)",
                  path));
}

}  // namespace gpufeed
