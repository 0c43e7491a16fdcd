"""Data in an S3-API store (s3rver behind the fault proxy): the same batches as the local
copy for every kind of source, throttling and cut bodies survived, a changed object refused,
clear errors, the node-local disk cache, and one listing per torchrun job."""

import os
import socket
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

import gpufeed
from conftest import SCRIPTS, collect, make_arrays, script_env, write_numpy_dir


@pytest.fixture
def store(s3_server, monkeypatch):
    """The server, with this process's remote reads pointed at its proxy."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    gpufeed.set_remote_options(endpoint=s3_server.endpoint, region=s3_server.region,
                               retry_budget_s=20)
    return s3_server


def _bucket(store, name):
    store.create_bucket(name)
    return name


def _local_and_remote(tmp_path, store, bucket):
    """The same files in tmp_path/data and under s3://bucket/data/."""
    data = tmp_path / "data"
    write_numpy_dir(data / "numpy", make_arrays(samples=300, seed=4))
    rng = np.random.default_rng(5)
    mel = rng.standard_normal((300, 1, 8, 5)).astype("f4")
    label = np.arange(300, dtype="i8")
    with h5py.File(data / "plain.h5", "w") as f:
        f.create_dataset("mel", data=mel, chunks=(32, 1, 8, 5))
        f.create_dataset("label", data=label)
    with h5py.File(data / "gzip.h5", "w") as f:
        f.create_dataset("mel", data=mel, chunks=(32, 1, 8, 5), compression="gzip", shuffle=True)
        f.create_dataset("label", data=label, chunks=(32,), compression="gzip")
    from PIL import Image
    for i in range(24):
        folder = data / "images" / f"class{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 255, (40 + i, 50, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)
    store.upload_tree(str(data), bucket, "data")
    return str(data), f"s3://{bucket}/data"


