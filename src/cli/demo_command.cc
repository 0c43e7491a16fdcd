#include "cli/demo_command.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/bench_run.h"
#include "core/format.h"
#include "cli/demo_data.h"
#include "cli/exit_codes.h"
#include "cli/progress_line.h"
#include "gpufeed/error.h"
#include "gpufeed/sources.h"

namespace gpufeed::cli {
namespace {

struct DemoArgs {
  std::string folder;
  int64_t samples = 100000;
  int epochs = 1000;
  double seconds = 15;
  bool json = false;
  int64_t batch_size = 8192;
  double step_ms = 10;
  int workers = 0;
  std::string device = CachedLoaderOptions{}.device;
};

int RunDemo(const DemoArgs& args) {
  // With --json the figures go to stdout as one JSON object and the narration to stderr.
  std::FILE* out = args.json ? stderr : stdout;
  const std::string folder = args.folder.empty() ? DefaultDemoFolder() : args.folder;
  const double set_bytes = static_cast<double>(args.samples) * (64 * 32 * 4 + 8);
  fmt::print(out, "gpufeed demo: {} log-mel segments (mel float32[1,64,32], label int64), {}\n",
             FormatCount(static_cast<double>(args.samples)), FormatBytes(set_bytes));
  fmt::print(out, "data set    {}\n", folder);
  if (!DemoSetExists(folder, args.samples)) {
    ProgressLine line(true, 2.0);
    const auto start = std::chrono::steady_clock::now();
    MakeDemoSet(folder, args.samples, [&](double fraction) {
      line.Update(fmt::format("making the demo data set: {:.0f}%", 100 * fraction));
    });
    line.Finish();
    fmt::print(out, "made it in {:.1f} s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } else {
    fmt::print(out, "found it from an earlier run\n");
  }

  BenchConfig config;
  config.open.loader.batch_size = args.batch_size;
  config.open.loader.workers = args.workers;
  config.open.device = args.device;
  config.epochs = args.epochs;
  config.seconds = args.seconds;
  config.step_ms = args.step_ms;
  config.doctor = true;
  if (args.seconds > 0) {
    fmt::print(out,
               "running     {:.0f} s of whole epochs at batch {}, shuffled, with a simulated GPU "
               "step of {} ms\n\n",
               args.seconds, args.batch_size, args.step_ms);
  } else {
    fmt::print(out,
               "running     {} epochs at batch {}, shuffled, with a simulated GPU step of {} ms\n\n",
               args.epochs, args.batch_size, args.step_ms);
  }
  auto source = OpenNumpy(folder, {.fields = {"mel", "label"}});
  ProgressLine line(!args.json, 2.0);
  const BenchResult r = RunBench(source, config, [&](const BenchProgress& p) {
    line.Update(FormatProgress(p));
  });
  line.Finish();

  fmt::print(out, "\nSummary\n");
  fmt::print(out, "  gpufeed delivered {} samples ({}) in {:.2f} s: {} samples/s, {}/s.\n",
             FormatCount(static_cast<double>(r.samples)), FormatBytes(static_cast<double>(r.bytes)),
             r.wall_s, FormatCount(r.samples_per_s), FormatBytes(r.bytes_per_s));
  fmt::print(out, "  That is {:.2f} of what a plain memcpy of the same bytes reaches on this machine "
             "({} threads).\n",
             r.ratio_to_ceiling, r.stats.workers);
  fmt::print(out, "  The simulated GPU was busy {:.1f}% of the time after the first batch ({:.2f} s "
             "in); the\n  training loop waited {:.1f}% of its time for data.\n",
             100 * r.gpu_busy_fraction, r.time_to_first_batch_s, 100 * r.consumer_wait_fraction);
  if (!r.diagnosis_text.empty()) {
    fmt::print(out, "\n{}", r.diagnosis_text);
  } else {
    fmt::print(out, "  {}\n", r.gpu_busy_fraction >= 0.95
                             ? "The loader keeps up: the GPU step is the bottleneck, as it should be."
                             : "The GPU waited for data: `gpufeed bench --doctor` says why.");
  }
  fmt::print(out, "\nNext: `gpufeed bench {}` for the full figures, or the Python quick start in "
             "the README.\n",
             folder);
  if (args.json) {
    // The doctor's verdict and stage at the top, then every figure of the run.
    nlohmann::json j = nlohmann::json::parse(r.ToJson());
    if (j.contains("doctor")) {
      j["verdict"] = j["doctor"]["verdict"];
      j["stage"] = j["doctor"]["stage"];
    }
    fmt::print("{}\n", j.dump(2));
  }
  return 0;
}

}  // namespace

void RegisterDemoCommand(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Show gpufeed working end to end, no arguments needed: make a demo data set (once, in\n"
      "the user's cache folder), run about 15 s of epochs at batch 8192 with a simulated GPU\n"
      "step (long enough for the monitor and the doctor to measure), and summarize what the\n"
      "GPU would have seen, ending with the doctor's verdict.");
  cmd->add_option("--folder", args->folder, "Where the demo data set lives")
      ->default_str(DefaultDemoFolder());
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
  cmd->add_option("-w,--workers", args->workers, "Worker threads (0: automatic)")
      ->capture_default_str();
  cmd->add_option("-d,--device", args->device, "cpu, auto, cuda or cuda:N")->capture_default_str();
  cmd->callback([args] {
    const int code = RunReportingErrors([&] { return RunDemo(*args); });
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace gpufeed::cli
