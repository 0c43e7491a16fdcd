#!/usr/bin/python3
"""Token corpora: gpufeed's packed rows against DataLoader over np.memmap, and the padding of
random, bucketed and bin-packed batches.

Run with Debian's python (it has torch and numpy):

    /usr/bin/python3 bench/token_packing.py [--gpufeed build/src/cli/gpufeed] [--docs 450000]

Builds, once, in a cache folder (default ~/.cache/gpufeed-bench): a Megatron-LM indexed corpus,
`tokens-<docs>.bin` + `.idx`, written byte for byte as Megatron's index writer does (the
MMIDIDX header, version 1, dtype code 4 = int32, the sequence lengths, byte pointers and
document index): `--docs` documents of log-normal lengths (median 400, sigma 0.5; about 204 M
int32 tokens for 450,000). Then measures, in one run:
  (a) torch.utils.data.DataLoader, 2 workers, batch 8 documents, shuffled, over the pattern
      users write: a Dataset whose __getitem__ slices one document out of np.memmap views of
      the .bin and .idx, and a collate_fn that pads the batch to its longest document. Only
      the first batches (from the iterator's creation) are timed; tokens/s counts real tokens.
  (b) gpufeed.Loader(prefix, sequences=gpufeed.Pack(4096), batch_size=8, workers=2) in order and
      shuffled: 3 epochs each, tokens/s (rows' real tokens) of each epoch, the median printed,
      and the loader's time per batch. The Loader's open (reading every document's length) is
      timed apart.
  (c) `gpufeed bench PREFIX --pack-length 4096 -b 64 --workers 2 --epochs 10 --json`, with
      and without `--no-ids`: tokens/s at [64, 4096] against the memcpy ceiling of the same
      threads (its bytes/s over 4 bytes a token). The ids are written, not copied, so the
      batch's bytes with ids are no figure to hold against a memcpy.
  (d) The fill (real tokens / all the rows' tokens) of the same lengths: gpufeed's padded rows
      (max_length = the longest document), and whole documents packed into rows of 4096
      (split=False), from gpufeed's stats.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "build", "python")]
import gpufeed  # noqa: E402

LENGTH = 4096
MEDIAN = 400
SIGMA = 0.5


def write_indexed(prefix, lengths):
    """prefix.bin + prefix.idx as Megatron-LM's _IndexWriter writes them (int32 tokens)."""
    if os.path.exists(prefix + ".idx"):
        return
    rng = np.random.default_rng(1)
    with open(prefix + ".bin.tmp", "wb") as out:
        step = 20_000
        for start in range(0, len(lengths), step):
            n = int(lengths[start:start + step].sum())
            out.write(rng.integers(0, 50_257, size=n, dtype=np.int32).tobytes())
    pointers = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * 4, out=pointers[1:])
    with open(prefix + ".idx.tmp", "wb") as idx:
        idx.write(b"MMIDIDX\x00\x00")
        idx.write(np.array([1], dtype="<u8").tobytes())        # version
        idx.write(np.array([4], dtype="<u1").tobytes())        # dtype code: int32
        idx.write(np.array([len(lengths)], dtype="<u8").tobytes())      # sequences
        idx.write(np.array([len(lengths) + 1], dtype="<u8").tobytes())  # document indices
        idx.write(lengths.astype("<i4").tobytes())
        idx.write(pointers.astype("<i8").tobytes())
        idx.write(np.arange(len(lengths) + 1, dtype="<i8").tobytes())
    os.replace(prefix + ".bin.tmp", prefix + ".bin")
    os.replace(prefix + ".idx.tmp", prefix + ".idx")


def corpus_lengths(docs):
    rng = np.random.default_rng(0)
    return np.maximum(1, rng.lognormal(np.log(MEDIAN), SIGMA, docs)).astype(np.int32)


class MemmapDocuments(Dataset):
    """The per-sample pattern: one document sliced out of np.memmap per __getitem__."""

    def __init__(self, prefix):
        idx = np.memmap(prefix + ".idx", dtype=np.uint8, mode="r")
        count = int(idx[18:26].view("<u8")[0])
        self.lengths = np.frombuffer(idx, dtype="<i4", count=count, offset=34)
        self.pointers = np.frombuffer(idx, dtype="<i8", count=count, offset=34 + 4 * count)
        self.bin = np.memmap(prefix + ".bin", dtype=np.int32, mode="r")

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        start = int(self.pointers[i]) // 4
        return torch.from_numpy(np.array(self.bin[start:start + int(self.lengths[i])]))


