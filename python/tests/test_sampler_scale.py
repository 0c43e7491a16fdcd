"""A data set of billions of samples: the plan is computed per batch, never stored, so the
loader opens at once, len() and state_dict() cost nothing per sample, and any part of the
order can be asked for without the rest."""

import resource

import h5py
import numpy as np

import gpufeed
from gpufeed import _gpufeed

SAMPLES = 4_000_000_000


def loader(**options):
    return gpufeed.Loader(gpufeed.synthetic("x:float32", samples=SAMPLES), batch_size=256,
                          seed=5, device="cpu", **options)


def test_four_billion_samples_open_and_run_in_little_memory():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    big = loader(workers=2)
    assert len(big) == (SAMPLES + 255) // 256
    first = []
    for _, batch in zip(range(200), big):
        first.append(batch.indices.numpy().copy())
    indices = np.concatenate(first)
    assert len(np.unique(indices)) == len(indices) == 200 * 256
    assert indices.min() >= 0 and indices.max() < SAMPLES
    # The batches are the sampler's order, which a slice asks for without the rest.
    np.testing.assert_array_equal(
        indices, _gpufeed.epoch_order(SAMPLES, 256, 0, seed=5, start=0, count=len(indices)))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100 * 1024, f"peak RSS grew by {grown_kib} KiB"
    big.close()


def test_resume_mid_epoch_over_four_billion_samples():
    a = loader()
    a.set_epoch(2)
    for _, _batch in zip(range(7), a):
        pass
    state = a.state_dict()
    expected = [batch.indices.numpy().copy() for _, batch in zip(range(5), a)]
    a.close()
    b = loader(workers=1)
    b.load_state_dict(state)
    got = [batch.indices.numpy().copy() for _, batch in zip(range(5), b)]
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(e, g)
    b.close()


def test_epoch_order_slices_agree_with_the_whole_order():
    whole = _gpufeed.epoch_order(1001, 8, 3, seed=1, rank=1, world_size=3)
    assert len(whole) == 334
    for start, count in ((0, 10), (100, 50), (330, 100), (334, 5)):
        np.testing.assert_array_equal(
            _gpufeed.epoch_order(1001, 8, 3, seed=1, rank=1, world_size=3, start=start,
                                 count=count),
            whole[start:start + count])


def test_a_sparse_hdf5_dataset_of_four_billion_rows(tmp_path):
    # Nothing written: libhdf5 allocates no chunk, and every row reads as the fill value.
    path = str(tmp_path / "sparse.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", shape=(SAMPLES,), dtype="f4", chunks=(65536,), fillvalue=1.5)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    big = gpufeed.Loader(path, fields=["x"], batch_size=4096, seed=2, device="cpu")
    assert len(big) == (SAMPLES + 4095) // 4096
    seen = set()
    for _, batch in zip(range(50), big):
        assert bool((batch["x"] == 1.5).all())
        seen.update(batch.indices.tolist())
    assert len(seen) == 50 * 4096
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100 * 1024, f"peak RSS grew by {grown_kib} KiB"
    big.close()
