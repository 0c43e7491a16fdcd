#!/usr/bin/python3
"""Short processes in a row, each `gpufeed.Loader(path, cache="shm")` reading a few batches
of an HDF5 file and exiting: whether the copy the first one starts is published for the node,
and what the next process's first batch costs.

Run with Debian's python (h5py, numpy, torch), from the repository root with the build tree's
package on the path and its CLI named:

    PYTHONPATH=python:build/python GPUFEED_BIN=build/src/cli/gpufeed \\
        /usr/bin/python3 bench/shm_short_processes.py [--rows 40000] [--processes 8] [--detach 1]

Writes (once, in --data-dir) N x float32[1,64,32] `mel` + int64 `label` with h5py (chunks
of 256 rows, uncompressed), then runs --processes processes one after another and one more,
each in a fresh interpreter against an shm root of its own under /dev/shm (removed at the
end). Prints, per process: seconds from Loader() to the first batch and what served it
(`serving`: "shm" is the published copy, "none" the source); when the copy was published,
counted from the end of the last of the row; the copies `gpufeed cache ls` lists at the end.
With --detach 0 every build stays in its process (Cache(detach=False)).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, sys, time
import gpufeed
path, root, detach, batches = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
start = time.perf_counter()
loader = gpufeed.Loader(path, fields=["mel", "label"], batch_size=256, shuffle=True,
                        device="cpu", cache=gpufeed.Cache("shm", shm_dir=root, detach=detach))
first, serving = None, None
for i, batch in enumerate(loader):
    if first is None:
        first, serving = time.perf_counter() - start, loader.cache_info["serving"]
    if i + 1 >= batches:
        break
print(json.dumps({"first": first, "serving": serving, "key": loader.cache_info["key"]}))
"""


def build_file(path, rows):
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    with h5py.File(path + ".tmp", "w") as f:
        mel = f.create_dataset("mel", (rows, 1, 64, 32), dtype="float32", chunks=(256, 1, 64, 32))
        for begin in range(0, rows, 4096):
            end = min(rows, begin + 4096)
            mel[begin:end] = rng.standard_normal((end - begin, 1, 64, 32), dtype=np.float32)
        f.create_dataset("label", data=np.arange(rows, dtype=np.int64) % 10)
    os.replace(path + ".tmp", path)


def ls(binary, root):
    out = subprocess.run([binary, "cache", "ls", "--json", "--dir", root], capture_output=True,
                         text=True, check=True)
    return [e for e in json.loads(out.stdout) if ".tmp-" not in e["path"]]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--detach", default="1")
    parser.add_argument("--wait", type=float, default=120, help="seconds to wait for the copy")
    parser.add_argument("--data-dir", default=os.path.expanduser("~/.cache/gpufeed-bench"))
    a = parser.parse_args()
    binary = os.environ.get("GPUFEED_BIN") or shutil.which("gpufeed")
    os.makedirs(a.data_dir, exist_ok=True)
    path = os.path.join(a.data_dir, f"short_processes_{a.rows}.h5")
    if not os.path.exists(path):
        build_file(path, a.rows)
    print(f"data: {path} ({os.path.getsize(path) / 1e6:.0f} MB), detach={a.detach}")
    root = tempfile.mkdtemp(prefix="gpufeed-short-", dir="/dev/shm")
    try:
        last_end = None
        for n in range(1, a.processes + 2):
            if n == a.processes + 1:  # the last one comes once the copy is there (or --wait)
                deadline = time.monotonic() + a.wait
                while not ls(binary, root) and time.monotonic() < deadline:
                    time.sleep(0.1)
            out = subprocess.run([sys.executable, "-c", CHILD, path, root, a.detach,
                                  str(a.batches)], capture_output=True, text=True, check=True)
            if n == a.processes:
                last_end = time.time()
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"process {n}: first batch {r['first']:.3f} s, served by "
                  f"{'the copy' if r['serving'] == 'shm' else 'the source'} "
                  f"({r['serving']}), key {r['key']}")
        copies = ls(binary, root)
        if not copies:
            print("no copy was published")
        for e in copies:
            published = time.time() - e["age_s"]
            print(f"published: {e['key']} {e['bytes'] / 1e6:.0f} MB, built "
                  f"{100 * e['built_share']:.0f} %, {published - last_end:+.2f} s from the end "
                  f"of process {a.processes} (negative: before it ended)")
    finally:
        subprocess.run([binary, "cache", "rm", "--all", "--force", "--dir", root],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
