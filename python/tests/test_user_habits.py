"""What a PyTorch user does first: DDP shards of equal length, fork, holding batches,
a per-batch hook, several files, and the small traps (seed, fields, workers, resume, pickle)."""

import collections
import copy
import io
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest
import torch

import gpufeed
from conftest import make_arrays, write_numpy_dir


def synthetic(samples=100):
    return gpufeed.synthetic("x:float32[8],y:int64[]", samples=samples, seed=1)


# 1. DDP padding --------------------------------------------------------------------------


def test_shards_are_padded_to_equal_length_unless_pad_is_false():
    source = synthetic(129)
    padded = [gpufeed.Loader(source, batch_size=64, rank=r, world_size=2, device="cpu")
              for r in range(2)]
    assert [len(lo) for lo in padded] == [2, 2]
    sizes = [[len(b["y"]) for b in lo] for lo in padded]
    assert sizes[0] == sizes[1] == [64, 1]
    unpadded = [gpufeed.Loader(source, batch_size=64, rank=r, world_size=2, device="cpu",
                               pad=False) for r in range(2)]
    assert [len(lo) for lo in unpadded] == [2, 1]
    seen = np.concatenate([b.indices.numpy() for lo in unpadded for b in lo])
    assert sorted(seen) == list(range(129))  # every sample exactly once


def test_three_samples_over_four_ranks_from_the_environment(monkeypatch):
    source = synthetic(3)
    monkeypatch.setenv("WORLD_SIZE", "4")
    got = []
    for rank in range(4):
        monkeypatch.setenv("RANK", str(rank))
        loader = gpufeed.Loader(source, batch_size=64, device="cpu", seed=2)
        assert len(loader) == 1
        got.append([b.indices.tolist() for b in loader])
    assert all(len(batches) == 1 and len(batches[0]) == 1 for batches in got)
    assert {i for batches in got for i in batches[0]} == {0, 1, 2}


# 3. fork ---------------------------------------------------------------------------------


