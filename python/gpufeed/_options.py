"""The options objects of gpufeed.Loader. Each concept beyond DataLoader's flat parameters is
one Loader parameter: a plain value for the common case (cache="shm", shuffle=True,
trace="t.json", autotune=True, held=4), one of these frozen dataclasses for the rest. The
loader translates them into the entries of the C++ _LoaderOptions, whose names and defaults
are gpufeed/loader_options.h's and gpufeed/cache.h's."""

import dataclasses
import json
import os
from typing import Any, Optional, Sequence, Union

from gpufeed import _gpufeed


@dataclasses.dataclass(frozen=True)
class Cache:
    """Loader(cache=gpufeed.Cache(...)): the data set kept close to the GPU, and how.

    tier:        "none" (default), "ram", "shm", "device", "auto" or "disk", as
                 Loader(cache="...") takes them. "disk" keeps the bytes of s3:// and
                 http(s):// data on this node's disk (a local path is refused: it is on disk
                 already): one download per block for every process of the node, within a
                 budget, least recently read first out; from then on every remote source
                 the process opens reads through it.
    preload:     with tier "ram": read the whole data set when the loader is made, in parallel
                 (default: fill on first touch).
    background:  True (default): the loader is made at once and streams from the source while
                 the copy (an shm cache not built yet, a RAM preload) is made at low priority;
                 it reads from the copy once the copy is complete.
                 loader.cache_info["built_fraction"] tells how far it is. False: the
                 constructor makes the copy before it returns.
    detach:      True (default): an shm build this process started and stops unfinished (the
                 loader closed, the process exiting, Ctrl-C) goes on in a detached, nice 19
                 `gpufeed cache build` that publishes it for the node, when the source is a
                 path or URI another process can open (not arrays in memory). False: every
                 build stays in this process and stops with it.
    shm_dir:     where tier "shm" keeps its file (default /dev/shm).
    shm_group:   share tier "shm" files with the members of this group (a name or gid you
                 belong to) instead of keeping them your own; members trust each other's
                 caches, nobody else can read or plant them.
    chunk_cache: HDF5 files given by path: bytes of decoded chunks (and, for a file in an
                 object store, whole unfiltered chunks) the workers keep between
                 batches, one cache they share, whatever the tier (0 keeps none; default: the
                 decoded data set's size, within 1/16 of the available RAM and 16 MiB to
                 1 GiB). Cache(chunk_cache=...) sets only this budget. For an
                 open source, pass it to gpufeed.open() / gpufeed.hdf5().
    disk_dir:    where tier "disk" keeps its blocks (default $XDG_CACHE_HOME/gpufeed/remote,
                 else ~/.cache/gpufeed/remote; made 0700, refused unless it is yours alone).
    disk_budget: bytes tier "disk" keeps, for all processes together (default: half the
                 free space of disk_dir's file system).
    """

    tier: Optional[str] = None
    preload: Optional[bool] = None
    shm_dir: Optional[Union[str, os.PathLike]] = None
    shm_group: Optional[Union[str, int]] = None
    chunk_cache: Optional[int] = None
    disk_dir: Optional[Union[str, os.PathLike]] = None
    disk_budget: Optional[int] = None
    background: Optional[bool] = None
    detach: Optional[bool] = None


@dataclasses.dataclass(frozen=True)
class BlockShuffle:
    """Loader(shuffle=gpufeed.BlockShuffle(...)): a shuffle for chunked (compressed) data that
    reads each chunk about once an epoch instead of once per sample drawn from it: blocks
    of `block` consecutive samples are shuffled, then samples within each window of `window`
    consecutive blocks of that order (whole blocks: the short last one counts as one).
    Seeded, and different every epoch, like shuffle=True.

    block:  samples per block; negative: the source's chunk size (default); 0: a full
            shuffle, as shuffle=True.
    window: blocks shuffled together (default 4).
    """

    block: int = -1
    window: Optional[int] = None


@dataclasses.dataclass(frozen=True, eq=False)  # eq=False: arrays have no plain ==
class Groups:
    """Loader(groups=gpufeed.Groups(...)): grouped data (the segments of one recording),
    delivered as packed batches of whole groups. Give exactly one of group and offsets.

    group:       a per-row integer field (group ids 0..F-1; the rows of a group need not be
                 contiguous): a dataset name, or an array.
    offsets:     a dataset of F+1 increasing row offsets (HDF5 or NumPy), or an array.
    fields:      per-group datasets of F rows (a file label): names or arrays; read once and
                 kept in loader.group_fields.
    pack_window: groups packed together, first-fit decreasing (default: about 4 batches'
                 worth), so batches come out nearly full.
    """

    group: Any = None
    offsets: Any = None
    fields: Optional[Union[str, Sequence[Any]]] = None
    pack_window: Optional[int] = None

    def __post_init__(self):
        if (self.group is None) == (self.offsets is None):
            raise _gpufeed.InvalidArgument(
                "gpufeed.Groups takes exactly one of group= (a per-row integer field) and "
                "offsets= (F+1 row offsets)")


