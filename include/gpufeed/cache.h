// Caches: the tiers that keep a data set close to the GPU, so later epochs (and other
// processes) read memory instead of files; the options that ask for one, and what was chosen.
//
// A loader takes its cache from its recipe (gpufeed/open_loader.h, the one way the CLI and
// the Python package assemble a loader):
//
//   auto [loader, source, info] = gpufeed::OpenLoader({.source = gpufeed::OpenNumpy("train"),
//       .loader = {.batch_size = 8192}, .device = "cuda", .cache = {.tier = CacheTier::kAuto}});
//
// That assembly makes every copy gpufeed's own loaders read: the loader's rows as the recipe
// asks, and the rows below a source whose own rows change at every read, as that source asks
// (StoreBelow below: an image source's decoded images, below each epoch's random crops).
// OpenCached below is the cache alone, a Source decorator over any source: what OpenLoader
// calls, and what a program that builds its loader by hand calls itself.
//
// Tiers (gpufeed/source.h lists their names):
//   ram    one contiguous array per field in this process, filled on first touch, or preloaded
//          in the background (see below); later epochs gather rows from RAM.
//   shm    a file under /dev/shm named gpufeed-<key> (key: a hash of the source's Identity()
//          and the format version) that the first process builds and publishes atomically
//          (written, then renamed) with a hash per row (rows under 4 KiB: per 4 KiB of rows);
//          every later process -- local DDP ranks, concurrent hyper-parameter trials -- maps
//          the same copy read-only and gathers from it as the RAM tier gathers. Only its owner
//          can write it, so readers check the header (owner, mode, keyed checksum, schema) at
//          open, not every row they read; `gpufeed cache verify` re-hashes it on request
//          (gpufeed/shm_caches.h: listing, removing, verifying and collecting these files).
//          A build killed half-way is detected and redone; /dev/shm running full falls back
//          to streaming, never to partial data.
//   device the whole data set in GPU memory (the loader's CUDA device), uploaded once through
//          pinned staging before OpenCached returns; a loader on that device gathers each
//          batch there with a kernel, no host work per batch. Deterministic transforms (casts,
//          normalization) run once before the upload; random ones (SpecAugment) cannot run on
//          device-resident rows, so the device tier is refused for them.
//   disk   the bytes of s3:// and http(s):// data kept on this node's disk, one download per
//          block for every process of the node, within a budget, least recently read first
//          out. It sits below the sources, in the file system: from UseDiskTier on, every
//          remote source the process opens reads through it, so it is turned on before the
//          source is opened (OpenLoader does, for a recipe that names its data by path).
//          Local data is refused: it is on disk already.
//   none   the source itself.
//   auto   device when it fits the device budget (CUDA only, no random transforms); else the
//          source's shm cache when one is already published (nothing measured); else, when
//          the data set fits the RAM budget, a short probe (CacheInfo::measured: at most 4096
//          rows and two 16 MB copies, tens of milliseconds) of how fast rows gather from the
//          source, a RAM copy and an shm copy: shm when it beats the source and gathers at 80%
//          of RAM's rate or more (or $LOCAL_WORLD_SIZE says several processes share it), else
//          ram when that beats the source, else none. The reason gives the figures.
//
// In the background (CacheOptions::background, the default): a published shm cache is mapped
// at once. Otherwise OpenCached returns in milliseconds a source that reads from the base
// source while a filler thread (nice 19, half the threads) builds the shm file -- or, when
// another process holds the build lock, waits for that process to publish it, never building
// a second copy -- or preloads the RAM copy. Once the copy is complete (shm: published), the
// source reads from it, switching between two reads: each read is served wholly by one of the
// two, which hold the same bytes, so the loader's batches are exactly those it would give
// without a cache, across the switch too. CacheInfo::progress (and a loader's
// LoaderStats::source) says how far the copy is and how the fill ended. Destroying the source
// stops the fill within a few MB and joins the thread;
// a half-built file is removed, never published. A fill that cannot make the copy for lack
// of space, or because another process held the lock for more than 30 minutes, logs a
// warning and leaves the reads on the source; any other error of the fill (the base source's
// read errors, a refused lock file) is logged and thrown by every read after it, so the
// loader raises it at its next batch.
//
// The choice and its reason are logged once (core/log.h: a "gpufeed: " line on stderr).
//
// Thread-safety: OpenCached may be called from any thread, and from many processes at once
// over the same shared-memory folder (they coordinate with flock). The returned Source is
// thread-safe like every Source. UseDiskTier is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpufeed/device.h"
#include "gpufeed/source.h"
#include "gpufeed/transforms.h"

