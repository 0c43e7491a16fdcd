"""A Megatron indexed data set written with numpy exactly as megatron/core/datasets/
indexed_dataset.py's _IndexWriter writes it (prefix.bin + prefix.idx) opens as one
variable-length field."""

import json
import os
import struct
import subprocess

import numpy as np
import pytest

import gpufeed


def write_megatron(prefix, sequences, dtype, code):
    with open(str(prefix) + ".bin", "wb") as f:
        for seq in sequences:
            f.write(np.asarray(seq, dtype=dtype).tobytes(order="C"))
    lengths = np.array([len(s) for s in sequences], dtype=np.int32)
    pointers = np.zeros(len(sequences), dtype=np.int64)
    pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize)
    documents = np.arange(len(sequences) + 1, dtype=np.int64)
    with open(str(prefix) + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(sequences)))
        f.write(struct.pack("<Q", len(documents)))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(documents.tobytes(order="C"))


@pytest.mark.parametrize("dtype,code,name", [(np.int32, 4, "int32"), (np.uint16, 8, "uint16")])
def test_an_indexed_corpus_opens_as_one_variable_length_field(tmp_path, dtype, code, name):
    prefix = tmp_path / "corpus_text_document"
    write_megatron(prefix, [[1, 2, 3], [], list(range(1000)), [7]], dtype, code)
    for path in (prefix, str(prefix) + ".idx", str(prefix) + ".bin"):
        source = gpufeed.open(path)
        assert source.schema == [("tokens", name, (-1,))]
        assert len(source) == 4
        assert "4 sequences" in source.describe()


def test_a_lying_index_is_corrupt_data_naming_the_file(tmp_path):
    prefix = tmp_path / "bad"
    write_megatron(prefix, [[1, 2], [3]], np.int32, 4)
    with open(str(prefix) + ".bin", "r+b") as f:
        f.truncate(8)  # the second sequence now runs past the end
    with pytest.raises(gpufeed.CorruptData, match="bad.idx: sequence 1"):
        gpufeed.open(prefix)


def test_inspect_prints_the_variable_length_field(tmp_path):
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    prefix = tmp_path / "corpus"
    write_megatron(prefix, [[1, 2, 3], [], [4]], np.int32, 4)
    out = subprocess.run([binary, "inspect", str(prefix)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out
    assert "tokens: int32[*]" in out.stdout and "3 sequences" in out.stdout
    assert "lengths p0 0, p50 1, p90 1, p99 1, p100 3; 4 items in all" in out.stdout
    out = subprocess.run([binary, "inspect", str(prefix) + ".idx", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out
    report = json.loads(out.stdout)
    assert report["samples"] == 3
    assert report["fields"] == [{"name": "tokens", "dtype": "int32", "shape": [-1],
                                 "variable": True, "items": 4,
                                 "length_percentiles": {"p0": 0, "p50": 1, "p90": 1, "p99": 1,
                                                        "p100": 3}}]


def reference_sequences(prefix):
    """The corpus read with numpy from the format's spec alone: header, sizes, pointers."""
    idx = np.fromfile(str(prefix) + ".idx", dtype=np.uint8)
    assert idx[:9].tobytes() == b"MMIDIDX\x00\x00"
    code = int(idx[17])
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
             7: np.float32, 8: np.uint16}[code]
    count = int(idx[18:26].view("<u8")[0])
    lengths = idx[34:34 + 4 * count].view("<i4")
    pointers = idx[34 + 4 * count:34 + 12 * count].view("<i8")
    data = np.fromfile(str(prefix) + ".bin", dtype=np.uint8)
    return [data[p:p + n * np.dtype(dtype).itemsize].view(dtype) for p, n in zip(pointers, lengths)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_packed_rows_of_an_indexed_corpus_hold_its_tokens_once(tmp_path, shuffle):
    rng = np.random.default_rng(5)
    sequences = [rng.integers(0, 60_000, size=n) for n in rng.integers(0, 300, size=200)]
    prefix = tmp_path / "corpus"
    write_megatron(prefix, sequences, np.uint16, 8)
    expected = np.concatenate(reference_sequences(prefix)).astype(np.int64)
    loader = gpufeed.Loader(prefix, batch_size=4, shuffle=shuffle, seed=2, device="cpu",
                            pad=False, sequences=gpufeed.Pack(256),
                            transforms=["cast:tokens:int32"])
    got = []
    for batch in loader:
        for row, n in enumerate(batch["tokens_lengths"].tolist()):
            got.extend(batch["tokens"][row, :n].tolist())
    loader.close()
    if shuffle:
        assert sorted(got) == sorted(expected.tolist())
    else:
        assert got == expected.tolist()


def test_padded_rows_of_an_indexed_corpus_equal_the_spec_reading(tmp_path):
    rng = np.random.default_rng(6)
    sequences = [rng.integers(-2**31, 2**31 - 1, size=n) for n in [0, 1, 50, 700, 3]]
    prefix = tmp_path / "corpus"
    write_megatron(prefix, sequences, np.int32, 4)
    reference = reference_sequences(prefix)
    loader = gpufeed.Loader(prefix, batch_size=5, shuffle=False, device="cpu", sequences=gpufeed.Pad(64))
    batch = next(iter(loader))
    for i, seq in enumerate(reference):
        n = min(64, len(seq))
        assert int(batch["tokens_lengths"][i]) == n
        assert batch["tokens"][i, :n].tolist() == seq[:n].tolist()
    loader.close()