@dataclasses.dataclass(frozen=True)
class Trace:
    """Loader(trace=gpufeed.Trace(...)): the stage trace of the last batches.

    path:    where it is written (Chrome trace-event JSON) when the loader is closed
             (default: no file; loader.trace(path) writes it on request).
    batches: the batches it keeps (default: those of the last minute; -1: no recording).
    """

    path: Optional[Union[str, os.PathLike]] = None
    batches: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Autotune:
    """Loader(autotune=gpufeed.Autotune(...)): autotuning on, within these bounds.

    max_workers:  reader threads it may go up to (default: the CPU count or cgroup quota).
    max_prefetch: prefetch depth it may go up to (default: 4 * max_workers, within 25% of
                  free RAM).
    """

    max_workers: Optional[int] = None
    max_prefetch: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Held:
    """Loader(held=gpufeed.Held(...)): the batches the training loop may keep.

    max_outstanding: batches the loop may still hold when it asks for the next one, planned
                     for up front (default 3; held=N is the same as Held(max_outstanding=N)).
    budget_bytes:    batch buffers the pool may grow to when the loop holds more (default:
                     10% of RAM for host batches, a quarter of free GPU memory for device
                     ones); past it the loader raises.
    """

    max_outstanding: Optional[int] = None
    budget_bytes: Optional[int] = None


def integer(value, name):
    if isinstance(value, bool) or int(value) != value:
        raise _gpufeed.InvalidArgument(f"{name} must be an integer, got {value!r}")
    return int(value)


_OBJECTS = (Cache, BlockShuffle, Groups, Trace, Autotune, Held)


def _refuse_other_object(name, value, expected):
    if isinstance(value, _OBJECTS) and not isinstance(value, expected):
        raise TypeError(f"Loader({name}=...) takes gpufeed.{expected.__name__}, not "
                        f"gpufeed.{type(value).__name__}")


# The user's name of each _LoaderOptions entry an options object sets, for error messages.
_LABELS = {"shuffle_block": "BlockShuffle.block", "shuffle_window": "BlockShuffle.window",
           "trace_batches": "Trace.batches", "max_workers": "Autotune.max_workers",
           "max_prefetch": "Autotune.max_prefetch", "max_outstanding": "held",
           "held_budget_bytes": "Held.budget_bytes", "pack_window": "Groups.pack_window"}


def _set(given, values):
    """Sets given[key] = convert(value, name) for each (key, value, convert) whose value is not
    None: an option left None keeps its C++ default."""
    for key, value, convert in values:
        if value is not None:
            given[key] = convert(value, _LABELS.get(key, key))


def _bool(value, _):
    return bool(value)


def _str(value, _):
    return os.fspath(value) if isinstance(value, os.PathLike) else str(value)


def translate(shuffle, cache, groups, trace, autotune, held):
    """The _LoaderOptions entries of the one-per-concept parameters, and the chunk_cache budget
    (an option of the HDF5 source, not of the loader)."""
    for name, value, expected in (("shuffle", shuffle, BlockShuffle), ("cache", cache, Cache),
                                  ("groups", groups, Groups), ("trace", trace, Trace),
                                  ("autotune", autotune, Autotune), ("held", held, Held)):
        _refuse_other_object(name, value, expected)
    if groups is not None and not isinstance(groups, Groups):
        raise TypeError(f"Loader(groups=...) takes gpufeed.Groups(group=... or offsets=...), "
                        f"not {type(groups).__name__}")
    given = {}
    chunk_cache = None
    if isinstance(shuffle, BlockShuffle):
        _set(given, (("shuffle", True, _bool), ("shuffle_block", shuffle.block, integer),
                     ("shuffle_window", shuffle.window, integer)))
    else:
        _set(given, (("shuffle", shuffle, _bool),))
    if isinstance(cache, Cache):
        _set(given, (("cache", cache.tier, _str), ("preload", cache.preload, _bool),
                     ("background", cache.background, _bool),
                     ("detach", cache.detach, _bool),
                     ("shm_dir", cache.shm_dir, _str), ("shm_group", cache.shm_group, _str)))
        chunk_cache = cache.chunk_cache
    else:
        _set(given, (("cache", cache, _str),))
    if isinstance(trace, Trace):
        _set(given, (("trace", trace.path, _str), ("trace_batches", trace.batches, integer)))
    else:
        _set(given, (("trace", trace, _str),))
    if isinstance(autotune, Autotune):
        _set(given, (("autotune", True, _bool), ("max_workers", autotune.max_workers, integer),
                     ("max_prefetch", autotune.max_prefetch, integer)))
    else:
        # On unless turned off: the loader takes the doctor's safe remedies by default.
        _set(given, (("autotune", True if autotune is None else autotune, _bool),))
    if isinstance(held, Held):
        _set(given, (("max_outstanding", held.max_outstanding, integer),
                     ("held_budget_bytes", held.budget_bytes, integer)))
    else:
        _set(given, (("max_outstanding", held, integer),))
    if groups is not None:
        _set(given, (("pack", True, _bool), ("pack_window", groups.pack_window, integer)))
    return given, chunk_cache


