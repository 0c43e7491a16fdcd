// Remedies: the doctor's advice that the loader takes itself, because taking it leaves every
// batch as it would have been (the same samples in the same order).
//
//   auto [loader, source, cache] = gpufeed::OpenLoader({..., .remedies = true});
//
// OpenLoader (gpufeed/open_loader.h) attaches the default remedies to the loader it builds
// when the recipe asks for them; AttachRemedies attaches others (tests, a loader built by
// hand).
//
// Every `check_every_steps` finished steps (at most four times a second), or `check_every_s`, the
// doctor judges the recent batches (Diagnose over CollectDoctorInput, without a monitor). When it
// finds the loop waiting on reads (input-bound, or CPU-starved, with the wait in the read or
// remote-fetch stage), the data set is copied into memory in the background (`start_cache`); the
// source switches to the copy between reads once it is complete. When no copy can be made (the set
// does not fit the RAM budget), a compressed HDF5 source's decoded-chunk cache is raised instead
// (`grow_chunk_cache`). Each remedy is applied once and recorded, with its evidence,
// in LoaderStats::actions and logged ("gpufeed: batch 23: read-bound: ..."). The autotuner
// (LoaderOptions::autotune) is the other remedy: it tunes workers and prefetch on its own.
// Advice that changes the order (block shuffle) or needs a new file (gpufeed rechunk) stays
// advice: the doctor prints it; nothing here acts on it.
//
// Thread-safety: AttachRemedies on the loader's consumer thread, before or between Next()
// calls; the checks then run on that thread inside Next().
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "gpufeed/doctor.h"
#include "gpufeed/loader.h"

namespace gpufeed {

struct RemedyOptions {
  // Default: 16 finished steps between two looks at the loader (and the doctor's own
  // minimum of batches and seconds before its first verdict).
  int check_every_steps = 16;
  // Default: 2 s: a look at least this often when steps are slow.
  double check_every_s = 2.0;
  // Default: none = no copy. Starts copying the loader's source in the background; returns
  // what it started ("a RAM copy (0.8 GB fits the RAM budget 11.2 GB)"), or an empty string with
  // `*why` set when it cannot ("0.8 GB does not fit the RAM budget 0.5 GB"). Called at most once,
  // on the consumer thread.
  std::function<std::string(std::string* why)> start_cache;
  // Default: none. When no copy is made (none asked for, or it does not fit), raises the
  // decoded-chunk cache of a compressed HDF5 source toward the decoded data set; returns what
  // it did, or "" with `*why` set. Called at most once, on the consumer thread.
  std::function<std::string(std::string* why)> grow_chunk_cache;
};

// The remedies OpenLoader attaches (LoaderRecipe::remedies): start_cache is
// StartCacheWhileRunning on the loader's source (gpufeed/cache_remedy.h); grow_chunk_cache
// raises an HDF5 source's chunk cache to the decoded data set, within a quarter of the
// available RAM. A loader opened otherwise (a cache asked for, or remedies off) gets neither:
// its source stays as given.
// REQUIRES: `loader` outlives the options' use (AttachRemedies keeps them in the loader).
RemedyOptions DefaultRemedies(Loader& loader);

// The reason to copy the data set into memory, from one diagnosis: "read-bound: the loop
// waited 94% of its time, 98% of the wait on reads"; nullopt when the reads are not what the
// loop waits on.
std::optional<std::string> CacheRemedyEvidence(const Diagnosis& diagnosis);

// Watches `loader` (REQUIRES: it outlives nothing it keeps: the observer lives in the loader)
// and applies the remedies above. Replaces any step observer set before.
void AttachRemedies(Loader& loader, RemedyOptions options);

}  // namespace gpufeed
