#!/usr/bin/python3
"""Whole-file evaluation: per-file verdicts from segment scores, three ways, one run.

Run with Debian's python (torch, h5py, numpy) and the build tree's package:

    PYTHONPATH=build/python /usr/bin/python3 bench/file_level_eval.py

Builds, once, in a cache folder (default ~/.cache/gpufeed-bench): a synthetic set of 7,913
files with 8 to 64 segments each (uniform, seeded), float32[1,64,32] per segment (`mel`),
an int64 label per file (`label`) and `file_offsets` (F+1 row offsets), in one HDF5 file
written with h5py's defaults (contiguous, uncompressed). Then scores every file with the
same small CNN (CPU here; CUDA when torch has it), in one run, the methods taking turns
--rounds times (each figure the median of its rounds):
  (a) the per-file loop: read one file's segments with h5py, one forward, vote in Python;
  (b) 16 files per forward, stacked by hand (one h5py read of 16 consecutive files), the
      logits split back per file and voted in Python;
  (c) gpufeed, as the evaluation guide writes it: forward passes of the size
      gpufeed.forward_rows measures fastest per row, Loader(groups=Groups(offsets=
      "file_offsets")) batches of whole files of at least 512 rows scored in passes of that
      size, and voted on the device by gpufeed.GroupReducer(how="vote").
and prints files/s, the ratios, the batch fill, the model-only ceiling (the same forward
passes over segments already in memory) and whether the per-file
predictions of the three are identical (same model, same votes: each file's majority class
over its segments' argmax, ties to the lowest class).
"""
import argparse
import os
import time

import h5py
import numpy as np
import torch
from torch import nn

import gpufeed

FILES = 7913
SHAPE = (1, 64, 32)
CLASSES = 10
STACK = 16


def build_file(path, files, segments=(8, 64), seed=0):
    """The synthetic grouped file at `path` (once), with h5py's default dataset layout."""
    if os.path.exists(path):
        return
    rng = np.random.default_rng(seed)
    sizes = rng.integers(segments[0], segments[1] + 1, size=files)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    labels = rng.integers(0, CLASSES, size=files).astype(np.int64)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        mel = f.create_dataset("mel", shape=(int(offsets[-1]),) + SHAPE, dtype="f4")
        step = 256
        for start in range(0, files, step):
            end = min(files, start + step)
            rows = slice(int(offsets[start]), int(offsets[end]))
            # A per-file pattern on top of noise: files of one label look alike.
            n = rows.stop - rows.start
            base = rng.standard_normal((n,) + SHAPE).astype("f4")
            file_of_row = np.repeat(np.arange(start, end), sizes[start:end])
            base += (labels[file_of_row] / CLASSES).astype("f4")[:, None, None, None]
            mel[rows] = base
        f.create_dataset("label", data=labels)
        f.create_dataset("file_offsets", data=offsets)
    os.replace(tmp, path)


def make_model(device, kind="cnn"):
    torch.manual_seed(0)
    if kind == "linear":
        # Less compute per segment than the CNN, standing in for a GPU's fast forward pass:
        # more of what is left is the data path and the voting.
        model = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(SHAPE)), CLASSES))
        return model.to(device).eval()
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, CLASSES))
    return model.to(device).eval()


def forward(model, x, rows):
    """The model over `x` in passes of `rows` (all at once for rows <= 0). On a CPU a pass
    over thousands of segments is several times slower per segment than one over a hundred
    (its activations leave the caches), so a packed batch is scored in passes there; on a
    GPU usually in one."""
    if rows <= 0 or len(x) <= rows:
        return model(x)
    return torch.cat([model(part) for part in x.split(rows)])


def vote(logits):
    return int(torch.bincount(logits.argmax(1), minlength=CLASSES).argmax())


def per_file_loop(path, model, device):
    preds = []
    with h5py.File(path, "r") as f:
        mel, offsets = f["mel"], f["file_offsets"][:]
        for i in range(len(offsets) - 1):
            x = torch.from_numpy(mel[offsets[i]:offsets[i + 1]]).to(device)
            preds.append(vote(model(x)))
    return preds


