// OpenLoader: the one way a loader is assembled from what a person asks for -- the data, the
// loader's options, its device and transforms, a cache tier, the doctor's remedies. The CLI
// (`gpufeed bench`, `demo`, `cache build`) and the Python package (gpufeed.Loader) assemble
// their loaders with it.
//
//   auto [loader, source, cache] = gpufeed::OpenLoader(
//       {.path = "train.h5", .fields = {"mel", "label"},
//        .loader = {.batch_size = 8192, .shuffle = true}, .device = "cuda",
//        .cache = {.tier = gpufeed::CacheTier::kAuto}, .remedies = true});
//   while (auto batch = loader->Next()) { use(batch->field("mel")); }
//
// In order: the disk tier when asked for (before the data is opened, so that its reads go
// through it: gpufeed/cache.h, UseDiskTier); the data (opened from `path`, or the source
// given), the store below it cached where it asks (see below), and its variable-length field
// padded or packed into rows of one size (gpufeed/varlen.h); the device and the transforms;
// the cache (OpenCached: the device tier may run the deterministic transforms once before its
// upload, and the loader then runs the others); the loader; the remedies
// (gpufeed/remedies.h), attached to it. What the loader meets afterwards --
// the tier serving it, how far a copy is, the remedies taken, the source's counters -- is in its
// stats() (LoaderStats::source and ::actions).
//
// Every cache a loader reads is made here, and OpenLoader is the one caller of OpenCached in
// gpufeed's own code. Right after the data is opened, data that asks for the rows below it to
// be cached (gpufeed/cache.h, StoreBelow: an image source's decoded images, from which each
// epoch's crops are cut) gets that copy, made as it asks (ImageOptions::cache) and handed back
// to it, once per source: a second loader over the same source reads the same copy.
//
// Thread-safety: OpenLoader may be called from any thread. Its long phases (a cache build, a
// preload, an upload, the wait for another process's build) stop at the calling thread's
// CancelToken (gpufeed/cancel.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/loader.h"
#include "gpufeed/source.h"
#include "gpufeed/varlen.h"

namespace gpufeed {

// Everything a loader is assembled from, as the CLI and the Python package take it from a
// person: the one table of the defaults they share. Fields left alone keep the defaults written
// here and in LoaderOptions / CacheOptions.
struct LoaderRecipe {
  // The data: a source opened already, or a path OpenPath opens (a NumPy folder, an HDF5 file,
  // an s3:// or http(s):// object or folder, a database URI) with `fields` (empty: all). Exactly
  // one of `source` and `path`. A path also tells a stopped shm build how to open the data again
  // (CacheOptions::source_path, when that is empty), and lets the disk tier be turned on
  // before the data is opened.
  std::shared_ptr<Source> source = nullptr;
  std::string path = {};
  std::vector<std::string> fields = {};
  // Default: LoaderOptions' own. Its `device` and `transforms` stay unset (else
  // Error(kInvalidArgument)): the two fields below hold them, for the loader and the cache.
  LoaderOptions loader = {};
  // Default: "auto" = the GPU when there is one (CUDA_VISIBLE_DEVICES / LOCAL_RANK pick
  // which), else the host. gpufeed exists to feed a GPU: a person who has one should not
  // have to say so, and without one "auto" is the host. Else "cpu", "cuda", "cuda:N".
  std::string device = "auto";
  // Default: none. Host transform specs (ParseTransform): "cast:mel:float16", ...
  std::vector<std::string> transforms = {};
  // How a variable-length field of the data is batched (gpufeed/varlen.h): packed with
  // `pack` when it is set (its `shuffle` then follows the loader's), else padded with `pad`
  // (default: to the longest sample). Either on data without such a field is
  // Error(kInvalidArgument).
  std::optional<PackOptions> pack = std::nullopt;
  std::optional<PadOptions> pad = std::nullopt;
  // Default: CacheOptions' own (tier none). Its `device` and `transforms` stay unset, as the
  // loader's do. Tier disk with a `source` given open: the caller turned it on before opening
  // it (UseDiskTier), else Error(kInvalidArgument).
  CacheOptions cache = {};
  // Default: false. True: the doctor's remedies watch the loader and act on it
  // (gpufeed/remedies.h); with cache tier none (or disk), its source can start a RAM copy of
  // itself while the loader runs (gpufeed/cache_remedy.h), which they start when the loop
  // waits on reads.
  bool remedies = false;
  // Default: false. True: stop once the cache is in place, without a loader: the copy a loader
  // of this recipe would read, made or found (`gpufeed cache build`). OpenedLoader::loader is
  // then null.
  bool cache_only = false;
};

// A loader, what it reads, and what its cache chose.
struct OpenedLoader {
  std::unique_ptr<Loader> loader;  // null with LoaderRecipe::cache_only
  // What the loader reads: the cache in front of the data, or the data itself.
  std::shared_ptr<Source> source;
  CacheInfo cache;  // tier none, reason "caching is off", when no cache was asked for
};

// Assembles the loader `recipe` describes (see above). Throws Error(kInvalidArgument) for a
// recipe with both or neither of `source` and `path`, or with a device or transforms in its
// loader or cache options; and what UseDiskTier, OpenPath, OpenDevice, ParseTransform,
// OpenCached (for the loader's rows, or a store below the data) and the Loader constructor
// throw.
OpenedLoader OpenLoader(LoaderRecipe recipe);

}  // namespace gpufeed