def pad_collate(batch):
    """The padding collate_fn users write (bench/hdf5_vlen.py's baseline uses it too)."""
    longest = max(len(t) for t in batch)
    out = torch.zeros(len(batch), longest, dtype=torch.int32)
    lengths = torch.empty(len(batch), dtype=torch.int64)
    for i, t in enumerate(batch):
        out[i, :len(t)] = t
        lengths[i] = len(t)
    return {"tokens": out, "tokens_lengths": lengths}


def dataloader_tokens_per_s(prefix, seconds):
    loader = DataLoader(MemmapDocuments(prefix), batch_size=8, shuffle=True, num_workers=2,
                        collate_fn=pad_collate, persistent_workers=False)
    tokens = 0
    start = time.perf_counter()
    for batch in loader:
        tokens += int(batch["tokens_lengths"].sum())
        if time.perf_counter() - start > seconds:
            break
    return tokens / (time.perf_counter() - start)


def gpufeed_epochs(prefix, shuffle, epochs=3):
    t0 = time.perf_counter()
    loader = gpufeed.Loader(prefix, batch_size=8, shuffle=shuffle, workers=2, device="cpu",
                            sequences=gpufeed.Pack(LENGTH))
    open_s = time.perf_counter() - t0
    rates, per_batch = [], []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        tokens = 0
        batches = 0
        start = time.perf_counter()
        for batch in loader:
            tokens += int(batch["tokens_lengths"].sum())
            batches += 1
        elapsed = time.perf_counter() - start
        rates.append(tokens / elapsed)
        per_batch.append(elapsed / batches)
    loader.close()
    return open_s, statistics.median(rates), statistics.median(per_batch)


def wide_rows(binary, prefix, ids):
    """tokens/s at [64, 4096] from `gpufeed bench`, and its memcpy ceiling (same threads) in
    tokens/s: the bytes/s it copies over 4 bytes a token."""
    command = [binary, "bench", prefix, "--pack-length", str(LENGTH), "-b", "64", "--workers",
               "2", "--no-shuffle", "--epochs", "10", "--json"] + ([] if ids else ["--no-ids"])
    doc = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    source = doc["stats"]["source"]
    share_real = source["varlen_items"] / (source["varlen_items"] + source["varlen_pad_items"])
    tokens_per_s = doc["samples_per_s"] * LENGTH * share_real
    return tokens_per_s, doc["ceiling_bytes_per_s"] / 4


def fills(prefix):
    """Real tokens / all the rows' tokens: padded rows and whole documents packed."""
    result = []
    for options in ({"sequences": gpufeed.Pad()},
                    {"sequences": gpufeed.Pack(LENGTH, split=False)}):
        loader = gpufeed.Loader(prefix, batch_size=64, device="cpu", **options)
        result.append(1 - loader.stats()["source"]["varlen_padding_share"])
        loader.close()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpufeed", default=os.path.join(ROOT, "build", "src", "cli", "gpufeed"))
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/gpufeed-bench"))
    parser.add_argument("--docs", type=int, default=450_000)
    parser.add_argument("--dataloader-seconds", type=float, default=10)
    args = parser.parse_args()
    os.makedirs(args.cache_dir, exist_ok=True)
    prefix = os.path.join(args.cache_dir, f"tokens-{args.docs}")
    lengths = corpus_lengths(args.docs)
    write_indexed(prefix, lengths)
    print(f"corpus: {args.docs:,} documents, {int(lengths.sum()):,} int32 tokens "
          f"(log-normal lengths, median {int(np.median(lengths))})")

    baseline = dataloader_tokens_per_s(prefix, args.dataloader_seconds)
    print(f"DataLoader (memmap __getitem__ + padding collate, 2 workers, batch 8): "
          f"{baseline / 1e6:.2f} M tokens/s")
    for shuffle in (False, True):
        open_s, rate, per_batch = gpufeed_epochs(prefix, shuffle)
        name = "shuffled" if shuffle else "in order"
        print(f"gpufeed packed [8, {LENGTH}] {name}: {rate / 1e6:.1f} M tokens/s "
              f"(median of 3 epochs; {per_batch * 1e6:.0f} us per batch; open {open_s:.2f} s)")
        print(f"gpufeed / DataLoader, {name}: {rate / baseline:.1f}x")
    for ids in (False, True):
        wide, memcpy = wide_rows(args.gpufeed, prefix, ids)
        name = "with position and document ids" if ids else "tokens only (ids=False)"
        print(f"gpufeed packed [64, {LENGTH}], {name}: {wide / 1e6:.0f} M tokens/s; memcpy of "
              f"the tokens' bytes, same threads: {memcpy / 1e6:.0f} M tokens/s; "
              f"tokens ratio {wide / memcpy:.2f}")
    padded_fill, packed_fill = fills(prefix)
    print(f"fill: padded rows {padded_fill:.3f}; whole documents packed (split=False) "
          f"{packed_fill:.3f}")


if __name__ == "__main__":
    main()
