"""Variable-length fields through the Loader: padded and packed batches of ragged data, checked
against the arrays they come from, with resume."""

import numpy as np
import pytest
import torch

import gpufeed


def corpus(samples=500, seed=0, median=40):
    rng = np.random.default_rng(seed)
    lengths = np.maximum(0, rng.lognormal(np.log(median), 0.8, samples).astype(np.int64))
    lengths[7] = 0  # an empty sample
    offsets = np.zeros(samples + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(1, 50_000, size=offsets[-1], dtype=np.int32)
    return values, offsets


def all_batches(loader):
    return [{k: v.clone() for k, v in batch.items()} for batch in loader]


def test_padded_batches_hold_each_sample_and_its_length():
    values, offsets = corpus(100)
    labels = np.arange(100, dtype=np.int64)
    loader = gpufeed.Loader({"tokens": gpufeed.ragged(values, offsets), "label": labels},
                            batch_size=16, shuffle=False, device="cpu",
                            sequences=gpufeed.Pad(64, pad_value=-1))
    assert ("tokens", "int32", (64,)) in loader.schema
    assert ("tokens_lengths", "int64", ()) in loader.schema
    for batch in loader:
        for row, label in enumerate(batch["label"].tolist()):
            sample = values[offsets[label]:offsets[label + 1]][:64]
            n = int(batch["tokens_lengths"][row])
            assert n == len(sample)
            assert batch["tokens"][row, :n].tolist() == sample.tolist()
            assert (batch["tokens"][row, n:] == -1).all()
    padding = loader.stats()["source"]
    kept = np.minimum(np.diff(offsets), 64).sum()
    assert padding["varlen_items"] == kept
    assert padding["varlen_pad_items"] == 100 * 64 - kept
    assert padding["varlen_truncated_items"] == np.diff(offsets).sum() - kept
    assert padding["varlen_padding_share"] == pytest.approx(1 - kept / (100 * 64))
    loader.close()


def test_left_truncation_keeps_the_last_items():
    values, offsets = corpus(20, median=100)
    loader = gpufeed.Loader({"tokens": gpufeed.ragged(values, offsets)}, batch_size=20,
                            shuffle=False, device="cpu",
                            sequences=gpufeed.Pad(8, truncation="left"))
    batch = next(iter(loader))
    for i in range(20):
        sample = values[offsets[i]:offsets[i + 1]]
        n = min(8, len(sample))
        assert batch["tokens"][i, :n].tolist() == sample[len(sample) - n:].tolist()
    loader.close()


@pytest.mark.parametrize("shuffle", [False, True])
def test_packed_epoch_holds_every_token_exactly_once(shuffle):
    values, offsets = corpus(400)
    loader = gpufeed.Loader({"tokens": gpufeed.ragged(values, offsets)}, batch_size=4,
                            shuffle=shuffle, seed=3, device="cpu", drop_last=False, pad=False,
                            sequences=gpufeed.Pack(128))
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        tokens = []
        pieces = []
        for batch in loader:
            real = batch["tokens_lengths"]
            for row in range(batch["tokens"].shape[0]):
                n = int(real[row])
                tokens.extend(batch["tokens"][row, :n].tolist())
                positions = batch["tokens_position_ids"][row, :n]
                documents = batch["tokens_document_ids"][row, :n]
                # positions count up from 0 within each piece of a sample
                for d in documents.unique().tolist():
                    assert positions[documents == d].tolist() == list(
                        range(int((documents == d).sum())))
                assert (batch["tokens_document_ids"][row, n:] == -1).all()
            pieces.append(gpufeed.cu_seqlens(batch, "tokens"))
        assert sorted(tokens) == sorted(values.tolist())
        if not shuffle:
            assert tokens == values.tolist()
        epochs.append(tokens)
    assert (epochs[0] != epochs[1]) == shuffle
    loader.close()


def test_cu_seqlens_marks_pieces_and_padding():
    values = np.arange(1, 11, dtype=np.int32)
    offsets = np.array([0, 3, 10], dtype=np.int64)
    loader = gpufeed.Loader({"tokens": gpufeed.ragged(values, offsets)}, batch_size=2,
                            shuffle=False, device="cpu", sequences=gpufeed.Pack(6))
    batch = next(iter(loader))
    # row 0: sample 0 (3) + 3 of sample 1; row 1: 4 of sample 1, then 2 of padding
    assert batch["tokens"].tolist() == [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 0, 0]]
    assert gpufeed.cu_seqlens(batch, "tokens").tolist() == [0, 3, 6, 10, 12]
    loader.close()


