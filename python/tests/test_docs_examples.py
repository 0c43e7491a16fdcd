"""Every Python example in README.md and docs/*.md runs, so the documentation cannot drift from
the package.

Each ```python fenced block is one test. It runs in a fresh namespace, in a folder holding
small data sets under the names the examples use (train.h5, a.h5/b.h5, compressed.h5,
eval.h5, data.h5 (a compound table), the NumPy folder train/, train.db, tabular.db,
images/train and images/val; see
`_make_fixture_data`), with stand-ins for what an example leaves to the reader: `model`,
`epochs`, `mean`, `std`. Examples say device="auto", which is the CPU on a machine without a
GPU, and stay small enough to run in seconds.

A block that cannot run here (it needs a GPU, a PostgreSQL server or torchrun) is fenced as

    ```python no-run: <why>

and is reported as skipped with that reason. Keep them few. ```cpp blocks are compile-checked
(syntax only, against include/); shell and console blocks are not run. Relative links between
the documents must resolve (docs/benchmarks.md, which bench/run_all.py generates, excepted).
"""

import json
import os
import re
import sqlite3
import subprocess

import h5py
import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)
NO_RUN = re.compile(r"\s*no-run\s*:?\s*(.*)")


def _documents():
    docs = os.path.join(ROOT, "docs")
    names = ["README.md"]
    if os.path.isdir(docs):
        names += [os.path.join("docs", n) for n in sorted(os.listdir(docs)) if n.endswith(".md")]
    return names


def _blocks():
    """(document, line, info string, code) of every ```python block."""
    found = []
    for name in _documents():
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = f.read()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((name, line, match.group(1).strip(), match.group(2)))
    return found


def _params():
    params = []
    for name, line, info, code in _blocks():
        marks = []
        no_run = NO_RUN.fullmatch(info)
        if no_run:
            reason = no_run.group(1) or "marked no-run"
            marks.append(pytest.mark.skip(reason=f"{name}:{line}: {reason}"))
        elif info:
            raise ValueError(f"{name}:{line}: unknown fence ```python {info}")
        params.append(pytest.param(name, line, code, marks=marks, id=f"{name}:{line}"))
    return params


def _write_h5(path, mel, label, **extra):
    with h5py.File(path, "w") as f:
        f["mel"] = mel
        f["label"] = label
        for key, value in extra.items():
            f[key] = value


