#!/usr/bin/python3
"""How long a loader with cache="shm" makes its user wait on a cold cache, against the same
loader without a cache, in one run.

    PYTHONPATH=build/python /usr/bin/python3 bench/cache_cold_start.py [--json]

On the demo HDF5 file (`gpufeed demo` makes it: 820 MB, chunked as h5py chunks it), with a
fresh shared-memory folder each time: the constructor's time, the time from the constructor
to the first batch, and the time until the loader reads from the finished shm copy (the copy
is built in the background while the first epoch streams). The uncached loader on the same
file is the peer. Opening the HDF5 source and importing gpufeed are one-time costs, printed
apart.
"""
import argparse
import json
import os
import shutil
import tempfile
import time

import gpufeed

DEMO_H5 = os.path.expanduser("~/.cache/gpufeed/demo-mel.h5")


def first_batch(path, cache):
    """(open s, constructor s, constructor to first batch s, loader, iterator)."""
    t0 = time.perf_counter()
    source = gpufeed.open(path, fields=["mel", "label"])
    t_open = time.perf_counter()
    loader = gpufeed.Loader(source, batch_size=8192, shuffle=True, device="cpu", cache=cache,
                            autotune=False)
    t_made = time.perf_counter()
    it = iter(loader)
    next(it)
    t_first = time.perf_counter()
    return t_open - t0, t_made - t_open, t_first - t_made, loader, it


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", default=DEMO_H5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if not os.path.exists(args.path):
        p.error(f"{args.path} is missing: run `gpufeed demo --no-baseline --seconds 0 --epochs 1`")
    shm_dir = tempfile.mkdtemp(prefix="gpufeed-cold-", dir="/dev/shm")
    try:
        _, plain_made, plain_first, loader, _ = first_batch(args.path, "none")
        loader.close()
        opened, made, first, loader, it = first_batch(
            args.path, gpufeed.Cache("shm", shm_dir=shm_dir))
        t_made_plus_first = time.perf_counter()
        loader.wait_for_cache()
        switch = time.perf_counter() - t_made_plus_first + first
        built = loader.cache_info
        loader.close()
    finally:
        shutil.rmtree(shm_dir, ignore_errors=True)
    figures = {
        "open_s": opened,
        "constructor_s": made,
        "first_batch_s": first,
        "uncached_constructor_s": plain_made,
        "uncached_first_batch_s": plain_first,
        "first_batch_vs_uncached": first / plain_first if plain_first > 0 else None,
        "copy_complete_s": switch,
        "serving": built["serving"],
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"one-time: opening the HDF5 source {opened:.3f} s")
    print(f"cache='shm', cold: constructor {made * 1000:.1f} ms, first batch {first:.3f} s after it")
    print(f"cache='none':      constructor {plain_made * 1000:.1f} ms, first batch "
          f"{plain_first:.3f} s after it")
    print(f"first batch, shm cold / uncached: {figures['first_batch_vs_uncached']:.2f}")
    print(f"the shm copy was complete {switch:.1f} s after the constructor "
          f"(the loader then reads it: {built['serving']})")


if __name__ == "__main__":
    main()
