"""HDF5 element types PyTorch has no dtype for, and bitfields: what the Loader reads (compared
with h5py), what it refuses and how it says so, and what `gpufeed inspect` tells the user."""

import json
import os
import subprocess

import h5py
import numpy as np
import pytest
import torch
from h5py import h5s, h5t

import gpufeed

UINTS = {
    "u16": np.array([0, 1, 65535, 300, 7, 9, 40000], np.uint16),
    "u32": np.array([0, 1, 2**32 - 1, 300, 7, 9, 2**31], np.uint32),
    "u64": np.array([0, 1, 2**63 - 1, 300, 7, 9, 2**40], np.uint64),
}


@pytest.fixture
def uint_file(tmp_path):
    path = str(tmp_path / "u.h5")
    with h5py.File(path, "w") as f:
        for name, values in UINTS.items():
            f[name] = values
        f["too_big"] = np.array([0, 1, 2**63, 3], np.uint64)
        f["mel"] = np.arange(7, dtype=np.float32)
        f["name"] = np.array([b"a", b"b", b"c", b"d", b"e", b"f", b"g"])
    return path


def read_all(path, field, **kw):
    loader = gpufeed.Loader(path, fields=[field], batch_size=64, shuffle=False, device="cpu",
                            **kw)
    (batch,) = list(loader)
    return batch[field]


@pytest.mark.skipif(hasattr(torch, "uint16"), reason="this torch has unsigned dtypes")
@pytest.mark.parametrize("name,cast", [("u16", "int32"), ("u32", "int64"), ("u64", "int64"),
                                       ("u16", "int64"), ("u16", "float32")])
def test_unsigned_dataset_reads_through_dtype_as_h5py_reads_it(uint_file, name, cast):
    got = read_all(uint_file, name, dtype={name: cast})
    assert got.dtype == getattr(torch, cast)
    with h5py.File(uint_file, "r") as f:
        want = f[name][()]
    assert got.numpy().tolist() == want.tolist()


@pytest.mark.skipif(hasattr(torch, "uint16"), reason="this torch has unsigned dtypes")
def test_uint64_beyond_int64_is_refused_naming_field_and_sample(uint_file):
    with pytest.raises(gpufeed.Error) as e:
        read_all(uint_file, "too_big", dtype={"too_big": "int64"})
    assert "too_big" in str(e.value) and "sample 2" in str(e.value)


@pytest.mark.skipif(hasattr(torch, "uint16"), reason="this torch has unsigned dtypes")
@pytest.mark.parametrize("name,cast", [("u16", "int32"), ("u32", "int64"), ("u64", "int64")])
def test_unsigned_dataset_without_dtype_says_which_dtype_reads_it(uint_file, name, cast):
    with pytest.raises(gpufeed.Unsupported) as e:
        gpufeed.Loader(uint_file, fields=[name], batch_size=4, device="cpu")
    message = str(e.value)
    assert f"field '{name}'" in message
    assert "torch" in message and "has no dtype" in message
    assert f"dtype={{'{name}': '{cast}'}}" in message


def write_bitfield(path, ftype, values):
    mtype = {1: h5t.STD_B8LE, 2: h5t.STD_B16LE, 4: h5t.STD_B32LE, 8: h5t.STD_B64LE}
    with h5py.File(path, "w") as f:
        d = h5py.h5d.create(f.id, b"x", ftype, h5s.create_simple(values.shape))
        d.write(h5s.ALL, h5s.ALL, values, mtype=mtype[values.itemsize])


def test_eight_bit_bitfield_reads_as_bool(tmp_path):
    # As PyTables stores bool.
    path = str(tmp_path / "b8.h5")
    write_bitfield(path, h5t.STD_B8LE, np.array([[0, 1], [1, 1], [0, 0]], np.uint8))
    got = read_all(path, "x")
    with h5py.File(path, "r") as f:
        want = f["x"][()]
    assert got.dtype == torch.bool
    assert got.numpy().tolist() == want.astype(bool).tolist()


