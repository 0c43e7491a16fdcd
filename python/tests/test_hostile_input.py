"""Shapes whose sizes overflow 64 bits are gpufeed errors in Python, never an
abort in torch's storage-size check; and a memory-mapped file truncated under a loader is an
IoError naming it, not a SIGBUS."""

import struct

import numpy as np
import pytest

import gpufeed


def raw_npy(path, shape, data=b""):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    d = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % dims
    total = (10 + len(d) + 1 + 63) // 64 * 64
    d = d + " " * (total - 10 - len(d) - 1) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + data)


@pytest.mark.parametrize("shape,error,words", [
    ((0, 2**62, 2**62), gpufeed.CorruptData, "overflow"),
    ((2**62,), gpufeed.CorruptData, r"more than 2\^64"),
    ((2**61, 0), gpufeed.Unsupported, "zero bytes"),
])
def test_npy_shapes_that_overflow_are_errors(tmp_path, shape, error, words):
    raw_npy(tmp_path / "x.npy", shape)
    with pytest.raises(error, match=words) as info:
        gpufeed.Loader(tmp_path, batch_size=4, device="cpu")
    assert "x.npy" in str(info.value)


def test_a_schema_whose_sample_size_overflows_is_invalid():
    with pytest.raises(gpufeed.InvalidArgument, match="overflow"):
        gpufeed.synthetic("x:float32[4611686018427387904,4]", samples=10)
    with pytest.raises(gpufeed.InvalidArgument, match="overflow"):
        gpufeed.synthetic("x:float32[2147483648,2147483648]", samples=10)


def test_a_batch_whose_size_overflows_is_invalid():
    # 1 TiB per sample; batches hold min(batch_size, samples) rows, so both are 2**30.
    source = gpufeed.synthetic("x:uint8[1099511627776]", samples=2**30)
    with pytest.raises(gpufeed.InvalidArgument, match="overflow"):
        gpufeed.Loader(source, batch_size=2**30, device="cpu")


def test_a_mapped_file_truncated_under_the_loader_is_an_io_error(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((8192, 256), dtype=np.float32))  # 8 MiB
    loader = gpufeed.Loader(tmp_path, batch_size=512, device="cpu", workers=1, cache="none")
    with open(tmp_path / "x.npy", "r+b") as f:
        f.truncate(4096)
    with pytest.raises(gpufeed.IoError, match="changed size while being read") as info:
        for _ in loader:
            pass
    assert "x.npy" in str(info.value)
