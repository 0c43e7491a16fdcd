#include "cli/demo_command.h"

#include <fmt/format.h>

#include <chrono>

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
  int epochs = 2;
  int64_t batch_size = 8192;
  double step_ms = 10;
  int workers = 0;
  std::string device = CachedLoaderOptions{}.device;
};

int RunDemo(const DemoArgs& args) {
  const std::string folder = args.folder.empty() ? DefaultDemoFolder() : args.folder;
  const double set_bytes = static_cast<double>(args.samples) * (64 * 32 * 4 + 8);
  fmt::print("gpufeed demo: {} log-mel segments (mel float32[1,64,32], label int64), {}\n",
             FormatCount(static_cast<double>(args.samples)), FormatBytes(set_bytes));
  fmt::print("data set    {}\n", folder);
  if (!DemoSetExists(folder, args.samples)) {
    ProgressLine line(true, 2.0);
    const auto start = std::chrono::steady_clock::now();
    MakeDemoSet(folder, args.samples, [&](double fraction) {
      line.Update(fmt::format("making the demo data set: {:.0f}%", 100 * fraction));
    });
    line.Finish();
    fmt::print("made it in {:.1f} s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } else {
    fmt::print("found it from an earlier run\n");
  }

  BenchConfig config;
  config.open.loader.batch_size = args.batch_size;
  config.open.loader.workers = args.workers;
  config.open.device = args.device;
  config.epochs = args.epochs;
  config.step_ms = args.step_ms;
  config.doctor = true;
  fmt::print("running     {} epochs at batch {}, shuffled, with a simulated GPU step of {} ms\n\n",
             args.epochs, args.batch_size, args.step_ms);
  auto source = OpenNumpy(folder, {.fields = {"mel", "label"}});
  ProgressLine line(true, 2.0);
  const BenchResult r = RunBench(source, config, [&](const BenchProgress& p) {
    line.Update(FormatProgress(p));
  });
  line.Finish();

  fmt::print("\nSummary\n");
  fmt::print("  gpufeed delivered {} samples ({}) in {:.2f} s: {} samples/s, {}/s.\n",
             FormatCount(static_cast<double>(r.samples)), FormatBytes(static_cast<double>(r.bytes)),
             r.wall_s, FormatCount(r.samples_per_s), FormatBytes(r.bytes_per_s));
  fmt::print("  That is {:.2f} of what a plain memcpy of the same bytes reaches on this machine "
             "({} threads).\n",
             r.ratio_to_ceiling, r.stats.workers);
  fmt::print("  The simulated GPU was busy {:.1f}% of the time after the first batch ({:.2f} s "
             "in); the\n  training loop waited {:.1f}% of its time for data.\n",
             100 * r.gpu_busy_fraction, r.time_to_first_batch_s, 100 * r.consumer_wait_fraction);
  if (!r.diagnosis_text.empty()) {
    fmt::print("\n{}", r.diagnosis_text);
  } else {
    fmt::print("  {}\n", r.gpu_busy_fraction >= 0.95
                             ? "The loader keeps up: the GPU step is the bottleneck, as it should be."
                             : "The GPU waited for data: `gpufeed bench --doctor` says why.");
  }
  fmt::print("\nNext: `gpufeed bench {}` for the full figures, or the Python quick start in "
             "the README.\n",
             folder);
  return 0;
}

}  // namespace

void RegisterDemoCommand(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Show gpufeed working end to end, no arguments needed: make a demo data set (once, in\n"
      "the user's cache folder), run 2 epochs at batch 8192 with a simulated GPU step, and\n"
      "summarize what the GPU would have seen.");
  cmd->add_option("--folder", args->folder, "Where the demo data set lives")
      ->default_str(DefaultDemoFolder());
  cmd->add_option("--samples", args->samples, "Samples in the demo set")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("-e,--epochs", args->epochs, "Epochs")->capture_default_str()->check(CLI::PositiveNumber);
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
