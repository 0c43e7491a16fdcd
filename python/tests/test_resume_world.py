"""A state_dict() saved at one world size resumes at another: the ranks together deliver the
rest of the epoch's global order (no sample twice beyond the padding, none skipped), with equal
batch counts. Ranks are simulated in one process, one loader per rank."""

import collections

import pytest

import gpufeed

SAMPLES = 203  # a prime: no multiple of the batch size or any world size
BATCH = 4
MODES = [dict(shuffle=False), dict(shuffle=True), dict(shuffle=gpufeed.BlockShuffle(5, 2))]


def _loader(rank, world, **mode):
    return gpufeed.Loader(gpufeed.synthetic("x:float32[2]", samples=SAMPLES, seed=4),
                          batch_size=BATCH, seed=8, rank=rank, world_size=world, device="cpu",
                          workers=1, **mode)


def _global_order(**mode):
    mode = dict(mode, drop_last=False)
    with _loader(0, 1, **mode) as one:
        return [int(i) for b in one for i in b.indices]


def _run(world, steps, state=None, **mode):
    """Every rank's batches (their sample indices), and each rank's state after them."""
    batches, states = [], []
    for rank in range(world):
        with _loader(rank, world, **mode) as loader:
            if state is not None:
                loader.load_state_dict(state)
            mine = []
            for batch in loader:
                mine.append([int(i) for i in batch.indices])
                if len(mine) == steps:
                    break
            batches.append(mine)
            states.append(loader.state_dict())
    return batches, states


@pytest.mark.parametrize("mode", MODES, ids=["none", "full", "block"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_world_size_4_resumes_at_2_8_1_and_3(mode, drop_last):
    mode = dict(mode, drop_last=drop_last)
    order = _global_order(**mode)
    first, states = _run(4, 7, **mode)
    consumed = states[0]["global_consumed"]
    assert consumed == 7 * BATCH * 4
    assert {s["global_consumed"] for s in states} == {consumed}
    taken = [i for rank in first for b in rank for i in b]
    assert sorted(taken) == sorted(order[:consumed])

    for world in (2, 8, 1, 3):
        rest, _ = _run(world, None, state=states[world % 4], **mode)
        assert len({len(r) for r in rest}) == 1, f"unequal batch counts at world size {world}"
        got = collections.Counter(i for rank in rest for b in rank for i in b)
        remainder = order[consumed:]
        if drop_last:
            kept = len(remainder) // world // BATCH * BATCH * world
            assert got == collections.Counter(remainder[:kept])
        else:
            padded = -(-len(remainder) // world) * world
            want = collections.Counter(remainder[i % len(remainder)] for i in range(padded))
            assert got == want
            assert padded - len(remainder) < world


def test_states_of_every_rank_must_agree():
    _, states = _run(4, 3)
    resumed = _loader(1, 2)
    resumed.load_state_dict(states)  # all four agree
    assert resumed.state_dict()["global_consumed"] == states[0]["global_consumed"]
    _, later = _run(4, 5)
    with pytest.raises(gpufeed.InvalidArgument, match="different places"):
        resumed.load_state_dict([states[0], later[1]])


def test_a_state_without_its_global_position_keeps_its_world_size():
    _, states = _run(4, 2)
    old = {k: v for k, v in states[0].items() if k != "global_consumed"}
    with pytest.raises(gpufeed.InvalidArgument, match="saved with world_size 4, this loader has 2"):
        _loader(0, 2).load_state_dict(old)
    _loader(0, 4).load_state_dict(old)  # its own world size, as before
    # Every rank's old states: each loader takes its own rank's.
    olds = [{k: v for k, v in s.items() if k != "global_consumed"} for s in states]
    at2 = _loader(2, 4)
    at2.load_state_dict(olds)
    assert at2.state_dict()["batch"] == 2
