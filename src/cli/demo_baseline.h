// The demo's baseline: the pattern gpufeed's users start from, a PyTorch DataLoader over a
// Dataset whose __getitem__ reads one sample with h5py, run on the demo's HDF5 file for a few
// seconds with the same simulated GPU step per sample as gpufeed's run, so the two can be
// shown side by side. Runs in a Python child process (GPUFEED_PYTHON, else /usr/bin/python3,
// else python3 on PATH: the first that imports torch and h5py), which is killed if it
// overruns its time by more than a grace period.
// Thread-safety: one call at a time (it forks).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace gpufeed::cli {

struct BaselineConfig {
  std::string path;       // the HDF5 file (datasets mel and label)
  double seconds = 6;     // stop iterating after this long (whole batches)
  int64_t batch_size = 256;
  double step_ms = 0.3125;  // the simulated GPU step per batch
  int workers = 2;
};

struct BaselineResult {
  bool ran = false;
  std::string why_not;  // when !ran: no Python with torch and h5py, or what failed
  std::string python;   // the interpreter that ran it
  int64_t samples = 0;
  double seconds = 0;
  double first_batch_s = 0;
  double samples_per_s = 0;
  double gpu_busy_fraction = 0;  // the simulated step's share of the time after the first batch
};

// `on_progress(samples, seconds)` is called as batches arrive.
BaselineResult RunDataLoaderBaseline(const BaselineConfig& config,
                                     const std::function<void(int64_t, double)>& on_progress);

}  // namespace gpufeed::cli
