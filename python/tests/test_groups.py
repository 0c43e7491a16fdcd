"""Grouped data: packed batches of whole groups, GroupReducer against a per-file loop, and
the errors for bad group metadata."""

import json
import math
import os
import subprocess

import h5py
import numpy as np
import pytest
import torch

import gpufeed

# The groups of make_groups(): files by their row offsets, each with its label.
FILES = gpufeed.Groups(offsets="file_offsets", fields="file_label")


def make_groups(files=150, low=1, high=40, seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(low, high + 1, size=files)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rows = int(offsets[-1])
    return {
        "x": rng.standard_normal((rows, 3)).astype(np.float32),
        "row": np.arange(rows, dtype=np.int64),
        "file_offsets": offsets,
        "file_label": (np.arange(files) % 4).astype(np.int64),
    }


def epoch_parts(loader, data):
    """Delivers one epoch; checks each batch's rows against its group parts and returns the
    rows in order and each group's parts as (batch number, offset, length, complete)."""
    rows, parts = [], {}
    offsets = data["file_offsets"]
    for b, batch in enumerate(loader):
        assert len(batch["row"]) <= loader.batch_size
        groups = batch.groups
        ids = batch["group"]
        assert ids.dtype == torch.int64
        for gid, begin, end, offset, complete in zip(groups["id"].tolist(),
                                                     groups["begin"].tolist(),
                                                     groups["end"].tolist(),
                                                     groups["offset"].tolist(),
                                                     groups["complete"].tolist()):
            expected = np.arange(offsets[gid] + offset, offsets[gid] + offset + end - begin)
            assert batch["row"][begin:end].numpy().tolist() == expected.tolist()
            assert (ids[begin:end] == gid).all()
            parts.setdefault(gid, []).append((b, offset, end - begin, complete))
        assert groups["end"][-1] == len(batch["row"])
        assert groups["file_label"].tolist() == data["file_label"][groups["id"].numpy()].tolist()
        rows.extend(batch["row"].tolist())
    return rows, parts


def check_whole(parts, sizes, batch_size):
    for gid, list_ in parts.items():
        if sizes[gid] <= batch_size:
            assert len(list_) == 1, f"group {gid} of {sizes[gid]} rows was split"
        next_offset = 0
        for i, (b, offset, length, complete) in enumerate(list_):
            assert offset == next_offset
            assert complete == (i == len(list_) - 1)
            if i:
                assert b == list_[i - 1][0] + 1, "parts of a split group in consecutive batches"
            next_offset += length
        assert next_offset == sizes[gid]


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_row_once_and_groups_whole(shuffle):
    data = make_groups()
    sizes = np.diff(data["file_offsets"])
    loader = gpufeed.Loader(data, batch_size=32, shuffle=shuffle, seed=5, device="cpu",
                            workers=2, groups=gpufeed.Groups(offsets="file_offsets",
                                                             fields=["file_label"]))
    assert loader.num_groups == 150
    assert loader.group_sizes.tolist() == sizes.tolist()
    assert loader.pack_fill > 0.9
    orders = []
    for epoch in range(2):
        rows, parts = epoch_parts(loader, data)
        assert sorted(rows) == list(range(len(data["row"])))
        assert len(parts) == 150
        check_whole(parts, sizes, 32)
        orders.append(rows)
    assert (orders[0] != orders[1]) == shuffle


def test_sharded_ranks_disjoint_equal_and_complete():
    data = make_groups(files=200)
    sizes = np.diff(data["file_offsets"])
    for shuffle in (False, True):
        all_rows, counts, groups_seen = [], set(), []
        for rank in range(3):
            loader = gpufeed.Loader(data, batch_size=32, shuffle=shuffle, seed=1, rank=rank,
                                    world_size=3, device="cpu", workers=1, groups=FILES)
            rows, parts = epoch_parts(loader, data)
            check_whole(parts, sizes, 32)
            counts.add(len(loader))
            all_rows.extend(rows)
            groups_seen.extend(parts)
        assert len(counts) == 1, "every rank runs the same number of batches"
        assert sorted(all_rows) == list(range(len(data["row"])))
        assert len(groups_seen) == len(set(groups_seen)) == 200


def per_file(data, outputs, how, classes=None):
    offsets = data["file_offsets"]
    out = []
    for g in range(len(offsets) - 1):
        rows = outputs[offsets[g]:offsets[g + 1]]
        if how == "sum":
            out.append(rows.sum(0))
        elif how == "mean":
            out.append(rows.mean(0))
        elif how == "max":
            out.append(rows.max(0).values)
        else:
            pred = rows.argmax(1) if rows.is_floating_point() else rows
            out.append(torch.bincount(pred, minlength=classes).argmax())
    return torch.stack(out)


@pytest.mark.parametrize("how", ["sum", "mean", "max", "vote"])
def test_group_reducer_equals_a_per_file_loop(how):
    # Batches of 24 rows and groups of up to 60: many groups are split across batches.
    data = make_groups(files=80, high=60, seed=3)
    # Outputs a model could give: small integers in float32, so sums are exact in any order.
    torch.manual_seed(0)
    outputs = torch.randint(-8, 9, (len(data["row"]), 5)).float()
    loader = gpufeed.Loader(data, batch_size=24, groups=FILES, shuffle=True, seed=2,
                            device="cpu", workers=1)
    reducer = gpufeed.GroupReducer(loader.num_groups, how=how, device="cpu")
    split = 0
    for batch in loader:
        split += int((~batch.groups["complete"]).sum())
        reducer.update(outputs[batch["row"]], batch)
    assert split > 0, "the test must cover groups split across batches"
    expected = per_file(data, outputs, how, classes=5)
    result = reducer.result()
    if how == "vote":
        assert result.dtype == torch.int64
        assert torch.equal(result, expected)
    else:
        assert torch.allclose(result, expected)
    assert reducer.counts().tolist() == np.diff(data["file_offsets"]).tolist()


def test_vote_over_class_indices_and_two_level_voting():
    data = make_groups(files=30, low=6, high=20, seed=4)
    rows = len(data["row"])
    labels = torch.randint(0, 3, (rows,), generator=torch.Generator().manual_seed(1))
    loader = gpufeed.Loader(data, batch_size=50, groups=FILES, shuffle=False, device="cpu",
                            workers=1)
    votes = gpufeed.GroupReducer(loader.num_groups, how="vote", num_classes=3)
    for batch in loader:
        votes.update(labels[batch["row"]], batch["group"])
    assert torch.equal(votes.result(), per_file(data, labels, "vote", classes=3))
    with pytest.raises(gpufeed.InvalidArgument, match="num_classes"):
        gpufeed.GroupReducer(3, how="vote").update(torch.tensor([0, 1]), torch.tensor([0, 1]))

    # Two levels: mean scores over windows of 3 segments, then a majority over each file's
    # windows. Window ids are per-row ids like any group's.
    scores = torch.randn(rows, 4, generator=torch.Generator().manual_seed(2))
    file_of_row = torch.repeat_interleave(torch.arange(30), torch.from_numpy(
        np.diff(data["file_offsets"])))
    position = torch.arange(rows) - torch.from_numpy(data["file_offsets"][:-1])[file_of_row]
    window_key = file_of_row * 100 + position // 3
    keys, window_of_row = torch.unique(window_key, return_inverse=True)
    windows = gpufeed.GroupReducer(len(keys), how="mean")
    for batch in loader:
        windows.update(scores[batch["row"]], window_of_row[batch["row"]])
    files = gpufeed.GroupReducer(30, how="vote")
    files.update(windows.result(), keys // 100)
    expected = []
    for f in range(30):
        s = scores[file_of_row == f]
        means = torch.stack([w.mean(0) for w in s.split(3)])
        expected.append(torch.bincount(means.argmax(1), minlength=4).argmax())
    assert torch.equal(files.result(), torch.stack(expected))


def test_group_ids_rows_need_not_be_contiguous(tmp_path):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 12, size=200).astype(np.int32)
    ids[:12] = np.arange(12)  # every id used
    path = tmp_path / "ids.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(200, dtype=np.float32)
        f["file_id"] = ids
        f["label"] = np.arange(12, dtype=np.int64) * 10
    loader = gpufeed.Loader(str(path), fields=["x"], batch_size=40, device="cpu", workers=1,
                            groups=gpufeed.Groups(group="file_id", fields=["label"]))
    assert loader.num_groups == 12
    seen = []
    for batch in loader:
        for gid, begin, end in zip(batch.groups["id"].tolist(), batch.groups["begin"].tolist(),
                                   batch.groups["end"].tolist()):
            rows = batch["x"][begin:end].long().tolist()
            assert rows == np.flatnonzero(ids == gid).tolist()[:len(rows)] or \
                all(ids[r] == gid for r in rows)
            assert sorted(rows) == rows, "a group's rows in row order"
        assert (batch.groups["label"] == batch.groups["id"] * 10).all()
        assert batch["group"].tolist() == ids[batch["x"].long().numpy()].tolist()
        seen.extend(batch["x"].long().tolist())
    assert sorted(seen) == list(range(200))


def write_h5(path, **datasets):
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(10, dtype=np.float32)
        for name, value in datasets.items():
            f[name] = value
    return str(path)


@pytest.mark.parametrize("offsets, expected", [
    ([0, 4, 3, 10], "row 2 holds 3, less than row 1 (4): offsets must increase"),
    ([0, 4, 12, 10], "row 2 holds 12, past the row count 10"),
    ([1, 4, 10], "row 0 holds 1: offsets must start at 0"),
])
def test_bad_offsets_name_the_dataset_and_row(tmp_path, offsets, expected):
    path = write_h5(tmp_path / "bad.h5", file_offsets=np.array(offsets, dtype=np.int64))
    with pytest.raises(gpufeed.CorruptData) as error:
        gpufeed.Loader(path, fields=["x"], batch_size=4, device="cpu",
                       groups=gpufeed.Groups(offsets="file_offsets"))
    assert f"'file_offsets' ({path})" in str(error.value)
    assert expected in str(error.value)


def test_negative_group_id_names_the_dataset_and_row(tmp_path):
    ids = np.array([0, 0, 1, 1, -3, 2, 2, 2, 1, 0], dtype=np.int64)
    path = write_h5(tmp_path / "ids.h5", file_id=ids)
    with pytest.raises(gpufeed.CorruptData) as error:
        gpufeed.Loader(path, fields=["x"], batch_size=4, groups=gpufeed.Groups(group="file_id"),
                       device="cpu")
    assert f"'file_id' ({path}): row 4 holds -3: group ids must be >= 0" in str(error.value)


def test_per_group_field_of_the_wrong_length(tmp_path):
    path = write_h5(tmp_path / "f.h5", file_offsets=np.array([0, 4, 10]),
                    label=np.array([1, 2, 3]))
    with pytest.raises(gpufeed.CorruptData) as error:
        gpufeed.Loader(path, fields=["x"], batch_size=4, device="cpu",
                       groups=gpufeed.Groups(offsets="file_offsets", fields=["label"]))
    message = str(error.value)
    assert f"per-group field 'label' ({path}) has 3 rows, not one per group (2 groups" in message
    assert "row 2 is the first without a group" in message
    # The same checks hold for arrays passed in memory.
    data = make_groups(files=5)
    with pytest.raises(gpufeed.CorruptData, match="'file_label' has 4 rows"):
        gpufeed.Loader(dict(data, file_label=np.zeros(4)), batch_size=8, groups=FILES,
                       device="cpu")


def test_group_options_are_checked(tmp_path):
    data = make_groups(files=5)
    del data["file_label"]
    for both_or_neither in ({"group": "g", "offsets": "file_offsets"}, {"fields": ["x"]}):
        with pytest.raises(gpufeed.InvalidArgument, match="exactly one of group= .* offsets="):
            gpufeed.Groups(**both_or_neither)
    with pytest.raises(TypeError, match=r"takes gpufeed.Groups\(group=... or offsets=...\)"):
        gpufeed.Loader(data, batch_size=8, groups="file_offsets", device="cpu")
    with pytest.raises(TypeError, match="groups=...\\) takes gpufeed.Groups, not gpufeed.Cache"):
        gpufeed.Loader(data, batch_size=8, groups=gpufeed.Cache(), device="cpu")
    path = write_h5(tmp_path / "g.h5", file_offsets=np.array([0, 10]))
    with pytest.raises(gpufeed.InvalidArgument, match="fields="):
        gpufeed.Loader(path, batch_size=8, groups=gpufeed.Groups(offsets="file_offsets"),
                       device="cpu")
    with pytest.raises(gpufeed.InvalidArgument, match="how must be"):
        gpufeed.GroupReducer(3, how="median")


def test_cli_bench_reports_files_per_second_and_fill(tmp_path):
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    data = make_groups(files=60)
    path = tmp_path / "grouped.h5"
    with h5py.File(path, "w") as f:
        f["x"] = data["x"]
        f["file_offsets"] = data["file_offsets"]
    run = subprocess.run([binary, "bench", str(path), "--fields", "x", "--group-offsets",
                          "file_offsets", "--pack", "-b", "64", "-e", "2", "-w", "1", "--json",
                          "-d", "cpu"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["groups"] == 60
    assert result["groups_per_s"] > 0
    assert 0.9 < result["pack_fill"] <= 1.0
    assert result["samples"] == 2 * len(data["x"])
    text = subprocess.run([binary, "bench", str(path), "--fields", "x", "--group-offsets",
                           "file_offsets", "--pack", "-b", "64", "-q", "-d", "cpu"],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "files/s (60 groups per epoch" in text.stdout
    bad = subprocess.run([binary, "bench", str(path), "--group-offsets", "file_offsets", "--pack"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--fields" in bad.stderr


def test_forward_rows_picks_the_smallest_count_near_the_best_rate():
    clock = {"now": 0.0}

    def forward(batch):
        rows = batch.shape[0]
        # Per row cheapest at 256 rows, as a CPU model whose activations leave the caches.
        clock["now"] += rows * 1e-6 * (1 + abs(math.log2(rows) - 8))
        return batch.sum(dim=1)

    rows = gpufeed.forward_rows(forward, torch.zeros(4), timer=lambda: clock["now"])
    assert rows == 256
    assert set(gpufeed.forward_rows.last) == {32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
    # A flat cost per row: the smallest count is as fast, and packs fullest.
    flat = gpufeed.forward_rows(lambda b: clock.__setitem__("now", clock["now"] + b.shape[0]),
                                torch.zeros(2), candidates=(64, 512, 4096),
                                timer=lambda: clock["now"])
    assert flat == 64
    with pytest.raises(gpufeed.InvalidArgument):
        gpufeed.forward_rows(forward, [0.0])
    with pytest.raises(gpufeed.InvalidArgument):
        gpufeed.forward_rows(forward, torch.zeros(4), candidates=(0, 8))


def test_forward_rows_is_not_decided_by_one_slow_moment():
    clock = {"now": 0.0, "calls": 0}

    def forward(batch):
        rows = batch.shape[0]
        clock["calls"] += 1
        # 128 rows is the fastest per row; one call of it stalls (the machine was busy
        # elsewhere), as a single measurement of each size would have seen it.
        clock["now"] += rows * 1e-6 * (1 + abs(math.log2(rows) - 7))
        if rows == 128 and clock["calls"] == 8:
            clock["now"] += 1.0
        return batch

    rows = gpufeed.forward_rows(forward, torch.zeros(4), candidates=(64, 128, 256),
                                timer=lambda: clock["now"], min_seconds=0)
    assert rows == 128
    assert gpufeed.forward_rows.last[128] > gpufeed.forward_rows.last[64]
    with pytest.raises(gpufeed.InvalidArgument):
        gpufeed.forward_rows(forward, torch.zeros(4), min_seconds=-1)
    # Below min_rows (twice the longest group) nothing is tried, however fast it runs.
    assert gpufeed.forward_rows(forward, torch.zeros(4), candidates=(64, 128, 256),
                                timer=lambda: clock["now"], min_rows=129) == 256
    assert set(gpufeed.forward_rows.last) == {256}
    with pytest.raises(gpufeed.InvalidArgument, match="min_rows"):
        gpufeed.forward_rows(forward, torch.zeros(4), candidates=(64,), min_rows=65)


@pytest.mark.parametrize("segments", [(1, 24), (8, 64)])
def test_packed_batches_of_a_forward_pass_size_fill_past_0_98(segments):
    rng = np.random.default_rng(0)
    lengths = rng.integers(segments[0], segments[1] + 1, size=7913)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = {"x": np.zeros((int(offsets[-1]), 2), np.float32), "file_offsets": offsets}
    for shuffle in (False, True):
        loader = gpufeed.Loader(data, fields=["x"], batch_size=512, shuffle=shuffle,
                                device="cpu", groups=gpufeed.Groups(offsets="file_offsets"))
        assert loader.pack_fill >= 0.98, (segments, shuffle, loader.pack_fill)
        # Within a few batches of as few as the rows need.
        assert len(loader) <= math.ceil(int(offsets[-1]) / 512) * 1.01 + 1
