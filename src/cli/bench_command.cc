#include "cli/bench_command.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/bench_run.h"
#include "cli/exit_codes.h"
#include "cli/progress_line.h"
#include "cli/sigint_cancel.h"
#include "core/checked_math.h"
#include "gpufeed/error.h"
#include "gpufeed/groups.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/images.h"
#include "gpufeed/open_loader.h"
#include "gpufeed/sources.h"
#include "gpufeed/varlen.h"
#include "sources/open_path.h"

namespace gpufeed::cli {
namespace {

struct BenchArgs {
  std::string path;
  std::string synthetic;
  std::string lengths;  // a synthetic variable-length field's length distribution
  int64_t samples = 100000;
  std::vector<std::string> fields;
  bool no_shuffle = false;
  bool block_shuffle = false;
  int64_t chunk_cache_mib = -1;  // -1: the HDF5 source's default
  bool json = false;
  bool quiet = false;
  std::string cache{CacheTierName(LoaderRecipe{}.cache.tier)};
  std::string group;          // a per-row group id dataset
  std::string group_offsets;  // an F+1 offsets dataset
  bool pack = false;
  int64_t pack_length = 0;  // > 0: a variable-length field packed into rows of this many items
  bool whole_samples = false;
  bool no_ids = false;
  std::optional<double> eos;
  int64_t max_length = 0;  // padded rows: 0 = the longest sample
  BenchConfig config;
};

// The arguments that cannot go together, refused before anything is opened.
void CheckSourceArgs(const BenchArgs& args) {
  if (args.path.empty() == args.synthetic.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "give a data set PATH or --synthetic SPEC (e.g. --synthetic "
                "'mel:float32[1,64,32],label:int64'), not both");
  }
  if (!args.group.empty() || !args.group_offsets.empty()) {
    if (args.path.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "--group / --group-offsets read the groups from the data set's file: give "
                  "its PATH");
    }
    if (args.fields.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "with --group / --group-offsets, name the per-row datasets with --fields (the "
                  "file also holds the group datasets, of other lengths)");
    }
  }
}

// The data set to measure: synthetic data, an image folder, or a file the same-work ceiling
// can open again (args.config.reopen).
std::shared_ptr<Source> OpenBenchSource(BenchArgs& args) {
  std::shared_ptr<Source> source;
  // The disk tier is below the source: on before the source is opened, so it reads through it.
  if (ParseCacheTier(args.cache) == CacheTier::kDisk) {
    UseDiskTier(args.path, args.config.open.cache);
  }
  // Ctrl-C stops a long open (an HDF5 file of many chunks) cleanly; only while it runs.
  std::optional<SigintCancels> sigint(std::in_place);
  if (!args.synthetic.empty()) {
    source = OpenSynthetic(
        ParseSchema(args.synthetic), args.samples, args.config.open.loader.seed,
        args.lengths.empty() ? SyntheticLengths{} : ParseSyntheticLengths(args.lengths));
  } else if (ClassifyPath(args.path, *DefaultFileSystem()) == PathKind::kImages) {
    // Images: RandomResizedCrop(224) + flip; --cache asks for a copy of the decoded images,
    // which OpenLoader makes (the crops themselves are never copied).
    source = OpenImages(args.path, {.cache = ParseCacheTier(args.cache), .verbose = !args.json});
    args.cache = "none";
  } else {
    // A file (NumPy, HDF5, ...): the same-work ceiling reads a second opening of it.
    std::optional<Hdf5Options> hdf5;
    if (args.chunk_cache_mib >= 0 &&
        ClassifyPath(args.path, *DefaultFileSystem()) == PathKind::kHdf5) {
      hdf5.emplace().chunk_cache_bytes = static_cast<size_t>(
          MulOrThrow(static_cast<uint64_t>(args.chunk_cache_mib), uint64_t{1} << 20,
                     "--chunk-cache-mib", ErrorCode::kInvalidArgument));
    }
    args.config.reopen = [path = args.path, fields = args.fields, hdf5] {
      return hdf5 ? OpenHdf5({path}, fields, *hdf5) : OpenPath(path, fields);
    };
    source = args.config.reopen();
  }
  sigint->ThrowIfInterrupted(fmt::format("opening {}", args.path));
  return source;
}

