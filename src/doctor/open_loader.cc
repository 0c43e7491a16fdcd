// OpenLoader: every step of assembling a loader, in one place (gpufeed/open_loader.h).
#include "gpufeed/open_loader.h"

#include <fmt/format.h>

#include <utility>

#include "cache/deferred_cache.h"
#include "gpufeed/error.h"
#include "gpufeed/remedies.h"
#include "gpufeed/sources.h"

namespace gpufeed {
namespace {

// Each setting has one place: the data is `source` or `path`, and the device and the
// transforms are the recipe's own, which the loader and the cache then share.
void CheckRecipe(const LoaderRecipe& recipe) {
  if ((recipe.source == nullptr) == recipe.path.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "OpenLoader: give the data as LoaderRecipe::source (an open source) or "
                "LoaderRecipe::path (what OpenPath opens), exactly one of the two");
  }
  if (recipe.source != nullptr && !recipe.fields.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "OpenLoader: LoaderRecipe::fields go with a path; pick the fields of an open "
                "source when opening it");
  }
  if (recipe.loader.device || !recipe.loader.transforms.empty() || recipe.cache.device ||
      !recipe.cache.transforms.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "OpenLoader: give the device and the transforms as LoaderRecipe::device and "
                "::transforms (\"cuda:0\", \"cast:mel:float16\"), not in its loader or cache "
                "options");
  }
}

// The data: the source given, or the path opened -- after the disk tier, when asked for, so
// that a remote source reads through it.
std::shared_ptr<Source> OpenData(LoaderRecipe& recipe) {
  if (recipe.source != nullptr) return std::move(recipe.source);
  if (recipe.cache.tier == CacheTier::kDisk) UseDiskTier(recipe.path, recipe.cache);
  // A stopped shm build reopens the data as it was opened here.
  if (recipe.cache.source_path.empty()) {
    recipe.cache.source_path = recipe.path;
    recipe.cache.source_fields = recipe.fields;
  }
  return OpenPath(recipe.path, recipe.fields);
}

// The data in rows of one size: a variable-length field padded or packed (gpufeed/varlen.h).
std::shared_ptr<Source> BatchVariableField(std::shared_ptr<Source> source, LoaderRecipe& recipe) {
  if (!source->schema().HasVariable()) {
    if (recipe.pack || recipe.pad) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("OpenLoader: {} applies to a variable-length field, and {} has "
                              "none ({})",
                              recipe.pack ? "packing" : "padding", source->Describe(),
                              source->schema().ToString()));
    }
    return source;
  }
  // A build that another process takes over opens the path alone, without these rows.
  recipe.cache.source_path.clear();
  recipe.cache.source_fields.clear();
  if (recipe.pack) {
    PackOptions pack = *recipe.pack;
    pack.shuffle = recipe.loader.shuffle;
    return PackSequences(std::move(source), std::move(pack));
  }
  return PadSequences(std::move(source), recipe.pad.value_or(PadOptions{}));
}

// Every copy the assembly makes -- the loader's rows, a store below its data -- is made here.
std::shared_ptr<Source> Copy(std::shared_ptr<Source> rows, const CacheOptions& options,
                             CacheInfo* info) {
  return OpenCached(std::move(rows), options, info);
}

// The rows the data is cut from, when it asks for them to be cached (gpufeed/cache.h,
// StoreBelow: an image source's decoded images): the copy made as the data asks, once per
// source, and handed back to it. What the loader reads stays the data itself.
void CacheStoreBelow(const Source& data) {
  if (const StoreBelow* below = StoreBelow::Of(data)) {
    below->CacheStore([](std::shared_ptr<Source> store, const CacheOptions& asked) {
      return Copy(std::move(store), asked, nullptr);
    });
  }
}

// Whether the loader's source is one the remedies can copy while the loader runs: no cache of
// its own in front of it (the disk tier is below it), rows that repeat and that a copy reads
// faster, not on a device.
bool CopiesWhileRunning(const LoaderRecipe& recipe, const Source& source) {
  const CacheTier tier = recipe.cache.tier;
  return recipe.remedies && !recipe.cache_only &&
         (tier == CacheTier::kNone || tier == CacheTier::kDisk) && source.rows_repeat() &&
         source.copy_speeds_reads() && source.device_rows() == nullptr;
}

}  // namespace

OpenedLoader OpenLoader(LoaderRecipe recipe) {
  CheckRecipe(recipe);
  std::shared_ptr<Source> source = OpenData(recipe);
  CacheStoreBelow(*source);
  source = BatchVariableField(std::move(source), recipe);
  LoaderOptions& loader = recipe.loader;
  loader.device = OpenDevice(recipe.device);
  for (const auto& spec : recipe.transforms) loader.transforms.push_back(ParseTransform(spec));
  OpenedLoader out;
  out.cache.reason = "caching is off";
  if (recipe.cache.tier != CacheTier::kNone) {
    recipe.cache.device = loader.device;
    recipe.cache.transforms = loader.transforms;
    source = Copy(std::move(source), recipe.cache, &out.cache);
    loader.transforms = out.cache.loader_transforms;  // the device tier ran the deterministic ones
  }
  if (CopiesWhileRunning(recipe, *source)) {
    CacheOptions copy = recipe.cache;
    copy.tier = CacheTier::kRam;
    copy.preload = true;
    copy.background = true;  // never blocks the loop that asked
    copy.verbose = false;    // the remedy logs what it started, with its evidence
    copy.device = nullptr;
    copy.transforms.clear();
    source = std::make_shared<DeferredCachedSource>(std::move(source), std::move(copy));
  }
  out.source = source;
  if (recipe.cache_only) return out;
  out.loader = std::make_unique<Loader>(std::move(source), std::move(loader));
  if (recipe.remedies) AttachRemedies(*out.loader, DefaultRemedies(*out.loader));
  return out;
}

}  // namespace gpufeed
