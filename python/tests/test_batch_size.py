"""gpufeed.suggest_batch_size: the fit on recorded measurements, and what it says without CUDA."""

import numpy as np
import pytest
import torch

import gpufeed

GB = 10**9


def test_fixed_memory_does_not_scale_with_the_batch():
    # Recorded on a 24 GB card: 6 GB of weights + optimizer state + context-free allocations,
    # 10 MB of activations per sample. Scaling all of 7.28 GB with the batch (the old guess)
    # would say batch 128 x 2 -> 256 at most; the fit says far more.
    peaks = {64: 6 * GB + 64 * 10 * 10**6, 128: 6 * GB + 128 * 10 * 10**6}
    s = gpufeed.fit_batch_size(peaks, total_bytes=24 * GB, other_bytes=1 * GB, current=128)
    assert s.fixed_bytes == pytest.approx(6 * GB, rel=1e-6)
    assert s.per_sample_bytes == pytest.approx(10 * 10**6, rel=1e-6)
    # 24 GB * 0.9 - 1 GB other - 6 GB fixed = 14.6 GB / 10 MB = 1460 -> multiple of 8: 1456
    assert s.batch_size == 1456
    assert "about 1456 fits (now 128)" in s.text
    assert "10.00 MB per sample" in s.text and "fixed 6.00 GB" in s.text
    assert "your setting stands" in s.text


def test_the_device_cache_and_other_processes_shrink_the_budget():
    peaks = {32: 2 * GB + 32 * 50 * 10**6, 64: 2 * GB + 64 * 50 * 10**6}
    free_card = gpufeed.fit_batch_size(peaks, 16 * GB, other_bytes=0)
    with_cache = gpufeed.fit_batch_size(peaks, 16 * GB, other_bytes=8 * GB)
    assert with_cache.batch_size < free_card.batch_size
    # 16 * 0.9 - 8 - 2 = 4.4 GB / 50 MB = 88
    assert with_cache.batch_size == 88


def test_noisy_points_are_fitted_by_least_squares():
    rng = np.random.default_rng(0)
    sizes = [16, 32, 64, 128]
    peaks = {b: int(3 * GB + b * 20e6 + rng.normal(0, 5e6)) for b in sizes}
    s = gpufeed.fit_batch_size(peaks, 40 * GB)
    assert s.per_sample_bytes == pytest.approx(20e6, rel=0.01)


def test_a_peak_that_does_not_grow_or_does_not_fit_gives_no_size_and_says_why():
    flat = gpufeed.fit_batch_size({8: GB, 16: GB}, 24 * GB)
    assert flat.batch_size is None and "did not grow" in flat.text
    full = gpufeed.fit_batch_size({8: 30 * GB, 16: 31 * GB}, 24 * GB)
    assert full.batch_size is None and "does not fit" in full.text
    with pytest.raises(ValueError, match="two different batch sizes"):
        gpufeed.fit_batch_size({8: GB}, 24 * GB)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_without_cuda_it_says_it_needs_cuda_and_changes_nothing(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((64, 4), dtype=np.float32))
    loader = gpufeed.Loader(str(tmp_path), batch_size=16, device="cpu")
    calls = []
    s = gpufeed.suggest_batch_size(lambda b: calls.append(b), loader)
    assert s.batch_size is None
    assert "needs CUDA" in s.text
    assert calls == []  # nothing ran
    assert loader.batch_size == 16
