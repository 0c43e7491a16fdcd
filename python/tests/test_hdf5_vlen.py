"""Variable-length HDF5 datasets as h5py writes them (h5py.vlen_dtype, h5py.string_dtype), read
by gpufeed's own reader, padded and packed, compared with h5py sample by sample; and the
damaged references and global heaps gpufeed refuses, naming the file, dataset and sample."""

import os
import struct
import subprocess

import h5py
import numpy as np
import pytest

import gpufeed

LAYOUTS = {
    "contiguous": {},
    "chunked": {"chunks": (16,)},
    "gzip": {"chunks": (16,), "compression": "gzip", "shuffle": True},
}


def sequences(samples, dtype, seed=0, median=20):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 2 * median, samples)
    lengths[3] = 0
    lengths[samples - 1] = 0
    out = []
    for n in lengths:
        if np.dtype(dtype).kind == "f":
            out.append((rng.standard_normal(n) * 100).astype(dtype))
        else:
            info = np.iinfo(dtype)
            out.append(rng.integers(info.min, info.max, n, dtype=np.dtype(dtype).newbyteorder("=")))
    return out


def write(path, name, values, dtype, layout="contiguous", label=True):
    with h5py.File(path, "a") as f:
        d = f.create_dataset(name, (len(values),), dtype=h5py.vlen_dtype(np.dtype(dtype)),
                             **LAYOUTS[layout])
        for i, v in enumerate(values):
            d[i] = np.asarray(v, dtype=dtype)
        if label:
            f["label"] = np.arange(len(values), dtype=np.int64)


def stored(path, name):
    with h5py.File(path, "r") as f:
        return [np.asarray(x) for x in f[name][:]]


def check_padded(path, name, expected, max_length, batch_size=16, shuffle=False):
    loader = gpufeed.Loader(str(path), fields=[name, "label"], batch_size=batch_size,
                            shuffle=shuffle, device="cpu", sequences=gpufeed.Pad(max_length),
                            drop_last=False)
    seen = 0
    for batch in loader:
        for row, label in enumerate(batch["label"].tolist()):
            want = expected[label][:max_length]
            n = int(batch[f"{name}_lengths"][row])
            assert n == len(want), label
            got = batch[name][row, :n].numpy()
            assert got.dtype == want.dtype.newbyteorder("=")
            np.testing.assert_array_equal(got, want, err_msg=f"sample {label}")
            assert not batch[name][row, n:].any()
            seen += 1
    loader.close()
    assert seen == len(expected)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "float16",
                                   "float32", "float64", ">i4", ">f8"])
def test_padded_sequences_equal_h5py(tmp_path, dtype, layout):
    path = tmp_path / "v.h5"
    values = sequences(100, dtype)
    write(path, "tokens", values, dtype, layout)
    expected = stored(path, "tokens")
    if dtype.startswith(">"):
        # h5py 3.7 reads big-endian items unswapped (1.5 comes back as 3.1e-319): compare with
        # what was written, which the file holds big-endian.
        expected = [np.asarray(v, dtype) for v in values]
    check_padded(path, "tokens", expected, max_length=64)
    check_padded(path, "tokens", expected, max_length=8, shuffle=True, batch_size=7)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_strings_read_as_their_stored_bytes(tmp_path, layout):
    path = tmp_path / "s.h5"
    texts = ["héllo wörld", "", "a", "日本語のテキスト", "x" * 300] * 10
    with h5py.File(path, "w") as f:
        d = f.create_dataset("text", (len(texts),), dtype=h5py.string_dtype(), **LAYOUTS[layout])
        for i, t in enumerate(texts):
            d[i] = t
        a = f.create_dataset("ascii", (len(texts),), dtype=h5py.string_dtype("ascii"),
                             **LAYOUTS[layout])
        for i, t in enumerate(texts):
            a[i] = t.encode("utf-8", "replace") if t.isascii() else b"?"
        f["label"] = np.arange(len(texts), dtype=np.int64)
    with h5py.File(path, "r") as f:
        utf8 = [np.frombuffer(f["text"][i], np.uint8) for i in range(len(texts))]
        ascii_ = [np.frombuffer(f["ascii"][i], np.uint8) for i in range(len(texts))]
    assert bytes(utf8[0]).decode() == texts[0]
    check_padded(path, "text", utf8, max_length=512)
    check_padded(path, "ascii", ascii_, max_length=4)


def test_unwritten_samples_are_empty(tmp_path):
    path = tmp_path / "v.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("tokens", (40,), dtype=h5py.vlen_dtype(np.int32), chunks=(8,),
                             compression="gzip")
        d[9] = np.arange(5, dtype=np.int32)  # chunks 0, 2.. are never written
        f["label"] = np.arange(40, dtype=np.int64)
    check_padded(path, "tokens", stored(path, "tokens"), max_length=6)


