#include "images/list.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <system_error>

#include "core/io/missing_path.h"
#include "core/path_names.h"
#include "gpufeed/error.h"

namespace gpufeed {
namespace {

namespace stdfs = std::filesystem;

constexpr const char* kImageExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};
// Those of torchvision's extensions gpufeed does not decode (it decodes JPEG and PNG only: a
// TIFF or WebP decoder is a large attack surface for formats training sets rarely use).
constexpr const char* kUndecodedExtensions[] = {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
// Symbolic links may form cycles that os.walk would follow forever; gpufeed stops there.
constexpr int kMaxFolderDepth = 64;

std::string ExtensionList() {
  std::string out;
  for (const char* ext : kImageExtensions) out += (out.empty() ? "" : ", ") + std::string(ext);
  return out;
}

// The key that says a folder was walked already. A local folder reached again through a
// symbolic link has the same canonical path (the only question asked of the OS directly: the
// file seam has no links); an object store has no links, so a prefix is its own key.
std::string FolderKey(const std::string& folder) {
  if (IsUriPath(folder)) return folder;
  std::error_code ec;
  const stdfs::path canonical = stdfs::canonical(folder, ec);
  return ec ? std::string() : canonical.string();
}

// os.walk(top, followlinks=True): each folder's files (non-folders, links included), then
// its sub-folders (List follows symbolic links). Collected as (folder path, file names) for
// sorting like sorted(os.walk()).
void Walk(const FileSystem& fs, const std::string& folder, int depth, std::set<std::string>& seen,
          std::vector<std::pair<std::string, std::vector<std::string>>>& out) {
  const std::string key = FolderKey(folder);
  if (key.empty() || depth > kMaxFolderDepth || !seen.insert(key).second) return;
  std::vector<DirEntry> entries;
  try {
    entries = fs.List(folder);
  } catch (const Error&) {
    return;  // as os.walk, which skips a folder it cannot list
  }
  std::vector<std::string> files;
  std::vector<std::string> folders;
  for (DirEntry& entry : entries) {
    (entry.type == PathType::kDirectory ? folders : files).push_back(std::move(entry.name));
  }
  out.emplace_back(folder, std::move(files));
  for (const std::string& name : folders) Walk(fs, JoinPath(folder, name), depth + 1, seen, out);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n')) s.pop_back();
  return s;
}

// One CSV record (RFC 4180 quoting; no fields spanning lines).
std::vector<std::string> SplitCsv(const std::string& line, const std::string& where) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  if (quoted) {
    throw Error(ErrorCode::kCorruptData, fmt::format("{}: unterminated quoted field", where));
  }
  return fields;
}

bool ParseLabel(const std::string& text, int64_t& value) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && value >= 0;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

bool HasImageExtension(const std::string& name) {
  const std::string lower = Lower(name);
  return std::any_of(std::begin(kImageExtensions), std::end(kImageExtensions),
                     [&](const char* ext) { return lower.ends_with(ext); });
}

std::vector<std::string> UndecodedFormatPaths(const ImageList& list) {
  std::vector<std::string> out;
  for (const std::string& path : list.paths) {
    const std::string lower = Lower(path);
    if (std::any_of(std::begin(kUndecodedExtensions), std::end(kUndecodedExtensions),
                    [&](const char* ext) { return lower.ends_with(ext); })) {
      out.push_back(path);
    }
  }
  return out;
}

ImageList ListImageFolder(const std::string& root, const FileSystem& fs) {
  if (fs.Type(root) == PathType::kMissing) {
    ThrowMissing(fs, root, fmt::format("{}: no such image folder", root));
  }
  ImageList list;
  std::vector<DirEntry> entries;
  try {
    entries = fs.List(root);
  } catch (const Error& e) {
    throw Error(ErrorCode::kIo, fmt::format("{}: cannot list: {}", root, e.what()));
  }
  for (const DirEntry& entry : entries) {
    if (entry.type == PathType::kDirectory) list.classes.push_back(entry.name);
  }
  std::sort(list.classes.begin(), list.classes.end());
  if (list.classes.empty()) {
    throw Error(
        ErrorCode::kNotFound,
        fmt::format("{}: no class folder (ImageFolder layout: one sub-folder per class)", root));
  }
  std::vector<std::string> empty_classes;
  for (size_t c = 0; c < list.classes.size(); ++c) {
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;
    std::set<std::string> seen;
    Walk(fs, JoinPath(root, list.classes[c]), 0, seen, folders);
    std::sort(folders.begin(), folders.end());
    const size_t before = list.paths.size();
    for (auto& [folder, files] : folders) {
      std::sort(files.begin(), files.end());
      for (const std::string& file : files) {
        if (!HasImageExtension(file)) continue;
        list.paths.push_back(JoinPath(folder, file));
        list.labels.push_back(static_cast<int64_t>(c));
      }
    }
    if (list.paths.size() == before) empty_classes.push_back(list.classes[c]);
  }
  if (!empty_classes.empty()) {
    std::string names;
    for (const auto& name : empty_classes) names += (names.empty() ? "" : ", ") + name;
    throw Error(ErrorCode::kNotFound,
                fmt::format("{}: no image file for the classes {}; image files end in {}", root,
                            names, ExtensionList()));
  }
  return list;
}

namespace {

struct ListRow {
  std::string path;
  std::string label;
  int line;
};

// The header (naming the path and label columns) and the rows of an image list.
std::vector<ListRow> ReadListRows(std::istream& in, const std::string& list_path,
                                  const std::string& path_column, const std::string& label_column) {
  std::string line;
  if (!std::getline(in, line)) {
    throw Error(ErrorCode::kCorruptData,
                fmt::format("{}: empty (expected a header row)", list_path));
  }
  const auto header = SplitCsv(Trim(line), list_path + ":1");
  const auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: no column '{}' in the header ({})",
                                                           list_path, name, Trim(line)));
    }
    return static_cast<size_t>(it - header.begin());
  };
  const size_t path_at = column(path_column);
  const size_t label_at = column(label_column);
  std::vector<ListRow> rows;
  for (int number = 2; std::getline(in, line); ++number) {
    line = Trim(line);
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", list_path, number);
    auto fields = SplitCsv(line, where);
    if (fields.size() <= std::max(path_at, label_at)) {
      throw Error(ErrorCode::kCorruptData, fmt::format("{}: {} fields, the header has {}", where,
                                                       fields.size(), header.size()));
    }
    if (fields[path_at].empty()) {
      throw Error(ErrorCode::kCorruptData, fmt::format("{}: empty path", where));
    }
    rows.push_back({fields[path_at], fields[label_at], number});
  }
  if (rows.empty()) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: no images listed", list_path));
  }
  return rows;
}