def _in_child(fn):
    """Runs fn() in a forked child; returns its exit status (it is killed after 60 s)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        code = 1
        try:
            code = fn()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung")


def test_a_loader_made_before_fork_raises_in_the_child_and_one_made_there_works(capfd):
    loader = gpufeed.Loader(synthetic(40), batch_size=10, device="cpu", workers=2)
    assert len(list(b["x"].clone() for b in loader)) == 4  # the parent's workers are running

    def use_parents_loader():
        try:
            next(iter(loader))
        except gpufeed.InvalidArgument as e:
            ok = "Create the loader in the process that iterates it" in str(e)
            os.write(2, f"child error: {e}\n".encode())
            return 0 if ok else 2
        return 3

    def make_own_loader():
        own = gpufeed.Loader(synthetic(40), batch_size=10, device="cpu", workers=2)
        return 0 if sum(len(b["y"]) for b in own) == 40 else 4

    assert _in_child(use_parents_loader) == 0, capfd.readouterr().err
    assert _in_child(make_own_loader) == 0
    assert "forked from it" in capfd.readouterr().err
    assert sum(len(b["y"]) for b in loader) == 40  # the parent's loader is unharmed


# 4. holding batches ----------------------------------------------------------------------


def test_holding_every_batch_grows_the_pool_with_one_warning(capfd):
    source = synthetic(100)
    loader = gpufeed.Loader(source, batch_size=10, shuffle=False, device="cpu", held=2)
    batches = list(loader)
    labels = [b["y"] for b in gpufeed.Loader(source, batch_size=10, shuffle=False,
                                             device="cpu")]
    assert len(batches) == 10 and len(labels) == 10
    # Every held batch kept its own rows: no buffer was reused under it.
    assert torch.equal(torch.cat([b["x"] for b in batches]),
                       torch.cat([b["x"] for b in gpufeed.Loader(source, batch_size=100,
                                                                 shuffle=False, device="cpu")]))
    assert torch.equal(torch.cat(labels), torch.cat([b["y"] for b in batches]))
    err = capfd.readouterr().err
    assert err.count("batch buffer") == 2, err  # one warning per loader, not one per batch
    assert ".clone()" in err


def test_holding_past_the_budget_raises_with_the_advice():
    loader = gpufeed.Loader(synthetic(1000), batch_size=10, device="cpu", workers=1,
                            prefetch=1, held=gpufeed.Held(max_outstanding=2, budget_bytes=8192))
    kept = []
    with pytest.raises(gpufeed.InvalidArgument, match=r"batches are still referenced.*clone\(\)"):
        for batch in loader:
            kept.append(batch)
    assert 2 <= len(kept) < 100
    del kept[:]
    assert next(iter(loader)) is not None  # released: the loader goes on


# 5. buffers sized by the largest batch ---------------------------------------------------


def test_a_batch_size_beyond_the_data_set_allocates_for_the_data_set_only():
    loader = gpufeed.Loader(synthetic(1000), batch_size=10**9, device="cpu", workers=1)
    stats = loader.stats()
    assert stats["buffer_bytes"] < 64 * 1024, stats["buffer_bytes"]  # 1000 x 16 bytes + padding
    (batch,) = list(loader)
    assert len(batch["x"]) == 1000
    sharded = gpufeed.Loader(synthetic(1000), batch_size=10**6, device="cpu", rank=1,
                             world_size=4, workers=1)
    assert sharded.stats()["buffer_bytes"] < stats["buffer_bytes"]


# 6. batch_transform and several files ----------------------------------------------------


def test_batch_transform_runs_on_each_batch_in_the_iterating_thread():
    threads = []

    def normalise(batch):
        threads.append(threading.get_ident())
        return {"x": batch["x"] * 2, "n": len(batch["y"])}

    source = synthetic(25)
    loader = gpufeed.Loader(source, batch_size=10, shuffle=False, device="cpu",
                            batch_transform=normalise)
    got = list(loader)
    assert [b["n"] for b in got] == [10, 10, 5]
    plain = torch.cat([b["x"] for b in gpufeed.Loader(source, batch_size=25, shuffle=False,
                                                      device="cpu")])
    assert torch.equal(torch.cat([b["x"] for b in got]), plain * 2)
    assert threads == [threading.get_ident()] * 3
    with pytest.raises(gpufeed.InvalidArgument, match="callable"):
        gpufeed.Loader(source, batch_size=10, batch_transform="normalize")


def test_several_hdf5_files_are_one_data_set(tmp_path):
    h5py = pytest.importorskip("h5py")
    parts = []
    for i, n in enumerate((7, 5)):
        path = tmp_path / f"part{i}.h5"
        with h5py.File(path, "w") as f:
            f["mel"] = np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 100 * i
            f["label"] = np.arange(n, dtype=np.int64) + 100 * i
        parts.append(str(path))
    loader = gpufeed.Loader(parts, fields=["label", "mel"], batch_size=4, shuffle=False,
                            device="cpu")
    labels = torch.cat([b["label"] for b in loader]).tolist()
    assert labels == list(range(7)) + [100 + i for i in range(5)]
    assert len(gpufeed.hdf5(parts, fields="mel")) == 12


# 13. smaller traps -----------------------------------------------------------------------


def test_a_negative_seed_is_a_clear_error():
    with pytest.raises(gpufeed.InvalidArgument, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        gpufeed.Loader(synthetic(), batch_size=10, seed=-1)


def test_one_field_may_be_a_string(tmp_path):
    data = write_numpy_dir(tmp_path / "d", make_arrays(samples=12))
    loader = gpufeed.Loader(data, fields="mel", batch_size=4, device="cpu")
    assert [name for name, _, _ in loader.schema] == ["mel"]
    memory = gpufeed.Loader(make_arrays(samples=12), fields="label", batch_size=4, device="cpu")
    assert [name for name, _, _ in memory.schema] == ["label"]


def test_absurd_worker_counts_are_clamped_with_a_message(capfd):
    loader = gpufeed.Loader(synthetic(), batch_size=10, device="cpu", workers=1000)
    assert loader.workers <= max(16, 4 * os.cpu_count())
    assert sum(len(b["y"]) for b in loader) == 100
    assert "workers=1000" in capfd.readouterr().err


def test_load_state_dict_refuses_another_file_shuffle_mode_or_drop_last():
    loader = gpufeed.Loader(synthetic(100), batch_size=10, device="cpu", seed=3)
    next(iter(loader))
    state = loader.state_dict()
    cases = [({"source": synthetic(90)}, "another file"),
             ({"shuffle": False}, "shuffle"),
             ({"shuffle": gpufeed.BlockShuffle(block=5)}, "shuffle"),
             ({"drop_last": True}, "drop_last"),
             ({"pad": False}, "pad")]
    for change, message in cases:
        options = {"source": synthetic(100), "batch_size": 10, "device": "cpu", "seed": 3}
        options.update(change)
        other = gpufeed.Loader(options.pop("source"), **options)
        with pytest.raises(gpufeed.InvalidArgument, match=message):
            other.load_state_dict(state)
    same = gpufeed.Loader(synthetic(100), batch_size=10, device="cpu", seed=3)
    same.load_state_dict(state)
    assert next(iter(same)).index == 1
    old = {k: state[k] for k in ("epoch", "batch", "seed", "rank", "world_size", "batch_size")}
    # A state saved before these were recorded was saved over the earlier shuffled order:
    # mid-epoch it would repeat and skip samples, so it is refused; at an epoch's start it loads.
    with pytest.raises(gpufeed.InvalidArgument, match="by an earlier gpufeed"):
        same.load_state_dict(old)
    same.load_state_dict(dict(old, batch=0))
    assert next(iter(same)).index == 0


def test_tqdm_bar_ends_with_the_run_s_throughput(capsys):
    pytest.importorskip("tqdm")
    loader = gpufeed.Loader(synthetic(64), batch_size=8, device="cpu")
    assert sum(1 for _ in gpufeed.tqdm(loader, interval=0.0, mininterval=0)) == 8
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "samples/s=" in last and "samples/s=0," not in last, last


def test_a_batch_pickles_and_saves_as_a_dict_of_tensors():
    batch = next(iter(gpufeed.Loader(synthetic(20), batch_size=5, device="cpu")))
    for restored in (pickle.loads(pickle.dumps(batch)), copy.deepcopy(batch)):
        assert type(restored) is collections.OrderedDict and list(restored) == ["x", "y"]
        assert torch.equal(restored["x"], batch["x"])
    buffer = io.BytesIO()
    torch.save(batch, buffer)
    # weights_only=True is torch.load's default from torch 2.6: it loads only plain types
    # (an OrderedDict of tensors, not a Batch or a dict built by a call to dict).
    for weights_only in (True, False):
        buffer.seek(0)
        saved = torch.load(buffer, weights_only=weights_only)
        assert isinstance(saved, dict) and torch.equal(saved["y"], batch["y"])


def test_a_file_open_for_writing_elsewhere_is_named_as_such(tmp_path):
    h5py = pytest.importorskip("h5py")
    locked, flagged = str(tmp_path / "locked.h5"), str(tmp_path / "flagged.h5")
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a writer that keeps the file open (and locked) until told to go
        try:
            f = h5py.File(locked, "w")
            f["mel"] = np.ones((10, 2), np.float32)
            f.flush()
            os.write(ready_w, b"1")
            os.read(hold_r, 1)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"1"
        with pytest.raises(gpufeed.IoError, match="another process has this HDF5 file open "
                                                  "for writing"):
            gpufeed.open(locked)
    finally:
        os.write(hold_w, b"1")
        os.waitpid(pid, 0)
    pid = os.fork()
    if pid == 0:  # an SWMR writer that dies without closing: the superblock says "writing"
        try:
            f = h5py.File(flagged, "w", libver="latest")
            f["mel"] = np.ones((10, 2), np.float32)
            f.swmr_mode = True
            f.flush()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    with pytest.raises(gpufeed.IoError, match="marked open for writing.*h5clear -s"):
        gpufeed.open(flagged)


def test_damaged_metadata_says_the_file_is_damaged(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "damaged.h5"
    with h5py.File(path, "w") as f:
        f["mel"] = np.ones((100, 4), np.float32)
        header = h5py.h5o.get_info(f["mel"].id).addr
    data = bytearray(path.read_bytes())
    data[header + 20:header + 24] = b"\xff\xff\xff\xff"  # the first message's flags: invalid
    path.write_bytes(bytes(data))
    with pytest.raises(gpufeed.CorruptData, match="the file is damaged") as info:
        gpufeed.Loader(str(path), fields="mel", batch_size=10)
    assert "datasets there are: none" not in str(info.value)


# 7. the CLI from pip ---------------------------------------------------------------------


def test_the_pip_package_ships_the_cli_and_an_entry_point_runs_it():
    import subprocess
    import sys
    import tomllib

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert project["project"]["scripts"]["gpufeed"] == "gpufeed._cli:main"
    assert "bin/gpufeed" in project["tool"]["setuptools"]["package-data"]["gpufeed"]
    with open(os.path.join(root, "setup.py")) as f:
        assert '"gpufeed_main"' in f.read()  # setup.py builds the binary it ships
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    # The entry point's module, run as a script: what `gpufeed ...` and `python -m gpufeed`
    # run, without importing torch twice here.
    cli = os.path.join(os.path.dirname(gpufeed.__file__), "_cli.py")
    env = dict(os.environ, GPUFEED_BIN=binary)
    out = subprocess.run([sys.executable, cli, "--help"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "cache" in out.stdout and "inspect" in out.stdout, out
    env["GPUFEED_BIN"] = "/nonexistent/gpufeed"
    out = subprocess.run([sys.executable, cli, "--help"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 127 and "not installed" in out.stderr


# 8, 10. compressed chunks: the full-shuffle warning, one decoded-chunk budget -------------


def _gzip_file(path, samples=2000, chunk=100):
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        f.create_dataset("mel", data=np.arange(samples * 16, dtype=np.float32).reshape(-1, 16),
                         chunks=(chunk, 16), compression="gzip")
    return str(path)


def test_a_full_shuffle_over_compressed_chunks_says_so_with_the_fixes(tmp_path, capfd):
    path = _gzip_file(tmp_path / "gz.h5")
    gpufeed.Loader(path, batch_size=64, device="cpu", cache=gpufeed.Cache(chunk_cache=4096))
    err = capfd.readouterr().err
    assert "full shuffle over compressed chunks of 100 samples decodes each chunk about" in err
    assert "shuffle_block=-1" in err and 'cache="ram"' in err and "128 KB" in err, err
    assert err.count("full shuffle") == 1
    # Block shuffle, or a worker whose share of the chunk cache holds the data set (the
    # default budget is the decoded data set): no warning.
    gpufeed.Loader(path, batch_size=64, device="cpu", cache=gpufeed.Cache(chunk_cache=4096),
                   shuffle=gpufeed.BlockShuffle())
    gpufeed.Loader(path, batch_size=64, device="cpu", workers=1)
    assert "full shuffle" not in capfd.readouterr().err


def test_the_decoded_chunk_budget_is_one_for_all_workers_and_settable(tmp_path):
    path = _gzip_file(tmp_path / "gz.h5")
    source = gpufeed.open(path, chunk_cache=3 << 20)
    assert gpufeed._gpufeed.hdf5_counters(source)["chunk_cache_bytes"] == 3 << 20
    # The default: the decoded data set (2000 x 64 bytes), far below 1/16 of free RAM.
    default = gpufeed.open(path)
    assert gpufeed._gpufeed.hdf5_counters(default)["chunk_cache_bytes"] == 2000 * 64
    loader = gpufeed.Loader(default, batch_size=100, device="cpu", workers=4)
    got = torch.cat([b["mel"] for b in loader])
    assert sorted(got[:, 0].tolist()) == [16.0 * i for i in range(2000)]
    with pytest.raises(gpufeed.InvalidArgument, match="chunk_cache"):
        gpufeed.Loader(source, batch_size=10, cache=gpufeed.Cache(chunk_cache=1 << 20))


# 11. the shm cache after a rewrite -------------------------------------------------------


def test_a_rewrite_that_restores_size_and_mtime_rebuilds_the_shm_cache(tmp_path):
    data = tmp_path / "d"
    arrays = {"x": np.arange(40, dtype=np.float32).reshape(20, 2)}
    write_numpy_dir(data, arrays)
    shm = tmp_path / "shm"
    shm.mkdir()
    first = gpufeed.Loader(str(data), batch_size=20, shuffle=False, device="cpu",
                           cache=gpufeed.Cache("shm", shm_dir=str(shm)))
    assert float(next(iter(first))["x"].sum()) == float(arrays["x"].sum())
    assert first.wait_for_cache(timeout=120)  # built in the background
    old_path = first.cache_info["path"]
    first.close()
    del first
    stat = os.stat(data / "x.npy")
    write_numpy_dir(data, {"x": arrays["x"] * 2})  # same size
    os.utime(data / "x.npy", ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime
    assert os.stat(data / "x.npy").st_mtime_ns == stat.st_mtime_ns
    second = gpufeed.Loader(str(data), batch_size=20, shuffle=False, device="cpu",
                            cache=gpufeed.Cache("shm", shm_dir=str(shm)))
    assert second.wait_for_cache(timeout=120)
    assert second.cache_info["built"] and second.cache_info["path"] != old_path
    assert float(next(iter(second))["x"].sum()) == 2 * float(arrays["x"].sum())
    assert not os.path.exists(old_path)  # the older version, mapped by nobody, is gone