def test_sixteen_bit_bitfield_reads_as_uint16_through_dtype(tmp_path):
    path = str(tmp_path / "b16.h5")
    write_bitfield(path, h5t.STD_B16BE, np.array([0, 1, 0x8000, 0xffff], np.uint16))
    got = read_all(path, "x", dtype={"x": "int32"})
    with h5py.File(path, "r") as f:
        want = f["x"][()]
    assert got.numpy().tolist() == want.tolist() == [0, 1, 0x8000, 0xffff]


def inspect(path, *args):
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    out = subprocess.run([binary, "inspect", path, *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out
    return out.stdout


def test_inspect_says_what_gpufeed_will_do_with_each_dataset(uint_file):
    report = json.loads(inspect(uint_file, "--json"))
    by_name = {d["dataset"]: d for d in report["datasets"]}
    assert by_name["/mel"]["access"] == "direct"
    assert by_name["/name"]["access"] == "refused"
    assert "string" in by_name["/name"]["access_detail"]
    for name, cast in [("u16", "int32"), ("u32", "int64"), ("u64", "int64")]:
        d = by_name["/" + name]
        assert d["access"] == "cast" and d["cast_dtype"] == cast
        assert f"dtype={{'{name}': '{cast}'}}" in d["access_detail"]
    assert "range-checked" in by_name["/u64"]["access_detail"]
    text = inspect(uint_file)
    assert "gpufeed:     needs a cast for PyTorch" in text
    assert "gpufeed:     read directly by gpufeed" in text


def test_compound_members_are_fields_named_dataset_dot_member(tmp_path):
    # As PyTables tables and pandas format="table" store rows: one compound dataset.
    path = str(tmp_path / "table.h5")
    rows = np.zeros(9, dtype=[("id", "<i8"), ("score", ">f4"), ("ok", "?"), ("tag", "S3")])
    rows["id"] = np.arange(9) * 7
    rows["score"] = np.linspace(-1, 1, 9)
    rows["ok"] = np.arange(9) % 2 == 0
    with h5py.File(path, "w") as f:
        f.create_dataset("table", data=rows, chunks=(4,), compression="gzip")
    fields = ["table.id", "table.score", "table.ok"]
    loader = gpufeed.Loader(path, fields=fields, batch_size=9, shuffle=False, device="cpu")
    (batch,) = list(loader)
    with h5py.File(path, "r") as f:
        for field in fields:
            want = f["table"][field.split(".")[1]]
            assert batch[field].numpy().tolist() == want.tolist(), field
    with pytest.raises(gpufeed.Unsupported, match="table.tag.*member 'tag' holds fixed-length "
                       "strings"):
        gpufeed.Loader(path, fields=["table.tag"], batch_size=9, device="cpu")
    # No fields named: the numeric members, the string left out.
    (batch,) = list(gpufeed.Loader(path, batch_size=9, shuffle=False, device="cpu"))
    assert sorted(batch) == sorted(fields)
    report = json.loads(inspect(path, "--json"))
    assert [d["dataset"] for d in report["datasets"]] == [
        "/table.id", "/table.score", "/table.ok", "/table.tag"]
    assert "holds fixed-length strings" in inspect(path)


def test_compound_members_read_while_h5py_reads_the_file(tmp_path):
    # A bool member is an enum; libhdf5 converting it into integers would call the converter
    # h5py registers, which waits for the GIL this thread holds while it waits in h5py for
    # libhdf5's lock: the loader must never need Python.
    path = str(tmp_path / "table.h5")
    rows = np.zeros(64, dtype=[("ok", "?"), ("x", ">i4")])
    rows["ok"] = np.arange(64) % 3 == 0
    rows["x"] = np.arange(64)
    with h5py.File(path, "w") as f:
        f.create_dataset("table", data=rows, chunks=(8,))
    loader = gpufeed.Loader(path, fields=["table.ok", "table.x"], batch_size=4, shuffle=True,
                            workers=2, device="cpu")
    with h5py.File(path, "r") as f:
        for epoch in range(10):
            loader.set_epoch(epoch)
            for batch in loader:
                assert f["table"]["ok"][...].sum() == 22
                want = rows["ok"][batch["table.x"].numpy()]
                assert batch["table.ok"].numpy().tolist() == want.tolist()
