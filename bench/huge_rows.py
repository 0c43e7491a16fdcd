#!/usr/bin/python3
"""Rows of a gigabyte under an 8 GB address-space limit (`ulimit -v`, as a cluster job's
memory limit gives), each case in a fresh process: the open, the first batch and the user's
own copy of it, against h5py reading the same row in the same limit.

    PYTHONPATH=build/python /usr/bin/python3 bench/huge_rows.py [--dir DIR] [--limit-gb 8]
                                                                [--prepare-only]

Cases (files made once in DIR, their cost not in any figure):
  fill    int8 (3, 2**30), chunks of 16 MiB, nothing written: every row is the fill value
  rows    int32 (3, 2**28) written (3 GiB on disk): each row is 1 GiB of data
  refuse  int32 (20, 2**28) at batch_size=13: a 14 GB batch, refused when the loader is made
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import h5py
import numpy as np


def make(folder):
    os.makedirs(folder, exist_ok=True)
    paths = {k: os.path.join(folder, f"{k}.h5") for k in ("fill", "rows", "refuse")}
    if not os.path.exists(paths["fill"]):
        with h5py.File(paths["fill"], "w") as f:
            f.create_dataset("x", shape=(3, 2**30), dtype="i1", chunks=(1, 2**24))
    if not os.path.exists(paths["rows"]):
        with h5py.File(paths["rows"] + ".part", "w") as f:
            d = f.create_dataset("x", shape=(3, 2**28), dtype="i4")
            for r in range(3):
                for s in range(0, 2**28, 2**24):
                    d[r, s:s + 2**24] = np.arange(s, s + 2**24, dtype=np.int32) + r
        os.rename(paths["rows"] + ".part", paths["rows"])
    if not os.path.exists(paths["refuse"]):
        with h5py.File(paths["refuse"], "w") as f:
            f.create_dataset("x", shape=(20, 2**28), dtype="i4", chunks=(1, 2**22))
    return paths


def child(path, reader, batch_size, limit):
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if reader == "gpufeed":
        import gpufeed  # the import (torch's with it) is not the open's cost
    out = {}
    t = time.monotonic()
    try:
        if reader == "h5py":
            with h5py.File(path, "r") as f:
                out["open_s"] = time.monotonic() - t
                t = time.monotonic()
                row = f["x"][0:1]
                out["first_batch_s"] = time.monotonic() - t
                row.copy()
        else:
            loader = gpufeed.Loader(path, batch_size=batch_size, device="cpu", shuffle=False)
            out["open_s"] = time.monotonic() - t
            t = time.monotonic()
            batch = next(iter(loader))
            out["first_batch_s"] = time.monotonic() - t
            batch["x"].numpy().copy()
        out["copy_ok"] = True
    except MemoryError as e:
        out["error"] = f"MemoryError: {e}"
    except Exception as e:  # the refusal, or anything else: printed whole
        out["error"] = f"{type(e).__name__}: {e}"
        out["refused_s"] = time.monotonic() - t
    print(json.dumps(out))


def run(path, reader, batch_size, limit):
    done = subprocess.run([sys.executable, __file__, "--child", path, reader, str(batch_size),
                           str(limit)], capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{reader} on {path}: exit {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=os.path.expanduser("~/.cache/gpufeed/bench-huge-rows"))
    p.add_argument("--limit-gb", type=float, default=8.0)
    p.add_argument("--prepare-only", action="store_true", help="make the files and exit")
    args = p.parse_args()
    paths = make(args.dir)
    if args.prepare_only:
        return 0
    limit = int(args.limit_gb * 1e9)
    print(f"address-space limit: {limit} bytes (RLIMIT_AS, as `ulimit -v {limit // 1024}`)")
    summary = {}
    for case in ("fill", "rows"):
        g = run(paths[case], "gpufeed", 1, limit)
        h = run(paths[case], "h5py", 1, limit)
        for who, r in (("gpufeed", g), ("h5py", h)):
            print(f"{case}: {who}: open {r.get('open_s', float('nan')):.3f} s, first batch "
                  f"{r.get('first_batch_s', float('nan')):.2f} s, user's copy "
                  f"{'ok' if r.get('copy_ok') else r.get('error')}")
        summary[case] = {"open_s": g.get("open_s"), "first_batch_s": g.get("first_batch_s"),
                         "copy_ok": 1.0 if g.get("copy_ok") else 0.0,
                         "first_batch_ratio_to_h5py": (g["first_batch_s"] / h["first_batch_s"]
                                                       if g.get("copy_ok") and h.get("copy_ok")
                                                       else None)}
    r = run(paths["refuse"], "gpufeed", 13, limit)
    print(f"refuse: batch_size=13: after {r.get('refused_s', float('nan')):.3f} s: "
          f"{r.get('error', 'not refused')}")
    summary["refuse"] = {"refused_s": r.get("refused_s"),
                         "refused": 1.0 if "InvalidArgument" in r.get("error", "") else 0.0}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
