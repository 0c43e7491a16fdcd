"""Bitshuffle (HDF5 filter 32008) files written by the bitshuffle library itself.

gpufeed decodes filter 32008 with its own bit transpose (src/sources/hdf5/filters/codecs.cc). The
other tests' Bitshuffle files are framed by tests/sources/hdf5/make_compressed_hdf5.py, also ours:
an error shared by both would pass them. Here the reference is Debian's `bitshuffle`
package (its HDF5 filter and its transform), so gpufeed must read what users' files hold.
"""

import os
import sys

import numpy as np
import pytest

import gpufeed

h5py = pytest.importorskip("h5py")
bitshuffle = pytest.importorskip("bitshuffle")
bitshuffle_h5 = pytest.importorskip("bitshuffle.h5")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "sources", "hdf5"))


# (dtype, per-sample shape, samples per chunk, bitshuffle block size in elements: 0 is the
# library's default). Chunks whose element count is not a multiple of 8 leave elements
# outside the transposed blocks; a block size smaller than the chunk makes several blocks
# and a short last one; the sample count leaves the last chunk part-filled.
CASES = [
    ("f4", (1, 16, 8), 32, 0),
    ("f4", (1, 16, 8), 32, 64),
    ("i1", (7,), 9, 0),
    ("i2", (3,), 5, 8),
    ("i8", (5,), 13, 16),
    ("f8", (2, 3), 50, 0),
]


def _values(rng, dtype, shape):
    if np.dtype(dtype).kind == "f":
        return (np.round(rng.standard_normal(shape) * 4) / 4).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)


@pytest.mark.parametrize("dtype,sample_shape,chunk_rows,block", CASES)
def test_files_written_by_the_bitshuffle_library_read_equal(tmp_path, dtype, sample_shape,
                                                            chunk_rows, block):
    rng = np.random.default_rng(len(sample_shape) * 100 + chunk_rows)
    n = 203
    data = _values(rng, dtype, (n,) + sample_shape)
    path = tmp_path / "bitshuffle.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(chunk_rows,) + sample_shape,
                         compression=bitshuffle_h5.H5FILTER,
                         compression_opts=(block, bitshuffle_h5.H5_COMPRESS_LZ4))
    with h5py.File(path, "r") as f:
        assert "32008" in f["x"]._filters  # written through the library's filter
        np.testing.assert_array_equal(f["x"][...], data)
    loader = gpufeed.Loader(str(path), batch_size=64, shuffle=False, device="cpu")
    got = np.concatenate([batch["x"].numpy() for batch in loader])
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("elem_size", [1, 2, 4, 8])
def test_the_test_files_transform_matches_the_library(elem_size):
    """make_compressed_hdf5.py's transform (used for the Zstd framing, which Debian's
    bitshuffle 0.3.5 cannot write) equals the library's on a whole block."""
    import make_compressed_hdf5 as maker

    rng = np.random.default_rng(elem_size)
    rows = rng.integers(0, 256, (64, elem_size), dtype=np.uint8)
    as_elements = rows.view(np.dtype(f"V{elem_size}")).reshape(64)
    reference = bitshuffle.bitshuffle(as_elements, 64)
    assert maker.bitshuffle_block(rows) == reference.view(np.uint8).tobytes()