// A variable-length field: packed with --pack-length, else padded (gpufeed/varlen.h). The
// same-work ceiling then reads the loader's own rows (there is no other opening of them).
void ConfigureVarlen(BenchArgs& args, const Source& source) {
  LoaderRecipe& o = args.config.open;
  const bool asked =
      args.pack_length > 0 || args.max_length > 0 || args.whole_samples || args.eos || args.no_ids;
  if (!source.schema().HasVariable()) {
    if (asked) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--pack-length, --max-length, --whole-samples and --eos apply to a "
                              "variable-length field; {} has none ({})",
                              source.Describe(), source.schema().ToString()));
    }
    return;
  }
  args.config.reopen = nullptr;
  if (args.pack_length > 0) {
    o.pack = PackOptions{.length = args.pack_length,
                         .split = !args.whole_samples,
                         .eos = args.eos,
                         .ids = !args.no_ids};
  } else if (args.whole_samples || args.eos || args.no_ids) {
    throw Error(ErrorCode::kInvalidArgument,
                "--whole-samples, --eos and --no-ids go with --pack-length");
  } else {
    o.pad = PadOptions{.max_length = args.max_length};
  }
}

// The loader's options from the arguments: groups, shuffle, cache, and the run's length.
void ConfigureRun(BenchArgs& args, const Source& source) {
  LoaderRecipe& o = args.config.open;
  if (!args.group.empty() || !args.group_offsets.empty()) {
    o.loader.groups = ReadGroups(args.path, {.id_field = args.group, .offsets = args.group_offsets},
                                 source.size());
    o.loader.pack = args.pack;
  } else if (args.pack) {
    throw Error(ErrorCode::kInvalidArgument,
                "--pack packs groups into batches: declare them with --group FIELD or "
                "--group-offsets DATASET");
  }
  o.loader.shuffle = !args.no_shuffle;
  ConfigureVarlen(args, source);
  if (args.block_shuffle) o.loader.shuffle_block = -1;  // the source's own block (HDF5 chunk)
  o.cache.tier = ParseCacheTier(args.cache);
  o.remedies = o.loader.autotune;
  o.cache.verbose = !args.json;
  o.cache.background = false;  // the figures are the cached tier's, not the streaming before it
  if (args.config.epochs <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--epochs must be positive, got {}", args.config.epochs));
  }
  if (args.config.step_ms < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--step-ms must be >= 0, got {}", args.config.step_ms));
  }
  args.config.monitor = !args.json && !args.quiet;
}

// The length percentiles of each variable-length field of the data (before padding or
// packing), for the report.
std::vector<std::pair<std::string, LengthSummary>> VariableLengths(const Source& source) {
  std::vector<std::pair<std::string, LengthSummary>> out;
  const Schema& schema = source.schema();
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    if (schema.fields[i].variable()) {
      out.emplace_back(schema.fields[i].name, SummarizeLengths(source, static_cast<int>(i)));
    }
  }
  return out;
}

