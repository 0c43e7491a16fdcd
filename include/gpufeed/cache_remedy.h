// The hook the doctor's remedies use to copy a loader's data set into memory while the loader
// runs (gpufeed/remedies.h): a loader whose recipe asked for remedies and no cache
// (gpufeed/open_loader.h, LoaderRecipe::remedies) reads through a source that can start a RAM
// copy of itself, in the background, within the recipe's RAM budget; the source switches to
// the copy between two reads once it is complete, so every batch stays as it would have been.
//
// Thread-safety: thread-safe; callable while the loader runs.
#pragma once

#include <string>

#include "gpufeed/source.h"

namespace gpufeed {

// Starts the copy of `loader_source` (a loader's source(): what the remedies call) and returns
// what it started ("a RAM copy (0.8 GB fits the RAM budget 11.2 GB)"). Returns "" with the
// reason in `*why` when it cannot: the loader was not opened so, a copy was started before,
// or the set does not fit the budget.
std::string StartCacheWhileRunning(const Source& loader_source, std::string* why);

}  // namespace gpufeed
