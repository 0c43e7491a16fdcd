"""Chunked layouts h5py writes that the other tests do not: an extensible-array chunk index
whose unlimited axis is not the first, and partial edge chunks stored unfiltered. gpufeed
must read each exactly as h5py does, the last partial chunk included."""
import ctypes
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import gpufeed

HOSTILE_TOOLS = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                              "sources", "hdf5"))

def read_all(path, field, batch_size):
    loader = gpufeed.Loader(path, fields=[field], batch_size=batch_size, shuffle=False,
                            device="cpu")
    return np.concatenate([b[field].numpy() for b in loader])


def read_shuffled(path, field, n):
    # Dataset "i" holds each row's index, so the shuffled rows go back in place.
    loader = gpufeed.Loader(path, fields=[field, "i"], batch_size=7, shuffle=True, seed=3,
                            device="cpu")
    out = {}
    for batch in loader:
        for i, row in zip(batch["i"].tolist(), batch[field].numpy()):
            out[i] = row
    assert sorted(out) == list(range(n))
    return np.stack([out[i] for i in range(n)])


# HDF5 1.10's format, whose chunk indexes (layout version 4) libhdf5 1.10 through 1.14 write
# under libver="latest"; h5py on HDF5 2.x writes layout version 5 there (tested below).
V110 = ("v110", "v110")


def test_extensible_array_index_unlimited_along_the_second_axis(tmp_path):
    path = str(tmp_path / "earray.h5")
    rng = np.random.default_rng(5)
    data = rng.standard_normal((23, 37)).astype(np.float32)
    with h5py.File(path, "w", libver=V110) as f:
        d = f.create_dataset("x", shape=(23, 10), maxshape=(23, None), chunks=(4, 6),
                             dtype="f4", compression="gzip")
        d.resize((23, 37))
        d[...] = data
        f["i"] = np.arange(23)
    with h5py.File(path, "r") as f:
        want = f["x"][...]
    np.testing.assert_array_equal(want, data)
    np.testing.assert_array_equal(read_all(path, "x", 5), want)
    np.testing.assert_array_equal(read_shuffled(path, "x", 23), want)
    if os.environ.get("GPUFEED_BIN"):
        out = subprocess.run([os.environ["GPUFEED_BIN"], "inspect", path], capture_output=True,
                             text=True, timeout=120, check=True).stdout
        assert "extensible array, read directly" in out


def layout_versions(path):
    """The version of every data layout message in the file's version-2 object headers."""
    sys.path.insert(0, HOSTILE_TOOLS)
    try:
        from make_hostile_hdf5 import v2_header_messages
    finally:
        sys.path.remove(HOSTILE_TOOLS)
    data = bytearray(open(path, "rb").read())
    versions, at = [], data.find(b"OHDR")
    while at >= 0:
        messages, _ = v2_header_messages(data, at)
        versions += [data[body] for kind, body, _ in messages if kind == 8]
        at = data.find(b"OHDR", at + 1)
    return versions


@pytest.mark.skipif(h5py.version.hdf5_version_tuple < (2, 0),
                    reason="h5py's libhdf5 writes layout version 5 from HDF5 2.0")
def test_hdf5_2_layout_version_5_is_refused_naming_it(tmp_path):
    # HDF5 2.0 writes version 5 under libver="latest" where the index records filtered chunk
    # sizes: a compressed dataset with an unlimited axis, as h5py users make for appending.
    path = str(tmp_path / "v5.h5")
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("x", data=np.arange(100, dtype=np.float32), chunks=(10,),
                         maxshape=(None,), compression="gzip")
    versions = layout_versions(path)
    if 5 not in versions:
        pytest.skip(f"HDF5 {h5py.version.hdf5_version} wrote layout versions {versions}")
    with pytest.raises(gpufeed.Unsupported, match="data layout message version 5 .*libver="):
        read_all(path, "x", 10)


DONT_FILTER_PARTIAL_CHUNKS = 0x0002  # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS


def h5py_libhdf5():
    """The libhdf5 h5py itself links (a wheel's bundled copy, or the system's), as ldd names
    it for h5py's own extension: another libhdf5 may be loaded too (gpufeed's, or the MPI
    build another package pulls in), and an ID of one is unknown to the other."""
    import h5py.defs

    out = subprocess.run(["ldd", h5py.defs.__file__], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        name, _, where = line.strip().partition(" => ")
        if name.startswith("libhdf5") and "_hl" not in name:
            return ctypes.CDLL(where.split(" (")[0])
    raise AssertionError(f"no libhdf5 in ldd {h5py.defs.__file__}:\n{out}")


def set_chunk_opts(dcpl, opts):
    # h5py 3.7 (Debian 12) has no set_chunk_opts: call it in the libhdf5 h5py loaded.
    lib = h5py_libhdf5()
    lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
    assert lib.H5Pset_chunk_opts(dcpl.id, opts) >= 0


def make_unfiltered_edges(path, data, chunk):
    with h5py.File(path, "w", libver=V110) as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunk)
        dcpl.set_deflate(6)
        set_chunk_opts(dcpl, DONT_FILTER_PARTIAL_CHUNKS)
        space = h5py.h5s.create_simple(data.shape)
        tid = h5py.h5t.py_create(data.dtype)
        dsid = h5py.h5d.create(f.id, b"x", tid, space, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)
        f["i"] = np.arange(data.shape[0])


def test_partial_edge_chunks_stored_unfiltered(tmp_path):
    path = str(tmp_path / "edges.h5")
    data = (np.arange(29 * 11, dtype=np.int32).reshape(29, 11) * 7919) % 1000
    make_unfiltered_edges(path, data, (8, 4))
    with h5py.File(path, "r") as f:
        want = f["x"][...]
        assert f["x"].compression == "gzip"
        info = [f["x"].id.get_chunk_info(k) for k in range(f["x"].id.get_num_chunks())]
    sizes = {c.chunk_offset: c.size for c in info}
    # Full chunks deflated, the edge chunks (last rows, last columns) stored as they are, their
    # filter mask 0 all the same: only the layout's flag says so.
    assert sizes[(0, 0)] < 8 * 4 * 4
    assert sizes[(24, 0)] == sizes[(0, 8)] == 8 * 4 * 4
    np.testing.assert_array_equal(want, data)
    np.testing.assert_array_equal(read_all(path, "x", 6), want)
    np.testing.assert_array_equal(read_shuffled(path, "x", 29), want)
