#include "cli/demo_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/bench_run.h"
#include "cli/demo_baseline.h"
#include "cli/demo_data.h"
#include "cli/exit_codes.h"
#include "cli/progress_line.h"
#include "core/format.h"
#include "gpufeed/error.h"
#include "gpufeed/hdf5.h"
#include "gpufeed/sources.h"

namespace gpufeed::cli {
namespace {

struct DemoArgs {
  std::string format = "hdf5";
  std::string path;  // the HDF5 file or the NumPy folder; default by format
  bool baseline = true;
  double baseline_seconds = 6;
  int64_t samples = 100000;
  int epochs = 1000;
  double seconds = 15;
  bool json = false;
  int64_t batch_size = 8192;
  double step_ms = 10;
  int workers = 0;
  std::string device = LoaderRecipe{}.device;
};

// The DataLoader's batch: what users of a per-sample Dataset typically pick.
constexpr int64_t kBaselineBatch = 256;

// Where the demo runs: its data set, and where the narration goes.
struct DemoPlace {
  // With --json the figures go to stdout as one JSON object and the narration to stderr.
  std::FILE* out;
  bool hdf5;         // --format hdf5, else npy
  std::string path;  // the HDF5 file or the NumPy folder
};

// Says what the demo set is, and makes it unless an earlier run left it.
void PrepareDemoData(const DemoArgs& args, const DemoPlace& place) {
  std::FILE* out = place.out;
  const double set_bytes = static_cast<double>(args.samples) * (64 * 32 * 4 + 8);
  fmt::print(out, "gpufeed demo: {} log-mel segments (mel float32[1,64,32], label int64), {}\n",
             FormatCount(static_cast<double>(args.samples)), FormatBytes(set_bytes));
  if (place.hdf5) {
    const std::vector<int64_t> chunk = H5pyGuessChunk({args.samples, 1, 64, 32}, sizeof(float));
    const int64_t pieces = (64 + chunk[2] - 1) / chunk[2] * ((32 + chunk[3] - 1) / chunk[3]);
    fmt::print(out,
               "data set    {}\n            HDF5 as h5py writes it with chunks=True (chunks of "
               "[{}]: each sample\n            spans {} chunks), uncompressed\n",
               place.path, fmt::join(chunk, ", "), pieces);
  } else {
    fmt::print(out, "data set    {} (NumPy files)\n", place.path);
  }
  if (place.hdf5 ? DemoHdf5Exists(place.path, args.samples)
                 : DemoSetExists(place.path, args.samples)) {
    fmt::print(out, "found it from an earlier run\n");
    return;
  }
  ProgressLine line(true, 2.0);
  const auto start = std::chrono::steady_clock::now();
  auto progress = [&](double fraction) {
    line.Update(fmt::format("making the demo data set: {:.0f}%", 100 * fraction));
  };
  if (place.hdf5) {
    MakeDemoHdf5(place.path, args.samples, progress);
  } else {
    MakeDemoSet(place.path, args.samples, progress);
  }
  line.Finish();
  fmt::print(out, "made it in {:.1f} s\n",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// The DataLoader + h5py run, with the same simulated GPU: step_ms per batch_size samples.
BaselineResult RunBaseline(const DemoArgs& args, const DemoPlace& place) {
  const double step_per_sample_ms = args.step_ms / static_cast<double>(args.batch_size);
  BaselineConfig bc;
  bc.path = place.path;
  bc.seconds = args.baseline_seconds;
  bc.batch_size = kBaselineBatch;
  bc.step_ms = step_per_sample_ms * static_cast<double>(kBaselineBatch);
  bc.workers = 2;
  fmt::print(place.out,
             "\nFirst, the pattern most users start from: a PyTorch DataLoader (2 workers, batch "
             "{}) over a\nDataset that reads one sample with h5py in __getitem__, for about "
             "{:.0f} s, with the same\nsimulated GPU ({} ms per {} samples).\n",
             kBaselineBatch, args.baseline_seconds, args.step_ms, args.batch_size);
  ProgressLine line(!args.json, 2.0);
  BaselineResult baseline = RunDataLoaderBaseline(bc, [&](int64_t samples, double seconds) {
    line.Update(fmt::format("DataLoader + h5py: {} samples in {:.1f} s, {} samples/s",
                            FormatCount(static_cast<double>(samples)), seconds,
                            FormatCount(static_cast<double>(samples) / std::max(seconds, 1e-9))));
  });
  line.Finish();
  if (baseline.ran) {
    fmt::print(place.out, "DataLoader + h5py: {} samples/s, simulated GPU busy {:.2f}%\n",
               FormatCount(baseline.samples_per_s), 100 * baseline.gpu_busy_fraction);
  } else {
    fmt::print(place.out,
               "skipped: {}\n(set GPUFEED_PYTHON to a Python with torch and h5py to "
               "compare)\n",
               baseline.why_not);
  }
  return baseline;
}

// gpufeed's run on the same file, with the doctor.
BenchResult RunGpufeed(const DemoArgs& args, const DemoPlace& place) {
  std::FILE* out = place.out;
  fmt::print(out, "\nNow gpufeed on the same file.\n");
  BenchConfig config;
  config.open.loader.batch_size = args.batch_size;
  config.open.loader.workers = args.workers;
  config.open.device = args.device;
  config.epochs = args.epochs;
  config.seconds = args.seconds;
  config.step_ms = args.step_ms;
  config.doctor = true;
  // As the Python Loader runs by default: the autotuner and the doctor's safe remedies on.
  config.open.loader.autotune = true;
  config.open.remedies = true;
  if (args.seconds > 0) {
    fmt::print(out,
               "running     {:.0f} s of whole epochs at batch {}, shuffled, with a simulated GPU "
               "step of {} ms,\n            with the Python Loader's defaults: the loader takes "
               "the doctor's safe remedies\n            itself (tunes workers and prefetch, "
               "copies the set into RAM when reads are the bound)\n\n",
               args.seconds, args.batch_size, args.step_ms);
  } else {
    fmt::print(
        out, "running     {} epochs at batch {}, shuffled, with a simulated GPU step of {} ms\n\n",
        args.epochs, args.batch_size, args.step_ms);
  }
  // The same-work ceiling reads a second opening (BenchConfig::reopen).
  config.reopen = [path = place.path, hdf5 = place.hdf5]() -> std::shared_ptr<Source> {
    return hdf5 ? OpenHdf5({path}, {"mel", "label"})
                : OpenNumpy(path, {.fields = {"mel", "label"}});
  };
  auto source = config.reopen();
  ProgressLine line(!args.json, 2.0);
  BenchResult r =
      RunBench(source, config, [&](const BenchProgress& p) { line.Update(FormatProgress(p)); });
  line.Finish();
  return r;
}

// The DataLoader's and gpufeed's figures in one table.
void PrintSideBySide(const DemoArgs& args, std::FILE* out, const BenchResult& r,
                     const BaselineResult& baseline) {
  fmt::print(out,
             "\nSide by side (the same file, the same simulated GPU: {} ms per {} samples)\n"
             "                                    samples/s   GPU busy   first batch\n",
             args.step_ms, args.batch_size);
  // First batch from the start of each: the DataLoader's from iter(), gpufeed's including
  // the loader's construction.
  fmt::print(out, "  DataLoader + h5py, 2 workers    {:>12}   {:>7.2f}%   {:>9.2f} s\n",
             FormatCount(baseline.samples_per_s), 100 * baseline.gpu_busy_fraction,
             baseline.first_batch_s);
  fmt::print(out, "  gpufeed, {} workers              {:>12}   {:>7.2f}%   {:>9.2f} s\n",
             r.stats.workers, FormatCount(r.samples_per_s), 100 * r.gpu_busy_fraction,
             r.setup_s + r.time_to_first_batch_s);
  if (baseline.samples_per_s > 0) {
    fmt::print(out, "  gpufeed delivered {:.1f}x the DataLoader's samples/s.\n",
               r.samples_per_s / baseline.samples_per_s);
  }
}

// What the loader did by itself during the run: the remedies, then the autotuner's changes.
void PrintActions(std::FILE* out, const LoaderStats& stats) {
  if (stats.actions.empty() && stats.tuning_log.empty()) {
    fmt::print(out, "  The loader changed nothing during the run.\n");
    return;
  }
  fmt::print(out, "  What the loader did by itself:\n");
  for (const auto& action : stats.actions) fmt::print(out, "    - {}\n", action);
  for (const auto& change : stats.tuning_log) fmt::print(out, "    - {}\n", change);
}

// The run's summary, the comparison when the baseline ran, the verdict, and what to try next.
void PrintSummary(const DemoArgs& args, const DemoPlace& place, const BenchResult& r,
                  const BaselineResult& baseline) {
  std::FILE* out = place.out;
  fmt::print(out, "\nSummary\n");
  fmt::print(out, "  gpufeed delivered {} samples ({}) in {:.2f} s: {} samples/s, {}/s.\n",
             FormatCount(static_cast<double>(r.samples)), FormatBytes(static_cast<double>(r.bytes)),
             r.wall_s, FormatCount(r.samples_per_s), FormatBytes(r.bytes_per_s));
  fmt::print(out,
             "  That is {:.2f} of what a plain memcpy of the same bytes reaches on this machine "
             "({} threads).\n",
             r.ratio_to_ceiling, r.stats.workers);
  fmt::print(out,
             "  The simulated GPU was busy {:.1f}% of the time after the first batch ({:.2f} s "
             "in); the\n  training loop waited {:.1f}% of its time for data.\n",
             100 * r.gpu_busy_fraction, r.time_to_first_batch_s, 100 * r.consumer_wait_fraction);
  if (r.gpu_busy_fraction_final >= 0) {
    fmt::print(out, "  Over the run's last 5 s the simulated GPU was busy {:.1f}%.\n",
               100 * r.gpu_busy_fraction_final);
  }
  PrintActions(out, r.stats);
  if (baseline.ran) PrintSideBySide(args, out, r, baseline);
  if (!r.diagnosis_text.empty()) {
    fmt::print(out, "\n{}", r.diagnosis_text);
  } else {
    fmt::print(out, "  {}\n",
               r.gpu_busy_fraction >= 0.95
                   ? "The loader keeps up: the GPU step is the bottleneck, as it should be."
                   : "The GPU waited for data: `gpufeed bench --doctor` says why.");
  }
  fmt::print(out,
             "\nNext: `gpufeed bench {}{}` for the full figures, or the Python quick start in "
             "the README.\n",
             place.path, place.hdf5 ? " --fields mel,label" : "");
}

// --json: the doctor's verdict and stage at the top, then every figure of the run, the data
// set, and the baseline's figures (or why it did not run).
void PrintDemoJson(const DemoArgs& args, const DemoPlace& place, const BenchResult& r,
                   const BaselineResult& baseline) {
  nlohmann::json j = nlohmann::json::parse(r.ToJson());
  if (j.contains("doctor")) {
    j["verdict"] = j["doctor"]["verdict"];
    j["stage"] = j["doctor"]["stage"];
  }
  j["data_set"] = {{"path", place.path}, {"format", args.format}};
  if (place.hdf5 && args.baseline) {
    nlohmann::json b = {{"ran", baseline.ran}};
    if (baseline.ran) {
      b["python"] = baseline.python;
      b["batch_size"] = kBaselineBatch;
      b["workers"] = 2;
      b["samples"] = baseline.samples;
      b["seconds"] = baseline.seconds;
      b["samples_per_s"] = baseline.samples_per_s;
      b["gpu_busy_fraction"] = baseline.gpu_busy_fraction;
      b["time_to_first_batch_s"] = baseline.first_batch_s;
      if (baseline.samples_per_s > 0) {
        j["speedup_over_dataloader"] = r.samples_per_s / baseline.samples_per_s;
      }
    } else {
      b["why_not"] = baseline.why_not;
    }
    j["dataloader_baseline"] = b;
  }
  fmt::print("{}\n", j.dump(2));
}

int RunDemo(const DemoArgs& args) {
  const bool hdf5 = args.format == "hdf5";
  const DemoPlace place{
      .out = args.json ? stderr : stdout,
      .hdf5 = hdf5,
      .path = !args.path.empty() ? args.path : (hdf5 ? DefaultDemoFile() : DefaultDemoFolder()),
  };
  PrepareDemoData(args, place);
  BaselineResult baseline;
  if (hdf5 && args.baseline) baseline = RunBaseline(args, place);
  const BenchResult r = RunGpufeed(args, place);
  PrintSummary(args, place, r, baseline);
  if (args.json) PrintDemoJson(args, place, r, baseline);
  return 0;
}

}  // namespace

void RegisterDemoCommand(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Show gpufeed working end to end, no arguments needed: make a demo data set (once, in\n"
      "the user's cache folder: an HDF5 file chunked as h5py chunks it), run the usual\n"
      "PyTorch DataLoader over per-sample h5py reads on it for a few seconds (when a Python\n"
      "with torch and h5py is found), then about 15 s of gpufeed epochs at batch 8192 with a\n"
      "simulated GPU step (long enough for the monitor and the doctor to measure), and show\n"
      "both side by side, ending with the doctor's verdict.");
  cmd->add_option("--format", args->format,
                  "hdf5: one HDF5 file in h5py's chunked layout; npy: NumPy files in a folder "
                  "(the set the README's benchmarks use)")
      ->capture_default_str()
      ->check(CLI::IsMember({"hdf5", "npy"}));
  cmd->add_option("--path,--folder", args->path, "Where the demo data set lives")
      ->default_str(DefaultDemoFile() + " (npy: " + DefaultDemoFolder() + ")");
  cmd->add_flag("!--no-baseline", args->baseline,
                "Skip the DataLoader + h5py run (it needs a Python with torch and h5py: "
                "GPUFEED_PYTHON, else /usr/bin/python3, else python3)");
  cmd->add_option("--baseline-seconds", args->baseline_seconds,
                  "How long the DataLoader + h5py run lasts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--samples", args->samples, "Samples in the demo set")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seconds", args->seconds,
                  "Run whole epochs for about this long (0: exactly --epochs)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-e,--epochs", args->epochs, "Epochs (the most, with --seconds)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json,
                "Print the run's figures and the doctor's verdict and stage as JSON on stdout "
                "(the narration goes to stderr)");
  cmd->add_option("-b,--batch-size", args->batch_size, "Samples per batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--step-ms", args->step_ms, "Simulated GPU step per batch, ms")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-w,--workers", args->workers, "Worker threads (0: min(4, hardware threads))")
      ->capture_default_str();
  cmd->add_option("-d,--device", args->device, "cpu, auto, cuda or cuda:N")->capture_default_str();
  cmd->callback([args] {
    const int code = RunReportingErrors([&] { return RunDemo(*args); });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace gpufeed::cli