namespace gpufeed {

// The root of the shared-memory file system: where the shm caches and the device tier's
// shared handles live (each user's or group's folder below it) unless told otherwise.
inline constexpr const char kShmRoot[] = "/dev/shm";

struct CacheOptions {
  // Default: none. Caching is asked for, never assumed: every tier spends RAM, /dev/shm or
  // GPU memory (and the shm tier leaves a file behind for other processes), which nobody
  // should find spent without having said so. kAuto picks within the budgets below.
  CacheTier tier = CacheTier::kNone;
  // Default: false = fill on first touch. True: read the whole data set now, in parallel
  // (the shm tier always builds the whole file before publishing it).
  bool preload = false;
  // Default: 0 = 50% of available RAM (MemAvailable, and memory.max - memory.current of this
  // process's cgroup v2 where that is lower).
  uint64_t ram_budget_bytes = 0;
  uint64_t device_budget_bytes = 0;  // Default: 0 = 40% of the device's free memory
  std::string shm_dir = kShmRoot;    // Default: /dev/shm
  // Default: empty = the shm caches are this user's own (<shm_dir>/gpufeed-user-<uid>, 0700).
  // A group name or id the user belongs to: the caches are shared with that group's members
  // (<shm_dir>/gpufeed-group-<gid>, mode 2770, files 0640): any member maps a cache another
  // member built; nobody outside the group can read, plant or squat them. Members trust each
  // other's caches.
  std::string shm_group = {};
  // Default: null = no device tier. The loader's device: `auto` considers the device tier
  // only when this is a CUDA device.
  std::shared_ptr<Device> device = nullptr;
  // Default: none. The transforms the loader will run. The device tier applies them before
  // the upload when all are deterministic (then CacheInfo::loader_transforms is empty and
  // the returned source's schema is the transformed one) and is refused when one is random.
  std::vector<std::shared_ptr<Transform>> transforms = {};
  // Default: true: under "auto", a host copy is made only when a short probe measures that
  // gathering from it beats gathering from the source (CacheInfo::measured). False: decide
  // from the budgets alone (tests that need one answer whatever the machine's speed).
  bool measure_gather = true;
  // Default: 0 = hardware threads: preload and shm build parallelism (a background fill uses
  // half of them, at least one).
  int threads = 0;
  bool verbose = true;  // Default: true: log the choice, waits and progress (stderr)
  // Default: true: OpenCached returns at once when the copy is not there yet (an shm cache
  // not published, a RAM preload): a filler thread at idle priority makes it while the
  // returned source reads from the source, and the source switches to the copy between two
  // reads once it is complete (CacheInfo::progress tells how far it is). False: OpenCached
  // makes the copy before it returns (`gpufeed cache build`, benchmarks of the cached tier).
  bool background = true;
  // Default: true: an shm build this process started and stops before it is published (the
  // loader closed, the process exiting, Ctrl-C) is handed to a detached, nice 19
  // `gpufeed cache build` of the same source, which takes the build lock once this process
  // has released it, builds the same key and publishes it for the node. Only when
  // `source_path` says how to open the source again and the CLI is found (`cli_binary`).
  // False: every build stays in this process and stops with it.
  bool detach = true;
  // Default: empty = the source cannot be opened by another process (arrays in memory): a
  // stopped build is not handed over. Else what OpenPath opens: a NumPy folder, an HDF5 file,
  // an s3:// or http(s):// object or folder, a database URI; and `source_fields` its fields
  // (empty: all). The detached build refuses to build unless its key equals this process's.
  std::string source_path = {};
  std::vector<std::string> source_fields = {};
  // Default: empty = $GPUFEED_BIN, else `gpufeed` beside this executable, else on $PATH.
  std::string cli_binary = {};
  // The disk tier (UseDiskTier). Default: empty = $XDG_CACHE_HOME/gpufeed/remote, else
  // ~/.cache/gpufeed/remote; made 0700, refused unless it is this user's alone.
  std::string disk_dir = {};
  // Default: 0 = half the free space of disk_dir's file system. Bytes the disk tier keeps, for
  // all processes of the node together.
  uint64_t disk_budget_bytes = 0;
};

// A copy being made in the background (CacheInfo::progress): how far it is and what happened.
// Thread-safety: thread-safe; the filler writes it, anyone reads it or waits for it.
class CacheProgress {
 public:
  struct Snapshot {
    CacheTier tier = CacheTier::kNone;  // what serves the samples now
    double built_fraction = 0;          // share of the copy made: 0 to 1 (1: it serves)
    bool done = false;                  // the filler has ended (built, failed or stopped)
    bool built = false;                 // shm: this process built the file
    std::string reason = {};            // what happened, in words (CacheInfo::reason's)
    std::string error = {};  // the fill's error, which the source's reads now throw; else empty
  };
  explicit CacheProgress(Snapshot start) : now_(std::move(start)) {}
  Snapshot Get() const {
    std::lock_guard lock(mu_);
    return now_;
  }
  // Waits until the filler has ended or `timeout_s` passed; returns whether it ended.
  bool WaitUntilDone(double timeout_s) const {
    std::unique_lock lock(mu_);
    return done_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                             [&] { return now_.done; });
  }
  // The filler's updates.
  void SetFraction(double fraction) {
    std::lock_guard lock(mu_);
    now_.built_fraction = fraction;
  }
  void SetReason(std::string reason) {
    std::lock_guard lock(mu_);
    now_.reason = std::move(reason);
  }
  void Finish(Snapshot last) {
    {
      std::lock_guard lock(mu_);
      now_ = std::move(last);
      now_.done = true;
    }
    done_cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable done_cv_;
  Snapshot now_;  // guarded by mu_
};

// What OpenCached chose and why.
struct CacheInfo {
  CacheTier tier = CacheTier::kNone;  // what serves the samples (never kAuto)
  std::string reason;                 // "0.8 GB fits the RAM budget 11.2 GB"
  std::string path;                   // the shm file; empty for other tiers
  std::string key;                    // the shm key (16 hex digits); empty for other tiers
  uint64_t bytes = 0;                 // the data set's size
  // shm: this process built the file (false: it found it published, or builds it in the
  // background: then CacheProgress::Snapshot::built says so once done).
  bool built = false;
  double open_seconds = 0;  // time OpenCached took (shm: waiting for or building the file)
  // "auto" on the host: the gather rates it decided from (bytes per second of shuffled rows
  // from the source, from a RAM copy, from an shm copy); all 0 when nothing was measured.
  struct Measured {
    double source_bytes_per_s = 0;
    double ram_bytes_per_s = 0;
    double shm_bytes_per_s = 0;
  } measured;
  // The transforms the loader must still run: CacheOptions::transforms, or none when the
  // device tier applied them before its upload.
  std::vector<std::shared_ptr<Transform>> loader_transforms;
  // The device tier: how this process holds the copy ("uploaded here and shared with this
  // GPU's other processes (CUDA IPC)", "imported the copy process 1234 uploaded (CUDA IPC)",
  // "a private copy: <why it is not shared>"); empty for other tiers.
  std::string device_share;
  // A copy made in the background (CacheOptions::background): how far it is, refreshed as it
  // fills; null when the copy was complete when OpenCached returned. `tier` above is the tier
  // being made; the progress says what serves meanwhile (the source: kNone).
  std::shared_ptr<const CacheProgress> progress;