int RunBenchCommand(BenchArgs& args) {
  CheckSourceArgs(args);
  const std::shared_ptr<Source> source = OpenBenchSource(args);
  ConfigureRun(args, *source);
  ProgressLine line(!args.json && !args.quiet);
  BenchResult result = RunBench(source, args.config,
                                [&](const BenchProgress& p) { line.Update(FormatProgress(p)); });
  line.Finish();
  if (result.groups > 0 && result.wall_s > 0) {
    result.groups_per_s = static_cast<double>(result.groups) * result.epochs / result.wall_s;
  }
  if (args.json) {
    nlohmann::json j = nlohmann::json::parse(result.ToJson());
    for (const auto& [name, lengths] : VariableLengths(*source)) {
      for (const auto& [percent, length] : lengths.percentiles) {
        j["lengths"][name][fmt::format("p{}", percent)] = length;
      }
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    if (!result.cache.empty()) fmt::print("cache       {}\n", result.cache);
    fmt::print("{}", FormatBenchReport(result));
    for (const auto& [name, lengths] : VariableLengths(*source)) {
      std::string line;
      for (const auto& [percent, length] : lengths.percentiles) {
        line += fmt::format("{}p{} {}", line.empty() ? "" : ", ", percent, length);
      }
      fmt::print("lengths     {}: {}\n", name, line);
    }
  }
  return 0;
}

// PATH or --synthetic, and which fields to read.
void AddDataSetOptions(CLI::App* cmd, BenchArgs* args) {
  cmd->add_option("path", args->path,
                  "The data set: a NumPy folder, an HDF5 file, an image folder or .csv list, "
                  "or a database URI (the kinds are below)");
  cmd->footer(
      "PATH is one of:\n"
      "  a folder of .npy files, one per field (train/mel.npy, train/label.npy)\n"
      "  an HDF5 file: .h5, .hdf5, .hdf, or any file with the HDF5 signature\n"
      "  an image folder in ImageFolder layout (one sub-folder per class) or a .csv image list:\n"
      "    RandomResizedCrop(224) + flip, decoded in the workers; fields image and label\n"
      "  a database URI, loaded once into memory (quote it in the shell):\n"
      "    sqlite:///abs/path.db?table=T   (sqlite:rel/path.db is relative)\n"
      "    postgresql://user@host:5432/db?query=SELECT x, label FROM t   (or postgres://)\n"
      "    parameters: table=T or query=SELECT..., columns=a,b, fields=x:float32[7,5] (a\n"
      "    BLOB's dtype and shape; x:uint8[*] for its bytes); PostgreSQL only: key=COLUMN and "
      "connections=N (parallel\n"
      "    COPY by key ranges), cursor=1; any other parameter goes to libpq. A password comes\n"
      "    from PGPASSWORD or ~/.pgpass, as libpq reads them.\n"
      "Grouped data (--group, --group-offsets): an HDF5 file or a NumPy folder that holds the\n"
      "group datasets.");
  cmd->add_option("--synthetic", args->synthetic,
                  "Benchmark generated data of this schema instead, e.g. "
                  "'mel:float32[1,64,32],label:int64'");
  cmd->add_option("--lengths", args->lengths,
                  "With --synthetic and a variable-length field ('tokens:int32[*]'): its "
                  "samples' lengths, 'uniform:MIN:MAX' or 'lognormal:MEDIAN:SIGMA[:MAX]'");
  cmd->add_option("--samples", args->samples, "Samples of synthetic data")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--fields", args->fields,
                  "Fields to read: HDF5 datasets, .npy names or database columns (default: "
                  "all; an image source always gives image and label)")
      ->delimiter(',');
}

// The loader's shape, order, device and transforms, and the run's length and step.
void AddLoaderOptions(CLI::App* cmd, BenchArgs* args) {
  LoaderOptions& loader = args->config.open.loader;
  cmd->add_option("-b,--batch-size", loader.batch_size, "Samples per batch")->capture_default_str();
  cmd->add_option("-w,--workers", loader.workers, "Worker threads (0: min(4, cores))")
      ->capture_default_str();
  cmd->add_option(
         "-p,--prefetch", loader.prefetch,
         "Batches kept ready beyond the workers' (0: 2 x workers, within 128 MiB of batches but "
         "at least 2)")
      ->capture_default_str();
  cmd->add_option("-e,--epochs", args->config.epochs, "Epochs to run")->capture_default_str();
  cmd->add_option("--step-ms", args->config.step_ms,
                  "Simulate a GPU step of this many ms per batch (a sleep; on CUDA, work on the "
                  "default stream that events time) and report the fraction of wall time the "
                  "simulated GPU was busy")
      ->capture_default_str();
  cmd->add_option("--seed", loader.seed, "Shuffle seed")->capture_default_str();
  cmd->add_flag("--no-shuffle", args->no_shuffle, "Read in order");
  cmd->add_option("--chunk-cache-mib", args->chunk_cache_mib,
                  "HDF5: MiB of decoded chunks the workers keep between batches, one budget "
                  "they share; 0 keeps none (default: the decoded data set's size within 1/16 "
                  "of free RAM, 16 MiB to 1 GiB)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--block-shuffle", args->block_shuffle,
                "Shuffle whole chunks, then samples within a window of chunks (for compressed "
                "HDF5: each chunk is decoded once per window instead of once per sample)");
  cmd->add_option("--shuffle-window", loader.shuffle_window,
                  "Chunks per window with --block-shuffle")
      ->capture_default_str();
  cmd->add_option("-d,--device", args->config.open.device, "cpu, auto, cuda or cuda:N")
      ->capture_default_str();
  cmd->add_option("-t,--transform", args->config.open.transforms,
                  "A host transform, repeatable: cast:FIELD:float16 (or bfloat16), "
                  "normalize:FIELD:MEAN:STD, specaugment:FIELD[:FM:F:TM:T] (FM frequency masks "
                  "of up to F bins, TM time masks of up to T steps)");
}