def test_packed_batches_resume_exactly_mid_epoch():
    values, offsets = corpus(300)
    make = lambda: gpufeed.Loader({"tokens": gpufeed.ragged(values, offsets)},  # noqa: E731
                                  batch_size=3, shuffle=True, seed=11, device="cpu",
                                  sequences=gpufeed.Pack(64, eos=0))
    first = make()
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    rest = [b["tokens"].clone() for b in it]
    first.close()
    second = make()
    second.load_state_dict(state)
    again = [b["tokens"].clone() for b in second]
    second.close()
    assert len(rest) == len(again) > 0
    for a, b in zip(rest, again):
        assert torch.equal(a, b)


def test_whole_samples_pack_with_a_high_fill():
    values, offsets = corpus(2000, median=300)
    loader = gpufeed.Loader({"tokens": gpufeed.ragged(values, offsets)}, batch_size=8,
                            device="cpu", sequences=gpufeed.Pack(2048, split=False))
    padding = loader.stats()["source"]
    assert padding["varlen_padding_share"] <= 0.05
    seen = 0
    for batch in loader:
        seen += int(batch["tokens_lengths"].sum())
    assert seen >= padding["varlen_items"]  # pad=True may repeat rows to even out ranks
    loader.close()


def test_options_for_a_variable_field_on_fixed_data_are_refused():
    with pytest.raises(gpufeed.InvalidArgument, match="variable-length"):
        gpufeed.Loader({"x": np.zeros((4, 3), np.float32)}, batch_size=2, device="cpu",
                       sequences=gpufeed.Pack(4))


def test_bad_offsets_are_refused_by_name():
    with pytest.raises(gpufeed.CorruptData, match="tokens"):
        gpufeed.Loader({"tokens": gpufeed.ragged(np.zeros(5, np.int32), [0, 3, 2, 5])},
                       batch_size=2, device="cpu")


def test_packed_rows_without_ids_hold_the_same_tokens():
    values, offsets = corpus(100)
    make = lambda ids: gpufeed.Loader(  # noqa: E731
        {"tokens": gpufeed.ragged(values, offsets)}, batch_size=4, shuffle=False,
        device="cpu", sequences=gpufeed.Pack(64, ids=ids))
    with_ids, without = make(True), make(False)
    assert [name for name, _, _ in without.schema] == ["tokens", "tokens_lengths"]
    for a, b in zip(with_ids, without):
        assert torch.equal(a["tokens"], b["tokens"])
        assert torch.equal(a["tokens_lengths"], b["tokens_lengths"])
    with_ids.close()
    without.close()


def test_packed_rows_resume_at_another_world_size_in_the_same_global_order():
    values, offsets = corpus(300)

    def loader(rank, world):
        return gpufeed.Loader({"tokens": gpufeed.ragged(values, offsets)}, batch_size=2,
                              shuffle=True, seed=5, rank=rank, world_size=world, device="cpu",
                              workers=1, drop_last=False, sequences=gpufeed.Pack(128))

    def rows(batch):
        return [tuple(r) for r in batch["tokens"].tolist()]

    with loader(0, 1) as one:  # the epoch's global order of packed rows
        order = [row for b in one for row in rows(b)]
    states, taken = [], []
    for rank in range(4):  # four ranks take three batches each, then save
        with loader(rank, 4) as part:
            it = iter(part)
            for _ in range(3):
                taken += rows(next(it))
            states.append(part.state_dict())
    assert sorted(taken) == sorted(order[:len(taken)])
    rest = []
    for rank in range(2):  # the rest at world size 2, from rank 0's state
        with loader(rank, 2) as part:
            part.load_state_dict(states[0])
            rest.append([row for b in part for row in rows(b)])
    assert len(rest[0]) == len(rest[1])
    remaining = sorted(order[len(taken):])
    assert sorted(set(rest[0] + rest[1])) == sorted(set(remaining))
