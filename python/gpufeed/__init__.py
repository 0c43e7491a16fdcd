"""gpufeed: keeps training GPUs busy.

Reads training samples in parallel C++ threads (no GIL, no fork), batches them in pinned
memory, copies them to the GPU ahead of the step, and hands each batch to PyTorch as a dict
of tensors, zero-copy through DLPack::

    loader = gpufeed.Loader("train.h5", fields=["mel", "label"], batch_size=8192,
                            device="cuda")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in gpufeed.tqdm(loader):
            loss = model(batch["mel"], batch["label"])
"""

import os as _os
import sys as _sys

try:
    from gpufeed import _gpufeed
except ImportError:
    # Imported from the source tree (python/) with a build tree's staged package
    # (build/python/gpufeed, which holds _gpufeed) further down sys.path: look there too.
    __path__ += [
        _os.path.join(entry, "gpufeed") for entry in _sys.path
        if entry and _os.path.isdir(_os.path.join(entry, "gpufeed"))
        and _os.path.realpath(_os.path.join(entry, "gpufeed")) != _os.path.realpath(__path__[0])
    ]
    from gpufeed import _gpufeed
from gpufeed._gpufeed import (
    Cancelled,
    CorruptData,
    DeviceError,
    Error,
    InvalidArgument,
    IoError,
    NotFound,
    PermissionDenied,
    Source,
    Unsupported,
    remote_stats,
    set_remote_options,
)
from gpufeed._batch import Batch
from gpufeed._batch_size import BatchSizeSuggestion, fit_batch_size, suggest_batch_size
from gpufeed._forward_rows import forward_rows
from gpufeed._groups import GroupReducer
from gpufeed._images import images
from gpufeed._loader import Loader
from gpufeed._memory import release_memory
from gpufeed._monitor import Monitor
from gpufeed._options import Autotune, BlockShuffle, Cache, Groups, Held, Trace
from gpufeed._progress import tqdm
from gpufeed._sources import hdf5, memory, open, synthetic
from gpufeed._varlen import Pack, Pad, Ragged, cu_seqlens, ragged

__all__ = [
    "Autotune",
    "Batch",
    "BatchSizeSuggestion",
    "BlockShuffle",
    "Cache",
    "Cancelled",
    "CorruptData",
    "DeviceError",
    "Error",
    "GroupReducer",
    "Groups",
    "Held",
    "forward_rows",
    "InvalidArgument",
    "IoError",
    "Loader",
    "NotFound",
    "Pack",
    "Pad",
    "Ragged",
    "PermissionDenied",
    "Source",
    "Monitor",
    "Unsupported",
    "hdf5",
    "fit_batch_size",
    "cu_seqlens",
    "images",
    "memory",
    "open",
    "ragged",
    "release_memory",
    "remote_stats",
    "set_remote_options",
    "suggest_batch_size",
    "synthetic",
    "Trace",
    "tqdm",
]

__version__ = "0.1.0"
