#!/usr/bin/python3
"""What `gpufeed rechunk` gains on the demo's HDF5 file: the same shuffled reads, no cache,
before and after the rewrite, in one run.

    /usr/bin/python3 bench/rechunk_gain.py [--gpufeed build/src/cli/gpufeed] [--epochs 2]

The demo file (`gpufeed demo` makes it once: 100,000 x float32[1,64,32] + int64, 820 MB) is
chunked as h5py's `chunks=True` chunks it, which cuts every sample into 256 pieces. The
rewrite (`gpufeed rechunk`, about 1 MiB of whole samples per chunk) is made once next to it and
timed on its own line (a one-time cost); then `gpufeed bench FILE --cache none` runs on both
files, alternating, and the samples/s of each and their ratio are printed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(binary, path, epochs):
    out = subprocess.run([binary, "bench", path, "--cache", "none", "-w", "2", "-b", "8192",
                          "-e", str(epochs), "--json"], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)["samples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpufeed", default=os.path.join(ROOT, "build", "src", "cli", "gpufeed"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="alternations of the two files")
    args = p.parse_args()
    demo = os.path.expanduser("~/.cache/gpufeed/demo-mel.h5")
    rechunked = os.path.expanduser("~/.cache/gpufeed/demo-mel-rechunked.h5")
    if not os.path.exists(demo):
        subprocess.run([args.gpufeed, "demo", "--no-baseline", "--seconds", "0", "--epochs",
                        "1"], check=True, capture_output=True)
    if not os.path.exists(rechunked) or os.path.getmtime(rechunked) < os.path.getmtime(demo):
        start = time.monotonic()
        subprocess.run([args.gpufeed, "rechunk", "-q", "--force", demo, rechunked], check=True,
                       capture_output=True)
        print(f"one-time: gpufeed rechunk of the demo file: {time.monotonic() - start:.1f} s")
    before, after = [], []
    for _ in range(args.rounds):
        before.append(bench(args.gpufeed, demo, args.epochs))
        after.append(bench(args.gpufeed, rechunked, args.epochs))
    b, a = max(before), max(after)
    print(f"h5py chunks=True layout: {b:12,.0f} samples/s (best of {args.rounds})")
    print(f"after gpufeed rechunk:   {a:12,.0f} samples/s (best of {args.rounds})")
    print(f"rechunked / original: {a / b:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