def stacked(path, model, device):
    preds = []
    with h5py.File(path, "r") as f:
        mel, offsets = f["mel"], f["file_offsets"][:]
        files = len(offsets) - 1
        for first in range(0, files, STACK):
            last = min(files, first + STACK)
            x = torch.from_numpy(mel[offsets[first]:offsets[last]]).to(device)
            logits = model(x)
            sizes = np.diff(offsets[first:last + 1]).tolist()
            preds.extend(vote(part) for part in logits.split(sizes))
    return preds


def with_gpufeed(path, model, device, workers, prefetch, rows, batch):
    loader = gpufeed.Loader(path, fields=["mel"], batch_size=batch,
                            groups=gpufeed.Groups(offsets="file_offsets", fields=["label"]),
                            shuffle=False, device=device, workers=workers, prefetch=prefetch,
                            # As the guide writes it: gpufeed's defaults, unless a setting is
                            # pinned on the command line.
                            autotune=False if workers or prefetch else None)
    reducer = gpufeed.GroupReducer(loader.num_groups, how="vote", device=loader.device,
                                   num_classes=CLASSES)
    for batch in loader:
        reducer.update(forward(model, batch["mel"], rows), batch)
    preds = reducer.result().cpu().tolist()
    fill, batches = loader.pack_fill, len(loader)
    loader.close()
    return preds, fill, batches


