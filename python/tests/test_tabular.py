"""Fields made of several columns: fields={"x": [...] or "f*", "y": "label"} and dtype={...}
on a SQLite table, HDF5 and NumPy 1-D fields, and arrays in memory. The batch holds
x: [B, K], stacked in the workers, equal to the columns side by side."""

import os
import sqlite3

import h5py
import numpy as np
import pytest
import torch

import gpufeed

ROWS = 517
K = 35


def _values(rows=ROWS, k=K):
    ids = np.arange(rows)
    return ids[:, None] * 0.1 + np.arange(k)[None, :] * 1.01  # float64, rounded by float32


@pytest.fixture
def wide_db(tmp_path):
    """A table of an id key, 35 REAL columns and a label, its rows stored shuffled."""
    path = tmp_path / "wide.db"
    values = _values()
    columns = ", ".join(f"f{k} REAL" for k in range(K))
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE wide (id INTEGER, {columns}, label INTEGER)")
        order = np.random.default_rng(1).permutation(ROWS)
        db.executemany(f"INSERT INTO wide VALUES ({', '.join('?' * (K + 2))})",
                       [(int(i), *map(float, values[i]), int(i % 7)) for i in order])
    return str(path)


def _reference(path):
    names = ", ".join(f"f{k}" for k in range(K))
    with sqlite3.connect(path) as db:
        rows = db.execute(f"SELECT {names} FROM wide ORDER BY id").fetchall()
    return torch.tensor(np.array(rows, dtype=np.float64).astype(np.float32))


def _epoch(loader):
    return [{name: t.clone() for name, t in batch.items()} for batch in loader]


def test_sqlite_columns_stack_into_one_float32_field_equal_to_the_ordered_query(wide_db):
    uri = f"sqlite:///{wide_db}?table=wide&key=id"
    loader = gpufeed.Loader(uri, fields={"x": "f*", "y": "label"}, dtype={"x": "float32"},
                            batch_size=256, shuffle=False, device="cpu")
    assert [(n, d, s) for n, d, s in loader.schema] == [("x", "float32", (K,)),
                                                         ("y", "int64", ())]
    batches = _epoch(loader)
    assert [b["x"].shape for b in batches] == [(256, K), (256, K), (ROWS - 512, K)]
    assert all(b["x"].dtype == torch.float32 for b in batches)
    x = torch.cat([b["x"] for b in batches])
    assert torch.equal(x, _reference(wide_db))
    assert torch.equal(torch.cat([b["y"] for b in batches]), torch.arange(ROWS) % 7)
    # The list form is the same field; the key is no field unless named.
    listed = gpufeed.open(uri, fields={"x": [f"f{k}" for k in range(K)], "id": "id"},
                          dtype={"x": torch.float32})
    assert [f[:2] for f in listed.schema] == [("x", "float32"), ("id", "int64")]
    plain = gpufeed.open(uri)
    assert "id" not in [f[0] for f in plain.schema]
    assert len(plain.schema) == K + 1


def test_narrowing_refuses_a_value_out_of_range_naming_column_and_row(wide_db):
    with sqlite3.connect(wide_db) as db:
        db.execute("UPDATE wide SET f9 = 1e39 WHERE id = 33")
    uri = f"sqlite:///{wide_db}?table=wide&key=id"
    with pytest.raises(gpufeed.CorruptData, match=r"row 33, column 'f9'.*beyond float32's range"):
        gpufeed.Loader(uri, fields={"x": "f*"}, dtype={"x": "float32"}, batch_size=64)
    # float64, as SQLite stores it, holds the value.
    loader = gpufeed.Loader(uri, fields={"x": "f*"}, batch_size=64, shuffle=False, device="cpu")
    x = torch.cat([b["x"].clone() for b in loader])
    assert x.dtype == torch.float64 and x[33, 9].item() == 1e39


def test_bad_field_specs_are_clear_errors(wide_db):
    uri = f"sqlite:///{wide_db}?table=wide&key=id"
    with pytest.raises(gpufeed.NotFound, match="pattern 'g\\*' matches no column"):
        gpufeed.open(uri, fields={"x": "g*"})
    with pytest.raises(gpufeed.InvalidArgument, match="different dtypes"):
        gpufeed.open(uri, fields={"x": ["f0", "label"]})
    with pytest.raises(gpufeed.InvalidArgument, match="dtype names fields"):
        gpufeed.open(uri, fields={"x": "f*"}, dtype={"z": "float32"})
    with pytest.raises(gpufeed.InvalidArgument, match="must be a column name"):
        gpufeed.open(uri, fields={"x": 3})


def _write_columns_hdf5(path, values, label):
    with h5py.File(path, "w") as f:
        for k in range(values.shape[1]):
            f.create_dataset(f"c{k}", data=values[:, k], chunks=(min(64, len(values)),))
        f.create_dataset("label", data=label)


@pytest.mark.parametrize("kind", ["hdf5", "numpy", "memory"])
def test_one_dimensional_fields_stack_from_hdf5_numpy_and_memory(tmp_path, kind):
    values = _values(300, 12)
    label = np.arange(300, dtype=np.int64)
    if kind == "hdf5":
        source = str(tmp_path / "cols.h5")
        _write_columns_hdf5(source, values, label)
    elif kind == "numpy":
        source = str(tmp_path / "cols")
        os.makedirs(source)
        for k in range(12):
            np.save(os.path.join(source, f"c{k}.npy"), values[:, k])
        np.save(os.path.join(source, "label.npy"), label)
    else:
        source = {**{f"c{k}": values[:, k].copy() for k in range(12)}, "label": label}
    # Listed names keep their order; a pattern takes the source's order (HDF5, NumPy: by name).
    names = [f"c{k}" for k in range(12)]
    loader = gpufeed.Loader(source, fields={"x": names, "y": "label"}, dtype={"x": "float32"},
                            batch_size=64, shuffle=True, seed=3, device="cpu")
    assert loader.schema[0] == ("x", "float32", (12,))
    seen = 0
    for batch in loader:
        expected = torch.from_numpy(values[batch["y"].numpy()].astype(np.float32))
        assert torch.equal(batch["x"], expected)
        seen += len(batch["y"])
    assert seen == 300
    by_pattern = gpufeed.Loader(source, fields={"x": "c*"}, batch_size=300, shuffle=False,
                                device="cpu")
    order = [int(n[1:]) for n in sorted(names)] if kind != "memory" else list(range(12))
    x = next(iter(by_pattern))["x"]
    assert x.dtype == torch.float64 and torch.equal(x, torch.from_numpy(values[:, order]))


def test_a_pattern_reads_only_the_fields_it_takes(tmp_path):
    values = _values(50, 3)
    path = str(tmp_path / "cols.h5")
    _write_columns_hdf5(path, values, np.arange(50))
    source = gpufeed.open(path, fields={"x": "c*"})
    assert [f[0] for f in source.schema] == ["x"]
    assert "(3 fields" in source.describe()  # the HDF5 source under it: c0, c1, c2
