"""The package on a real GPU: batches on cuda equal the host's, value by value.

Runs where torch has CUDA and a driver is present (skipped elsewhere, and under the fake
driver of the test tree, whose tests are in test_dlpack.py).
"""

import os
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import torch

import gpufeed
from conftest import script_env, write_numpy_dir

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or "fake" in os.environ.get("GPUFEED_CUDA_LIBRARY", ""),
    reason="needs a real GPU and a torch with CUDA")


def _arrays(samples=5000):
    rng = np.random.default_rng(17)
    return {
        "mel": rng.standard_normal((samples, 1, 16, 8), dtype=np.float32),
        "label": rng.integers(0, 1000, size=samples, dtype=np.int64),
        "weight": rng.random(samples).astype(np.float16),
    }


def _epochs(loader, epochs):
    """Every batch of `epochs` epochs, copied to host memory right away."""
    out = []
    for _ in range(epochs):
        for batch in loader:
            out.append((batch.indices.cpu().numpy().copy(),
                        {name: (tensor.device.type, tensor.cpu().numpy().copy())
                         for name, tensor in batch.items()}))
    return out


def _check_against(arrays, batches, device_type):
    seen = 0
    for indices, fields in batches:
        seen += len(indices)
        for name, (where, values) in fields.items():
            assert where == device_type, f"{name} arrived on {where}"
            np.testing.assert_array_equal(values, arrays[name][indices], err_msg=name)
    return seen


@pytest.mark.parametrize("cache", [None, "ram", "device"])
def test_cuda_batches_equal_the_arrays(tmp_path, cache):
    arrays = _arrays()
    folder = write_numpy_dir(tmp_path / "set", arrays)
    loader = gpufeed.Loader(folder, batch_size=256, shuffle=True, seed=5, workers=3,
                            device="cuda", cache=cache)
    seen = _check_against(arrays, _epochs(loader, 3), "cuda")
    assert seen == 3 * len(arrays["label"])


def test_hdf5_gzip_chunks_to_cuda_equal_h5py(tmp_path):
    arrays = _arrays(3000)
    path = str(tmp_path / "set.h5")
    with h5py.File(path, "w") as f:
        for name, values in arrays.items():
            f.create_dataset(name, data=values, chunks=True, compression="gzip", shuffle=True)
    with h5py.File(path, "r") as f:
        reference = {name: f[name][()] for name in arrays}
    loader = gpufeed.Loader(path, batch_size=128, shuffle=True, seed=9, device="cuda")
    assert _check_against(reference, _epochs(loader, 2), "cuda") == 2 * 3000


def test_a_batch_is_ready_for_work_on_the_current_stream():
    # Many small batches, each copied at once by a kernel on a side stream: a batch whose
    # transfer were not ordered before that stream's work would show stale or partial rows.
    source = gpufeed.synthetic("x:float32[4096]", samples=20000, seed=3)
    host = {int(b.indices[0]): b["x"].clone() for b in
            gpufeed.Loader(source, batch_size=100, shuffle=False, device="cpu")}
    stream = torch.cuda.Stream()
    loader = gpufeed.Loader(source, batch_size=100, shuffle=False, device="cuda", prefetch=8)
    with torch.cuda.stream(stream):
        copies = [(int(b.indices[0]), b["x"].clone()) for b in loader]
    torch.cuda.synchronize()
    assert len(copies) == 200
    for first, rows in copies:
        assert rows.is_cuda
        assert torch.equal(rows.cpu(), host[first])


def test_group_reducer_votes_on_cuda(tmp_path):
    rng = np.random.default_rng(4)
    counts = rng.integers(1, 25, size=300)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = int(offsets[-1])
    data = {"x": rng.standard_normal((rows, 8), dtype=np.float32),
            "row": np.arange(rows, dtype=np.int64), "file_offsets": offsets}
    path = str(tmp_path / "groups.h5")
    with h5py.File(path, "w") as f:
        for name, values in data.items():
            f.create_dataset(name, data=values)
    labels = torch.from_numpy(rng.integers(0, 5, size=rows)).cuda()
    loader = gpufeed.Loader(path, ["x", "row"], batch_size=96, device="cuda", shuffle=True,
                            seed=2, groups=gpufeed.Groups(offsets="file_offsets"))
    votes = gpufeed.GroupReducer(loader.num_groups, how="vote", num_classes=5, device="cuda")
    for batch in loader:
        assert batch["x"].is_cuda
        votes.update(labels[batch["row"]], batch)
    result = votes.result().cpu()
    host = labels.cpu()
    expected = torch.stack([torch.bincount(host[offsets[g]:offsets[g + 1]], minlength=5).argmax()
                            for g in range(len(counts))])
    assert torch.equal(result, expected)


def test_events_measure_the_gpu_busy_share():
    source = gpufeed.synthetic("x:float32[1024]", samples=8192, seed=1)
    loader = gpufeed.Loader(source, batch_size=256, device="cuda")
    for _ in range(3):
        for batch in loader:
            (batch["x"] @ batch["x"].T).sum().item()
    found = loader.diagnose()
    assert found["gpu_measure"], found
    assert found["gpu_busy_fraction"] is not None and 0 < found["gpu_busy_fraction"] <= 1, found


def test_the_monitor_reads_this_gpu_through_nvml():
    x = torch.randn(4096, 4096, device="cuda")
    with gpufeed.Monitor(interval=0.1) as monitor:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            (x @ x).sum().item()
        time.sleep(0.3)
    assert "NVML: " in monitor.nvml_status and "GPU" in monitor.nvml_status, monitor.nvml_status
    gpu = monitor.snapshot()["gpus"][0]
    assert gpu["memory_total_bytes"] and gpu["memory_used_bytes"], gpu
    busy = [s["gpus"][0]["utilization_ratio"] for s in monitor.history()]
    assert any(b is not None and b > 0 for b in busy), busy
    assert "VRAM n/a" not in monitor.line() and "GPU n/a" not in monitor.line(), monitor.line()


def test_the_device_copy_is_shared_with_another_process(tmp_path):
    arrays = _arrays(2000)
    folder = write_numpy_dir(tmp_path / "set", arrays)
    owner = gpufeed.Loader(folder, batch_size=100, shuffle=False, device="cuda", cache="device")
    assert torch.equal(next(iter(owner))["label"].cpu(), torch.from_numpy(arrays["label"][:100]))
    code = ("import sys, gpufeed\n"
            "loader = gpufeed.Loader(sys.argv[1], batch_size=100, shuffle=False, device='cuda',"
            " cache='device')\n"
            "print(sum(int(b['label'].sum()) for b in loader))\n")
    env = script_env()
    proc = subprocess.run([sys.executable, "-c", code, folder], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "imported the copy process" in proc.stderr, proc.stderr
    assert int(proc.stdout) == int(arrays["label"].sum())
    owner.close()