def _make_images(folder, classes, per_class, seed):
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name in classes:
        os.makedirs(os.path.join(folder, name), exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(60 + 4 * i, 80, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(os.path.join(folder, name, f"{i}.jpg"), quality=90)


def _make_fixture_data(folder):
    rng = np.random.default_rng(0)
    samples = 600
    mel = rng.standard_normal((samples, 1, 64, 32), dtype=np.float32)
    label = rng.integers(0, 10, size=samples, dtype=np.int64)
    _write_h5(os.path.join(folder, "train.h5"), mel, label)
    _write_h5(os.path.join(folder, "a.h5"), mel[:300], label[:300])
    _write_h5(os.path.join(folder, "b.h5"), mel[300:], label[300:])
    with h5py.File(os.path.join(folder, "compressed.h5"), "w") as f:
        f.create_dataset("mel", data=mel, chunks=(64, 1, 64, 32), compression="gzip",
                         compression_opts=1, shuffle=True)
        f.create_dataset("label", data=label, chunks=(64,), compression="gzip")
    os.makedirs(os.path.join(folder, "train"))
    np.save(os.path.join(folder, "train", "mel.npy"), mel)
    np.save(os.path.join(folder, "train", "label.npy"), label)

    # eval.h5: 40 recordings of 3..24 segments each, a label per recording.
    lengths = rng.integers(3, 25, size=40)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = int(offsets[-1])
    with h5py.File(os.path.join(folder, "eval.h5"), "w") as f:
        f["mel"] = rng.standard_normal((rows, 1, 64, 32), dtype=np.float32)
        f["file_offsets"] = offsets
        f["file_id"] = np.repeat(np.arange(40), lengths).astype(np.int64)
        f["label"] = rng.integers(0, 10, size=40, dtype=np.int64)

    # data.h5: a table as PyTables and pandas write one, a compound dataset.
    table = np.zeros(500, dtype=[("Longitude", "<f8"), ("Latitude", "<f8"), ("name", "S8")])
    table["Longitude"] = rng.uniform(-180, 180, size=500)
    table["Latitude"] = rng.uniform(-90, 90, size=500)
    with h5py.File(os.path.join(folder, "data.h5"), "w") as f:
        f["table"] = table

    db = sqlite3.connect(os.path.join(folder, "train.db"))
    db.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, x BLOB, label INTEGER)")
    db.executemany("INSERT INTO samples VALUES (?, ?, ?)",
                   [(i, rng.standard_normal((7, 5), dtype=np.float32).tobytes(), i % 10)
                    for i in range(200)])
    db.commit()
    db.close()

    # tabular.db: an id key and 35 REAL feature columns, as a feature table is stored.
    db = sqlite3.connect(os.path.join(folder, "tabular.db"))
    columns = ", ".join(f"f{i} REAL" for i in range(35))
    db.execute(f"CREATE TABLE samples (id INTEGER PRIMARY KEY, {columns}, label INTEGER)")
    db.executemany(f"INSERT INTO samples VALUES ({', '.join('?' * 37)})",
                   [(i, *rng.standard_normal(35).tolist(), i % 10) for i in range(300)])
    db.commit()
    db.close()

    _make_images(os.path.join(folder, "images", "train"), ["cat", "dog"], 6, seed=1)
    _make_images(os.path.join(folder, "images", "val"), ["cat", "dog"], 3, seed=2)


class _Model(torch.nn.Module):
    """Stands in for the reader's model: scores of 10 classes per row, from any input."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x, *rest):
        x = x.float().flatten(1)
        x = torch.nn.functional.pad(x, (0, max(0, 10 - x.shape[1])))[:, :10]
        return x * self.scale


def _stand_ins():
    return {"__name__": "__main__", "model": _Model(), "epochs": 2, "mean": 0.5, "std": 0.25}


def _gpufeed_bin():
    return os.environ.get("GPUFEED_BIN", os.path.join(ROOT, "build", "src", "cli", "gpufeed"))


def _remove_shm_caches_of(folder):
    """The examples' cache="shm" / "auto" leave caches in /dev/shm: remove those of our files
    (their identity names each file's inode and modification time, or its absolute path)."""
    binary = _gpufeed_bin()
    if not os.path.exists(binary):
        return
    listed = subprocess.run([binary, "cache", "ls", "--json"], capture_output=True, text=True)
    if listed.returncode != 0:
        return
    marks = {folder}
    for parent, _, files in os.walk(folder):
        for name in files:
            st = os.stat(os.path.join(parent, name))
            marks.add(f"={st.st_ino}:{st.st_mtime_ns}")
    keys = [c["key"] for c in json.loads(listed.stdout or "[]")
            if any(mark in c.get("identity", "") for mark in marks)]
    if keys:
        subprocess.run([binary, "cache", "rm", *keys], capture_output=True)


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("docs-data"))
    _make_fixture_data(folder)
    yield folder
    _remove_shm_caches_of(folder)


def test_the_documents_hold_examples():
    names = {name for name, _, _, _ in _blocks()}
    assert "README.md" in names


LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
GENERATED = {os.path.join("docs", "benchmarks.md")}


def test_relative_links_resolve():
    broken = []
    for name in _documents():
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = f.read()
        for match in LINK.finditer(text):
            target = match.group(1)
            if "://" in target:
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(name), target))
            if path not in GENERATED and not os.path.exists(os.path.join(ROOT, path)):
                broken.append(f"{name}: {target}")
    assert not broken, broken


@pytest.mark.parametrize("document, line, code", _params())
def test_example_runs(document, line, code, data_folder, monkeypatch):
    monkeypatch.chdir(data_folder)
    for module in re.findall(r"^import (\w+)$", code, re.M):
        if module != "gpufeed":  # a peer the example needs (optuna, h5py): scripts/setup has it
            pytest.importorskip(module)
    namespace = _stand_ins()
    exec(compile(code, f"{document}:{line}", "exec"), namespace)  # noqa: S102 - our own docs


# C++ blocks are compile-checked (syntax only): the #include lines at file scope, the rest in a
# function, with stand-ins for what the example leaves to the reader.
CPP_FENCE = re.compile(r"^```cpp[^\n]*\n(.*?)^```", re.S | re.M)
CPP_STAND_INS = """#include <cstdint>
#include <string>
[[maybe_unused]] static std::uintptr_t my_cuda_stream = 0;
[[maybe_unused]] static void train_step(const void*, const void*, std::int64_t = 0) {}
"""


def _cpp_blocks():
    found = []
    for name in _documents():
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = f.read()
        for match in CPP_FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(pytest.param(match.group(1), id=f"{name}:{line}"))
    return found


def _compiler():
    for name in ("g++", "clang++-14", "clang++"):
        for folder in os.environ.get("PATH", "").split(os.pathsep):
            if os.access(os.path.join(folder, name), os.X_OK):
                return name
    return None


@pytest.mark.parametrize("code", _cpp_blocks())
def test_cpp_example_compiles(code):
    compiler = _compiler()
    if compiler is None:
        pytest.skip("no C++ compiler")
    lines = code.splitlines()
    includes = [line for line in lines if line.startswith("#include")]
    body = [line for line in lines if not line.startswith("#include")]
    source = "\n".join(includes) + "\n" + CPP_STAND_INS + "void Example() {\n" + \
        "\n".join(body) + "\n}\n"
    result = subprocess.run(
        [compiler, "-std=c++20", "-fsyntax-only", "-Wall", "-Wno-unused-variable",
         "-I", os.path.join(ROOT, "include"), "-x", "c++", "-"],
        input=source, capture_output=True, text=True)
    assert result.returncode == 0, source + "\n" + result.stderr
