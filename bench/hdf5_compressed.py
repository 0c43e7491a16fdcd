#!/usr/bin/python3
"""Compressed HDF5: gpufeed vs DataLoader over per-sample h5py, the decode ceiling, and
libdeflate vs this project's zlib path, on the synthetic mel set written four ways.

Run with Debian's python (torch, h5py, hdf5plugin, numpy):

    /usr/bin/python3 bench/hdf5_compressed.py [--samples 100000] [--gpufeed build/src/cli/gpufeed]

Builds once, in a cache folder (default ~/.cache/gpufeed-bench): SAMPLES x float32[1,64,32]
`mel` + int64 `label`, chunks of 256 samples, written as
  gzip1_shuffle:        gzip level 1 + shuffle (h5py's compression="gzip", shuffle=True)
  blosc_lz4_bitshuffle: hdf5plugin.Blosc(cname="lz4", shuffle=BITSHUFFLE)
  blosc_zstd:           hdf5plugin.Blosc(cname="zstd")  (byte shuffle)
  lz4:                  hdf5plugin.LZ4()
Then, per format, in one run (2 workers, batch 8192):
  gpufeed samples/s with block shuffle (--block-epochs, default 10) and full shuffle
    (--full-epochs, default 3);
  DataLoader (2 workers) over a per-sample h5py Dataset (hdf5plugin imported): a few small
    batches timed, samples/s extrapolated (each sample decodes its whole 2 MB chunk, so the
    rate does not depend on the batch size), and gpufeed's ratio to it;
  the ceiling: every chunk of the file decoded once by 2 threads with the same library, no
    gather (build/bench/bench_hdf5_decode_ceiling), and block shuffle's share of it;
and for gzip, the same gpufeed runs with GPUFEED_HDF5_INFLATE=zlib (the zlib path gpufeed had
before libdeflate) and their ratio. Last, the trace's cost: block shuffle over blosc_lz4 with
recording off (--trace-batches -1) against recording on and the trace written (--trace),
alternated, best of several runs each.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import hdf5plugin  # the filters for h5py here and in the DataLoader's forked workers

# The synthetic mel file and the per-sample h5py DataLoader, as the uncompressed comparison has
# them.
from hdf5_vs_dataloader import build_file, measure_dataloader

BATCH = 8192
WORKERS = 2

FORMATS = {
    "gzip1_shuffle": lambda: dict(compression="gzip", compression_opts=1, shuffle=True),
    "blosc_lz4_bitshuffle": lambda: dict(hdf5plugin.Blosc(cname="lz4", clevel=5,
                                                          shuffle=hdf5plugin.Blosc.BITSHUFFLE)),
    "blosc_zstd": lambda: dict(hdf5plugin.Blosc(cname="zstd", clevel=5,
                                                shuffle=hdf5plugin.Blosc.SHUFFLE)),
    "lz4": lambda: dict(hdf5plugin.LZ4()),
}



def run_gpufeed(binary, path, block_shuffle, epochs=1, env=None, extra=()):
    cmd = [binary, "bench", path, "--fields", "mel,label", "--json", "--quiet",
           "--batch-size", str(BATCH), "--workers", str(WORKERS), "--epochs", str(epochs),
           *extra]
    if block_shuffle:
        cmd.append("--block-shuffle")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=dict(os.environ, **(env or {})))
    return json.loads(out.stdout)["samples_per_s"]


def run_ceiling(binary, path, zlib=False):
    cmd = [binary, path, "--dataset", "mel", "--dataset", "label", "--threads", str(WORKERS)]
    if zlib:
        cmd.append("--zlib")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["samples_per_s"]


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.join(os.path.dirname(here), "build")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpufeed", default=os.environ.get(
        "GPUFEED_BIN", os.path.join(build, "src", "cli", "gpufeed")))
    p.add_argument("--ceiling", default=os.path.join(build, "bench", "bench_hdf5_decode_ceiling"))
    p.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/gpufeed-bench"))
    p.add_argument("--samples", type=int, default=100_000, help="samples per file")
    p.add_argument("--dl-batch", type=int, default=128,
                   help="DataLoader batch size timed (the cost is per sample)")
    p.add_argument("--dl-batches", type=int, default=2)
    p.add_argument("--trace-runs", type=int, default=5, help="runs per side of the trace check")
    p.add_argument("--block-epochs", type=int, default=10,
                   help="epochs per block-shuffle run (start-up weighs less over several)")
    p.add_argument("--full-epochs", type=int, default=3)
    p.add_argument("--json", action="store_true", help="also print one JSON line of results")
    return p.parse_args()


def main():
    args = parse_args()
    for b in (args.gpufeed, args.ceiling):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} not found: build it (make build) or pass its path")

    os.makedirs(args.cache_dir, exist_ok=True)
    paths = {}
    t = time.perf_counter()
    for name, kw in FORMATS.items():
        paths[name] = os.path.join(args.cache_dir, f"seed_{args.samples}_{name}.h5")
        build_file(paths[name], args.samples, **kw())
    print(f"files: {args.samples} samples each, in {args.cache_dir} "
          f"[{time.perf_counter() - t:.1f} s to build what was missing]")
    print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}; "
          f"{WORKERS} workers, batch {BATCH}")
    for path in paths.values():  # page the files in
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass

    results = {}
    print(f"\n{'format':22s} {'size':>8s} {'block':>11s} {'full':>11s} {'DataLoader':>11s} "
          f"{'block/DL':>9s} {'ceiling':>11s} {'block/ceil':>10s}")
    for name, path in paths.items():
        block = run_gpufeed(args.gpufeed, path, True, epochs=args.block_epochs)
        full = run_gpufeed(args.gpufeed, path, False, epochs=args.full_epochs)
        dl = measure_dataloader(path, args.dl_batch, args.dl_batches, WORKERS)[0]
        ceiling = run_ceiling(args.ceiling, path)
        results[name] = dict(block=block, full=full, dataloader=dl, ceiling=ceiling,
                             mib=os.path.getsize(path) / 2**20)
        print(f"{name:22s} {results[name]['mib']:6.0f}MiB {block:11,.0f} {full:11,.0f} "
              f"{dl:11,.0f} {block / dl:8.0f}x {ceiling:11,.0f} {block / ceiling:10.2f}")
    print(f"(samples/s; block: gpufeed over {args.block_epochs} epochs, full: over "
          f"{args.full_epochs}; ceiling: every chunk decoded "
          "once by 2 threads, no gather; target block/ceil >= 0.8)")

    gz = paths["gzip1_shuffle"]
    zlib_env = {"GPUFEED_HDF5_INFLATE": "zlib"}
    z_block = run_gpufeed(args.gpufeed, gz, True, epochs=args.block_epochs, env=zlib_env)
    z_full = run_gpufeed(args.gpufeed, gz, False, epochs=args.full_epochs, env=zlib_env)
    z_ceiling = run_ceiling(args.ceiling, gz, zlib=True)
    r = results["gzip1_shuffle"]
    print(f"\ngzip level 1 + shuffle, libdeflate vs the zlib path (target >= 1.8x):")
    print(f"  block shuffle: {r['block']:11,.0f} vs {z_block:11,.0f} samples/s = "
          f"{r['block'] / z_block:.2f}x")
    print(f"  full shuffle:  {r['full']:11,.0f} vs {z_full:11,.0f} samples/s = "
          f"{r['full'] / z_full:.2f}x")
    print(f"  ceiling:       {r['ceiling']:11,.0f} vs {z_ceiling:11,.0f} samples/s = "
          f"{r['ceiling'] / z_ceiling:.2f}x")
    results["gzip_zlib"] = dict(block=z_block, full=z_full, ceiling=z_ceiling)

    # The trace's cost: alternate off / on so drifting load hits both sides alike.
    trace_path = os.path.join(args.cache_dir, "trace.json")
    off, on = [], []
    lz = paths["blosc_lz4_bitshuffle"]
    for _ in range(args.trace_runs):
        off.append(run_gpufeed(args.gpufeed, lz, True, epochs=args.block_epochs,
                               extra=("--trace-batches", "-1")))
        on.append(run_gpufeed(args.gpufeed, lz, True, epochs=args.block_epochs,
                              extra=("--trace", trace_path)))
    with open(trace_path) as f:
        events = len(json.load(f)["traceEvents"])
    print(f"\ntrace cost (blosc_lz4_bitshuffle, block shuffle, {args.block_epochs} epochs, "
          f"{args.trace_runs} runs "
          f"each): off best {max(off):,.0f} / median {statistics.median(off):,.0f}; on best "
          f"{max(on):,.0f} / median {statistics.median(on):,.0f} samples/s -> "
          f"{100 * (1 - max(on) / max(off)):+.1f}% (best), "
          f"{100 * (1 - statistics.median(on) / statistics.median(off)):+.1f}% (median); "
          f"the trace held {events} events (target < 2%)")
    results["trace"] = dict(off=off, on=on)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
