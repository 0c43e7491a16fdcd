"""Variable-length fields from files and generators: a NumPy folder's tokens.npy +
tokens.offsets.npy, synthetic lengths, SQLite BLOBs as bytes, each read through the Loader
padded and packed and checked against numpy slicing or sqlite3."""

import sqlite3

import numpy as np
import pytest

import gpufeed


def write_ragged_folder(folder, samples=120, seed=0, offsets_dtype=np.int64, start=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, size=samples)
    offsets = np.zeros(samples + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    offsets += start
    values = rng.integers(1, 30_000, size=offsets[-1] + 3, dtype=np.int32)  # 3 rows unused
    np.save(folder / "tokens.npy", values)
    np.save(folder / "tokens.offsets.npy", offsets.astype(offsets_dtype))
    np.save(folder / "label.npy", np.arange(samples, dtype=np.int64))
    return values, offsets


def padded_rows_match(loader, sample_items, max_length):
    seen = 0
    for batch in loader:
        for row, label in enumerate(batch["label"].tolist()):
            sample = sample_items(label)[:max_length]
            n = int(batch["tokens_lengths"][row])
            assert n == len(sample)
            assert batch["tokens"][row, :n].tolist() == list(sample)
            assert (batch["tokens"][row, n:] == 0).all()
            seen += 1
    return seen


@pytest.mark.parametrize("offsets_dtype,start", [(np.int64, 0), (np.uint32, 5)])
def test_a_numpy_folder_with_offsets_pads_like_numpy_slicing(tmp_path, offsets_dtype, start):
    values, offsets = write_ragged_folder(tmp_path, offsets_dtype=offsets_dtype, start=start)
    source = gpufeed.open(str(tmp_path))
    assert sorted(source.schema) == [("label", "int64", ()), ("tokens", "int32", (-1,))]
    loader = gpufeed.Loader(str(tmp_path), fields=["tokens", "label"], batch_size=16,
                            shuffle=True, seed=1, device="cpu", sequences=gpufeed.Pad(24))
    seen = padded_rows_match(loader, lambda i: values[offsets[i]:offsets[i + 1]].tolist(), 24)
    assert seen == 120
    loader.close()


def test_a_numpy_folder_packs_every_token_once(tmp_path):
    values, offsets = write_ragged_folder(tmp_path)
    loader = gpufeed.Loader(str(tmp_path), fields=["tokens"], batch_size=4, shuffle=False,
                            device="cpu", drop_last=False, sequences=gpufeed.Pack(64))
    tokens = []
    for batch in loader:
        for row in range(batch["tokens"].shape[0]):
            tokens.extend(batch["tokens"][row, :int(batch["tokens_lengths"][row])].tolist())
    assert tokens == values[offsets[0]:offsets[-1]].tolist()
    loader.close()


def test_hostile_numpy_offsets_are_corrupt_data_naming_the_file_and_sample(tmp_path):
    np.save(tmp_path / "tokens.npy", np.arange(10, dtype=np.int32))
    np.save(tmp_path / "tokens.offsets.npy", np.array([0, 6, 4, 10], dtype=np.int64))
    with pytest.raises(gpufeed.CorruptData, match=r"tokens.offsets.npy: offsets run backwards "
                                                  r"at sample 1"):
        gpufeed.open(str(tmp_path))
    np.save(tmp_path / "tokens.offsets.npy", np.array([0, 6, 11], dtype=np.int16))
    with pytest.raises(gpufeed.CorruptData, match=r"offset 2 \(sample 1\) is 11, outside the 10"):
        gpufeed.open(str(tmp_path))


def test_synthetic_lengths_are_drawn_per_sample_and_pad(tmp_path):
    spec = "tokens:int32[*],label:int64"
    source = gpufeed.synthetic(spec, 200, seed=4, lengths="uniform:1:30")
    assert "uniform:1:30" in source.describe()
    loader = gpufeed.Loader(source, batch_size=32, shuffle=False, device="cpu", sequences=gpufeed.Pad(32))
    lengths = []
    for batch in loader:
        for row, n in enumerate(batch["tokens_lengths"].tolist()):
            sample = len(lengths)
            assert n == gpufeed._gpufeed.synthetic_length("uniform:1:30", 4, 0, sample)
            expected = [gpufeed._gpufeed.synthetic_value(4, 0, sample, e, "int32")
                        for e in range(n)]
            assert batch["tokens"][row, :n].tolist() == expected
            lengths.append(n)
    assert min(lengths) >= 1 and max(lengths) <= 30 and len(set(lengths)) > 10
    loader.close()
    # A lognormal whose draws could pass 2**31 items needs a MAX.
    with pytest.raises(gpufeed.InvalidArgument, match="give a MAX"):
        gpufeed.synthetic("tokens:int32[*]", 10, lengths="lognormal:400:3")
    with pytest.raises(gpufeed.InvalidArgument, match="give its lengths"):
        gpufeed.synthetic("tokens:int32[*]", 10)
    packed = gpufeed.Loader(gpufeed.synthetic("tokens:int32[*]", 50, lengths="lognormal:20:0.5"),
                            batch_size=2, device="cpu", sequences=gpufeed.Pack(128))
    assert next(iter(packed))["tokens"].shape == (2, 128)
    packed.close()


def test_sqlite_blobs_declared_uint8_star_are_each_rows_bytes(tmp_path):
    path = tmp_path / "bytes.db"
    rng = np.random.default_rng(2)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, jpeg BLOB, label INTEGER)")
    rows = [(i, rng.integers(0, 256, size=int(rng.integers(0, 50)), dtype=np.uint8).tobytes(),
             i % 7) for i in range(90)]
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    db.commit()
    reference = {i: blob for i, blob, _ in db.execute("SELECT id, jpeg, label FROM t")}
    db.close()
    uri = f"sqlite://{path}?table=t&columns=id,jpeg&fields=jpeg:uint8[*]"
    source = gpufeed.open(uri)
    assert source.schema == [("id", "int64", ()), ("jpeg", "uint8", (-1,))]
    loader = gpufeed.Loader(uri, batch_size=8, shuffle=True, device="cpu", sequences=gpufeed.Pad(64))
    seen = 0
    for batch in loader:
        for row, i in enumerate(batch["id"].tolist()):
            n = int(batch["jpeg_lengths"][row])
            assert bytes(batch["jpeg"][row, :n].tolist()) == reference[i]
            seen += 1
    assert seen == 90
    loader.close()
    packed = gpufeed.Loader(uri, batch_size=2, shuffle=False, device="cpu", drop_last=False,
                            sequences=gpufeed.Pack(100))
    stream = b"".join(bytes(b["jpeg"][r, :int(b["jpeg_lengths"][r])].tolist())
                      for b in packed for r in range(b["jpeg"].shape[0]))
    assert stream == b"".join(reference[i] for i in range(90))
    packed.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE t SET jpeg = NULL WHERE id = 11")
    db.commit()
    db.close()
    with pytest.raises(gpufeed.CorruptData, match=r"row 11, column 'jpeg': NULL"):
        gpufeed.open(uri)
