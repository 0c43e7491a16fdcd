// OpenHdf5's opening of one file: its datasets, their fields and readers.
#include <fmt/format.h>

#include "core/log.h"
#include "gpufeed/error.h"
#include "sources/hdf5/format/library.h"
#include "sources/hdf5/index/compound.h"
#include "sources/hdf5/index/dataset.h"
#include "sources/hdf5/read/source_parts.h"

namespace gpufeed {
namespace {

std::string FieldName(const std::string& dataset) {
  return dataset.starts_with('/') ? dataset.substr(1) : dataset;
}

}  // namespace

void OpenHdf5Part(const std::string& path, std::vector<std::string>& datasets,
                  const Hdf5Options& options, int64_t first_sample, size_t p,
                  const std::vector<std::string>& paths, Schema& schema, Hdf5FilePart& part) {
  part.file = options.file_system->Open(path);  // kNotFound names the path
  Hdf5Id h5 = OpenHdf5File(part.file);
  if (datasets.empty()) {
    // A compound dataset yields its numeric members as fields "table.x".
    datasets = Hdf5DefaultFields(h5.get(), ListHdf5Datasets(h5.get()));
    if (datasets.empty()) {
      const std::string links = DescribeHdf5ExternalLinks(h5.get());
      throw Error(ErrorCode::kNotFound,
                  links.empty()
                      ? fmt::format("{}: the file holds no datasets", path)
                      : fmt::format("{}: the file holds no datasets of its own: {}", path, links));
    }
  }
  part.first_sample = first_sample;
  for (size_t f = 0; f < datasets.size(); ++f) {
    Hdf5Dataset ds = OpenHdf5Dataset(h5.get(), *part.file, datasets[f]);
    ds.field.name = FieldName(datasets[f]);
    if (ds.vlen) ds.vlen->field.name = ds.field.name;
    const FieldSpec spec = ds.vlen ? ds.vlen->field : ds.field;
    if (p == 0) {
      schema.fields.push_back(spec);
    } else if (!(spec == schema.fields[f])) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{}: dataset {} is {}, but in {} it is {}: every file must hold "
                              "the same dtype and per-sample shape",
                              path, datasets[f], spec.ToString(), paths.front(),
                              schema.fields[f].ToString()));
    }
    if (f == 0) {
      part.samples = ds.samples;
    } else if (ds.samples != part.samples) {
      throw Error(ErrorCode::kCorruptData,
                  fmt::format("{}: datasets have different lengths: {} holds {} samples, {} "
                              "holds {}",
                              path, datasets[0], part.samples, datasets[f], ds.samples));
    }
    if (ds.storage == Hdf5Storage::kLibrary) {
      Log(LogLevel::kWarning,
          fmt::format("warning: {}: dataset {} uses {}, which gpufeed does not read itself: "
                      "reading it through libhdf5 under its global lock (slow)",
                      path, datasets[f], ds.library_reason));
    }
    const auto tag = static_cast<uint32_t>(p * datasets.size() + f);
    part.readers.push_back(
        std::make_unique<Hdf5DatasetReader>(std::move(ds), part.file.get(), tag));
    const Hdf5DatasetReader* reader = part.readers.back().get();
    part.vlen.push_back(reader->dataset().vlen
                            ? std::make_unique<Hdf5VlenReader>(reader, part.file.get())
                            : nullptr);
  }
}

}  // namespace gpufeed