  // "shm (0.8 GB fits the RAM budget 11.2 GB; /dev/shm/gpufeed-0123456789abcdef)"
  std::string ToString() const;
};

// Returns a Source serving the same samples as `source`, cached in the tier `options` picks
// (the source itself for "none" and "disk"). `info`, when given, receives the choice. Throws
// Error(kInvalidArgument) for an unknown tier, a source whose rows differ from read to read
// (Source::rows_repeat false: a copy would freeze one draw; its store is what may be cached,
// StoreBelow), when an explicit "ram", "shm" or "device" does not fit its budget, an explicit
// "device" the loader cannot use (not CUDA, random transforms), or "disk" that UseDiskTier has
// not turned on; Error(kDevice) when the device
// upload runs out of memory (nothing stays allocated); and whatever the base source throws
// while a preload, shm build or upload reads it; Error(kCancelled) when the calling thread's
// CancelToken (gpufeed/cancel.h) is cancelled during a preload, shm build (or the wait for
// another process's) or upload, after undoing it (no shm file is published). An shm build that
// fails for lack of space (ENOSPC) or an I/O error logs a warning and returns the uncached
// source. In the background (options.background), the build's and preload's errors come later,
// from the returned source's reads (see "In the background" above); the shm folder is still
// checked here.
std::shared_ptr<Source> OpenCached(std::shared_ptr<Source> source, CacheOptions options = {},
                                   CacheInfo* info = nullptr);

// A source whose own rows differ from read to read (images: each epoch's random crops), cut
// from rows below it that repeat (the decoded images, stored at one size), which a cache may
// keep: the store. The source says which cache it asks for its store (ImageOptions::cache)
// but makes no copy itself. Its assembly, OpenLoader, makes the copy with OpenCached and hands
// it back through CacheStore. Until then -- and in a loader built by hand without it -- the
// source reads its store directly: the same samples, the store's rows made again at every read.
// Thread-safety: thread-safe. CacheStore may run while workers read the source: each read of
// the store is served wholly by the store or wholly by its copy, which hold the same rows.
class StoreBelow {
 public:
  // Makes the copy of `store` as `asked` says; returns the source to read the store from.
  using MakeCopy = std::function<std::shared_ptr<Source>(std::shared_ptr<Source> store,
                                                         const CacheOptions& asked)>;

