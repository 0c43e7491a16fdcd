"""Loader(cache=...): the RAM and shared-memory tiers give the source's values, the chosen
tier and its reason are visible in loader.cache_info, and a bad tier name is a ValueError
naming the choices."""

import os

import numpy as np
import pytest

import gpufeed
from conftest import collect


@pytest.mark.parametrize("tier", ["ram", "shm"])
def test_cached_batches_hold_the_source_rows(tmp_path, numpy_dir, arrays, tier):
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    cache = gpufeed.Cache(tier, preload=(tier == "ram"), shm_dir=shm_dir)
    loader = gpufeed.Loader(numpy_dir, batch_size=16, seed=2, device="cpu", cache=cache)
    assert loader.cache_info["tier"] == tier
    assert "fits the RAM budget" in loader.cache_info["reason"]
    assert loader.cache_info["bytes"] == sum(a.nbytes for a in arrays.values())
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen = []
        for indices, fields in collect(loader):
            seen.append(indices)
            for name in arrays:
                np.testing.assert_array_equal(fields[name], arrays[name][indices])
        assert sorted(np.concatenate(seen)) == list(range(len(arrays["label"])))
    assert loader.wait_for_cache(timeout=120)
    assert loader.cache_info["built_fraction"] == 1.0
    if tier == "shm":
        assert loader.cache_info["path"].startswith(str(shm_dir))
        assert os.path.exists(loader.cache_info["path"])
        assert loader.cache_info["built"]
    loader.close()


def test_auto_on_the_cpu_decides_from_a_measurement_and_says_why(tmp_path, numpy_dir):
    # In the constructor (background=False), so cache_info holds the figures at once.
    loader = gpufeed.Loader(numpy_dir, batch_size=16, device="cpu",
                            cache=gpufeed.Cache("auto", shm_dir=tmp_path, background=False))
    info = loader.cache_info
    # A copy only when it gathers faster than the source (a page-cached file's mapping may
    # be as fast): which one depends on the machine, the figures and their use do not.
    assert info["tier"] in ("shm", "ram", "none")
    assert "measured: source" in info["reason"]
    measured = info["measured"]
    assert measured["source_bytes_per_s"] > 0 and measured["ram_bytes_per_s"] > 0
    if info["tier"] == "none":
        assert measured["ram_bytes_per_s"] <= 1.1 * measured["source_bytes_per_s"]
    loader.close()


def test_no_cache_by_default(numpy_dir):
    loader = gpufeed.Loader(numpy_dir, batch_size=16, device="cpu")
    assert loader.cache_info == {"tier": "none", "reason": "caching is off"}
    loader.close()


def test_a_bad_tier_name_is_a_value_error_naming_the_choices(numpy_dir):
    with pytest.raises(ValueError) as error:
        gpufeed.Loader(numpy_dir, batch_size=16, device="cpu", cache="tape")
    message = str(error.value)
    for choice in ("none", "auto", "ram", "shm", "device", "'tape'"):
        assert choice in message


def test_device_tier_on_the_cpu_is_refused(numpy_dir):
    with pytest.raises(ValueError, match="loader's device is cpu"):
        gpufeed.Loader(numpy_dir, batch_size=16, device="cpu", cache="device")


def test_shm_group_shares_through_the_groups_folder(tmp_path, numpy_dir, arrays):
    group = os.getegid()  # a group this user is always in
    loader = gpufeed.Loader(numpy_dir, batch_size=16, device="cpu",
                            cache=gpufeed.Cache("shm", shm_dir=tmp_path, shm_group=str(group)))
    assert loader.wait_for_cache(timeout=120)
    path = loader.cache_info["path"]
    assert os.path.dirname(path) == str(tmp_path / f"gpufeed-group-{group}")
    assert os.stat(path).st_mode & 0o777 == 0o640
    for indices, fields in collect(loader):
        np.testing.assert_array_equal(fields["label"], arrays["label"][indices])
    loader.close()
    with pytest.raises(ValueError, match="no such group"):
        gpufeed.Loader(numpy_dir, batch_size=16, device="cpu",
                       cache=gpufeed.Cache("shm", shm_dir=tmp_path,
                                           shm_group="no-such-group-gpufeed"))


def test_an_hdf5_file_named_by_a_relative_path_is_keyed_by_its_absolute_path(tmp_path,
                                                                               arrays,
                                                                               monkeypatch):
    import json
    import subprocess

    import h5py

    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    data = tmp_path / "data"
    data.mkdir()
    with h5py.File(data / "train.h5", "w") as f:
        for name, array in arrays.items():
            f[name] = array
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    monkeypatch.chdir(data)
    loader = gpufeed.Loader("train.h5", fields=["mel", "label"], batch_size=16, device="cpu",
                            cache=gpufeed.Cache("shm", shm_dir=shm_dir))
    next(iter(loader))
    assert loader.wait_for_cache(timeout=120)
    # `gpufeed cache ls`, run from another folder, finds the file and calls the cache current.
    listed = json.loads(subprocess.run([binary, "cache", "ls", "--json", "--dir", str(shm_dir)],
                                       cwd="/", capture_output=True, text=True,
                                       check=True).stdout)
    entry = next(e for e in listed if str(data / "train.h5") in e["identity"])
    assert entry["state"] == "ok", entry
