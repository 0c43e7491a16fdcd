"""Sources from Python values: a path, NumPy arrays or torch tensors in memory, synthetic."""

import os
from collections.abc import Mapping

import numpy as np

from gpufeed import _gpufeed

# torch dtypes whose memory gpufeed reads as is, by their NumPy-style names.
_TORCH_DTYPE_NAMES = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float64": "float64",
}


def open(path, fields=None, chunk_cache=None):  # noqa: A001 - mirrors the builtin on purpose
    """Opens a data set on disk: a folder of .npy files (one per field) or an HDF5 file.

    `fields` picks the fields (datasets) to read, in order; None reads them all.
    `chunk_cache` (HDF5): bytes of decoded chunks the loader's workers keep between batches,
    one budget they share (None: the decoded data set's size within 1/16 of free RAM, 16 MiB
    to 1 GiB).
    """
    if isinstance(fields, str):
        fields = [fields]
    if chunk_cache is not None and not os.path.isdir(path):
        return hdf5([path], fields, chunk_cache=chunk_cache)
    return _gpufeed.open_path(os.fspath(path), list(fields or []))


def hdf5(paths, fields=None, chunk_cache=None):
    """HDF5 files as one data set: `fields` (dataset paths, None: every dataset of the first
    file) of every file in `paths`, concatenated along axis 0 in the order given.
    `chunk_cache` as in open()."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    if isinstance(fields, str):
        fields = [fields]
    budget = None
    if chunk_cache is not None:
        budget = int(chunk_cache)
        if budget < 0 or budget != chunk_cache:
            raise _gpufeed.InvalidArgument(
                f"chunk_cache must be a number of bytes >= 0 (0 keeps none), got {chunk_cache!r}")
    return _gpufeed.open_hdf5([os.fsdecode(p) for p in paths], list(fields or []), budget)


def synthetic(schema, samples, seed=0):
    """Deterministic data of a schema, e.g. "mel:float32[1,64,32],label:int64[]".

    Every element is a function of (seed, field, sample, element), so runs repeat exactly.
    """
    return _gpufeed.synthetic(schema, int(samples), int(seed))


def _torch_field(name, tensor):
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        raise _gpufeed.InvalidArgument(
            f"memory source: field '{name}' is a tensor on {tensor.device}; gpufeed reads "
            f"samples from host memory: pass it with .cpu()")
    dtype = _TORCH_DTYPE_NAMES.get(str(tensor.dtype).replace("torch.", ""))
    if dtype is None:
        raise _gpufeed.Unsupported(
            f"memory source: field '{name}' has dtype {tensor.dtype}, which gpufeed does not read")
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()  # the one copy: strided rows cannot be read in place
    return tensor, dtype, tensor.data_ptr()


def _numpy_field(name, array):
    array = np.asarray(array)
    if array.ndim == 0:
        raise _gpufeed.InvalidArgument(
            f"memory source: field '{name}' is a scalar; samples go along axis 0")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    array = np.ascontiguousarray(array)
    dtype = array.dtype.name
    if array.dtype.kind not in "biuf":
        raise _gpufeed.Unsupported(
            f"memory source: field '{name}' has dtype {array.dtype}, which gpufeed does not read")
    return array, dtype, array.__array_interface__["data"][0]


def memory(arrays, fields=None):
    """A source over arrays already in memory, zero-copy: a dict name -> NumPy array or CPU
    torch tensor, samples along axis 0. The source keeps the arrays alive; writes to them
    show in batches read afterwards, as with torch.from_numpy.

    `fields` picks the fields, in order; None takes every entry of the dict.
    """
    if not isinstance(arrays, Mapping):
        raise _gpufeed.InvalidArgument(
            f"memory source: expected a dict of arrays or tensors, got {type(arrays).__name__}")
    if isinstance(fields, str):
        fields = [fields]
    names = list(arrays) if fields is None else list(fields)
    if not names:
        raise _gpufeed.InvalidArgument("memory source: no fields given")
    specs, owners = [], []
    for name in names:
        if name not in arrays:
            raise _gpufeed.NotFound(
                f"memory source: no field '{name}' (the dict holds {sorted(arrays)})")
        value = arrays[name]
        if type(value).__module__.startswith("torch"):
            held, dtype, address = _torch_field(name, value)
        else:
            held, dtype, address = _numpy_field(name, value)
        shape = tuple(int(d) for d in held.shape)
        if not shape:
            raise _gpufeed.InvalidArgument(
                f"memory source: field '{name}' is a scalar; samples go along axis 0")
        specs.append((str(name), dtype, list(shape[1:]), int(address), shape[0]))
        owners.append(held)
    return _gpufeed.memory(specs, tuple(owners))


def as_source(source, fields, chunk_cache=None):
    """The Source a Loader reads from, whatever the user passed."""
    if chunk_cache is not None and not isinstance(source, (str, bytes, os.PathLike, list,
                                                           tuple)):
        raise _gpufeed.InvalidArgument(
            "chunk_cache applies to HDF5 files given by path; for an open source pass it to "
            "gpufeed.open() / gpufeed.hdf5()")
    if isinstance(source, _gpufeed.Source):
        if fields is not None:
            names = [f[0] for f in source.schema]
            if list(fields) != names:
                raise _gpufeed.InvalidArgument(
                    f"fields={list(fields)} cannot be applied to an open source "
                    f"({source.describe()}, fields {names}): pick them when opening it")
        return source
    if isinstance(source, (str, bytes, os.PathLike)):
        path = os.fsdecode(source)
        return open(path, fields, chunk_cache)
    if isinstance(source, (list, tuple)) and source and all(
            isinstance(p, (str, bytes, os.PathLike)) for p in source):
        return hdf5([os.fsdecode(p) for p in source], fields, chunk_cache)
    if isinstance(source, Mapping):
        return memory(source, fields)
    raise _gpufeed.InvalidArgument(
        "source must be a path (NumPy folder or HDF5 file), a list of HDF5 files, a dict of "
        "arrays or tensors, or a "
        f"gpufeed.Source; got {type(source).__name__}")
