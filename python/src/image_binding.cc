// Image folders as Python sees them: open_images(path, options) and ImageSource (a Source
// that also knows each sample's file, the classes and what on_error="skip" replaced).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "gpufeed/error.h"
#include "gpufeed/images.h"

namespace gpufeed::python {
namespace {

using ImageSourceClass = py::class_<ImageSource, Source, std::shared_ptr<ImageSource>>;

// The options dict gpufeed.images() builds: every key is one ImageOptions field. A key left
// out, or None, keeps ImageOptions' default (the defaults live there only).
ImageOptions ImageOptionsFrom(const py::dict& d) {
  ImageOptions o;
  for (const auto& [key_object, value] : d) {
    const std::string key = py::cast<std::string>(key_object);
    if (value.is_none()) continue;
    if (key == "crop")
      o.crop = ParseCropMode(py::cast<std::string>(value));
    else if (key == "size")
      o.size = py::cast<int>(value);
    else if (key == "resize")
      o.resize = py::cast<int>(value);
    else if (key == "scale")
      std::tie(o.scale_min, o.scale_max) = py::cast<std::pair<double, double>>(value);
    else if (key == "ratio")
      std::tie(o.ratio_min, o.ratio_max) = py::cast<std::pair<double, double>>(value);
    else if (key == "flip")
      o.flip = py::cast<bool>(value);
    else if (key == "dtype") {
      const std::string name = py::cast<std::string>(value);
      const auto dtype = ParseDType(name);
      if (!dtype) throw Error(ErrorCode::kInvalidArgument, "images: unknown dtype '" + name + "'");
      o.dtype = *dtype;
    } else if (key == "normalize_mean")
      o.normalize_mean = py::cast<std::vector<float>>(value);
    else if (key == "normalize_std")
      o.normalize_std = py::cast<std::vector<float>>(value);
    else if (key == "dct_scaling")
      o.dct_scaling = py::cast<bool>(value);
    else if (key == "exif_orientation")
      o.exif_orientation = py::cast<bool>(value);
    else if (key == "max_pixels")
      o.max_pixels = py::cast<uint64_t>(value);
    else if (key == "on_error")
      o.on_error = ParseOnError(py::cast<std::string>(value));
    else if (key == "strict")
      o.strict = py::cast<bool>(value);
    else if (key == "path_column")
      o.path_column = py::cast<std::string>(value);
    else if (key == "label_column")
      o.label_column = py::cast<std::string>(value);
    else if (key == "classes")
      o.classes = py::cast<std::vector<std::string>>(value);
    else if (key == "cache")
      o.cache = ParseCacheTier(py::cast<std::string>(value));
    else if (key == "cache_size")
      o.cache_size = py::cast<int>(value);
    else if (key == "shm_dir")
      o.shm_dir = py::cast<std::string>(value);
    else if (key == "ram_budget_bytes")
      o.ram_budget_bytes = py::cast<uint64_t>(value);
    else if (key == "verbose")
      o.verbose = py::cast<bool>(value);
    else
      throw Error(ErrorCode::kInvalidArgument, "images: unknown option '" + key + "'");
  }
  return o;
}

// Sample indices as Python code holds them: a list or tuple of ints, a 1-D numpy array or
// torch tensor of integers (a batch's .indices, on any device), or one integer.
std::vector<int64_t> IndicesFrom(const py::handle& object) {
  py::object value = py::reinterpret_borrow<py::object>(object);
  if (py::hasattr(value, "detach") && py::hasattr(value, "cpu")) {  // a torch tensor
    value = value.attr("detach")().attr("cpu")().attr("numpy")();
  }
  py::module_ numpy = py::module_::import("numpy");
  py::array array = numpy.attr("asarray")(value);
  if (array.ndim() > 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "images: sample indices must be one-dimensional, got " +
                    std::to_string(array.ndim()) + " dimensions");
  }
  const char kind = array.dtype().kind();
  if (array.size() > 0 && kind != 'i' && kind != 'u') {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("images: sample indices must be integers, got dtype ") +
                    py::str(array.dtype()).cast<std::string>());
  }
  py::array_t<int64_t> ints = numpy.attr("ascontiguousarray")(array, "int64").attr("ravel")();
  return std::vector<int64_t>(ints.data(), ints.data() + ints.size());
}

int64_t CheckedIndex(const ImageSource& s, int64_t i) {
  if (i < 0 || i >= s.size()) {
    throw Error(ErrorCode::kInvalidArgument, "images: sample " + std::to_string(i) +
                                                 " out of range [0, " + std::to_string(s.size()) +
                                                 ")");
  }
  return i;
}

