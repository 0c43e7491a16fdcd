#include "core/path_names.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

namespace gpufeed {

bool IsUriPath(std::string_view path) {
  const size_t colon = path.find("://");
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view scheme = path.substr(0, colon);
  return std::isalpha(static_cast<unsigned char>(scheme[0])) &&
         std::all_of(scheme.begin(), scheme.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
         });
}

std::string LowerExtension(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || name == "..") return "";
  std::string ext(name.substr(dot));
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

std::string ParentPath(const std::string& path) {
  if (!IsUriPath(path)) return std::filesystem::path(path).parent_path().string();
  const size_t root = path.find("://") + 3;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos || slash < root ? path : path.substr(0, slash);
}

bool IsAbsolutePath(std::string_view path) { return path.starts_with('/') || IsUriPath(path); }

std::string IdentityPath(const std::string& path) {
  std::string out = path;
  if (!IsUriPath(path)) {
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(path, ec);
    if (!ec) out = absolute.lexically_normal().string();
  }
  while (out.size() > 1 && out.back() == '/' && !out.ends_with("://")) out.pop_back();
  return out;
}

}  // namespace gpufeed
