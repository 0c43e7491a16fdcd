// Names of files and folders as text, for local paths and URIs alike: no call here touches
// the file system (every question about what is there goes to a FileSystem), and nothing
// normalises a URI, whose "//" std::filesystem would fold.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace gpufeed {

// True for "scheme://..." (s3://bucket/key, https://host/path): a URI, not a local path.
bool IsUriPath(std::string_view path);

// The last component's extension, lower-cased (".npy"); "" when it has none (a name that
// starts with its only dot, such as ".npy", has none, as std::filesystem says).
std::string LowerExtension(std::string_view path);

// The folder that holds `path`: "a/b/x.npy" -> "a/b", "x.npy" -> "", "s3://b/p/x" -> "s3://b/p".
std::string ParentPath(const std::string& path);

// Absolute: a URI, or a local path that starts with '/'.
bool IsAbsolutePath(std::string_view path);

// The name of `path` in cache keys, the same from any working directory: a local path made
// absolute and lexically normal, a URI as given (less trailing slashes).
std::string IdentityPath(const std::string& path);

}  // namespace gpufeed