def _same(a, b):
    assert len(a) == len(b)
    for (ia, fa), (ib, fb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        assert fa.keys() == fb.keys()
        for k in fa:
            np.testing.assert_array_equal(fa[k], fb[k])


def _epoch(source, **kw):
    return collect(gpufeed.Loader(source, batch_size=32, device="cpu", seed=3, workers=2, **kw))


def test_every_kind_of_source_reads_from_the_store_as_from_disk(tmp_path, store):
    local, remote = _local_and_remote(tmp_path, store, _bucket(store, "kinds"))
    _same(_epoch(f"{remote}/numpy/"), _epoch(f"{local}/numpy"))
    for name in ("plain.h5", "gzip.h5"):
        _same(_epoch(f"{remote}/{name}", fields=["mel", "label"]),
              _epoch(f"{local}/{name}", fields=["mel", "label"]))
    _same(_epoch(gpufeed.images(f"{remote}/images/", size=32, crop="center")),
          _epoch(gpufeed.images(f"{local}/images", size=32, crop="center")))
    stats = gpufeed.remote_stats()
    assert stats["requests"] > 0 and stats["bytes"] > 0
    assert stats["max_in_flight"] > 1  # a batch's reads go out together


def test_block_shuffle_fetches_each_unfiltered_chunk_once_not_per_batch(tmp_path, store):
    # Two batches in a row draw half of the same two chunks: read piece by piece, both batches
    # fetch both chunks; read whole and kept in the chunk cache, the second batch fetches none.
    bucket = _bucket(store, "blocks")
    mel = np.random.default_rng(6).standard_normal((2048, 64)).astype("f4")
    path = tmp_path / "blocks.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("mel", data=mel, chunks=(64, 64))
    store.put(bucket, "blocks.h5", path.read_bytes())

    def epoch(source, **kw):
        # One worker, as given (autotune=False): no second worker fetching the same chunk, no
        # copy of the set in RAM; only the chunk cache differs between the two runs.
        return collect(gpufeed.Loader(source, fields=["mel"], batch_size=64, device="cpu",
                                      seed=3, workers=1, shuffle=gpufeed.BlockShuffle(window=2),
                                      autotune=False, **kw))

    expected = epoch(str(path))
    fetched = {}
    for budget in (None, 0):  # the default chunk cache, and none
        before = gpufeed.remote_stats()["bytes"]
        _same(epoch(f"s3://{bucket}/blocks.h5", cache=gpufeed.Cache(chunk_cache=budget)),
              expected)
        fetched[budget] = gpufeed.remote_stats()["bytes"] - before
    assert fetched[None] < 0.7 * fetched[0], fetched


def test_block_shuffle_reading_ahead_past_a_small_chunk_cache_equals_the_local_read(
        tmp_path, store):
    # The read-ahead's deepest case: a chunk cache of a few chunks (chunks fetched ahead are
    # evicted and fetched again), two workers claiming batches at once, a short last chunk
    # (block-shuffle windows of whole blocks), and hints crossing into the next epoch. Every
    # epoch's batches must equal the local file's, in fewer than 1.5 requests per chunk.
    bucket = _bucket(store, "ahead")
    mel = np.random.default_rng(7).standard_normal((2000, 64)).astype("f4")  # 32 chunks, one short
    label = np.arange(2000, dtype="i8")
    path = tmp_path / "ahead.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("mel", data=mel, chunks=(64, 64))
        f.create_dataset("label", data=label, chunks=(64,))
    store.put(bucket, "ahead.h5", path.read_bytes())

    def epochs(source, **kw):
        loader = gpufeed.Loader(source, fields=["mel", "label"], batch_size=64, device="cpu",
                                seed=5, workers=2, shuffle=gpufeed.BlockShuffle(), autotune=False,
                                **kw)
        out = [collect(loader) for _ in range(3)]
        loader.close()
        return out

    expected = epochs(str(path))
    before = gpufeed.remote_stats()["requests"]
    got = epochs(f"s3://{bucket}/ahead.h5", cache=gpufeed.Cache(chunk_cache=8 * 64 * 64 * 4))
    requests = gpufeed.remote_stats()["requests"] - before
    for mine, theirs in zip(got, expected):
        _same(mine, theirs)
    # 3 epochs of 32 mel chunks and 32 label chunks (adjacent ones go out in one request).
    assert requests < 3 * 64 * 1.5, requests


def test_a_storm_of_503s_and_cut_bodies_are_survived_and_counted(tmp_path, store):
    local, remote = _local_and_remote(tmp_path, store, _bucket(store, "storm"))
    expected = _epoch(f"{local}/gzip.h5", fields=["mel", "label"])
    gpufeed.set_remote_options(endpoint=store.endpoint, region=store.region, max_attempts=20,
                               retry_budget_s=30)
    before = gpufeed.remote_stats()
    store.set_rules(fail_status=503, fail_count=8, retry_after="0", fail_methods=["GET"])
    _same(_epoch(f"{remote}/gzip.h5", fields=["mel", "label"]), expected)
    after = gpufeed.remote_stats()
    assert after["throttled"] - before["throttled"] >= 8
    assert after["retries"] - before["retries"] >= 8
    store.reset_proxy()
    store.set_rules(reset_after_bytes=700, reset_count=4)
    _same(_epoch(f"{remote}/plain.h5", fields=["mel", "label"]),
          _epoch(f"{local}/plain.h5", fields=["mel", "label"]))


def _h5py_default_gzip(path, rows):
    """A file as h5py writes it with compression on: chunks=True, gzip 4, shuffle."""
    rng = np.random.default_rng(8)
    mel = rng.standard_normal((rows, 1, 64, 32)).astype("f4")
    label = np.arange(rows, dtype="i8")
    with h5py.File(path, "w") as f:
        f.create_dataset("mel", data=mel, chunks=True, compression="gzip", shuffle=True)
        f.create_dataset("label", data=label, chunks=True, compression="gzip", shuffle=True)
    with h5py.File(path, "r") as f:  # the reference reader's values
        return {"mel": f["mel"][...], "label": f["label"][...]}


def _by_index(source, rows, **kw):
    out = {}
    for b in gpufeed.Loader(source, fields=["mel", "label"], batch_size=256, shuffle=True,
                            device="cpu", seed=2, **kw):
        idx = b.indices.numpy()
        for k, v in b.items():
            out.setdefault(k, np.zeros((rows,) + tuple(v.shape[1:]), v.numpy().dtype))[idx] = \
                v.numpy()
    return out


def test_a_hostile_network_never_reads_as_corruption(tmp_path, store):
    # Resets mid-body, bodies that end short without a transport error, a storm of 503s and
    # latency, all at once, on the kind of file h5py writes by default: the values are
    # h5py's, never CorruptData.
    bucket = _bucket(store, "hostile")
    rows = 6000
    path = tmp_path / "gz.h5"
    expected = _h5py_default_gzip(path, rows)
    store.put(bucket, "gz.h5", path.read_bytes())
    # Enough attempts that even one request meeting every fault in a row is not given up on:
    # the faults must be survived, not reported.
    gpufeed.set_remote_options(endpoint=store.endpoint, region=store.region, max_attempts=70,
                               retry_budget_s=120)
    store.set_rules(latency_ms=20, fail_status=503, fail_count=8, retry_after="0",
                    reset_after_bytes=3000, reset_count=20, short_after_bytes=1500,
                    short_count=20)
    got = _by_index(f"s3://{bucket}/gz.h5", rows)
    counts = store.counts()
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    rules = store._control("GET", "rules")
    assert rules["fail_count"] == 0 and rules["reset_count"] == 0 and rules["short_count"] == 0
    assert counts["by_status"].get("503", 0) == 8


def test_a_flipped_byte_in_the_object_is_corrupt_data(tmp_path, store):
    bucket = _bucket(store, "flipped")
    rows = 2000
    path = tmp_path / "gz.h5"
    _h5py_default_gzip(path, rows)
    with h5py.File(path, "r") as f:
        info = f["mel"].id.get_chunk_info(1)
    data = bytearray(path.read_bytes())
    data[info.byte_offset + info.size // 2] ^= 0xFF
    store.put(bucket, "gz.h5", bytes(data))
    with pytest.raises(gpufeed.CorruptData, match=r"gz\.h5"):
        _by_index(f"s3://{bucket}/gz.h5", rows)


def test_an_object_changed_during_the_job_is_refused_naming_it(tmp_path, store):
    bucket = _bucket(store, "changes")
    rows = np.arange(400_000, dtype="i8")  # 3.2 MB: later reads are not in any page held
    path = tmp_path / "x.npy"
    np.save(path, rows)
    store.put(bucket, "set/x.npy", path.read_bytes())
    loader = gpufeed.Loader(f"s3://{bucket}/set/", batch_size=4096, shuffle=False,
                            device="cpu", workers=1, prefetch=1)
    it = iter(loader)
    next(it)
    np.save(path, rows + 1)
    store.put(bucket, "set/x.npy", path.read_bytes())
    with pytest.raises(gpufeed.CorruptData, match=rf"s3://{bucket}/set/x.npy.*changed"):
        for _ in it:
            pass


def test_a_sqlite_file_in_the_store_loads_as_the_local_one(tmp_path, store):
    import sqlite3
    bucket = _bucket(store, "tables")
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER, x REAL, label INTEGER)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?)",
                       [(i, i * 0.5, i % 7) for i in range(500)])
    store.put(bucket, "db/t.db", path.read_bytes())
    _same(_epoch(f"sqlite:s3://{bucket}/db/t.db?table=t&key=id"),
          _epoch(f"sqlite:{path}?table=t&key=id"))
    with pytest.raises(gpufeed.NotFound, match="absent.db"):
        gpufeed.open(f"sqlite:s3://{bucket}/db/absent.db?table=t")


