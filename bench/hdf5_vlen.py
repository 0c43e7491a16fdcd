#!/usr/bin/python3
"""HDF5 variable-length token sequences: gpufeed's own reader against DataLoader + h5py.

Run with Debian's python (it has torch, h5py and numpy):

    /usr/bin/python3 bench/hdf5_vlen.py [--samples 50000]

Builds, once, in a cache folder (default ~/.cache/gpufeed-bench): `vlen-<samples>.h5`, one
dataset `tokens` of h5py.vlen_dtype(np.int32), gzip level 4 on h5py's chunks=True, of
log-normal lengths (median 200, sigma 0.6) as h5py writes it (global heap collections beside
the dataset's references). Then measures, in one run, real tokens/s of padded batches of 64
documents, shuffled, 2 workers each:
  (a) torch.utils.data.DataLoader over a Dataset whose __getitem__ reads one sequence with
      h5py (the file opened once per worker), with a collate_fn that pads to the batch's
      longest. Only the first batches are timed (from the iterator's creation).
  (b) gpufeed.Loader(file, fields=["tokens"], sequences=gpufeed.Pad(2048)), 3 epochs, the
      median printed;
      its open (every sequence's length read) timed apart.
and prints the ratio.
"""
import argparse
import os
import statistics
import sys
import time

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "build", "python")]
import gpufeed  # noqa: E402
from token_packing import pad_collate  # noqa: E402  (the same padding collate_fn)

MAX_LENGTH = 2048


def build_file(path, samples):
    if os.path.exists(path):
        return
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(200), 0.6, samples), 1, MAX_LENGTH).astype(np.int64)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        data = f.create_dataset("tokens", (samples,), dtype=h5py.vlen_dtype(np.int32),
                                chunks=True, compression="gzip", compression_opts=4)
        step = 5000
        for start in range(0, samples, step):
            block = np.empty(min(step, samples - start), dtype=object)
            for i in range(len(block)):
                block[i] = rng.integers(0, 50_257, size=lengths[start + i], dtype=np.int32)
            data[start:start + len(block)] = block
    os.replace(tmp, path)


class H5Sequences(Dataset):
    """The per-sample pattern: one h5py read per __getitem__."""

    def __init__(self, path):
        self.path = path
        with h5py.File(path, "r") as f:
            self.n = len(f["tokens"])
        self.file = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        return torch.from_numpy(self.file["tokens"][i])


def dataloader_tokens_per_s(path, seconds):
    loader = DataLoader(H5Sequences(path), batch_size=64, shuffle=True, num_workers=2,
                        collate_fn=pad_collate)
    tokens = 0
    start = time.perf_counter()
    for batch in loader:
        tokens += int(batch["tokens_lengths"].sum())
        if time.perf_counter() - start > seconds:
            break
    return tokens / (time.perf_counter() - start)


def gpufeed_tokens_per_s(path, epochs=3):
    t0 = time.perf_counter()
    loader = gpufeed.Loader(path, fields=["tokens"], batch_size=64, workers=2, device="cpu",
                            sequences=gpufeed.Pad(MAX_LENGTH))
    open_s = time.perf_counter() - t0
    rates = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        tokens = 0
        start = time.perf_counter()
        for batch in loader:
            tokens += int(batch["tokens_lengths"].sum())
        rates.append(tokens / (time.perf_counter() - start))
    loader.close()
    return open_s, statistics.median(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/gpufeed-bench"))
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--dataloader-seconds", type=float, default=10)
    args = parser.parse_args()
    os.makedirs(args.cache_dir, exist_ok=True)
    path = os.path.join(args.cache_dir, f"vlen-{args.samples}.h5")
    build_file(path, args.samples)
    print(f"file: {args.samples:,} int32 vlen sequences, gzip, h5py chunks=True "
          f"({os.path.getsize(path) / 1e6:.0f} MB)")
    baseline = dataloader_tokens_per_s(path, args.dataloader_seconds)
    print(f"DataLoader + h5py per sample (2 workers, batch 64, padded): "
          f"{baseline / 1e6:.2f} M tokens/s")
    open_s, rate = gpufeed_tokens_per_s(path)
    print(f"gpufeed padded [64, {MAX_LENGTH}]: {rate / 1e6:.1f} M tokens/s (median of 3 "
          f"epochs; open {open_s:.2f} s)")
    print(f"gpufeed / DataLoader: {rate / baseline:.1f}x")


if __name__ == "__main__":
    main()
