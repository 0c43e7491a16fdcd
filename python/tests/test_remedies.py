"""The loader takes the doctor's safe remedies by default: a loop waiting on reads gets its
data set copied into RAM while it runs, with the same batches in the same order."""
import h5py
import numpy as np
import pytest

import gpufeed


def _epoch_signature(loader):
    """Each batch's sum and first column: equal signatures, equal batches in equal order."""
    return [(b["x"].double().sum().item(), b["x"][:, 0].tolist()) for b in loader]


@pytest.fixture
def slow_file(tmp_path):
    # Every sample spans 256 gzip chunks and no decoded chunk is kept: reads are the bound.
    path = tmp_path / "slow.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.random.default_rng(0).random((1000, 4096), dtype=np.float32),
                         chunks=(1, 16), compression="gzip")
    return str(path)


def _loader(path, **options):
    return gpufeed.Loader(path, batch_size=16, workers=1, device="cpu", seed=3,
                          cache=gpufeed.Cache(chunk_cache=0), **options)


def test_read_bound_loader_copies_its_set_and_keeps_every_batch(slow_file):
    # One worker at most, so that reads stay the bound on a machine of any CPU count (more
    # workers would end the wait before the doctor judges).
    healed = _loader(slow_file, autotune=gpufeed.Autotune(max_workers=1))
    plain = _loader(slow_file, autotune=False)
    # The doctor judges after a second of the loop's time: a few epochs of this file.
    for _ in range(40):
        assert _epoch_signature(healed) == _epoch_signature(plain)
        if healed.stats()["actions"]:
            break
    actions = healed.stats()["actions"]
    assert len(actions) == 1, actions
    assert "the loop waited" in actions[0] and "building a RAM copy" in actions[0]
    # Epochs after the switch read the copy, and still give the same batches.
    for _ in range(2):
        assert _epoch_signature(healed) == _epoch_signature(plain)
    assert plain.stats()["actions"] == []
    report = healed.diagnose()
    assert report["actions"] == actions
    assert "What the loader did by itself:\n  - " + actions[0] in report["text"]


def test_autotune_false_keeps_the_loader_as_given(slow_file):
    loader = _loader(slow_file, autotune=False)
    for _ in range(3):
        _epoch_signature(loader)
    stats = loader.stats()
    assert stats["actions"] == [] and stats["tuning_log"] == [] and stats["workers"] == 1
