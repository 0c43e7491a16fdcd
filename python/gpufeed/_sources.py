"""Sources from Python values: a path or database URI, NumPy arrays or torch tensors in memory,
synthetic."""

import fnmatch
import os
from collections.abc import Mapping

import numpy as np

from gpufeed import _distributed, _gpufeed, _varlen

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


def _dtype_name(value):
    if isinstance(value, str):
        return value
    if type(value).__module__.startswith("torch"):
        return str(value).replace("torch.", "")
    return np.dtype(value).name


def _has_pattern(name):
    return any(c in name for c in "*?[")


def _select(fields, dtype):
    """The C++ select, [(field, [columns or patterns], stack, dtype name or None)], of
    fields={"x": ["f0", "f1"] or "f*", "y": "label"} and dtype={"x": "float32"}."""
    dtype = dict(dtype or {})
    unknown = [name for name in dtype if name not in fields]
    if unknown:
        raise _gpufeed.InvalidArgument(
            f"dtype names fields that fields= does not make: {unknown} (fields: {list(fields)})")
    select = []
    for name, columns in fields.items():
        if isinstance(columns, str):
            # One name is that column as is; a pattern stacks whatever it matches.
            stack, columns = _has_pattern(columns), [columns]
        elif isinstance(columns, (list, tuple)) and all(isinstance(c, str) for c in columns):
            stack, columns = True, list(columns)
        else:
            raise _gpufeed.InvalidArgument(
                f"fields['{name}'] must be a column name, a glob pattern or a list of names; "
                f"got {columns!r}")
        wanted = dtype.get(name)
        select.append((str(name), columns, stack,
                       None if wanted is None else _dtype_name(wanted)))
    return select


def _as_mapping(fields, dtype, names):
    """fields as a dict: a list (or None: every name) with a dtype= becomes one field per name."""
    if isinstance(fields, Mapping):
        return fields
    if isinstance(fields, str):
        fields = [fields]
    return {name: name for name in (names() if fields is None else fields)}


def _needed(select, names):
    """The fields `select` takes of the `names` a source holds, each once, in source order."""
    wanted = set()
    for _, columns, _, _ in select:
        for column in columns:
            if column in names:
                wanted.add(column)
            elif _has_pattern(column):
                wanted.update(n for n in names if fnmatch.fnmatchcase(n, column))
    return [n for n in names if n in wanted]


def _stacked(fields, dtype, open_fields, all_names):
    """A source of fields made of several fields of another: `open_fields(names)` opens the
    source with just those fields, `all_names()` lists them all (only asked for patterns)."""
    select = _select(_as_mapping(fields, dtype, all_names), dtype)
    if any(_has_pattern(c) for _, columns, _, _ in select for c in columns):
        needed = _needed(select, all_names())
    else:
        needed = list(dict.fromkeys(c for _, columns, _, _ in select for c in columns))
    # Unknown names go through as they are, so the C++ message names them.
    return _gpufeed.stack_fields(open_fields(needed or None), select)