# Each keyword the Loader took before its options objects: (the parameter that took it over,
# its options object, the object's field).
_REMOVED = {
    "preload": ("cache", Cache, "preload"),
    "shm_dir": ("cache", Cache, "shm_dir"),
    "shm_group": ("cache", Cache, "shm_group"),
    "chunk_cache": ("cache", Cache, "chunk_cache"),
    "shuffle_block": ("shuffle", BlockShuffle, "block"),
    "shuffle_window": ("shuffle", BlockShuffle, "window"),
    "group": ("groups", Groups, "group"),
    "group_offsets": ("groups", Groups, "offsets"),
    "group_fields": ("groups", Groups, "fields"),
    "pack_window": ("groups", Groups, "pack_window"),
    "pack": ("groups", Groups, None),
    "trace_batches": ("trace", Trace, "batches"),
    "max_workers": ("autotune", Autotune, "max_workers"),
    "max_prefetch": ("autotune", Autotune, "max_prefetch"),
    "max_outstanding": ("held", Held, "max_outstanding"),
    "held_budget_bytes": ("held", Held, "budget_bytes"),
}


def _show(value):
    """A value as the user would type it; "..." for an array."""
    if isinstance(value, str):
        return json.dumps(value)
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, os.PathLike):
        return json.dumps(os.fspath(value))
    if isinstance(value, (list, tuple)) and len(value) <= 8 and all(
            isinstance(v, (str, int, float)) for v in value):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return "..."


def _spelling(parameter, cls, fields, plain):
    """The new spelling of the removed keywords `fields` ({field: value}), given what the user
    passed as `parameter` (`plain`)."""
    if parameter == "held" and set(fields) == {"max_outstanding"}:
        return f"held={_show(fields['max_outstanding'])}"
    args = [f"{field}={_show(value)}" for field, value in fields.items() if field]
    note = ""
    if parameter == "cache":
        args.insert(0, f"tier={_show(plain) if isinstance(plain, str) else '...'}")
    elif parameter == "trace" and isinstance(plain, (str, os.PathLike)):
        args.insert(0, f"path={_show(plain)}")
    elif parameter == "groups":
        if "group" not in fields and "offsets" not in fields:
            args.insert(0, "offsets=...")
        note = " (a grouped loader always packs its batches)" if None in fields else ""
    elif parameter == "autotune":
        note = " (the object turns autotuning on)"
    return f"{parameter}=gpufeed.{cls.__name__}({', '.join(args)}){note}"


def refuse_keywords(removed, plain):
    """Raises the TypeError for Loader's keywords beyond its signature: a removed one names its
    new spelling; any other is Python's usual message. `plain` maps each parameter that took
    removed keywords over to what the user passed as that parameter."""
    for name in removed:
        if name not in _REMOVED:
            raise TypeError(f"Loader.__init__() got an unexpected keyword argument '{name}'")
    name = next(iter(removed))
    parameter, cls, _ = _REMOVED[name]
    fields = {_REMOVED[n][2]: value for n, value in removed.items()
              if _REMOVED[n][0] == parameter}
    raise TypeError(f"Loader() got an unexpected keyword argument '{name}': use "
                    f"{_spelling(parameter, cls, fields, plain.get(parameter))}")


def is_remote(source):
    """Whether `source` is a path read over the network (s3://, http://, https://)."""
    return isinstance(source, (str, bytes, os.PathLike)) and _gpufeed.is_remote_uri(
        os.fsdecode(source))


def disk_cache(cache, source):
    """Checks the tier against the one list of tiers (gpufeed/source.h, exported as
    _gpufeed.cache_tiers) and, for cache="disk", turns the process's node-local disk cache on
    for remote reads before the source is opened, so that it reads through it (the C++
    UseDiskTier; the loader then reports the tier, its folder and why)."""
    tier = cache.tier if isinstance(cache, Cache) else cache
    if tier is not None and tier not in _gpufeed.cache_tiers:
        raise _gpufeed.InvalidArgument(
            f"cache tier '{tier}' is not one of {', '.join(_gpufeed.cache_tiers)}")
    if tier != "disk":
        return
    path = os.fsdecode(source) if isinstance(source, (str, bytes, os.PathLike)) else ""
    directory = os.fspath(cache.disk_dir) if isinstance(cache, Cache) and cache.disk_dir else ""
    budget = cache.disk_budget if isinstance(cache, Cache) and cache.disk_budget else 0
    _gpufeed.use_disk_tier(path, directory, integer(budget, "disk_budget"))
