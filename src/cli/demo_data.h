// The demo data set: log-mel-like segments float32[1,64,32] with an int64 label, as NumPy
// files in a folder. Each class lights up its own band of mel bins over noise, so a small
// CNN can learn it (examples/train_mel.py). Written atomically: into a temporary folder
// that is renamed when complete, so an interrupted run never leaves a half set behind.
// Thread-safety: one call at a time per folder.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace gpufeed::cli {

inline constexpr int kDemoClasses = 10;

// $XDG_CACHE_HOME/gpufeed/demo-mel, else ~/.cache/gpufeed/demo-mel.
std::string DefaultDemoFolder();

// True when `folder` holds a complete demo set of `samples` samples.
bool DemoSetExists(const std::string& folder, int64_t samples);

// Writes mel.npy and label.npy; `on_progress(fraction)` is called as it goes.
// Throws Error(kIo) naming the path when the disk fails.
void MakeDemoSet(const std::string& folder, int64_t samples,
                 const std::function<void(double)>& on_progress);

}  // namespace gpufeed::cli