  virtual ~StoreBelow() = default;

  // When the source asks for a cache (a tier other than none), the first call hands
  // `make_copy` the store and the cache asked for, and reads the store from what it returns
  // from then on. Later calls (another loader over the same source) do nothing: one copy per
  // source. Concurrent calls wait for the first. What `make_copy` throws is thrown, and the
  // next call tries again.
  virtual void CacheStore(const MakeCopy& make_copy) const = 0;

  // `source` as a StoreBelow, or null when it has no store to cache.
  static const StoreBelow* Of(const Source& source) {
    return dynamic_cast<const StoreBelow*>(&source);
  }
};

// The disk tier for the data at `path`: from now on, the process reads every s3:// and
// http(s):// source it opens through the node-local disk cache in options.disk_dir, within
// options.disk_budget_bytes. A source opened before keeps reading as it did, so this comes
// before the source is opened: OpenLoader calls it for a recipe that names its data by path;
// a caller that opens its source itself (the Python package) calls it first. OpenCached with
// the disk tier then reports it (CacheInfo: tier disk, path the folder). Throws
// Error(kInvalidArgument) when `path` is not an s3:// or http(s):// URI (local data is on
// disk already), Error(kIo) when the folder is refused or cannot be made.
void UseDiskTier(const std::string& path, const CacheOptions& options);

// The shm key of a source: 16 hex digits of a hash of its Identity() and the format version.
std::string CacheKey(const Source& source);

}  // namespace gpufeed
