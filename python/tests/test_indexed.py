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
    out = subprocess.run([binary, "inspect", str(prefix) + ".idx", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out
    report = json.loads(out.stdout)
    assert report["samples"] == 3
    assert report["fields"] == [{"name": "tokens", "dtype": "int32", "shape": [-1],
                                 "variable": True}]
