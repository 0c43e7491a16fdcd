"""`gpufeed rechunk`: every dataset rewritten with whole-sample chunks reads back equal under
h5py, attributes, groups, fill values and links kept; bad targets refused; a full disk or an
existing output leaves nothing behind."""

import os
import resource
import signal
import subprocess

import h5py
import numpy as np
import pytest

# Registers the LZ4/Zstd filters for h5py's reads (scripts/setup installs it).
hdf5plugin = pytest.importorskip("hdf5plugin")

import gpufeed

BINARY = os.environ.get("GPUFEED_BIN")
pytestmark = pytest.mark.skipif(not BINARY, reason="GPUFEED_BIN (the built CLI) is not set")


def rechunk(*args, **kwargs):
    return subprocess.run([BINARY, "rechunk", "-q", *map(str, args)], capture_output=True,
                          text=True, timeout=120, **kwargs)


def write_layouts(path):
    """The layouts h5py users write: compressed and plain, 1-D to 4-D, uneven last chunks."""
    rng = np.random.default_rng(3)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "layouts"
        f.attrs["sizes"] = np.array([1, 2, 3], dtype=np.int32)
        f.create_dataset("mel", data=rng.standard_normal((1001, 1, 16, 8), dtype=np.float32),
                         chunks=True, compression="gzip", shuffle=True)
        f.create_dataset("label", data=np.arange(1001, dtype=np.int64), chunks=(100,))
        f.create_dataset("plain2d", data=rng.integers(0, 9, (333, 7), dtype=np.uint8))
        group = f.create_group("nested/deeper")
        group.attrs["unit"] = "dB"
        ds = group.create_dataset("x3", data=rng.random((77, 3, 5)), chunks=(10, 2, 2),
                                  fillvalue=3.5)
        ds.attrs["scale"] = 0.5
        f.create_dataset("big_endian", data=np.arange(50, dtype=">i4"), chunks=(7,),
                         compression="lzf")
        f.create_dataset("grow", data=np.ones((5, 2), dtype=np.float16), maxshape=(None, 2),
                         chunks=(2, 2))
        f.create_dataset("unwritten", shape=(40, 3), dtype=np.int16, chunks=(8, 3),
                         fillvalue=-7)
        f.create_dataset("scalar", data=42)
        f["soft"] = h5py.SoftLink("/mel")
        f["second_name"] = f["label"]
    return path


def datasets(f):
    out = {}
    f.visititems(lambda name, obj: out.setdefault(name, obj)
                 if isinstance(obj, h5py.Dataset) else None)
    return out


def test_every_dataset_reads_back_equal_with_whole_sample_chunks(tmp_path):
    src = write_layouts(tmp_path / "in.h5")
    dst = tmp_path / "out.h5"
    result = rechunk(src, dst)
    assert result.returncode == 0, result.stderr
    assert "rows checked" in result.stdout
    with h5py.File(src, "r") as a, h5py.File(dst, "r") as b:
        assert sorted(datasets(a)) == sorted(datasets(b))
        for name, x in datasets(a).items():
            y = b[name]
            assert y.dtype == x.dtype, name
            assert y.shape == x.shape, name
            np.testing.assert_array_equal(y[()], x[()], err_msg=name)
            if x.ndim >= 1 and x.shape[0] > 0:
                assert y.chunks[1:] == x.shape[1:], (name, y.chunks)
        assert b["mel"].compression == "gzip" and b["mel"].shuffle
        assert b["nested/deeper/x3"].fillvalue == 3.5
        assert b["unwritten"].fillvalue == -7
        np.testing.assert_array_equal(b["unwritten"][()], np.full((40, 3), -7, np.int16))
        assert b["grow"].maxshape == (None, 2)
        assert b.attrs["title"] == "layouts"
        np.testing.assert_array_equal(b.attrs["sizes"], [1, 2, 3])
        assert b["nested/deeper"].attrs["unit"] == "dB"
        assert b["nested/deeper/x3"].attrs["scale"] == 0.5
        assert b.get("soft", getlink=True).path == "/mel"
        assert b["second_name"] == b["label"]  # one object under two names
    # gpufeed reads the result too, with the same values.
    loader = gpufeed.Loader(str(dst), fields=["mel", "label"], batch_size=256, shuffle=False)
    batch = next(iter(loader))
    with h5py.File(src, "r") as a:
        np.testing.assert_array_equal(batch["mel"].numpy(), a["mel"][:256])


def test_samples_per_chunk_and_compression_are_applied(tmp_path):
    src = write_layouts(tmp_path / "in.h5")
    dst = tmp_path / "out.h5"
    result = rechunk(src, dst, "--samples-per-chunk", 64, "--compression", "none")
    assert result.returncode == 0, result.stderr
    with h5py.File(dst, "r") as b:
        assert b["mel"].chunks == (64, 1, 16, 8)
        assert b["mel"].compression is None and not b["mel"].shuffle
        assert b["label"].chunks == (64,)
    again = tmp_path / "gz.h5"
    assert rechunk(src, again, "--compression", "gzip:1").returncode == 0
    with h5py.File(again, "r") as b:
        assert b["plain2d"].compression == "gzip" and b["plain2d"].compression_opts == 1
        np.testing.assert_array_equal(b["plain2d"][()], h5py.File(src, "r")["plain2d"][()])


def test_an_existing_output_is_kept_unless_forced(tmp_path):
    src = write_layouts(tmp_path / "in.h5")
    dst = tmp_path / "out.h5"
    dst.write_bytes(b"keep me")
    result = rechunk(src, dst)
    assert result.returncode == 2
    assert "exists; pass --force" in result.stderr
    assert dst.read_bytes() == b"keep me"
    assert rechunk(src, dst, "--force").returncode == 0
    with h5py.File(dst, "r") as b:
        assert b["label"].shape == (1001,)


def test_bad_targets_are_refused_naming_them(tmp_path):
    src = write_layouts(tmp_path / "in.h5")
    missing_folder = rechunk(src, tmp_path / "no" / "such" / "out.h5")
    assert missing_folder.returncode == 3 and "does not exist" in missing_folder.stderr
    same = rechunk(src, src, "--force")
    assert same.returncode == 2 and "is the input file" in same.stderr
    bad_level = rechunk(src, tmp_path / "o.h5", "--compression", "gzip:12")
    assert bad_level.returncode == 2 and "must be 0 to 9" in bad_level.stderr
    no_input = rechunk(tmp_path / "absent.h5", tmp_path / "o.h5")
    assert no_input.returncode == 3
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(open(src, "rb").read()[:3000])
    damaged = rechunk(truncated, tmp_path / "o.h5")
    assert damaged.returncode == 4, damaged.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.h5", "truncated.h5"]


def test_a_disk_that_fills_leaves_nothing_behind(tmp_path):
    src = write_layouts(tmp_path / "in.h5")
    dst = tmp_path / "out.h5"

    def small_files():
        # Writes past 64 KiB fail with EFBIG, as on a full disk.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    result = rechunk(src, dst, preexec_fn=small_files)
    assert result.returncode == 5, result.stderr
    assert "rechunk" in result.stderr
    assert os.listdir(tmp_path) == ["in.h5"]
