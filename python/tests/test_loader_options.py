"""Loader's parameters: at most 21, one per concept; the options objects give the same C++
options (and so the same batches) as the keywords they replaced, and each removed keyword
names its new spelling."""

import inspect
import json
import os
import re

import h5py
import numpy as np
import pytest

import gpufeed
from gpufeed import _gpufeed


def test_the_loader_takes_at_most_21_parameters():
    parameters = [p for p in inspect.signature(gpufeed.Loader.__init__).parameters.values()
                  if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert len(parameters) <= 21, [p.name for p in parameters]
    flat = {"source", "fields", "batch_size", "shuffle", "seed", "drop_last", "workers",
            "prefetch", "device", "transforms", "batch_transform", "dtype", "rank",
            "world_size", "pad"}
    concepts = {"cache", "groups", "trace", "autotune", "held", "sequences"}
    assert flat | concepts == {p.name for p in parameters}
    # help(gpufeed.Loader) documents every parameter and options object.
    for name in flat | concepts:
        assert re.search(rf"\s{name}[:,] ", gpufeed.Loader.__doc__), name
    for cls in ("Cache", "BlockShuffle", "Groups", "Trace", "Autotune", "Held", "Pad", "Pack"):
        assert f"gpufeed.{cls}(" in gpufeed.Loader.__doc__, cls
        assert cls in gpufeed.__all__


@pytest.mark.parametrize("removed, spelling", [
    ({"shm_dir": "/x"}, 'cache=gpufeed.Cache(tier=..., shm_dir="/x")'),
    ({"cache": "ram", "preload": True}, 'cache=gpufeed.Cache(tier="ram", preload=True)'),
    ({"shm_group": "ml"}, 'cache=gpufeed.Cache(tier=..., shm_group="ml")'),
    ({"chunk_cache": 4096}, "cache=gpufeed.Cache(tier=..., chunk_cache=4096)"),
    ({"shuffle_block": 16, "shuffle_window": 2},
     "shuffle=gpufeed.BlockShuffle(block=16, window=2)"),
    ({"shuffle_window": 2}, "shuffle=gpufeed.BlockShuffle(window=2)"),
    ({"group_offsets": "o", "group_fields": ["y"], "pack": True},
     'groups=gpufeed.Groups(offsets="o", fields=["y"]) (a grouped loader always packs'),
    ({"group": "file_id"}, 'groups=gpufeed.Groups(group="file_id")'),
    ({"group_fields": "y"}, 'groups=gpufeed.Groups(offsets=..., fields="y")'),
    ({"pack_window": 8}, "groups=gpufeed.Groups(offsets=..., pack_window=8)"),
    ({"pack": True}, "groups=gpufeed.Groups(offsets=...) (a grouped loader always packs"),
    ({"trace_batches": 5}, "trace=gpufeed.Trace(batches=5)"),
    ({"trace": "t.json", "trace_batches": -1}, 'trace=gpufeed.Trace(path="t.json", batches=-1)'),
    ({"max_workers": 2}, "autotune=gpufeed.Autotune(max_workers=2) (the object turns"),
    ({"max_prefetch": 8}, "autotune=gpufeed.Autotune(max_prefetch=8)"),
    ({"max_outstanding": 2}, "use held=2"),
    ({"held_budget_bytes": 1024}, "held=gpufeed.Held(budget_bytes=1024)"),
])
def test_each_removed_keyword_names_its_new_spelling(removed, spelling):
    first = next(name for name in removed if name not in ("cache", "trace"))
    with pytest.raises(TypeError) as error:
        gpufeed.Loader({"x": np.zeros(4)}, batch_size=2, device="cpu", **removed)
    message = str(error.value)
    assert message.startswith(f"Loader() got an unexpected keyword argument '{first}': use ")
    assert spelling in message, message


def test_any_other_unknown_keyword_is_pythons_usual_error():
    with pytest.raises(TypeError) as error:
        gpufeed.Loader({"x": np.zeros(4)}, batch_size=2, num_workers=2)
    assert str(error.value) == "Loader.__init__() got an unexpected keyword argument 'num_workers'"
    with pytest.raises(TypeError, match=r"Loader\(shuffle=...\) takes gpufeed.BlockShuffle, "
                                        r"not gpufeed.Cache"):
        gpufeed.Loader({"x": np.zeros(4)}, batch_size=2, shuffle=gpufeed.Cache())


@pytest.fixture
def given(monkeypatch):
    """The _LoaderOptions entries each Loader made in the test passes to C++."""
    made = []
    real = _gpufeed._LoaderOptions

    def record(**entries):
        made.append({k: v for k, v in entries.items() if k not in ("batch_size", "transforms")})
        return real(**entries)

    monkeypatch.setattr(_gpufeed, "_LoaderOptions", record)
    return made


def test_each_object_sets_the_options_its_keywords_set(tmp_path, given):
    source = gpufeed.synthetic("x:float32[4]", samples=64)
    cases = [
        ({"shuffle": gpufeed.BlockShuffle(block=16, window=2)},
         {"shuffle": True, "shuffle_block": 16, "shuffle_window": 2}),
        ({"shuffle": gpufeed.BlockShuffle()}, {"shuffle": True, "shuffle_block": -1}),
        ({"shuffle": False}, {"shuffle": False}),
        ({"cache": gpufeed.Cache("ram", preload=True)}, {"cache": "ram", "preload": True}),
        ({"cache": gpufeed.Cache("shm", shm_dir=tmp_path, shm_group=os.getegid())},
         {"cache": "shm", "shm_dir": str(tmp_path), "shm_group": str(os.getegid())}),
        ({"cache": "ram"}, {"cache": "ram"}),
        ({"cache": gpufeed.Cache()}, {}),
        ({"cache": gpufeed.Cache("auto")}, {"cache": "auto"}),
        ({"trace": gpufeed.Trace(tmp_path / "t.json", batches=7)},
         {"trace": str(tmp_path / "t.json"), "trace_batches": 7}),
        ({"trace": gpufeed.Trace(batches=-1)}, {"trace_batches": -1}),
        ({"trace": str(tmp_path / "u.json")}, {"trace": str(tmp_path / "u.json")}),
        ({"autotune": gpufeed.Autotune(max_workers=2, max_prefetch=3)},
         {"autotune": True, "max_workers": 2, "max_prefetch": 3}),
        ({"autotune": gpufeed.Autotune()}, {"autotune": True}),
        ({"autotune": False}, {"autotune": False}),
        ({"held": 5}, {"max_outstanding": 5}),
        ({"held": gpufeed.Held(max_outstanding=4, budget_bytes=1 << 20)},
         {"max_outstanding": 4, "held_budget_bytes": 1 << 20}),
        ({}, {}),
    ]
    for options, expected in cases:
        gpufeed.Loader(source, batch_size=8, **options).close()
        # Autotuning (the doctor's remedies) is on unless said otherwise.
        assert given[-1] == {"autotune": True, **expected}, options


def raw_indices(source, **options):
    """The sample order of one epoch of a loader built from the C++ options directly."""
    impl = _gpufeed._Loader(source, _gpufeed._LoaderOptions(device="cpu", **options))
    order = []
    while (handle := impl.next()) is not None:
        order.extend(handle.indices().tolist())
    impl.close()
    return order


def indices(loader):
    return [i for batch in loader for i in batch.indices.tolist()]


def test_block_shuffle_gives_the_batches_of_its_c_options():
    source = gpufeed.synthetic("x:float32[4]", samples=192)
    loader = gpufeed.Loader(source, batch_size=12, seed=3, device="cpu",
                            shuffle=gpufeed.BlockShuffle(block=16, window=2))
    order = indices(loader)
    assert order == raw_indices(source, batch_size=12, seed=3, shuffle=True, shuffle_block=16,
                                shuffle_window=2)
    assert sorted(order) == list(range(192))
    # 12 blocks of 16 shuffled within windows of 2: each run of 32 samples spans 2 blocks.
    for start in range(0, 192, 32):
        assert len({i // 16 for i in order[start:start + 32]}) == 2
    assert order != indices(gpufeed.Loader(source, batch_size=12, seed=3, device="cpu"))


def test_cache_objects_give_the_source_rows(tmp_path):
    source = gpufeed.synthetic("x:float32[4]", samples=100)
    plain = gpufeed.Loader(source, batch_size=10, seed=1, device="cpu")
    want = [b["x"].clone() for b in plain]
    ram = gpufeed.Loader(source, batch_size=10, seed=1, device="cpu",
                         cache=gpufeed.Cache("ram", preload=True))
    assert ram.cache_info["tier"] == "ram"
    assert all((a == b).all() for a, b in zip(want, (b["x"] for b in ram)))
    shm = gpufeed.Loader(source, batch_size=10, seed=1, device="cpu",
                         cache=gpufeed.Cache("shm", shm_dir=tmp_path))
    assert shm.cache_info["path"].startswith(str(tmp_path))
    assert all((a == b).all() for a, b in zip(want, (b["x"] for b in shm)))


def test_the_chunk_cache_of_a_cache_object_reaches_the_hdf5_source(tmp_path):
    path = str(tmp_path / "gz.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(400, dtype=np.float32).reshape(100, 4),
                         chunks=(10, 4), compression="gzip")
    loader = gpufeed.Loader(path, batch_size=10, device="cpu",
                            cache=gpufeed.Cache(chunk_cache=3 << 20))
    assert _gpufeed.hdf5_counters(loader.source)["chunk_cache_bytes"] == 3 << 20
    assert loader.cache_info["tier"] == "none"
    assert sorted(float(v) for b in loader for v in b["x"][:, 0]) == [4.0 * i for i in range(100)]


def test_groups_give_the_batches_of_their_c_options():
    sizes = np.random.default_rng(0).integers(1, 20, size=60)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    data = {"x": np.arange(int(offsets[-1]), dtype=np.int64), "file_offsets": offsets,
            "label": np.arange(60, dtype=np.int64)}
    loader = gpufeed.Loader(data, batch_size=32, seed=4, device="cpu",
                            groups=gpufeed.Groups(offsets="file_offsets", fields=["label"],
                                                  pack_window=3))
    assert [name for name, _, _ in loader.schema] == ["x", "group"]
    assert loader.group_fields["label"].tolist() == list(range(60))
    table = _gpufeed.group_table("offsets", offsets, int(offsets[-1]), "'file_offsets'", [])
    source = gpufeed.memory({"x": data["x"]})
    assert indices(loader) == raw_indices(source, batch_size=32, seed=4, groups=table,
                                          pack=True, pack_window=3)
    # Arrays as well as names; exactly one of group and offsets.
    ids = np.repeat(np.arange(60), sizes)
    by_id = gpufeed.Loader({"x": data["x"]}, batch_size=32, seed=4, device="cpu",
                           groups=gpufeed.Groups(group=ids))
    assert by_id.num_groups == 60 and by_id.group_sizes.tolist() == sizes.tolist()
    with pytest.raises(gpufeed.InvalidArgument, match="exactly one of group="):
        gpufeed.Groups(group=ids, offsets=offsets)


def test_a_trace_object_writes_its_file_on_close(tmp_path):
    source = gpufeed.synthetic("x:float32[4]", samples=40)
    path = tmp_path / "trace.json"
    loader = gpufeed.Loader(source, batch_size=10, device="cpu",
                            trace=gpufeed.Trace(path, batches=2))
    assert sum(1 for _ in loader) == 4
    loader.close()
    events = json.loads(path.read_text())
    spans = events["traceEvents"] if isinstance(events, dict) else events
    batches = {e.get("args", {}).get("batch") for e in spans if e.get("name") == "read"}
    assert len(batches - {None}) == 2, batches  # the last 2 batches only
