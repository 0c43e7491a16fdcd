"""A cache made in the background: the Loader is made and yields batches while the copy is
not complete (cache_info["built_fraction"] < 1), reads from the copy once it is, and every
batch is the uncached loader's, before and after the switch.

The build is held the way another process's build holds it: the test takes the cache's build
lock itself, so the loader streams until the lock is let go. No timed assertions."""

import fcntl
import os

import numpy as np

import gpufeed
from conftest import collect


def _epochs(loader, epochs):
    """Every batch of `epochs`, in order."""
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        out.extend(collect(loader))
    return out


def _same(a, b):
    assert len(a) == len(b)
    for (indices_a, fields_a), (indices_b, fields_b) in zip(a, b):
        np.testing.assert_array_equal(indices_a, indices_b)
        for name in fields_a:
            np.testing.assert_array_equal(fields_a[name], fields_b[name])


def test_the_loader_streams_while_another_builder_holds_the_cache_then_switches(
        tmp_path, numpy_dir, arrays):
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    options = dict(batch_size=8, shuffle=True, seed=4, device="cpu")
    # A first loader builds the cache (in its constructor) and so names its file and lock;
    # the file goes again, and the test holds the lock: a build in progress elsewhere.
    first = gpufeed.Loader(numpy_dir, **options,
                           cache=gpufeed.Cache("shm", shm_dir=shm_dir, background=False))
    path = first.cache_info["path"]
    assert first.cache_info["built_fraction"] == 1.0
    first.close()
    os.remove(path)
    reference = gpufeed.Loader(numpy_dir, **options)
    expected = _epochs(reference, range(3))
    reference.close()

    with open(path + ".lock", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        loader = gpufeed.Loader(numpy_dir, **options, cache=gpufeed.Cache("shm", shm_dir=shm_dir))
        info = loader.cache_info
        assert info["tier"] == "shm"
        assert info["serving"] == "none"
        assert info["built_fraction"] < 1
        assert "streaming from the source" in info["reason"], info["reason"]
        streamed = _epochs(loader, range(1))
        assert loader.cache_info["built_fraction"] < 1  # still held: those came from the source
        assert loader.cache_info["serving"] == "none"
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert loader.wait_for_cache(timeout=120)
    info = loader.cache_info
    assert info["built_fraction"] == 1.0
    assert info["serving"] == "shm" and info["tier"] == "shm"
    assert os.path.exists(path)
    _same(streamed + _epochs(loader, range(1, 3)), expected)
    loader.close()


def test_a_ram_preload_in_the_background_gives_the_source_rows(numpy_dir, arrays):
    loader = gpufeed.Loader(numpy_dir, batch_size=8, device="cpu",
                            cache=gpufeed.Cache("ram", preload=True))
    # "preloading in the background", or "preloaded" once done: read afresh.
    assert "in the background" in loader.cache_info["reason"]
    for indices, fields in collect(loader):
        np.testing.assert_array_equal(fields["mel"], arrays["mel"][indices])
    assert loader.wait_for_cache(timeout=120)
    assert loader.cache_info["built_fraction"] == 1.0
    assert loader.cache_info["serving"] == "ram"
    loader.close()


def test_closing_the_loader_while_it_waits_for_a_build_returns(tmp_path, numpy_dir):
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    first = gpufeed.Loader(numpy_dir, batch_size=8, device="cpu",
                           cache=gpufeed.Cache("shm", shm_dir=shm_dir, background=False))
    path = first.cache_info["path"]
    first.close()
    os.remove(path)
    with open(path + ".lock", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        loader = gpufeed.Loader(numpy_dir, batch_size=8, device="cpu",
                                cache=gpufeed.Cache("shm", shm_dir=shm_dir))
        next(iter(loader))
        loader.close()  # stops the filler waiting for the lock and joins it
        del loader
    assert not os.path.exists(path)


def test_auto_on_a_cold_cache_measures_and_decides_in_the_background(tmp_path, numpy_dir,
                                                                      arrays):
    loader = gpufeed.Loader(numpy_dir, batch_size=8, device="cpu",
                            cache=gpufeed.Cache("auto", shm_dir=tmp_path))
    reason = loader.cache_info["reason"]  # read afresh: the filler may have chosen already
    assert "measuring in the background" in reason or "measured: source" in reason, reason
    for indices, fields in collect(loader):
        np.testing.assert_array_equal(fields["label"], arrays["label"][indices])
    assert loader.wait_for_cache(timeout=120)
    info = loader.cache_info
    assert "measured: source" in info["reason"], info["reason"]
    assert info["tier"] in ("shm", "ram", "none") and info["tier"] == info["serving"]
    for indices, fields in collect(loader):
        np.testing.assert_array_equal(fields["mel"], arrays["mel"][indices])
    loader.close()
