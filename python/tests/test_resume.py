"""state_dict / load_state_dict resume exactly where the loader stood."""

import json

import numpy as np
import pytest

import gpufeed
from conftest import collect


def _source():
    return gpufeed.synthetic("mel:float32[4,4],label:int64[]", samples=250, seed=1)


def test_resume_mid_epoch_gives_exactly_the_remaining_batches():
    reference = gpufeed.Loader(_source(), batch_size=16, seed=21, device="cpu")
    reference.set_epoch(2)
    full = collect(reference)

    first = gpufeed.Loader(_source(), batch_size=16, seed=21, device="cpu")
    first.set_epoch(2)
    it = iter(first)
    for _ in range(6):
        next(it)
    state = first.state_dict()
    assert state["epoch"] == 2 and state["batch"] == 6
    saved = json.loads(json.dumps(state))  # survives a checkpoint file
    first.close()

    resumed = gpufeed.Loader(_source(), batch_size=16, seed=21, device="cpu")
    resumed.load_state_dict(saved)
    rest = collect(resumed)
    assert len(rest) == len(full) - 6
    for (ia, fa), (ib, fb) in zip(rest, full[6:]):
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(fa["mel"], fb["mel"])
    # And the epoch after goes on as it would have.
    after = collect(resumed)
    reference_after = collect(reference)
    np.testing.assert_array_equal(after[0][0], reference_after[0][0])


def test_restore_in_the_same_loader_rewinds():
    loader = gpufeed.Loader(_source(), batch_size=50, seed=3, device="cpu")
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    second = next(it)
    third = next(it)
    want = (second.indices.clone(), third.indices.clone())
    del it, second, third
    loader.load_state_dict(state)
    again = [b.indices for _, b in zip(range(2), loader)]
    assert all((a == b).all() for a, b in zip(again, want))


def test_state_from_another_seed_is_refused_with_a_message():
    loader = gpufeed.Loader(_source(), batch_size=16, seed=1, device="cpu")
    state = loader.state_dict()
    other = gpufeed.Loader(_source(), batch_size=16, seed=2, device="cpu")
    with pytest.raises(gpufeed.InvalidArgument, match="saved with seed 1, this loader has 2"):
        other.load_state_dict(state)
    with pytest.raises(gpufeed.InvalidArgument, match="malformed loader state"):
        other.load_state_dict({"epoch": 0})


def test_states_carry_a_format_version_and_a_later_one_is_refused():
    loader = gpufeed.Loader(_source(), batch_size=16, seed=1, device="cpu")
    state = loader.state_dict()
    assert state["version"] == 2
    older = {k: v for k, v in state.items() if k != "version"}  # format 1: read as it was
    loader.load_state_dict(older)
    with pytest.raises(gpufeed.InvalidArgument, match="format version 3, which this gpufeed"):
        loader.load_state_dict(dict(state, version=3))
