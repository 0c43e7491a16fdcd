#include "cli/rechunk_command.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli/exit_codes.h"
#include "cli/progress_line.h"
#include "cli/sigint_cancel.h"
#include "core/format.h"
#include "sources/hdf5/tools/rechunk.h"

namespace gpufeed::cli {
namespace {

struct RechunkArgs {
  RechunkOptions options;
  bool quiet = false;
};

std::string ChunkShape(const std::vector<int64_t>& chunks) {
  return fmt::format("[{}]", fmt::join(chunks, ", "));
}

int RunRechunkCommand(RechunkArgs& args) {
  ProgressLine line(!args.quiet, 5.0);
  SigintCancels sigint;
  const RechunkReport report = RechunkHdf5(args.options, [&](uint64_t done, uint64_t total) {
    line.Update(fmt::format("rechunk: {} of {} ({:.0f} %)", FormatBytes(done), FormatBytes(total),
                            total ? 100.0 * done / total : 100.0));
  });
  sigint.ThrowIfInterrupted("rechunk");
  line.Finish();
  for (const RechunkDataset& dataset : report.datasets) {
    if (dataset.how == "rechunked") {
      fmt::print("{}: chunks {}\n", dataset.path, ChunkShape(dataset.chunks));
    } else {
      fmt::print("{}: {}\n", dataset.path, dataset.how);
    }
  }
  for (const std::string& note : report.notes) fmt::print("note: {}\n", note);
  fmt::print("wrote {}: {} of samples rewritten, {} rows checked against {}\n", args.options.output,
             FormatBytes(static_cast<double>(report.bytes_copied)), report.rows_verified,
             args.options.input);
  return 0;
}

}  // namespace

void RegisterRechunkCommand(CLI::App& app) {
  auto args = std::make_shared<RechunkArgs>();
  CLI::App* cmd = app.add_subcommand(
      "rechunk",
      "Rewrite an HDF5 file with chunks of whole samples along axis 0, the layout random\n"
      "access reads fastest (h5py's chunks=True can cut one sample into hundreds of pieces).\n"
      "Keeps groups, attributes, dtypes, fill values and links; writes through libhdf5, so\n"
      "h5py reads the result. Writes to a temporary name in OUT's folder, checks a sample of\n"
      "rows against IN, then renames it into place: a failure or Ctrl-C leaves nothing.");
  cmd->add_option("input", args->options.input, "The HDF5 file to read")->required();
  cmd->add_option("output", args->options.output, "The HDF5 file to write")->required();
  cmd->add_option("--samples-per-chunk", args->options.samples_per_chunk,
                  "Samples (rows along axis 0) per chunk; 0: about 1 MiB of samples")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--compression", args->options.compression,
                  "keep (each dataset's own filters), none, gzip[:LEVEL] (with shuffle), lz4, "
                  "zstd[:LEVEL]")
      ->capture_default_str();
  cmd->add_option("--verify-rows", args->options.verify_rows,
                  "Rows of each dataset compared with the input after the write")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--force", args->options.force, "Replace OUT when it exists");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress line");
  cmd->callback([args] {
    const int code = RunReportingErrors([&] { return RunRechunkCommand(*args); });
    if (code != 0) {
      // A write that failed in libhdf5 (a full disk) leaves its id table damaged, and its
      // exit-time cleanup then crashes (Debian's 1.10.8). The temporary file is already
      // removed and the error printed: leave without that cleanup.
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(code);
    }
  });
}

}  // namespace gpufeed::cli
