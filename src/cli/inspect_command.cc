#include "cli/inspect_command.h"

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/exit_codes.h"
#include "core/io/missing_path.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "gpufeed/varlen.h"
#include "sources/hdf5/tools/inspect.h"
#include "sources/open_path.h"

namespace gpufeed::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
};

// "p0 1, p50 400, p90 760, p99 1200, p100 4100; 204M items": a variable-length field's lengths.
std::string FormatLengths(const LengthSummary& s) {
  std::string out;
  for (const auto& [percent, length] : s.percentiles) {
    out += fmt::format("{}p{} {}", out.empty() ? "" : ", ", percent, length);
  }
  return fmt::format("{}; {} items in all", out.empty() ? "no samples" : out, s.total);
}

// A source's description and fields, each variable-length field marked as such (it has no
// size per sample) with its lengths' percentiles: what `inspect` says of a Megatron indexed
// data set or a NumPy folder.
int InspectSource(const InspectArgs& args, const std::shared_ptr<const FileSystem>& fs) {
  const auto source = OpenPath(args.path, {}, fs);
  const Schema& schema = source->schema();
  if (args.json) {
    nlohmann::json fields = nlohmann::json::array();
    for (size_t i = 0; i < schema.fields.size(); ++i) {
      const FieldSpec& f = schema.fields[i];
      nlohmann::json shape = nlohmann::json::array();
      for (int64_t d : f.shape) shape.push_back(d);
      nlohmann::json field = {{"name", f.name},
                              {"dtype", std::string(DTypeName(f.dtype))},
                              {"shape", shape},
                              {"variable", f.variable()}};
      if (f.variable()) {
        const LengthSummary lengths = SummarizeLengths(*source, static_cast<int>(i));
        field["items"] = lengths.total;
        for (const auto& [percent, length] : lengths.percentiles) {
          field["length_percentiles"][fmt::format("p{}", percent)] = length;
        }
      }
      fields.push_back(std::move(field));
    }
    const nlohmann::json out = {{"path", args.path},
                                {"source", source->Describe()},
                                {"samples", source->size()},
                                {"fields", fields}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{}\n  samples: {}\n  fields:\n", source->Describe(), source->size());
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const FieldSpec& f = schema.fields[i];
    fmt::print("    {}{}\n", f.ToString(),
               f.variable() ? fmt::format(" (variable-length; lengths {})",
                                          FormatLengths(SummarizeLengths(*source, static_cast<int>(i))))
                            : fmt::format(" ({} bytes per sample)", f.SampleBytes()));
  }
  return 0;
}

int RunInspectCommand(const InspectArgs& args) {
  const auto fs = DefaultFileSystem();
  switch (ClassifyPath(args.path, *fs)) {
    case PathKind::kMissing:
      ThrowMissing(*fs, args.path, fmt::format("{}: no such file", args.path));
    case PathKind::kHdf5:
      break;
    case PathKind::kIndexed:
    case PathKind::kNumpyFolder:
      return InspectSource(args, fs);
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: not an HDF5 file, a NumPy folder or a Megatron indexed "
                              "data set; `gpufeed inspect` reads HDF5 files (.h5, .hdf5, .hdf), "
                              "folders of .npy files and indexed data sets (prefix.idx + "
                              "prefix.bin)",
                              args.path));
  }
  const Hdf5Inspection inspection = InspectHdf5(args.path, fs);
  if (args.json) {
    fmt::print("{}\n", Hdf5InspectionToJson(inspection).dump(2));
  } else {
    fmt::print("{}", FormatHdf5Inspection(inspection));
  }
  return 0;
}

}  // namespace

void RegisterInspectCommand(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Describe an HDF5 file for training: per dataset its shape, dtype, layout, chunks,\n"
      "filters, compression ratio, the bytes one random sample reads and decodes, and a\n"
      "recommendation from those figures and the free RAM. A Megatron indexed data set\n"
      "(prefix.idx + prefix.bin) or a NumPy folder: its samples and fields, with the\n"
      "percentiles of each variable-length field's lengths.");
  cmd->add_option("path", args->path,
                  "An HDF5 file, a NumPy folder, or an indexed data set's prefix")
      ->required();
  cmd->add_flag("--json", args->json, "Print one JSON object instead of the report");
  cmd->callback([args] {
    const int code = RunReportingErrors([&] { return RunInspectCommand(*args); });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace gpufeed::cli
