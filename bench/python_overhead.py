#!/usr/bin/env python3
"""Python overhead per batch: what gpufeed's Python layer adds on top of the C++ Next().

Feeds tiny synthetic batches (so reading costs next to nothing) through an empty training
loop and splits the loop's time per batch, from the loader's own C++ stats, into
  - Next():   time inside the C++ Next() (waiting for workers, handing out the batch),
  - Python:   everything between two Next() calls: DLPack capsules, torch tensors, the batch
              dict, the iterator -- the Python overhead (target: <= 50 us),
and compares with a loop of Next() calls in C++ alone.

usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--batches N]
"""

import argparse
import time

import gpufeed


def measure(schema, batches, batch_size, workers):
    source = gpufeed.synthetic(schema, samples=batch_size * 1000)
    with gpufeed.Loader(source, batch_size=batch_size, workers=workers, device="cpu",
                        autotune=False) as loader:
        it = iter(loader)
        for _ in range(100):  # warm up: pool buffers, first batches
            next(it)
        base = loader.stats()
        start = time.perf_counter()
        done = 0
        while done < batches:
            for _batch in it:
                done += 1
                if done == batches:
                    break
            else:
                it = iter(loader)
        wall = time.perf_counter() - start
        stats = loader.stats()
    n = stats["batches"] - base["batches"]
    next_s = stats["consumer_wait_s"] - base["consumer_wait_s"]
    python_s = stats["consumer_step_s"] - base["consumer_step_s"]

    source = gpufeed.synthetic(schema, samples=batch_size * 1000)
    with gpufeed.Loader(source, batch_size=batch_size, workers=workers, device="cpu",
                        autotune=False) as loader:
        loader._impl.drain(100)
        cpp_s, cpp_n = loader._impl.drain(batches)
    return wall / n, next_s / n, python_s / n, cpp_s / cpp_n


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    cases = [
        ("2 fields", "x:float32[4],label:int64[]"),
        ("8 fields", ",".join(f"f{i}:float32[4]" for i in range(7)) + ",flag:bool[]"),
    ]
    print(f"{args.batches} batches of {args.batch_size} samples, {args.workers} workers, "
          f"host device; microseconds per batch")
    print(f"{'case':<10} {'loop':>8} {'Next()':>8} {'Python':>8} {'C++ loop':>9}")
    for name, schema in cases:
        loop, next_s, python, cpp = measure(schema, args.batches, args.batch_size, args.workers)
        print(f"{name:<10} {loop * 1e6:8.1f} {next_s * 1e6:8.1f} {python * 1e6:8.1f} "
              f"{cpp * 1e6:9.1f}")
    print("Python = time between Next() calls in an empty loop (target <= 50 us); "
          "C++ loop = Next() alone, no Python.")


if __name__ == "__main__":
    main()
