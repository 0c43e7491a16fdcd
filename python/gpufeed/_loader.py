"""gpufeed.Loader: batches as dicts of torch tensors, fed by the C++ engine."""

import json
import os
import sys

import torch

from collections.abc import Mapping

from gpufeed import _distributed, _gpufeed, _groups, _options, _sources, _tensors, _varlen
from gpufeed._batch import Batch, EpochIterator
from gpufeed._options import integer as _int


def _device_spec(device):
    spec = str(device)  # accepts torch.device("cuda", 1) as well as "cuda:1"
    if spec == "cuda" and isinstance(device, torch.device) and device.index is not None:
        spec = f"cuda:{device.index}"
    return spec


def _seed(value):
    seed = _int(value, "seed")
    if not 0 <= seed < 2**64:
        raise _gpufeed.InvalidArgument(
            f"seed must be an integer in [0, 2**64), got {seed} (torch.initial_seed() is one)")
    return seed


class Loader:
    """Loads batches of a data set in C++ threads and yields them as dicts of tensors.

    Past DataLoader's habits, each concept is one parameter (cache, groups, trace, autotune,
    held, sequences, and shuffle): a plain value for the common case, or a gpufeed options
    object.

    source:     a path (a folder of .npy files, one per field, or an HDF5 file), a database
                URI, a dict name -> NumPy array / CPU tensor (read in place), or a
                gpufeed.Source such as gpufeed.synthetic(...) or gpufeed.images(...).
                Several HDF5 files (a list of paths) are one data set, concatenated in the
                order given; every file holds the same datasets.
                Databases: "sqlite:///abs/path.db?table=T" (sqlite:rel/path.db is relative)
                or "postgresql://user@host/db?query=SELECT ..." (or postgres://), with
                gpufeed's parameters table, query, columns, fields, key, connections and
                cursor; every other postgresql:// parameter goes to libpq. Credentials come
                from the URI, the PG* environment variables (PGPASSWORD, ...) and
                ~/.pgpass, as libpq reads them. The rows are loaded once, when the Loader is
                made, into memory, where they stay for the loader's lifetime; epochs never
                query again. help(gpufeed.open) has the details.
    fields:     the fields to read, in order (None: all); one name may be given as a string.
                For a database table, its columns.
                A dict makes fields of several: {"x": "f*", "y": "label"} stacks the columns
                (datasets) f0, f1, ... into x: [B, K] in the workers; see gpufeed.open().
    batch_size: samples per batch (required).
    shuffle:    True (default) / False, as torch's DataLoader; or
                gpufeed.BlockShuffle(block=-1, window=None) for chunked (compressed) data:
                blocks of `block` consecutive samples (negative: the source's chunk size; 0:
                a full shuffle) are shuffled, then samples within a window of `window` blocks
                (None: 4), so each chunk is decoded about once per window.
    seed, drop_last: as torch's DataLoader + DistributedSampler; a seed gives the same batches
                on every run.
    workers:    reader threads (None: min(4, cores)). prefetch: batches kept ready beyond
                the workers (None: 2 * workers, within 128 MiB of batches but at least 2).
                Where batch buffers are large (rows of hundreds of MB), those left to None, and
                the batches the loop may hold, are lowered until the buffers in flight and one
                batch of your own fit what the process may allocate (available RAM, the
                cgroup's limit, `ulimit -v`), with one warning; a batch that cannot fit is
                refused before anything is allocated, naming the batch_size that would.
    device:     "auto" (CUDA when there is a GPU), "cpu", "cuda", "cuda:N" or a torch.device.
    transforms: host transforms applied before the copy, e.g. ["cast:mel:float16",
                "normalize:mel:0.5:0.25", "specaugment:mel"].
    batch_transform: a function called on each batch dict, after the copy (on the batch's
                device), in the thread that iterates: normalisation, GPU augmentation, a
                custom collate. What it returns is what the loop gets.
    dtype:      {field: dtype} converts fields, refusing values that do not fit (out of
                range; a float narrowed to float32 rounds).
    rank, world_size: this process's shard (None: $RANK / $WORLD_SIZE as torchrun sets them).
    pad:        without drop_last, pad every rank's shard to the same length by repeating
                samples from the start of the epoch's order, as DistributedSampler does
                (default True): every rank runs the same number of batches of the same sizes,
                so DDP's collectives stay paired. False: every sample exactly once, shards of
                unequal length (evaluation without collectives).
    sequences:  how a variable-length field (`tokens: int32[*]`: a Megatron corpus, an HDF5
                vlen dataset, gpufeed.ragged(values, offsets)) is batched: gpufeed.Pad(
                max_length=None, pad_value=0, pad_to_multiple_of=1, truncation="right") (the
                default; a plain number is its max_length): batch["f"] is [B, max_length]
                and batch["f_lengths"] [B] the items kept; or gpufeed.Pack(L, ...): rows of L
                items filled with samples end to end (see help(gpufeed.Pack)).
                stats()["source"] gives, per epoch, varlen_items (the items the rows hold),
                varlen_pad_items, varlen_truncated_items and varlen_padding_share.
    cache:      keep the data set close to the GPU (docs/caches.md): "none" (default), "ram" (a
                copy in this process, filled as rows are first read), "shm" (one copy under
                /dev/shm for every process of the node), "device" (resident in GPU memory,
                batches gathered there; needs a CUDA device and no random transforms), "disk"
                (s3:// and http(s):// data only: the objects' bytes on this node's disk), or
                "auto": the device tier when the data set fits 40% of the GPU's free memory; else
                the data set's shm cache when one is published already; else, when it fits half
                the available RAM, a short measurement of how fast rows gather from the source,
                from a RAM copy and from an shm copy chooses: shm when it gathers faster than the
                source and near RAM's rate (or several local processes share the node), else ram
                when that gathers faster than the source, else none. The constructor uploads a
                device copy and maps a published shm cache, and returns at once otherwise: the
                measurement, an shm build (or the wait for another process's) and a RAM preload
                run in the background at low priority while the epoch streams from the source,
                and the loader switches to the copy once it is complete (a RAM copy not
                preloaded: once chosen, filling as rows are read), with the same batches either
                way. The choice and its reason are printed and kept in `cache_info`, whose "tier"
                is "none" until "auto" has chosen and whose "built_fraction" and "serving" say
                how far the copy is; an error of the background fill is raised by the next batch.
                An shm build of a path or URI that the process stops unfinished (loader closed,
                process exiting) goes on in a detached `gpufeed cache build`, which publishes it.
                Or gpufeed.Cache(tier=None, preload=None, shm_dir=None, shm_group=None,
                chunk_cache=None, disk_dir=None, disk_budget=None, background=None, detach=None),
                described in help(gpufeed.Cache): preload=True reads the whole set into the RAM
                copy, background=False makes the copy in the constructor, detach=False keeps an
                shm build in this process, and chunk_cache sizes an HDF5 file's decoded-chunk
                cache, whatever the tier.
    groups:     gpufeed.Groups(group=None, offsets=None, fields=None, pack_window=None):
                grouped data (the segments of one recording), delivered as packed batches of
                whole groups. group= names a per-row integer field (rows of a group need not
                be contiguous); offsets= names a dataset of F+1 increasing row offsets (HDF5
                or NumPy); exactly one is given, and either may also be an array. fields=
                names per-group datasets of F rows (a file label). Each batch holds whole
                groups, first-fit decreasing within windows of pack_window groups (None:
                about 4 batches' worth) so batches come out nearly full; a group longer than a
                batch is split over consecutive batches, in order. Every row once per epoch;
                shuffle moves groups (groups of equal size trade places, batches are
                reordered), not rows; ranks get whole groups and equal batch counts. Batches
                carry batch["group"] (int64 per row, on the device) and batch.groups (the
                groups in the batch); reduce outputs per group with
                gpufeed.GroupReducer(loader.num_groups, ...); loader.group_fields holds the
                per-group fields ({name: CPU tensor [F, ...]}) and loader.group_sizes the rows
                of each group. With a path source, `fields` must name the per-row datasets.
    trace:      a path: the stage trace of the last batches (Chrome trace-event JSON, for
                Perfetto or chrome://tracing) is written there when the loader is closed;
                trace(path) writes it on request. Or gpufeed.Trace(path=None, batches=None):
                batches is the batches it keeps (None: those of the last minute; -1: no
                recording).
    autotune:   on by default: the loader takes the doctor's safe remedies itself, those that
                leave every batch as it would be (the same samples in the same order). It
                tunes workers and prefetch online (hill climbing on the measured wait and
                throughput), starting from `workers` and `prefetch`; each change and its
                reason is in stats()["tuning_log"]. And when the loop waits on reads and the
                data set fits the RAM budget, with cache="none", it copies the set into RAM in
                the background and reads from the copy once it is made; that action and its
                evidence are in stats()["actions"] and the log. gpufeed.Autotune(
                max_workers=None, max_prefetch=None) tunes within those bounds (None: the CPU
                count or cgroup quota; 4 * max_workers, within 25% of free RAM). False keeps
                exactly the given settings; set_parallelism() then stays within the starting
                workers and prefetch.
    held:       batches the training loop may still hold when it asks for the next one,
                planned for up front (max_outstanding; default 3: the one in the loop
                variable, one kept, say for logging, one spare). Each one costs a batch buffer
                (on the device for device="cuda"). A loop that holds more (`list(loader)`,
                `targets.append(batch["label"])`) makes the pool grow by a buffer per extra
                batch held, with one warning naming the cost; past a budget of batch buffers
                (default: 10% of RAM for host batches, a quarter of free GPU memory for device
                ones) the loader raises. gpufeed.Held(max_outstanding=None,
                budget_bytes=None) sets both. Keep copies of small fields
                (batch["label"].clone()) so the buffers go back to the pool.

    Every option left None keeps its C++ default (gpufeed/loader_options.h and
    gpufeed/cache.h).

    Iterating yields the rest of the current epoch, then stops; the next loop runs the next
    epoch (set_epoch() picks one). Batch tensors stay valid for as long as they are held.
    Use one loader from one thread at a time, in the process that created it: a loader
    made before fork() cannot be iterated in the child (create it in the child, e.g. inside a
    DataLoader worker).
    """

    def __init__(self, source, fields=None, batch_size=None, *, shuffle=None, seed=None,
                 drop_last=None, workers=None, prefetch=None, device=None, transforms=(),
                 batch_transform=None, dtype=None, rank=None, world_size=None, pad=None,
                 cache=None, groups=None, trace=None, autotune=None, held=None, sequences=None,
                 **removed):
        if removed:  # only to name the new spelling of a keyword the Loader no longer takes
            _options.refuse_keywords(removed, {"cache": cache, "trace": trace})
        # None leaves an option unset: its default is the C++ one (gpufeed/loader_options.h,
        # gpufeed/cache.h), written there once.
        if batch_size is None:
            raise _gpufeed.InvalidArgument("batch_size is required (samples per batch)")
        if isinstance(transforms, str):
            transforms = [transforms]
        if isinstance(fields, str):
            fields = [fields]
        if batch_transform is not None and not callable(batch_transform):
            raise _gpufeed.InvalidArgument(
                f"batch_transform must be callable, got {type(batch_transform).__name__}")
        self._batch_transform = batch_transform
        given, chunk_cache = _options.translate(shuffle, cache, groups, trace, autotune, held)
        given.update({"batch_size": _int(batch_size, "batch_size"),
                      "transforms": [str(t) for t in transforms]})
        if seed is not None:
            given["seed"] = _seed(seed)
        for name, value in (("rank", rank), ("world_size", world_size),
                            ("workers", workers), ("prefetch", prefetch)):
            if value is not None:
                given[name] = _int(value, name)
        for name, value in (("drop_last", drop_last), ("pad", pad)):
            if value is not None:
                given[name] = bool(value)
        if device is not None:
            given["device"] = _device_spec(device)
        if groups is not None and fields is None:
            if isinstance(source, Mapping):
                skip = _groups.excluded_names(groups.group, groups.offsets, groups.fields)
                fields = [name for name in source if name not in skip]
            elif isinstance(source, (str, bytes, os.PathLike, list, tuple)):
                raise _gpufeed.InvalidArgument(
                    "with groups, pass fields=[...]: the per-row datasets to read (the file "
                    "also holds the group datasets, of other lengths)")
        # Under torchrun, rank 0 lists remote data once for every rank.
        _distributed.manifests_for(source)
        _options.disk_cache(cache, source)
        self._source = _sources.as_source(source, fields, chunk_cache, dtype)
        # A variable-length field is batched padded (the default) or packed: rows of one size.
        varlen = _varlen.loader_options(self._source.schema, sequences)
        given.update(varlen)
        # Before the loader starts: a dtype torch lacks is refused with the dtype= that reads it
        # (a variable-length field's rows are checked once made: a cast transform may fix them).
        if not _varlen.has_variable(self._source.schema):
            _tensors.check_schema(self._source.schema)
        self._group_table = None
        self.group_fields = None
        if groups is not None:
            self._group_table = _groups.group_table(self._source, source, groups.group,
                                                    groups.offsets, groups.fields,
                                                    len(self._source))
            given["groups"] = self._group_table
            self.group_fields = _groups.group_fields(self._group_table)
        if not varlen:  # a builder in another process opens the same rows
            given.update(_sources.rebuild_description(source, fields, dtype))
        options = _gpufeed._LoaderOptions(**given)
        self._impl = _gpufeed._Loader(self._source, options)
        self._cache_info = json.loads(self._impl.cache_json)
        self._batch_size = int(batch_size)
        self.schema = [(name, dtype, tuple(shape)) for name, dtype, shape in self._impl.schema]
        _tensors.check_schema(self.schema, cast_by_transform=bool(varlen))
        self._names = [name for name, _, _ in self.schema]
        self._views = _tensors.field_views(self.schema)
        self._device_type, self._device_index = self._impl.device_id
        if self._device_type == "cuda" and not torch.cuda.is_available():
            device = self._impl.device
            self.close()
            raise _gpufeed.DeviceError(
                f"gpufeed puts batches on {device}, but this torch ({torch.__version__}) has "
                f"no CUDA: install a CUDA build of torch, or pass device='cpu'")

    # The cache ---------------------------------------------------------------------------

    @property
    def cache_info(self):
        """What the cache chose and why: tier, reason, path, key, bytes, built, measured.
        While a copy is made in the background (see Cache.background) it also says how far it
        is, read afresh each time: "built_fraction" (0 to 1; 1 once the batches come from the
        copy) and "serving" (what the batches come from now: "none" is the source); once the
        fill has ended, "reason" says how, "built" whether this process built it, and "error"
        what failed (the loader raises it on its next batch). A copy complete when the loader
        was made has "built_fraction" 1 and "serving" its tier."""
        info = dict(self._cache_info)
        progress = self._impl.cache_progress()
        if progress is None:
            if info.get("tier") in ("shm", "device"):
                info["built_fraction"] = 1.0
                info["serving"] = info["tier"]
            return info
        info["built_fraction"] = progress["built_fraction"]
        info["serving"] = progress["serving"]
        info["reason"] = progress["reason"]
        if progress["done"]:
            info["built"] = progress["built"]
            info["tier"] = progress["serving"]  # the tier made, or "none" when it failed
            if progress["error"]:
                info["error"] = progress["error"]
        return info

    def wait_for_cache(self, timeout=None):
        """Waits until the copy being made in the background is complete (or its fill ended
        otherwise: see cache_info), at most `timeout` seconds (None: no limit). Returns whether
        it ended. Training need not call it: the loader switches to the copy by itself."""
        limit = 1e9 if timeout is None else float(timeout)
        return self._impl.wait_for_cache(limit)

    # Iteration ---------------------------------------------------------------------------

    def __iter__(self):
        return EpochIterator(self._impl, self._make_batch)

    def _make_batch(self, handle):
        # torch's current stream waits for the batch's copy; the loader also records timing
        # events on it at the next batch and when the batch is dropped, so a stream of the
        # user's own (torch.cuda.Stream) must stay alive until then.
        stream = _tensors.consumer_stream(self._device_type, self._device_index)
        batch = Batch(zip(self._names, map(_tensors.from_capsule, handle.capsules(stream))))
        for position, dtype in self._views:
            name = self._names[position]
            batch[name] = batch[name].view(dtype)
        batch._handle = handle
        batch._group_fields = self.group_fields
        if self._batch_transform is not None:
            return self._batch_transform(batch)
        return batch

    def __len__(self):
        """Batches per epoch for this rank."""
        return self._impl.batches_per_epoch

    # Epochs and resumption ---------------------------------------------------------------

    def set_epoch(self, epoch):
        """Makes the next batch the first of `epoch` (a no-op where the loader stands there)."""
        self._impl.set_epoch(int(epoch))

    @property
    def epoch(self):
        """The epoch the next batch comes from."""
        return self._impl.epoch

    def state_dict(self):
        """Where the loader stands: resume exactly there with load_state_dict(). Besides the
        epoch and batch it records global_consumed: how far all ranks together went in the
        epoch's global order (taking every rank to be at the same step, as under DDP), which
        lets the state resume at another world size."""
        return json.loads(self._impl.state_json())

    def load_state_dict(self, state):
        """Resumes at a state_dict(): the next batch is the one that followed it. The seed,
        batch_size, shuffle mode, drop_last, pad and the data set (its sample count and
        fields) must match this loader's.

        At the saved rank and world size the run goes on exactly as it would have. At any
        other (another world size, or another rank's state: one rank's state serves every
        rank) the rest of the epoch's global order is dealt to this loader's ranks: no sample
        repeated beyond the usual padding, none skipped, every rank the same number of
        batches. `state` may also be a list of every rank's states; they must agree. States
        saved before global_consumed was recorded, and packed groups mid-epoch, resume only
        at their own rank and world size. Iterate after loading; set_epoch() on the resumed
        epoch would start it again from its first batch."""
        if isinstance(state, (list, tuple)):
            here = json.loads(self._impl.state_json())
            state = _distributed.agreed_state(state, here["rank"], here["world_size"])
        self._impl.restore_json(json.dumps(dict(state)))

    # Figures -----------------------------------------------------------------------------

    def stats(self):
        """Figures so far: batches, samples, bytes, seconds per stage (read, transform, copy,
        buffer and queue waits, the consumer's wait in the loop and its step between
        batches), consumer_wait_fraction, workers, prefetch, buffers, device. On CUDA,
        gpu_busy_fraction is the share of the GPU's time not spent waiting for batches,
        measured by events on the stream the batches were taken on (torch's current stream,
        through __dlpack__), over gpu_event_steps steps; None when no stream was named."""
        stats = json.loads(self._impl.stats_json())
        stats["held_batches"] = self._impl.held_batches
        if isinstance(self._source, _gpufeed.ImageSource):
            stats.update(self._source.stats())
        return stats

    @property
    def workers(self):
        """Reader threads at work now (the autotuner may change it)."""
        return self._impl.workers

    @property
    def prefetch(self):
        return self._impl.prefetch

    def set_parallelism(self, workers, prefetch):
        """Changes the reader threads and the prefetch depth while the loader runs (clamped to
        Autotune's max_workers and max_prefetch; without autotune, to the starting ones)."""
        self._impl.set_parallelism(int(workers), int(prefetch))

    def trace(self, path):
        """Writes the stage trace of the last batches to `path` as Chrome trace-event JSON
        (open it in Perfetto or chrome://tracing): a track per worker thread with read
        (decode inside), transform and copy spans per batch, the training loop's waits in
        next() and its steps, and counters (queue depth, buffers free, workers active)."""
        self._impl.write_trace(str(path))

    def diagnose(self, monitor=None, window=64):
        """The doctor's verdict over the last `window` batches: which stage makes the loop
        wait and what to change, with the numbers behind it. A running gpufeed.Monitor adds
        CPU, RAM and GPU figures. Returns a dict (verdict, stage, headline, evidence,
        advice, ...) whose "text" is the report a person reads; "actions" lists what the
        loader did by itself (the doctor's safe remedies, see `autotune`) and "tuning_log"
        the autotuner's changes, and the text ends with both."""
        report, text = _gpufeed.diagnose(self._impl, None if monitor is None else monitor._impl,
                                         int(window))
        result = json.loads(report)
        stats = self.stats()
        result["actions"] = stats["actions"]
        result["tuning_log"] = stats["tuning_log"]
        done = stats["actions"] + stats["tuning_log"]
        if done:
            text = text.rstrip("\n") + "\nWhat the loader did by itself:\n" + "".join(
                f"  - {line}\n" for line in done)
        result["text"] = text
        return result

    def report(self, monitor=None, window=64, file=None, all_ranks=False):
        """Prints the doctor's diagnosis (diagnose()["text"]) to `file` (default stderr, so
        it stays apart from a training script's own output) and returns the diagnose() dict.
        Call it after a few dozen batches, e.g. at the end of an epoch.

        all_ranks=True: under torch.distributed every rank must call it (a collective): each
        rank's summary (its wait for data, samples/s, verdict and stage) is gathered, and the
        returned dict adds "ranks" (one summary per rank), "slowest" (the rank that waited
        most for data: under DDP the others wait for it) and "ranks_text", e.g. "slowest:
        rank 3 waited 41 % for data, on read (input-bound)"; rank 0 prints it. Without a
        process group, this rank alone."""
        result = self.diagnose(monitor=monitor, window=window)
        rank = 0
        if all_ranks:
            result, rank = _distributed.gather_report(self, result)
        if rank == 0 or not all_ranks:
            print(result["text"], file=sys.stderr if file is None else file, flush=True)
        return result

    @property
    def batch_size(self):
        return self._batch_size

    @property
    def num_groups(self):
        """Groups of a grouped loader (the ids run 0..num_groups-1); None without groups."""
        return None if self._group_table is None else self._group_table.num_groups

    @property
    def group_sizes(self):
        """Rows of each group, an int64 tensor [num_groups]; None without groups."""
        if self._group_table is None:
            return None
        return torch.from_numpy(self._group_table.sizes())

    @property
    def pack_fill(self):
        """Packed groups: rows per epoch / (batches per epoch * batch_size) for this rank."""
        return self._impl.pack_fill

    @property
    def samples_per_epoch(self):
        return self._impl.samples_per_epoch

    @property
    def device(self):
        """Where batches are: "cpu" or "cuda:N"."""
        if self._device_type == "cpu":
            return torch.device("cpu")
        return torch.device(self._device_type, self._device_index)

    @property
    def source(self):
        return self._source

    # Lifetime ----------------------------------------------------------------------------

    def close(self):
        """Stops and joins the reader threads. Batches already delivered stay valid."""
        self._impl.close()

    @property
    def closed(self):
        return self._impl.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self)} batches/epoch"
        return (f"<gpufeed.Loader {self._source.describe()}, batch_size={self._batch_size}, "
                f"device={self._impl.device if not self.closed else '-'}, {state}>")
