#include "cli/inspect_command.h"

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/exit_codes.h"
#include "core/io/missing_path.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"
#include "sources/hdf5/tools/inspect.h"
#include "sources/open_path.h"

namespace gpufeed::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
};

// A source's description and fields, each variable-length field marked as such (it has no
// size per sample): what `inspect` says of a Megatron indexed data set.
int InspectSource(const InspectArgs& args, const std::shared_ptr<const FileSystem>& fs) {
  const auto source = OpenPath(args.path, {}, fs);
  const Schema& schema = source->schema();
  if (args.json) {
    nlohmann::json fields = nlohmann::json::array();
    for (const FieldSpec& f : schema.fields) {
      nlohmann::json shape = nlohmann::json::array();
      for (int64_t d : f.shape) shape.push_back(d);
      fields.push_back({{"name", f.name},
                        {"dtype", std::string(DTypeName(f.dtype))},
                        {"shape", shape},
                        {"variable", f.variable()}});
    }
    const nlohmann::json out = {{"path", args.path},
                                {"source", source->Describe()},
                                {"samples", source->size()},
                                {"fields", fields}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{}\n  samples: {}\n  fields:\n", source->Describe(), source->size());
  for (const FieldSpec& f : schema.fields) {
    fmt::print("    {}{}\n", f.ToString(),
               f.variable() ? " (variable-length: items per sample differ)"
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
      return InspectSource(args, fs);
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: not an HDF5 file or a Megatron indexed data set; `gpufeed "
                              "inspect` reads HDF5 files (.h5, .hdf5, .hdf) and indexed data "
                              "sets (prefix.idx + prefix.bin)",
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
      "(prefix.idx + prefix.bin): its sequences, tokens and dtype.");
  cmd->add_option("path", args->path, "An HDF5 file, or an indexed data set's prefix")->required();
  cmd->add_flag("--json", args->json, "Print one JSON object instead of the report");
  cmd->callback([args] {
    const int code = RunReportingErrors([&] { return RunInspectCommand(*args); });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace gpufeed::cli