@pytest.mark.parametrize("layout", ["contiguous", "gzip"])
def test_a_huge_sequence_packs_with_the_others(tmp_path, layout):
    path = tmp_path / "v.h5"
    values = sequences(50, "int32", seed=5)
    values[17] = np.arange(1_000_000, dtype=np.int32)
    write(path, "tokens", values, "int32", layout, label=False)
    expected = np.concatenate(stored(path, "tokens"))
    loader = gpufeed.Loader(str(path), fields=["tokens"], batch_size=4, shuffle=False,
                            device="cpu", sequences=gpufeed.Pack(4096), drop_last=False)
    tokens = []
    for batch in loader:
        for row in range(batch["tokens"].shape[0]):
            tokens.append(batch["tokens"][row, :int(batch["tokens_lengths"][row])].numpy())
    loader.close()
    np.testing.assert_array_equal(np.concatenate(tokens), expected)
    # Padded to the longest sample: the huge one whole.
    check_padded_huge = gpufeed.Loader(str(path), fields=["tokens"], batch_size=2,
                                       shuffle=False, device="cpu", sequences=gpufeed.Pad(),
                                       drop_last=False)
    assert check_padded_huge.schema[0][2] == (1_000_000,)
    for i, batch in enumerate(check_padded_huge):
        if i == 8:
            np.testing.assert_array_equal(batch["tokens"][1].numpy(), values[17])
    check_padded_huge.close()


def test_shuffled_packing_holds_every_item_once(tmp_path):
    path = tmp_path / "v.h5"
    write(path, "tokens", sequences(300, "int64", seed=2), "int64", "gzip", label=False)
    expected = np.concatenate(stored(path, "tokens"))
    loader = gpufeed.Loader(str(path), fields=["tokens"], batch_size=3, shuffle=True, seed=4,
                            device="cpu", sequences=gpufeed.Pack(128), drop_last=False, workers=2)
    tokens = []
    for batch in loader:
        for row in range(batch["tokens"].shape[0]):
            tokens.extend(batch["tokens"][row, :int(batch["tokens_lengths"][row])].tolist())
    loader.close()
    assert sorted(tokens) == sorted(expected.tolist())


def test_inspect_shows_the_variable_field(tmp_path):
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    path = tmp_path / "v.h5"
    write(path, "tokens", sequences(20, "int32"), "int32", "gzip")
    out = subprocess.run([binary, "inspect", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "tokens: int32[*]" in out.stdout


# Hostile input: a contiguous file whose first references and heap are patched.

def hostile_file(tmp_path):
    path = tmp_path / "bad.h5"
    write(path, "tokens", [np.array([1, 2, 3], np.int32), np.arange(10, dtype=np.int32),
                           np.array([], np.int32), np.array([7], np.int32)], "int32")
    with h5py.File(path, "r") as f:
        refs = f["tokens"].id.get_offset()
    data = bytearray(path.read_bytes())
    length, heap, index = struct.unpack_from("<IQI", data, refs)
    assert (length, index) == (3, 1)
    return path, data, refs, heap


def read_everything(path):
    loader = gpufeed.Loader(str(path), fields=["tokens", "label"], batch_size=4, shuffle=False,
                            device="cpu", sequences=gpufeed.Pad(16))
    for _ in loader:
        pass
    loader.close()


def patch_reference(data, refs, length=None, heap=None, index=None):
    old = struct.unpack_from("<IQI", data, refs)
    new = (old[0] if length is None else length, old[1] if heap is None else heap,
           old[2] if index is None else index)
    struct.pack_into("<IQI", data, refs, *new)


@pytest.mark.parametrize("case,words", [
    ("address", "past the end of the file"),
    ("index", "has no object 999"),
    ("length", "holds 12 bytes, but its reference says 2 items"),
    ("huge_length", "more than the file"),
    ("signature", "GCOL"),
    ("version", "version 2"),
    ("size_past_eof", "past the end of the file"),
    ("size_small", "smaller than its header"),
    ("object_size", "does not fit"),
])
def test_damaged_references_and_heaps_are_refused(tmp_path, case, words):
    path, data, refs, heap = hostile_file(tmp_path)
    if case == "address":
        patch_reference(data, refs, heap=len(data) + 4096)
    elif case == "index":
        patch_reference(data, refs, index=999)
    elif case == "length":
        patch_reference(data, refs, length=2)
    elif case == "huge_length":
        patch_reference(data, refs, length=2**31)
    elif case == "signature":
        data[heap:heap + 4] = b"XCOL"
    elif case == "version":
        data[heap + 4] = 2
    elif case == "size_past_eof":
        struct.pack_into("<Q", data, heap + 8, len(data))
    elif case == "size_small":
        struct.pack_into("<Q", data, heap + 8, 4)
    elif case == "object_size":
        struct.pack_into("<Q", data, heap + 16 + 8, 2**40)  # object 1's size
    path.write_bytes(bytes(data))
    with pytest.raises(gpufeed.CorruptData, match=words) as info:
        read_everything(path)
    message = str(info.value)
    assert "bad.h5" in message and "tokens" in message and "sample 0" in message, message