def model_ceiling(path, model, device, rows, batch):
    """The same forward passes over segments already in memory: what the model costs."""
    with h5py.File(path, "r") as f:
        mel = torch.from_numpy(f["mel"][:])
    start = time.perf_counter()
    for s in range(0, len(mel), batch):
        forward(model, mel[s:s + batch].to(device), rows)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def warm_page_cache(path, device, batch):
    """Reads the file once, so every method below reads it from the page cache. Then opens it
    with gpufeed and reads it through gpufeed once, as (c) does: where the cached pages are
    small, that open drops them, and gpufeed's first read brings them back as 2 MiB pages (once
    per file); on a GPU it also pins the staging buffers the later loaders of the process take
    again. That one-time cost is printed apart, and kept out of the timed runs: left to them,
    the first method timed would read the file back from disk."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass
    start = time.perf_counter()
    loader = gpufeed.Loader(path, fields=["mel"], batch_size=batch,
                            groups=gpufeed.Groups(offsets="file_offsets", fields=["label"]),
                            shuffle=False, device=str(device))
    for _ in loader:
        pass
    loader.close()
    print(f"one-time: gpufeed's first open and read of the file: "
          f"{time.perf_counter() - start:.2f} s")


def timed(fn, device):
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/gpufeed-bench"))
    p.add_argument("--files", type=int, default=FILES)
    p.add_argument("--workers", type=int, default=None,
                   help="gpufeed reader threads (default: gpufeed's, tuned while it runs; "
                        "setting it or --prefetch turns the tuning off)")
    p.add_argument("--prefetch", type=int, default=None,
                   help="gpufeed batches kept ready (default: gpufeed's)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", choices=("cnn", "linear"), default="cnn",
                   help="cnn: the small CNN (default); linear: one linear layer, a stand-in "
                        "for a forward pass that costs little per segment (as on a GPU)")
    p.add_argument("--segments", default="8-64",
                   help="segments per file, LO-HI (uniform; the file is built once per range)")
    p.add_argument("--batch", type=int, default=None,
                   help="rows per packed gpufeed batch (default: the forward pass's rows, "
                        "at least 512)")
    p.add_argument("--forward-rows", type=int, default=None,
                   help="segments per forward pass within a packed batch (default: what "
                        "gpufeed.forward_rows measures)")
    p.add_argument("--rounds", type=int, default=3,
                   help="times each method runs, in turn with the others (default 3); each "
                        "figure is the median")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    os.makedirs(args.cache_dir, exist_ok=True)
    lo, _, hi = args.segments.partition("-")
    segments = (int(lo), int(hi or lo))
    if not 1 <= segments[0] <= segments[1]:
        p.error("--segments must be LO-HI with 1 <= LO <= HI")
    suffix = "" if segments == (8, 64) else f"_{segments[0]}-{segments[1]}"
    path = os.path.join(args.cache_dir, f"file_level_{args.files}{suffix}.h5")
    build_file(path, args.files, segments)
    device = torch.device(args.device)
    model = make_model(device, args.model)
    rows_per_forward = args.forward_rows
    if rows_per_forward is None:
        with torch.no_grad():
            rows_per_forward = gpufeed.forward_rows(model, torch.zeros(SHAPE, device=device))
        rates = ", ".join(f"{n}: {r:,.0f}" for n, r in gpufeed.forward_rows.last.items())
        print(f"gpufeed.forward_rows: {rows_per_forward} rows per pass (rows/s: {rates})")
    batch = args.batch or max(rows_per_forward, 512)
    with h5py.File(path, "r") as f:
        rows, files = f["mel"].shape[0], f["label"].shape[0]
        labels = f["label"][:]
    print(f"{path}: {files} files, {rows} segments of float32{list(SHAPE)} "
          f"({rows * 4 * int(np.prod(SHAPE)) / 1e9:.2f} GB); model {args.model}, device {device}, "
          f"torch threads {torch.get_num_threads()}, forward passes of "
          f"{rows_per_forward or 'whole'} segments within a packed batch")
    times = {"loop": [], "stack": [], "gpufeed": [], "ceiling": []}
    with torch.no_grad():
        warm_page_cache(path, device, batch)
        # The methods take turns, --rounds times: a shared machine's slow spell then lands on
        # every method alike, and each figure is the median of its rounds.
        for _ in range(args.rounds):
            loop, t = timed(lambda: per_file_loop(path, model, device), device)
            times["loop"].append(t)
            stack, t = timed(lambda: stacked(path, model, device), device)
            times["stack"].append(t)
            (packed, fill, batches), t = timed(
                lambda: with_gpufeed(path, model, str(device), args.workers, args.prefetch,
                                     rows_per_forward, batch),
                device)
            times["gpufeed"].append(t)
            times["ceiling"].append(model_ceiling(path, model, device, rows_per_forward, batch))
    t_loop, t_stack, t_packed, ceiling = (float(np.median(times[k]))
                                          for k in ("loop", "stack", "gpufeed", "ceiling"))
    if args.rounds > 1:
        print(f"median of {args.rounds} rounds, each method in turn; seconds per round: "
              + "; ".join(f"{k} " + " ".join(f"{t:.2f}" for t in v) for k, v in times.items()))
    rate = {name: files / t for name, t in
            (("loop", t_loop), ("stack", t_stack), ("gpufeed", t_packed))}
    print(f"model only (segments in memory, passes of {rows_per_forward}): "
          f"{files / ceiling:9.0f} files/s "
          f"({ceiling:.2f} s)")
    print(f"(a) per-file loop, h5py:              {rate['loop']:9.0f} files/s ({t_loop:.2f} s)")
    print(f"(b) {STACK} files per forward, by hand:    {rate['stack']:9.0f} files/s "
          f"({t_stack:.2f} s)")
    # No packing beats the fewest batches that hold the rows: their fill is the best there is
    # (below 1 where the rows are not a multiple of the batch: the epoch's last batch is short).
    fewest = -(-rows // batch)
    best = rows / (fewest * batch)
    print(f"(c) gpufeed packed + GroupReducer:     {rate['gpufeed']:9.0f} files/s "
          f"({t_packed:.2f} s, {batches} batches of up to {batch}, fill {fill:.4f}; "
          f"the fewest batches that hold {rows} rows are {fewest}, fill {best:.4f})")
    print(f"gpufeed / per-file loop: {rate['gpufeed'] / rate['loop']:.2f}x "
          f"(target {'2.7' if device.type == 'cuda' else '1.5'}x); "
          f"gpufeed / stacking: {rate['gpufeed'] / rate['stack']:.2f}x (target 1.2x); "
          f"fill {fill:.4f} (target 0.98); fill / best possible fill {fill / best:.4f}")
    # The model alone bounds every method: gpufeed at 1.0 of it leaves nothing to the data path.
    print(f"gpufeed / model only: {rate['gpufeed'] * ceiling / files:.2f} "
          f"(per-file loop / model only: {rate['loop'] * ceiling / files:.2f})")
    same = loop == stack == packed
    differ = sum(a != b or a != c for a, b, c in zip(loop, stack, packed))
    print(f"per-file predictions identical across the three: {same}"
          + ("" if same else f" ({differ} files differ)"))
    print(f"accuracy against the file labels (an untrained model): "
          f"{np.mean(np.array(packed) == labels):.3f}")


if __name__ == "__main__":
    main()
