"""Batch buffers live as long as their tensors; kept batches never get recycled silently."""

import gc
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import gpufeed
from conftest import SCRIPTS, script_env
from gpufeed import _gpufeed


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_a_kept_tensor_stays_valid_while_later_batches_come():
    source = gpufeed.synthetic("mel:float32[32],label:int64[]", samples=400, seed=2)
    loader = gpufeed.Loader(source, batch_size=10, workers=2, prefetch=2, device="cpu")
    it = iter(loader)
    first = next(it)
    kept_mel, kept_label = first["mel"], first["label"]
    want_mel, want_label = kept_mel.clone(), kept_label.clone()
    del first
    for epoch in range(3):  # 120 batches: every other buffer of the pool is reused many times
        for batch in it:
            batch["mel"].add_(1.0)  # scribble on the recycled buffers
        it = iter(loader)
    assert torch.equal(kept_mel, want_mel) and torch.equal(kept_label, want_label)


def test_the_buffer_is_held_until_the_last_tensor_is_freed():
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[4],y:int64[]", samples=20),
                            batch_size=5, device="cpu")
    batch = next(iter(loader))
    assert loader.stats()["held_batches"] == 1
    y = batch["y"]
    del batch
    gc.collect()
    assert loader.stats()["held_batches"] == 1
    del y
    assert loader.stats()["held_batches"] == 0


def test_holding_past_the_budget_raises_instead_of_reusing():
    # Buffers of 512 bytes; 2 workers + 2 prefetch + 2 held fill the 3 KiB budget exactly,
    # so a third held batch cannot grow the pool.
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[8]", samples=100), batch_size=10,
                            device="cpu", workers=2, prefetch=2,
                            held=gpufeed.Held(max_outstanding=2, budget_bytes=3 * 1024))
    it = iter(loader)
    kept = [next(it), next(it)]
    with pytest.raises(gpufeed.InvalidArgument,
                       match="2 batches are still referenced, and one more host batch buffer"):
        next(it)
    kept.pop(0)
    batch = next(it)  # released one: the loader goes on, in order
    assert batch.index == 2
    loader2 = gpufeed.Loader(gpufeed.synthetic("x:float32[8]", samples=100), batch_size=10,
                             held=5, device="cpu")
    assert len([b for _, b in zip(range(5), loader2)]) == 5


def test_tensors_outlive_their_loader():
    source = gpufeed.synthetic("x:float64[6]", samples=30, seed=4)
    loader = gpufeed.Loader(source, batch_size=7, device="cpu")
    batch = next(iter(loader))
    x = batch["x"]
    want = x.clone()
    loader.close()
    del loader, batch
    gc.collect()
    np.testing.assert_array_equal(x.numpy(), want.numpy())
    assert float(x.sum()) == float(want.sum())


def test_memory_source_reads_in_place_and_keeps_the_arrays_alive():
    mel = np.arange(60, dtype=np.float32).reshape(20, 3)
    labels = torch.arange(20, dtype=torch.int64) * 10
    halves = torch.arange(20, dtype=torch.float32).to(torch.bfloat16).reshape(20, 1)
    loader = gpufeed.Loader({"mel": mel, "label": labels, "half": halves}, batch_size=4,
                            shuffle=False, device="cpu", held=6)
    # Zero-copy: the source reads the arrays where they are.
    identity = loader.source.identity()
    assert f"{mel.ctypes.data:x}" in identity and f"{labels.data_ptr():x}" in identity
    want_mel = mel.copy()
    del mel, labels, halves
    gc.collect()
    batches = list(loader)
    got_mel = torch.cat([b["mel"] for b in batches]).numpy()
    np.testing.assert_array_equal(got_mel, want_mel)
    assert torch.equal(torch.cat([b["label"] for b in batches]), torch.arange(20) * 10)
    half = torch.cat([b["half"] for b in batches])
    assert half.dtype == torch.bfloat16 and torch.equal(half.float().flatten(), torch.arange(20.0))


def test_memory_source_takes_non_contiguous_and_foreign_byte_order_arrays():
    base = np.arange(40, dtype=">i4").reshape(10, 4)
    loader = gpufeed.Loader({"a": base[:, ::2], "b": torch.arange(10).reshape(10, 1).t().t()},
                            batch_size=10, shuffle=False, device="cpu")
    batch = next(iter(loader))
    np.testing.assert_array_equal(batch["a"].numpy(), base[:, ::2].astype(np.int32))
    with pytest.raises(gpufeed.InvalidArgument, match="scalar"):
        gpufeed.Loader({"s": np.float32(1.0)}, batch_size=1)


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's quarantine holds freed memory")
def test_rss_is_stable_over_a_thousand_iterations():
    source = gpufeed.synthetic("mel:float32[1,16,16],label:int64[]", samples=64 * 50)
    loader = gpufeed.Loader(source, batch_size=64, workers=2, device="cpu")
    it = iter(loader)

    def run(batches):
        nonlocal it
        done = 0
        while done < batches:
            for batch in it:
                batch["mel"].sum()
                done += 1
                if done == batches:
                    return
            it = iter(loader)

    run(200)  # warm up: pools, torch's allocator, interned objects
    gc.collect()
    before = _rss_bytes()
    run(1000)
    gc.collect()
    grown = _rss_bytes() - before
    # A leaked batch would be 64 KiB (1,000 of them: 64 MiB); a leaked capsule or handle
    # ~200 bytes each.
    assert grown < 2 * 1024 * 1024, f"RSS grew by {grown} bytes over 1,000 batches"
    assert loader.stats()["held_batches"] <= 1


def test_release_memory_frees_the_batch_buffers_closed_loaders_left():
    # 4 MiB batches: pooled blocks, kept for the next loader once this one is closed.
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[1024]", samples=4096), batch_size=1024,
                            workers=1, prefetch=1, device="cpu")
    assert sum(len(b["x"]) for b in loader) == 4096
    loader.close()
    del loader
    gc.collect()
    freed = gpufeed.release_memory()
    assert freed["host_bytes"] >= 2 * 1024 * 1024 * 4, freed
    assert gpufeed.release_memory() == {"host_bytes": 0, "pinned_bytes": 0}


def test_release_memory_unpins_the_staging_buffers_a_closed_cuda_loader_left():
    build = pathlib.Path(_gpufeed.__file__).parents[2]
    fake = build / "tests" / "device" / "fake_cuda" / "libcuda.so.1"
    if not fake.exists():
        pytest.skip("the fake libcuda.so.1 is not built")
    env = script_env()
    env["GPUFEED_CUDA_LIBRARY"] = str(fake)
    env.pop("LOCAL_RANK", None)
    env.pop("GPUFEED_PINNED_POOL_BYTES", None)
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "cuda_pinned_pool.py"),
                           str(fake)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr
