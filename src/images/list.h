// The files of an image data set and their labels: a folder in torchvision's ImageFolder
// layout, or a CSV list file. Thread-safety: pure functions; an ImageList is a value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpufeed/file.h"

namespace gpufeed {

struct ImageList {
  std::vector<std::string> paths;    // one per sample, in sample order
  std::vector<int64_t> labels;       // one per sample
  std::vector<std::string> classes;  // class names by index; empty for a list of int labels
};

// torchvision's ImageFolder (0.14) listing, reproduced: classes are the sub-folders of `root`
// sorted by name (byte order, as Python sorts str), class index = position; the samples of
// each class are the files found by walking its folder (following symbolic links, folders
// sorted by path, files by name) whose lower-cased name ends in one of torchvision's image
// extensions (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp). Paths are
// root/class/.../file. Throws Error(kNotFound) for a missing root, a root without class
// folders, or classes without an image file (naming them, as torchvision does). Folders are
// listed through `fs`: a local folder or an object-store prefix alike.
ImageList ListImageFolder(const std::string& root, const FileSystem& fs = *DefaultFileSystem());

// A CSV list file with a header row naming at least `path_column` and `label_column`
// (quoted fields as in RFC 4180). A path is relative to the list file's folder unless it
// is absolute. A label is a non-negative integer, or a class name: then every label must be
// a name; the classes are `classes` when given (then a name outside them is an error), else
// the names found, sorted (as ImageFolder would index them). Throws Error naming the list
// file and line for a missing column, an unknown class name, a bad label or an empty list,
// except that with `skip_bad_rows` a row with an unknown class is left out and its line
// appended to `skipped` ("train.csv:7: unknown class 'zebra'"); Error(kNotFound) for a
// missing list. The list is read through `fs`, and relative paths are joined to its folder
// as text (a list in an object store names objects beside it).
ImageList ReadImageList(const std::string& list_path, const std::string& path_column = "path",
                        const std::string& label_column = "label",
                        const std::vector<std::string>& classes = {}, bool skip_bad_rows = false,
                        std::vector<std::string>* skipped = nullptr,
                        const FileSystem& fs = *DefaultFileSystem());

// True for names torchvision's ImageFolder takes (the extension rule above).
bool HasImageExtension(const std::string& name);

// The paths of `list` whose extension names a format torchvision lists but gpufeed does not
// decode (.ppm .bmp .pgm .tif .tiff .webp), in list order.
std::vector<std::string> UndecodedFormatPaths(const ImageList& list);

}  // namespace gpufeed
