"""Every kind of source the package takes: NumPy folder, HDF5 file, memory, synthetic."""

import numpy as np
import pytest

import gpufeed
from conftest import collect


def test_numpy_folder_with_chosen_fields(numpy_dir, arrays):
    loader = gpufeed.Loader(numpy_dir, fields=["label", "mel"], batch_size=32, device="cpu")
    assert [name for name, _, _ in loader.schema] == ["label", "mel"]
    for indices, fields in collect(loader):
        assert list(fields) == ["label", "mel"]
        np.testing.assert_array_equal(fields["label"], arrays["label"][indices])


def test_open_returns_a_reusable_source(numpy_dir, arrays):
    source = gpufeed.open(numpy_dir)
    assert len(source) == len(arrays["label"])
    assert sorted(name for name, _, _ in source.schema) == sorted(arrays)
    a = collect(gpufeed.Loader(source, batch_size=50, seed=1, device="cpu"))
    b = collect(gpufeed.Loader(source, batch_size=50, seed=1, device="cpu"))
    np.testing.assert_array_equal(a[0][0], b[0][0])
    with pytest.raises(gpufeed.InvalidArgument, match="pick them when opening"):
        gpufeed.Loader(source, fields=["mel"], batch_size=4)


def test_hdf5_file(tmp_path, arrays):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "train.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("mel", data=arrays["mel"])
        f.create_dataset("label", data=arrays["label"], chunks=(16,), compression="gzip")
    try:
        loader = gpufeed.Loader(path, fields=["mel", "label"], batch_size=20, seed=2,
                                device="cpu")
    except gpufeed.Unsupported as e:
        pytest.skip(f"this build reads no HDF5: {e}")
    batches = collect(loader)
    assert sum(len(i) for i, _ in batches) == len(arrays["label"])
    for indices, fields in batches:
        np.testing.assert_array_equal(fields["mel"], arrays["mel"][indices])
        np.testing.assert_array_equal(fields["label"], arrays["label"][indices])


def test_lone_npy_file_is_refused_naming_its_folder(numpy_dir):
    with pytest.raises(gpufeed.InvalidArgument, match="folder"):
        gpufeed.Loader(f"{numpy_dir}/mel.npy", batch_size=4)


def test_synthetic_schema_and_repr():
    source = gpufeed.synthetic("a:int16[2,2],b:float64[]", samples=9, seed=3)
    assert source.schema == [("a", "int16", (2, 2)), ("b", "float64", ())]
    assert "synthetic" in repr(source) and len(source) == 9
    with pytest.raises(gpufeed.InvalidArgument, match="samples must be >= 0"):
        gpufeed.synthetic("a:int8[]", samples=-1)
