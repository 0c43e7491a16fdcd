"""Each C++ error code is one Python class, also the builtin a user would catch."""

import numpy as np
import pytest

import gpufeed


def test_error_classes_subclass_the_natural_builtins():
    assert issubclass(gpufeed.InvalidArgument, ValueError)
    assert issubclass(gpufeed.NotFound, FileNotFoundError)
    assert issubclass(gpufeed.NotFound, LookupError)
    assert issubclass(gpufeed.IoError, OSError)
    assert issubclass(gpufeed.CorruptData, ValueError)
    assert issubclass(gpufeed.DeviceError, RuntimeError)
    assert issubclass(gpufeed.Unsupported, NotImplementedError)
    for cls in (gpufeed.InvalidArgument, gpufeed.NotFound, gpufeed.CorruptData, gpufeed.IoError,
                gpufeed.DeviceError, gpufeed.Cancelled, gpufeed.Unsupported):
        assert issubclass(cls, gpufeed.Error)
    assert gpufeed.NotFound.code == "not found"


def test_missing_path_raises_not_found_naming_it(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(gpufeed.NotFound, match="nowhere: no such file or folder"):
        gpufeed.Loader(missing, batch_size=4)
    with pytest.raises(FileNotFoundError):
        gpufeed.Loader(str(missing), batch_size=4)


def test_bad_options_raise_invalid_argument_with_the_value():
    source = gpufeed.synthetic("x:float32[]", samples=10)
    with pytest.raises(gpufeed.InvalidArgument, match="batch_size is required"):
        gpufeed.Loader(source)
    with pytest.raises(ValueError, match="workers must be >= 0"):
        gpufeed.Loader(source, batch_size=2, workers=-1)
    with pytest.raises(gpufeed.InvalidArgument, match="device 'tpu'|unknown device 'tpu'"):
        gpufeed.Loader(source, batch_size=2, device="tpu")
    with pytest.raises(gpufeed.InvalidArgument, match="rank"):
        gpufeed.Loader(source, batch_size=2, rank=3, world_size=2)
    with pytest.raises(gpufeed.Error, match="nope"):
        gpufeed.Loader(source, batch_size=2, transforms=["cast:nope:float16"])
    with pytest.raises(gpufeed.InvalidArgument, match="frobnicate"):
        gpufeed.Loader(source, batch_size=2, transforms=["frobnicate:x"])
    with pytest.raises(gpufeed.InvalidArgument, match="source must be a path"):
        gpufeed.Loader(42, batch_size=2)


def test_bad_schema_and_missing_field_name_the_part():
    with pytest.raises(gpufeed.InvalidArgument):
        gpufeed.synthetic("x:float33[]", samples=3)
    with pytest.raises(gpufeed.NotFound, match="nope"):
        gpufeed.Loader({"x": np.zeros(3)}, fields=["nope"], batch_size=1)


def test_missing_field_in_a_numpy_folder(numpy_dir):
    with pytest.raises(gpufeed.NotFound, match="absent"):
        gpufeed.Loader(numpy_dir, fields=["mel", "absent"], batch_size=4)


def test_corrupt_file_raises_corrupt_data_naming_the_file(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    np.save(folder / "x.npy", np.arange(100, dtype=np.float32))
    data = (folder / "x.npy").read_bytes()
    (folder / "x.npy").write_bytes(data[:6] + b"\x09" + data[7:100])  # bad version, cut short
    with pytest.raises(gpufeed.Error, match="x.npy") as info:
        gpufeed.Loader(str(folder), batch_size=4)
    assert isinstance(info.value, (gpufeed.CorruptData, gpufeed.Unsupported))


def test_truncated_data_is_corrupt_data(tmp_path):
    folder = tmp_path / "short"
    folder.mkdir()
    np.save(folder / "x.npy", np.arange(100, dtype=np.float32))
    data = (folder / "x.npy").read_bytes()
    (folder / "x.npy").write_bytes(data[:-40])
    with pytest.raises(gpufeed.CorruptData, match="x.npy"):
        gpufeed.Loader(str(folder), batch_size=4)


def test_unsupported_dtype_in_memory():
    with pytest.raises(gpufeed.Unsupported, match="complex"):
        gpufeed.Loader({"z": np.zeros(4, dtype=np.complex64)}, batch_size=2)


def test_closed_loader_says_so():
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[]", samples=10), batch_size=2,
                            device="cpu")
    loader.close()
    assert loader.closed
    with pytest.raises(gpufeed.InvalidArgument, match="closed"):
        next(iter(loader))
    loader.close()  # idempotent