// What each sample is: its file and its label, one sample or many.
void BindSampleLookups(ImageSourceClass& c) {
  c.def(
       "path",
       [](const ImageSource& s, const py::handle& index) {
         const std::vector<int64_t> one = IndicesFrom(index);
         if (one.size() != 1) {
           throw Error(ErrorCode::kInvalidArgument, "images: path() takes one sample index");
         }
         return s.path(CheckedIndex(s, one[0]));
       },
       py::arg("index"))
      .def(
          "paths",
          [](const ImageSource& s, const py::handle& indices) {
            std::vector<std::string> out;
            for (const int64_t i : IndicesFrom(indices)) out.push_back(s.path(CheckedIndex(s, i)));
            return out;
          },
          py::arg("indices"),
          "The files of samples `indices`: a list, numpy array or torch tensor (a batch's "
          ".indices).")
      .def(
          "label",
          [](const ImageSource& s, const py::handle& index) {
            const std::vector<int64_t> one = IndicesFrom(index);
            if (one.size() != 1) {
              throw Error(ErrorCode::kInvalidArgument, "images: label() takes one sample index");
            }
            return s.label(CheckedIndex(s, one[0]));
          },
          py::arg("index"))
      .def(
          "labels",
          [](const ImageSource& s, const py::handle& indices) {
            std::vector<int64_t> out;
            for (const int64_t i : IndicesFrom(indices)) out.push_back(s.label(CheckedIndex(s, i)));
            return out;
          },
          py::arg("indices"), "The labels of samples `indices` (as paths() takes them).");
}

// What the source holds and what went wrong while decoding: classes, cache tier, skipped
// samples and decoder warnings.
void BindImageReports(ImageSourceClass& c) {
  c.def_property_readonly("classes", &ImageSource::classes)
      .def_property_readonly(
          "cache_tier",
          [](const ImageSource& s) { return std::string(CacheTierName(s.cache_tier())); })
      .def("skipped",
           [](const ImageSource& s) {
             const SkippedImages skipped = s.skipped();
             return py::make_tuple(skipped.count, skipped.first);
           })
      .def(
          "stats",
          [](const ImageSource& s) {
            const SkippedImages skipped = s.skipped();
            const ImageDecodeWarnings warnings = s.decode_warnings();
            py::dict d;
            d["skipped"] = skipped.count;
            d["skipped_files"] = skipped.first;
            d["decode_warnings"] = warnings.count;
            d["decode_warning_files"] = warnings.first;
            return d;
          },
          "{skipped, skipped_files, decode_warnings, decode_warning_files}: samples replaced "
          "(on_error=\"skip\") and decodes libjpeg warned about (strict=False), each with the "
          "first few files and what was wrong.");
}

// {option: default} of the ImageOptions fields with a fixed default, as gpufeed.images() names
// them.
py::dict ImageDefaults() {
  const ImageOptions o;
  py::dict d;
  d["size"] = o.size;
  d["crop"] = std::string(CropModeName(o.crop));
  d["scale"] = py::make_tuple(o.scale_min, o.scale_max);
  d["ratio"] = py::make_tuple(o.ratio_min, o.ratio_max);
  d["flip"] = o.flip;
  d["dtype"] = std::string(DTypeName(o.dtype));
  d["dct_scaling"] = o.dct_scaling;
  d["exif_orientation"] = o.exif_orientation;
  d["max_pixels"] = o.max_pixels;
  d["on_error"] = std::string(OnErrorName(o.on_error));
  d["strict"] = o.strict;
  d["path_column"] = o.path_column;
  d["label_column"] = o.label_column;
  d["cache"] = std::string(CacheTierName(o.cache));
  d["cache_size"] = o.cache_size;
  d["shm_dir"] = o.shm_dir;
  d["verbose"] = o.verbose;
  return d;
}

}  // namespace

void BindImages(py::module_& m) {
  ImageSourceClass image_source(
      m, "ImageSource", "JPEG and PNG files decoded, cropped and resized in worker threads.");
  BindSampleLookups(image_source);
  BindImageReports(image_source);

  m.def(
      "open_images",
      [](const std::string& path, const py::dict& options) {
        ImageOptions o = ImageOptionsFrom(options);
        py::gil_scoped_release release;
        return OpenImages(path, std::move(o));
      },
      py::arg("path"), py::arg("options"));

  m.def("image_defaults", &ImageDefaults,
        "{option: default} of gpufeed.images() options that have a fixed default (ImageOptions).");

  m.def(
      "image_random_crop",
      [](int width, int height, uint64_t seed, int64_t epoch, int64_t index,
         const py::dict& options) {
        const ImageCrop c =
            RandomCropOf(width, height, seed, epoch, index, ImageOptionsFrom(options));
        return py::make_tuple(c.x, c.y, c.width, c.height, c.flip);
      },
      py::arg("width"), py::arg("height"), py::arg("seed"), py::arg("epoch"), py::arg("index"),
      py::arg("options") = py::dict(),
      "(x, y, width, height, flip): the random crop a sample gets (gpufeed.images crop=random).");
}

}  // namespace gpufeed::python
