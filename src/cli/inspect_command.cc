#include "cli/inspect_command.h"

#include <fmt/format.h>

#include <memory>
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

int RunInspectCommand(const InspectArgs& args) {
  const auto fs = DefaultFileSystem();
  switch (ClassifyPath(args.path, *fs)) {
    case PathKind::kMissing:
      ThrowMissing(*fs, args.path, fmt::format("{}: no such file", args.path));
    case PathKind::kHdf5:
      break;
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("{}: not an HDF5 file; `gpufeed inspect` reads HDF5 files "
                              "(.h5, .hdf5, .hdf)",
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
      "recommendation from those figures and the free RAM.");
  cmd->add_option("path", args->path, "An HDF5 file")->required();
  cmd->add_flag("--json", args->json, "Print one JSON object instead of the report");
  cmd->callback([args] {
    const int code = RunReportingErrors([&] { return RunInspectCommand(*args); });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace gpufeed::cli
