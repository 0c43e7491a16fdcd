"""`gpufeed bench --json`: both ceilings and the ratio to each, from the same run."""
import json
import os
import re
import subprocess
import sys

import pytest


def test_bench_json_reports_memcpy_and_same_work_ceilings():
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    out = subprocess.run(
        [binary, "bench", "--synthetic", "x:float32[64],label:int64", "--samples", "4000",
         "-b", "256", "-w", "2", "-e", "2", "-d", "cpu", "--json", "-q"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["samples"] == 8000
    for key in ("ceiling_samples_per_s", "same_work_samples_per_s"):
        assert result[key] > 0, key
    # Each ratio is the loader's rate over that ceiling's, whatever the machine's speed.
    assert result["ratio_to_ceiling"] == pytest.approx(
        result["samples_per_s"] / result["ceiling_samples_per_s"], rel=1e-6)
    assert result["ratio_to_same_work"] == pytest.approx(
        result["samples_per_s"] / result["same_work_samples_per_s"], rel=1e-6)
    # Two epochs: the second's rate apart, with its ratios to the same ceilings.
    assert result["later_samples_per_s"] > 0
    assert 0 < result["first_epoch_s"] < result["wall_s"]
    assert result["later_ratio_to_ceiling"] == pytest.approx(
        result["later_samples_per_s"] / result["ceiling_samples_per_s"], rel=1e-6)
    # ... the same work's on warm memory: a synthetic source has no file to open again, so
    # both same-work figures read the loader's own source.
    assert result["same_work_fresh_opening"] is False
    assert result["same_work_warm_samples_per_s"] == result["same_work_samples_per_s"]
    assert result["later_ratio_to_same_work"] == pytest.approx(
        result["later_samples_per_s"] / result["same_work_warm_samples_per_s"], rel=1e-6)
    # Batch memory taken fresh in the run: whole 4 KiB pages, and time spent when any.
    assert result["fresh_batch_memory_bytes"] % 4096 == 0
    assert (result["fresh_batch_memory_s"] > 0) == (result["fresh_batch_memory_bytes"] > 0)


def test_bench_of_a_file_measures_the_same_work_on_a_second_opening(tmp_path):
    # A file: the same work reads it again through a new opening (its own mapping, the first
    # touch paid as the loader's was), and again through the loader's own, warm.
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    np = pytest.importorskip("numpy")
    folder = tmp_path / "set"
    folder.mkdir()
    np.save(folder / "x.npy", np.arange(3000 * 64, dtype=np.float32).reshape(3000, 64))
    np.save(folder / "label.npy", np.arange(3000, dtype=np.int64))
    out = subprocess.run(
        [binary, "bench", str(folder), "-b", "128", "-w", "2", "-e", "2", "-d", "cpu", "--json",
         "-q"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["same_work_fresh_opening"] is True
    assert result["cache"] == ""  # none asked for
    assert result["same_work_samples_per_s"] > 0
    assert result["same_work_warm_samples_per_s"] > 0
    assert result["ratio_to_same_work"] == pytest.approx(
        result["samples_per_s"] / result["same_work_samples_per_s"], rel=1e-6)
    assert result["later_ratio_to_same_work"] == pytest.approx(
        result["later_samples_per_s"] / result["same_work_warm_samples_per_s"], rel=1e-6)
    # A RAM copy is this process's own memory: the same work reads the loader's source.
    ram = subprocess.run(
        [binary, "bench", str(folder), "-b", "128", "-w", "2", "-e", "2", "-d", "cpu", "--json",
         "-q", "--cache", "ram"],
        capture_output=True, text=True, timeout=120)
    assert ram.returncode == 0, ram.stderr
    ram_result = json.loads(ram.stdout)
    assert ram_result["cache"].startswith("ram ("), ram_result["cache"]
    assert ram_result["same_work_fresh_opening"] is False
    text = subprocess.run(
        [binary, "bench", str(folder), "-b", "128", "-w", "2", "-e", "2", "-d", "cpu", "-q"],
        capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "from a new opening of the source" in text.stdout
    assert "of the same work on warm memory" in text.stdout


def test_bench_text_gives_the_rate_of_its_first_touch():
    # A new process's batch buffers (here 2048 x 8 KB, from the process-wide pool) are fresh
    # memory; the line gives its rate, which tells the kernel's zeroing (memset speed) from a
    # VM's host backing fresh memory (well under 1 GB/s).
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    out = subprocess.run(
        [binary, "bench", "--synthetic", "mel:float32[1,64,32],label:int64", "--samples",
         "20000", "-b", "2048", "-w", "2", "-e", "1", "-d", "cpu", "-q"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert re.search(r"first touch \S+ \S+ of fresh batch memory faulted in, [0-9.]+ "
                     r"worker-seconds \([0-9.,]+ [kKMGT]?B/s: the kernel zeroes each page",
                     out.stdout), out.stdout


def test_demo_runs_for_its_seconds_and_reports_the_verdict_as_json(tmp_path):
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    out = subprocess.run(
        [binary, "demo", "--path", str(tmp_path / "demo.h5"), "--samples", "3000", "-b", "128",
         "--seconds", "1.5", "--step-ms", "2", "-d", "cpu", "--json", "--no-baseline"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # stdout holds the JSON alone; the narration is on stderr
    assert "Summary" in out.stderr and "Doctor:" in out.stderr
    # Whole epochs until 1.5 s had passed: more than one epoch of 24 batches of ~2 ms.
    assert result["epochs"] > 1
    assert result["samples"] == result["epochs"] * 3000
    assert result["wall_s"] >= 1.5
    assert result["verdict"] == result["doctor"]["verdict"]
    assert result["stage"] == result["doctor"]["stage"]
    assert result["verdict"] in ("healthy", "input-bound", "cpu-starved", "host-bound",
                                 "memory-pressure", "measuring")
    assert result["doctor"]["batches"] >= 16
    # A file just written sits in the page cache: whatever the verdict, never storage.
    assert "wait on storage" not in result["doctor"]["headline"]
    assert "faster storage" not in " ".join(result["doctor"]["advice"])
    # The set is HDF5 in h5py's chunks=True layout: the first run made it, a second finds it.
    assert result["data_set"] == {"path": str(tmp_path / "demo.h5"), "format": "hdf5"}
    assert "dataloader_baseline" not in result
    # The chunk shapes h5py itself picks with chunks=True, and the same values as the NumPy set.
    h5py = pytest.importorskip("h5py")
    from h5py._hl.filters import guess_chunk
    with h5py.File(tmp_path / "demo.h5", "r") as f:
        for name in ("mel", "label"):
            d = f[name]
            assert d.chunks == guess_chunk(d.shape, None, d.dtype.itemsize), name
            assert d.compression is None
        assert f["mel"].shape == (3000, 1, 64, 32) and f["label"].dtype == "int64"
    again = subprocess.run(
        [binary, "demo", "--path", str(tmp_path / "demo.h5"), "--samples", "3000", "-b", "128",
         "--seconds", "0", "-e", "1", "--step-ms", "2", "-d", "cpu", "--json", "--no-baseline"],
        capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "found it from an earlier run" in again.stderr
    assert "chunks of [" in again.stderr


def test_demo_shows_the_dataloader_over_h5py_beside_gpufeed(tmp_path):
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    env = dict(os.environ, GPUFEED_PYTHON=sys.executable)  # this interpreter has torch, h5py
    out = subprocess.run(
        [binary, "demo", "--path", str(tmp_path / "demo.h5"), "--samples", "2000", "-b", "256",
         "--seconds", "0.5", "--baseline-seconds", "0.5", "--step-ms", "1", "-d", "cpu",
         "--json"],
        capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    base = result["dataloader_baseline"]
    assert base["ran"], base
    assert base["python"] == sys.executable
    assert base["samples"] >= 256  # at least one whole batch
    assert base["samples_per_s"] > 0
    assert result["speedup_over_dataloader"] == pytest.approx(
        result["samples_per_s"] / base["samples_per_s"], rel=1e-6)
    assert "Side by side" in out.stderr and "DataLoader + h5py, 2 workers" in out.stderr
    # A Python without torch: the demo says so and shows gpufeed alone.
    env["GPUFEED_PYTHON"] = "/nonexistent/python3"
    alone = subprocess.run(
        [binary, "demo", "--path", str(tmp_path / "demo.h5"), "--samples", "2000", "-b", "256",
         "--seconds", "0", "-e", "1", "-d", "cpu", "--json"],
        capture_output=True, text=True, timeout=120, env=env)
    assert alone.returncode == 0, alone.stderr
    skipped = json.loads(alone.stdout)["dataloader_baseline"]
    assert not skipped["ran"] and "/nonexistent/python3" in skipped["why_not"]
    assert "skipped:" in alone.stderr
