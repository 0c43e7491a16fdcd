"""Batches: the C++ sampler's plan, every sample once, values equal to the source's."""

import numpy as np
import pytest
import torch

import gpufeed
from conftest import collect
from gpufeed import _gpufeed


def test_batches_follow_the_cpp_sampler_plan_and_hold_the_source_rows(numpy_dir, arrays):
    loader = gpufeed.Loader(numpy_dir, batch_size=16, seed=7, device="cpu")
    n = len(arrays["label"])
    for epoch in range(2):
        loader.set_epoch(epoch)
        order = _gpufeed.epoch_order(n, 16, epoch, seed=7)
        batches = collect(loader)
        assert len(batches) == len(loader) == 7
        np.testing.assert_array_equal(np.concatenate([i for i, _ in batches]), order)
        for b, (indices, fields) in enumerate(batches):
            np.testing.assert_array_equal(indices, order[b * 16:(b + 1) * 16])
            for name in arrays:
                np.testing.assert_array_equal(fields[name], arrays[name][indices])


def test_same_seed_same_batches_whatever_the_workers(numpy_dir):
    a = collect(gpufeed.Loader(numpy_dir, batch_size=10, seed=3, workers=1, device="cpu"))
    b = collect(gpufeed.Loader(numpy_dir, batch_size=10, seed=3, workers=3, prefetch=1,
                               device="cpu"))
    c = collect(gpufeed.Loader(numpy_dir, batch_size=10, seed=4, device="cpu"))
    assert len(a) == len(b)
    for (ia, fa), (ib, fb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        for name in fa:
            np.testing.assert_array_equal(fa[name], fb[name])
    assert not np.array_equal(np.concatenate([i for i, _ in a]), np.concatenate([i for i, _ in c]))


@pytest.mark.parametrize("drop_last", [False, True])
def test_every_sample_exactly_once_per_epoch(drop_last):
    source = gpufeed.synthetic("x:float32[3],y:int32[]", samples=1000, seed=5)
    loader = gpufeed.Loader(source, batch_size=64, drop_last=drop_last, device="cpu")
    orders = []
    for epoch in range(3):
        seen = np.concatenate([b.indices.numpy() for b in loader])
        expected = 960 if drop_last else 1000
        assert len(seen) == expected
        assert len(np.unique(seen)) == expected
        orders.append(seen)
        assert loader.epoch == epoch + 1
    assert not np.array_equal(orders[0], orders[1])  # each epoch reshuffles


def test_unshuffled_order_and_short_last_batch():
    loader = gpufeed.Loader(gpufeed.synthetic("x:int64[]", samples=10), batch_size=4,
                            shuffle=False, device="cpu")
    sizes = [(b.indices.tolist(), b.index) for b in loader]
    assert sizes == [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 1), ([8, 9], 2)]


def test_synthetic_values_match_the_cpp_definition():
    source = gpufeed.synthetic("mel:float32[2,3],label:int64[]", samples=50, seed=11)
    loader = gpufeed.Loader(source, batch_size=8, seed=1, device="cpu")
    batch = next(iter(loader))
    mel, label = batch["mel"], batch["label"]
    assert mel.shape == (8, 2, 3) and mel.dtype == torch.float32
    for row, sample in enumerate(batch.indices.tolist()):
        for element in range(6):
            want = _gpufeed.synthetic_value(11, 0, sample, element, "float32")
            assert mel[row].flatten()[element].item() == pytest.approx(want, rel=1e-6)
        assert label[row].item() == int(_gpufeed.synthetic_value(11, 1, sample, 0, "int64"))


def test_set_epoch_picks_the_epoch_and_len_counts_batches():
    source = gpufeed.synthetic("x:int32[]", samples=30)
    loader = gpufeed.Loader(source, batch_size=7, seed=2, device="cpu")
    assert len(loader) == 5 and loader.samples_per_epoch == 30
    loader.set_epoch(4)
    first = next(iter(loader))
    assert first.epoch == 4 and first.index == 0
    np.testing.assert_array_equal(first.indices.numpy(), _gpufeed.epoch_order(30, 7, 4, seed=2)[:7])


def test_rank_and_world_size_shard_the_plan():
    source = gpufeed.synthetic("x:int32[]", samples=101)
    shards = []
    for rank in range(3):
        loader = gpufeed.Loader(source, batch_size=8, rank=rank, world_size=3, seed=9,
                                device="cpu")
        shards.append(np.concatenate([b.indices.numpy() for b in loader]))
        np.testing.assert_array_equal(
            shards[-1], _gpufeed.epoch_order(101, 8, 0, seed=9, rank=rank, world_size=3))
    # Padded as DistributedSampler pads: 34 samples per rank, one sample seen twice.
    assert [len(s) for s in shards] == [34, 34, 34]
    together = np.concatenate(shards)
    assert len(together) == 102 and len(np.unique(together)) == 101


def test_rank_and_world_size_come_from_the_torchrun_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = gpufeed.Loader(gpufeed.synthetic("x:int32[]", samples=20), batch_size=4,
                            shuffle=False, device="cpu")
    assert loader.state_dict()["rank"] == 1 and loader.state_dict()["world_size"] == 2
    seen = np.concatenate([b.indices.numpy() for b in loader])
    np.testing.assert_array_equal(seen, np.arange(1, 20, 2))


def test_transforms_change_the_tensors(numpy_dir, arrays):
    loader = gpufeed.Loader(numpy_dir, batch_size=16, device="cpu",
                            transforms=["cast:mel:float16", "normalize:weight:0.5:0.25"])
    assert dict((n, d) for n, d, _ in loader.schema)["mel"] == "float16"
    batch = next(iter(loader))
    assert batch["mel"].dtype == torch.float16
    rows = batch.indices.numpy()
    np.testing.assert_allclose(batch["mel"].float().numpy(), arrays["mel"][rows], rtol=1e-3,
                               atol=1e-3)
    want = (arrays["weight"][rows].astype(np.float32) - 0.5) / 0.25
    np.testing.assert_allclose(batch["weight"].float().numpy(), want, rtol=1e-2, atol=1e-2)


def test_stats_count_what_was_delivered():
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[16]", samples=100), batch_size=10,
                            workers=2, prefetch=3, device="cpu", autotune=False)
    for batch in loader:
        pass
    del batch
    stats = loader.stats()
    assert stats["batches"] == 10 and stats["samples"] == 100
    assert stats["bytes"] == 100 * 16 * 4
    assert stats["workers"] == 2 and stats["prefetch"] == 3 and stats["device"] == "cpu"
    assert 0.0 <= stats["consumer_wait_fraction"] <= 1.0
    assert stats["held_batches"] == 0


def test_tqdm_shows_throughput(capsys):
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[4]", samples=64), batch_size=8,
                            device="cpu")
    count = sum(1 for _ in gpufeed.tqdm(loader, interval=0.0, mininterval=0))
    assert count == 8
    err = capsys.readouterr().err
    assert "8/8" in err and "samples/s" in err and "wait" in err