def test_missing_and_forbidden_data_give_clear_errors(store, monkeypatch):
    bucket = _bucket(store, "errors")
    store.put(bucket, "there.npy", b"x")
    with pytest.raises(gpufeed.NotFound, match="nobucket"):
        gpufeed.open("s3://nobucket/x.npy")
    with pytest.raises(gpufeed.NotFound, match="absent.h5"):
        gpufeed.open(f"s3://{bucket}/absent.h5")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "WRONG")
    gpufeed.set_remote_options(endpoint=store.endpoint, region=store.region)
    with pytest.raises(gpufeed.PermissionDenied, match="SignatureDoesNotMatch"):
        gpufeed.open(f"s3://{bucket}/there.npy")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "WRONG")
    gpufeed.set_remote_options(endpoint=store.endpoint, region=store.region)
    with pytest.raises(gpufeed.PermissionDenied, match="environment"):
        gpufeed.open(f"s3://{bucket}/other.npy")


def test_the_disk_cache_serves_the_second_epoch_without_a_request(tmp_path, store):
    local, remote = _local_and_remote(tmp_path, store, _bucket(store, "disk"))
    code = textwrap.dedent(f"""
        import json, os, sys, urllib.request
        import gpufeed
        def requests():
            with urllib.request.urlopen({store.endpoint!r} + "/__proxy/counts") as r:
                return json.load(r)["requests"]
        loader = gpufeed.Loader({remote + '/plain.h5'!r}, fields=["mel", "label"],
                                batch_size=32, device="cpu", seed=3,
                                cache=gpufeed.Cache("disk", disk_dir={str(tmp_path / 'cache')!r}))
        first = [b["label"].numpy().tolist() for b in loader]
        before = requests()
        second = [b["label"].numpy().tolist() for b in loader]
        print(json.dumps({{"info": loader.cache_info, "requests": requests() - before,
                          "first": sum(len(b) for b in first),
                          "second": sum(len(b) for b in second)}}))
    """)
    env = script_env()
    env.update(store.env())
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["info"]["tier"] == "disk"
    assert out["first"] == out["second"] == 300
    assert out["requests"] == 0
    assert any(os.scandir(tmp_path / "cache"))
    with pytest.raises(gpufeed.InvalidArgument, match="already on disk"):
        gpufeed.Loader(f"{local}/plain.h5", batch_size=8, cache="disk")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_lists_once_and_both_ranks_cover_the_set(tmp_path, store):
    bucket = _bucket(store, "ranks")
    write_numpy_dir(tmp_path / "numpy", make_arrays(samples=150, seed=2))
    store.upload_tree(str(tmp_path / "numpy"), bucket, "train")
    out = tmp_path / "out"
    out.mkdir()
    env = script_env()
    env.update(store.env())
    env["OMP_NUM_THREADS"] = "1"
    store.reset_proxy()
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
         "--redirects", "0:1,1:1", "--tee", "0:1,1:1", "--log_dir", str(tmp_path / "logs"),
         os.path.join(SCRIPTS, "torchrun_remote.py"), f"s3://{bucket}/train/", str(out)],
        env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert store.counts()["listings"] == 1
    seen = []
    counts = []
    for r in range(2):
        with open(out / f"rank{r}.txt") as f:
            batches = [list(map(int, line.split())) for line in f if line.strip()]
        counts.append(len(batches))
        seen += [i for b in batches for i in b]
    assert counts[0] == counts[1]
    assert sorted(seen) == list(range(150))


def test_inspect_reads_a_remote_file_and_advises_block_shuffle(tmp_path, store):
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    local, remote = _local_and_remote(tmp_path, store, _bucket(store, "inspect"))
    env = script_env()
    env.update(store.env())
    proc = subprocess.run([binary, "inspect",
                           f"{remote}/plain.h5"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "/mel: float32 [300, 1, 8, 5]" in proc.stdout
    assert "each random sample is a request to the store" in proc.stdout


def test_a_missing_object_says_what_the_store_answered(store):
    bucket = _bucket(store, "evidence")
    with pytest.raises(FileNotFoundError) as caught:
        gpufeed.Loader(f"s3://{bucket}/nope.h5", batch_size=4, device="cpu")
    head = [a for a in store.answers() if a["method"] == "HEAD" and a["path"].endswith("/nope.h5")]
    message = str(caught.value)
    assert "An error occurred (NoSuchKey) when calling the HeadObject operation" in message
    assert "HTTP 404 Not Found" in message and f"request id {head[-1]['request_id']}" in message