def open(path, fields=None, chunk_cache=None, dtype=None):  # noqa: A001 - mirrors the builtin
    """Opens a data set: a folder of .npy files (one per field), an HDF5 file, or a database
    named by a URI.

    `fields` picks the fields, in order; None reads them all. They are the HDF5 datasets, the
    .npy file names, or a database table's columns.
    A dict makes fields of several: {"x": ["f0", "f1", "f2"], "y": "label"} stacks f0..f2 into
    x: [B, 3] (a glob pattern, "x": "f*", takes the matches in table order) and reads label
    as y. `dtype` ({"x": "float32"}) converts a field, refusing values that do not fit.
    `chunk_cache` (HDF5 only): bytes of decoded chunks the loader's workers keep between
    batches, one budget they share (None: the decoded data set's size within 1/16 of free
    RAM, 16 MiB to 1 GiB).

    Databases (SQLite, PostgreSQL)::

        gpufeed.open("sqlite:///abs/path/train.db?table=samples", fields=["x", "label"])
        gpufeed.open("sqlite:data/train.db?query=SELECT x, label FROM samples")  # relative
        gpufeed.open("postgresql://user@host:5432/db?table=samples&key=id&connections=4")
        gpufeed.open("postgresql:///db?host=/run/postgresql&query=SELECT%20x%20FROM%20t"
                     "&fields=x:float32[7,5]")

    A URI starts with sqlite: (three slashes before an absolute path), postgresql: or
    postgres:. gpufeed's parameters, %-decoded:

        table=NAME      the table to load (quoted as an identifier), or
        query=SELECT..  a SELECT (or VALUES) statement; exactly one of table and query
        columns=a,b     the table's columns to load (default: every column); with a table,
                        the `fields` argument means the same; a query selects its own
        fields=SCHEMA   declared dtypes and shapes, as in "x:float32[7,5],label:int32":
                        required for a SQLite BLOB column (the raw bytes of a fixed-shape
                        array); narrows an INTEGER or REAL column (range-checked) or reshapes
                        a PostgreSQL array
        select=SPEC     fields made of columns, as fields={...} says: "x:float32=f*;y=label"
        key=COLUMN      an integer column the rows are ordered by, no field unless columns,
                        fields or select names it; PostgreSQL splits the load by it, with
        connections=N   connections each COPYing one key range (default 4 with a key, else 1)
        cursor=1        PostgreSQL: a binary server-side cursor instead of COPY (for poolers)

    Every other part of a postgresql:// URI goes to libpq unchanged (host, port, dbname,
    sslmode, ...). Credentials are libpq's: the user and password of the URI, else the PG*
    environment variables (PGHOST, PGUSER, PGPASSWORD, ...) and ~/.pgpass (mode 0600), as
    libpq reads them; keep passwords out of the URI. A password never appears in an error
    message, describe() or identity().

    The rows are read once, at open, in bulk (binary COPY for PostgreSQL), into one
    contiguous array per column in this process's memory, where they stay for the source's
    lifetime (about rows x row bytes): epochs read from that memory, never from the
    database again, so later changes to the table are not seen. Open a new source to reload.
    PostgreSQL bool, int2, int4, int8, float4, float8 and arrays of them (the same
    dimensions in every row) become bool, int16, int32, int64, float32, float64 fields;
    SQLite INTEGER becomes int64 and REAL float64. A NULL, a ragged array, an unsupported
    column type or a lost connection raises an error naming the row and column.
    """
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    _distributed.manifest_for(path)  # under torchrun, rank 0 lists remote data for every rank
    if chunk_cache is not None and _gpufeed.is_database_uri(path):
        raise _gpufeed.InvalidArgument(
            "chunk_cache applies to HDF5 files; a database is loaded into memory when it is "
            "opened")
    if isinstance(fields, Mapping) or dtype is not None:
        if _gpufeed.is_database_uri(path):
            if fields is None:
                # Listing the columns would load the table: the fields must be named.
                raise _gpufeed.InvalidArgument(
                    "dtype= on a database needs fields= naming the fields it converts, e.g. "
                    "fields={'x': 'f*', 'y': 'label'}, dtype={'x': 'float32'}")
            return _gpufeed.open_database(path, _select(_as_mapping(fields, dtype, None), dtype))
        return _stacked(fields, dtype, lambda names: open(path, names, chunk_cache),
                        lambda: [f[0] for f in open(path, None, chunk_cache).schema])
    if isinstance(fields, str):
        fields = [fields]
    if chunk_cache is not None and not os.path.isdir(path):
        return hdf5([path], fields, chunk_cache=chunk_cache)
    return _gpufeed.open_path(path, list(fields or []))