// The output, the cache, the doctor, the autotuner and the stage trace.
void AddRunOptions(CLI::App* cmd, BenchArgs* args) {
  cmd->add_flag("--json", args->json,
                "Print one JSON object (samples_per_s, ceiling_samples_per_s, ratio_to_ceiling, "
                "consumer_wait_fraction, gpu_busy_fraction, ...)");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress line");
  cmd->add_option("--cache", args->cache,
                  "Cache the data set: none, ram, shm (shared by every process on the node), "
                  "device, disk (remote data kept on this node's disk) or auto (chosen within "
                  "memory budgets); for images, the decoded images")
      ->capture_default_str();
  cmd->add_flag("--preload", args->config.open.cache.preload,
                "With --cache ram: read the whole set first");
  // --cache device keeps the set in GPU memory and gathers batches there (needs --device cuda).
  cmd->add_flag("--doctor", args->config.doctor,
                "Diagnose the run: which stage makes the (simulated) GPU wait, and what to change");
  cmd->add_flag("--autotune", args->config.open.loader.autotune,
                "Let the loader take the doctor's safe remedies while it runs, as the Python "
                "Loader does by default: tune workers and prefetch online from the given (or "
                "default) start, and copy the data set into RAM in the background when the run "
                "waits on reads and the set fits (same batches, same order); what it did is "
                "reported (actions, tuning log). Without it the run keeps exactly the given "
                "settings");
  cmd->add_option("--max-workers", args->config.open.loader.max_workers,
                  "With --autotune: the most workers to try (0: the CPU count, or the cgroup "
                  "quota where lower)");
  cmd->add_option("--trace", args->config.open.loader.trace,
                  "Write the stage trace of the run's last batches (Chrome trace-event JSON: "
                  "open it in Perfetto or chrome://tracing) to this file at the end");
}

// Grouped data: where the groups are, and whether batches pack whole groups.
void AddGroupOptions(CLI::App* cmd, BenchArgs* args) {
  cmd->add_option("--group", args->group,
                  "Grouped data: a per-row integer dataset naming each row's group (file); "
                  "with --pack, batches of whole groups (reports files/s and fill)");
  cmd->add_option("--group-offsets", args->group_offsets,
                  "Grouped data: a dataset of F+1 increasing row offsets (instead of --group)");
  cmd->add_flag("--pack", args->pack,
                "Pack whole groups into batches (first-fit decreasing; needs --group or "
                "--group-offsets)");
}

// A variable-length field (`tokens: int32[*]`): packed or padded rows.
void AddVarlenOptions(CLI::App* cmd, BenchArgs* args) {
  cmd->add_option("--pack-length", args->pack_length,
                  "A variable-length field packed end to end into rows of this many items "
                  "(default: padded rows)");
  cmd->add_flag("--whole-samples", args->whole_samples,
                "With --pack-length: whole samples only, first-fit decreasing (default: the "
                "stream cut at row ends)");
  cmd->add_option("--eos", args->eos, "With --pack-length: a value put after every sample");
  cmd->add_flag("--no-ids", args->no_ids,
                "With --pack-length: no position and document ids, only the items and the "
                "rows' lengths");
  cmd->add_option("--max-length", args->max_length,
                  "Padded rows of a variable-length field: this many items (0: the longest "
                  "sample)");
}

}  // namespace

void RegisterBenchCommand(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  args->config.open.loader.batch_size = 8192;
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure the loader on a data set: samples/s, MB/s, consumer wait, per-stage times, and\n"
      "in the same run two ceilings with the same number of threads: a memcpy of the same\n"
      "bytes, and the same shuffled rows read without the loader (from a new opening of the\n"
      "data set). A ratio of 1.00 to the second means the loader adds nothing.");
  // --help lists the options in the order they are added.
  AddDataSetOptions(cmd, args.get());
  AddLoaderOptions(cmd, args.get());
  AddRunOptions(cmd, args.get());
  AddGroupOptions(cmd, args.get());
  AddVarlenOptions(cmd, args.get());
  cmd->add_option("--trace-batches", args->config.open.loader.trace_batches,
                  "Batches the trace keeps (0: the last minute; -1: record nothing)")
      ->capture_default_str();
  cmd->callback([args] {
    const int code = RunReportingErrors([&] { return RunBenchCommand(*args); });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace gpufeed::cli