// The list file's bytes, read through the file seam (it may be an object).
std::string ReadListFile(const FileSystem& fs, const std::string& list_path) {
  std::unique_ptr<File> file;
  try {
    file = fs.Open(list_path);
  } catch (const Error& e) {
    throw Error(e.code() == ErrorCode::kNotFound ? ErrorCode::kNotFound : ErrorCode::kIo,
                fmt::format("{}: cannot open the image list", list_path));
  }
  // A list names each image in a few dozen bytes: 4 GiB is far past any real one.
  if (file->Size() > (uint64_t{4} << 30)) {
    throw Error(
        ErrorCode::kInvalidArgument,
        fmt::format("{}: {} bytes is too large for an image list", list_path, file->Size()));
  }
  std::string text(static_cast<size_t>(file->Size()), '\0');
  ReadFully(*file, 0, text.data(), text.size(), "the image list");
  return text;
}

}  // namespace

ImageList ReadImageList(const std::string& list_path, const std::string& path_column,
                        const std::string& label_column, const std::vector<std::string>& classes,
                        bool skip_bad_rows, std::vector<std::string>* skipped,
                        const FileSystem& fs) {
  std::istringstream in(ReadListFile(fs, list_path));
  std::string folder = ParentPath(list_path);
  if (folder.empty()) folder = ".";
  const std::vector<ListRow> rows = ReadListRows(in, list_path, path_column, label_column);

  ImageList list;
  int64_t value = 0;
  const bool numeric =
      classes.empty() && std::all_of(rows.begin(), rows.end(),
                                     [&](const ListRow& r) { return ParseLabel(r.label, value); });
  std::map<std::string, int64_t> index;
  if (!numeric) {
    list.classes = classes;
    if (list.classes.empty()) {
      std::set<std::string> names;
      for (const ListRow& r : rows) names.insert(r.label);
      list.classes.assign(names.begin(), names.end());
    }
    for (size_t i = 0; i < list.classes.size(); ++i) {
      index.emplace(list.classes[i], static_cast<int64_t>(i));
    }
  }
  for (const ListRow& r : rows) {
    int64_t label = 0;
    if (numeric) {
      ParseLabel(r.label, label);
    } else {
      const auto it = index.find(r.label);
      if (it == index.end()) {
        const std::string what = fmt::format("{}:{}: unknown class '{}' (classes: {} names)",
                                             list_path, r.line, r.label, list.classes.size());
        if (!skip_bad_rows) throw Error(ErrorCode::kInvalidArgument, what);
        if (skipped != nullptr) skipped->push_back(what);
        continue;
      }
      label = it->second;
    }
    list.paths.push_back(IsAbsolutePath(r.path) ? r.path : JoinPath(folder, r.path));
    list.labels.push_back(label);
  }
  if (list.paths.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: every row was skipped (unknown classes)", list_path));
  }
  return list;
}

}  // namespace gpufeed