def hdf5(paths, fields=None, chunk_cache=None):
    """HDF5 files as one data set: `fields` (dataset paths, None: every dataset of the first
    file) of every file in `paths`, concatenated along axis 0 in the order given.
    `chunk_cache` as in open()."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    _distributed.manifests_for(paths)
    if isinstance(fields, str):
        fields = [fields]
    budget = None
    if chunk_cache is not None:
        budget = int(chunk_cache)
        if budget < 0 or budget != chunk_cache:
            raise _gpufeed.InvalidArgument(
                f"chunk_cache must be a number of bytes >= 0 (0 keeps none), got {chunk_cache!r}")
    return _gpufeed.open_hdf5([os.fsdecode(p) for p in paths], list(fields or []), budget)


def synthetic(schema, samples, seed=0, lengths=None):
    """Deterministic data of a schema, e.g. "mel:float32[1,64,32],label:int64[]".

    Every element is a function of (seed, field, sample, element), so runs repeat exactly.

    A variable-length field ("tokens:int32[*],label:int64") needs ``lengths``, the
    distribution of its samples' item counts, each a function of (seed, field, sample):
    ``"uniform:MIN:MAX"`` (whole numbers, both ends included) or
    ``"lognormal:MEDIAN:SIGMA"`` (rounded exp of a normal draw around ln(MEDIAN)), optionally
    capped: ``"lognormal:MEDIAN:SIGMA:MAX"``. A length is at most 2**31 items; a lognormal
    that could draw more needs its MAX. No memory is kept per sample.
    """
    return _gpufeed.synthetic(schema, int(samples), int(seed), lengths or "")


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
    torch tensor, samples along axis 0, or gpufeed.ragged(values, offsets) for a
    variable-length field. The source keeps the arrays alive; writes to them
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
    specs, owners, ragged = [], [], []
    for name in names:
        if name not in arrays:
            raise _gpufeed.NotFound(
                f"memory source: no field '{name}' (the dict holds {sorted(arrays)})")
        value = arrays[name]
        if isinstance(value, _varlen.Ragged):
            values = value.values
            ragged.append((str(name), values.dtype.name, [int(d) for d in values.shape[1:]],
                           values.__array_interface__["data"][0], int(values.shape[0]),
                           value.offsets.__array_interface__["data"][0], len(value)))
            owners.append(value)
            continue
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
    if ragged:
        return _gpufeed.ragged_memory(ragged, specs, tuple(owners))
    return _gpufeed.memory(specs, tuple(owners))


def as_source(source, fields, chunk_cache=None, dtype=None):
    """The Source a Loader reads from, whatever the user passed."""
    if isinstance(fields, Mapping) or dtype is not None:
        if isinstance(source, _gpufeed.Source):
            return _stacked(fields, dtype, lambda names: source,
                            lambda: [f[0] for f in source.schema])
        if isinstance(source, Mapping):
            return _stacked(fields, dtype, lambda names: memory(source, names),
                            lambda: list(source))
        if isinstance(source, (list, tuple)) and source:
            return _stacked(fields, dtype, lambda names: as_source(source, names, chunk_cache),
                            lambda: [f[0] for f in as_source(source, None, chunk_cache).schema])
        if isinstance(source, (str, bytes, os.PathLike)):
            return open(os.fsdecode(source), fields, chunk_cache, dtype)
    if chunk_cache is not None and not isinstance(source, (str, bytes, os.PathLike, list,
                                                           tuple)):
        raise _gpufeed.InvalidArgument(
            "cache=gpufeed.Cache(chunk_cache=...) applies to HDF5 files given by path; for an "
            "open source pass chunk_cache to gpufeed.open() / gpufeed.hdf5()")
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
        "source must be a path (NumPy folder or HDF5 file), a database URI (sqlite:///..., "
        "postgresql://...), a list of HDF5 files, a dict of arrays or tensors, or a "
        f"gpufeed.Source; got {type(source).__name__}")


def rebuild_description(source, fields, dtype):
    """How another process opens `source` again (gpufeed/cache.h, CacheOptions::source_path):
    what a detached `gpufeed cache build` takes over a build this loader stops. Nothing for
    arrays in memory, open sources, lists of files, or fields made of several (dicts, dtype)."""
    if not isinstance(source, (str, bytes, os.PathLike)) or dtype is not None:
        return {}
    if fields is not None and not (isinstance(fields, (list, tuple)) and
                                   all(isinstance(f, str) for f in fields)):
        return {}
    path = os.fsdecode(source)
    if "://" not in path and not path.startswith(("sqlite:", "postgresql:", "postgres:")):
        path = os.path.abspath(path)  # the builder's log names it whole
    given = {"source_path": path, "source_fields": list(fields or [])}
    from gpufeed import _cli

    binary = _cli.binary()
    if os.access(binary, os.X_OK):
        given["cli_binary"] = binary
    return given
