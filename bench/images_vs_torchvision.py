#!/usr/bin/python3
"""gpufeed's image source vs torchvision's ImageFolder + DataLoader, on synthetic JPEGs.

Run with Debian's python (it has torch, torchvision and PIL), from a build tree:

    PYTHONPATH=build/python /usr/bin/python3 bench/images_vs_torchvision.py \
        [--ceiling build/bench/bench_image_decode_ceiling] [--batches 40]

Makes, once, under ~/.cache/gpufeed/images-bench: 20,000 JPEGs (quality 90, sizes around
500 x 375, landscape and portrait) in 1000 class folders (ImageFolder layout), with PIL.
Then, in one run, at 2 workers each, batch 256, RandomResizedCrop(224) + horizontal flip,
uint8 output, the same number of batches each (the first 2 not timed: start-up):
  (a) torchvision: ImageFolder(PILToTensor) + DataLoader(num_workers=2, pin_memory where CUDA
      is present), shuffled;
  (b) gpufeed streaming: gpufeed.images(root) under gpufeed.Loader(workers=2);
  (c) gpufeed from the decoded-image cache: cache="ram" (shorter side 256); one full epoch
      fills it, the next epoch is timed;
  (d) the ceiling: libjpeg-turbo's full-size decode of the same files by 2 threads, no
      transforms (bench_image_decode_ceiling).
(b) and (d) are measured alternately --rounds times (default 3) and their medians reported,
with images per CPU-second of each (less moved by other work on a shared machine).
Prints images/s, the ratios of gpufeed to torchvision and to the ceiling. Figures, not a test: the machine may be
shared, so compare the ratios of one run.
"""
import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
from PIL import Image

CLASSES = 1000
PER_CLASS = 20
BATCH = 256
ROOT = os.path.expanduser("~/.cache/gpufeed/images-bench")


def _make_class(c):
    rng = np.random.default_rng(c)
    folder = os.path.join(ROOT + ".tmp", f"n{c:05d}")
    os.makedirs(folder, exist_ok=True)
    # A photo-like base per class: smooth colour fields (low-frequency noise, upsampled) plus
    # grain; each image is a window of it (so the JPEGs are ~50-90 KB, as photos at q90).
    low = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(low).resize((800, 600), Image.BICUBIC), dtype=np.int16)
    base = np.clip(base + rng.integers(-12, 13, base.shape), 0, 255).astype(np.uint8)
    for i in range(PER_CLASS):
        w = int(rng.integers(400, 601))
        h = int(rng.integers(300, 451))
        if rng.random() < 0.25:
            w, h = h, w  # portrait
        x = int(rng.integers(0, 800 - w + 1))
        y = int(rng.integers(0, 600 - h + 1))
        Image.fromarray(base[y:y + h, x:x + w]).save(
            os.path.join(folder, f"{c:05d}_{i:02d}.jpg"), quality=90)


def build_folder():
    if os.path.isdir(ROOT):
        return
    print(f"making {CLASSES * PER_CLASS} JPEGs under {ROOT} (once)...", flush=True)
    start = time.time()
    with multiprocessing.Pool(2) as pool:
        pool.map(_make_class, range(CLASSES), chunksize=8)
    os.replace(ROOT + ".tmp", ROOT)
    print(f"  made in {time.time() - start:.0f} s", flush=True)


def warm_page_cache():
    total = 0
    for folder, _, files in os.walk(ROOT):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                total += len(f.read())
    return total


def rate(iterable, batches, cpu=None):
    """Images/s over batches 3..batches of an iterator (the first two are start-up). With
    `cpu` (a list), appends images per CPU-second of this process (all its threads)."""
    images = 0
    start = None
    for i, batch in enumerate(iterable):
        if i == 2:
            start = time.perf_counter()
            cpu_start = time.process_time()
        elif i > 2:
            images += len(batch[1] if isinstance(batch, (list, tuple)) else batch["label"])
        if i + 1 >= batches:
            break
    if cpu is not None:
        cpu.append(images / (time.process_time() - cpu_start))
    return images / (time.perf_counter() - start)


def run_torchvision(batches):
    from torchvision import datasets, transforms
    dataset = datasets.ImageFolder(ROOT, transform=transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
        transforms.PILToTensor()]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=2,
                                         pin_memory=torch.cuda.is_available())
    return rate(iter(loader), batches)


def run_gpufeed(batches, cache):
    import gpufeed
    source = gpufeed.images(ROOT, size=224, cache=cache, verbose=False)
    loader = gpufeed.Loader(source, batch_size=BATCH, shuffle=True, seed=1, workers=2,
                            device="cpu", autotune=False)
    fill_seconds = None
    if cache != "none":
        start = time.perf_counter()
        for _ in loader:  # the first epoch decodes every image into the cache
            pass
        fill_seconds = time.perf_counter() - start
    cpu = []
    result = rate(iter(loader), batches, cpu)
    loader.close()
    return result, fill_seconds, cpu[0]


def run_ceiling(binary, images):
    out = subprocess.run([binary, ROOT, "--threads", "2", "--limit", str(images)], check=True,
                         capture_output=True, text=True).stdout
    figures = json.loads(out)
    return figures["images_per_s"], figures["images_per_cpu_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ceiling", default="build/bench/bench_image_decode_ceiling")
    parser.add_argument("--batches", type=int, default=40,
                        help="batches per measurement (default 40 = 10,240 images)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="(b) and (d) measured alternately this many times, medians "
                             "reported: on a shared machine the load moves between phases")
    parser.add_argument("--skip-cache", action="store_true",
                        help="leave out (c): it holds 20,000 x 262 KB = 5.2 GB in RAM")
    args = parser.parse_args()
    build_folder()
    print(f"page cache warmed: {warm_page_cache() / 1e6:.0f} MB of JPEGs", flush=True)
    load_start = os.getloadavg()
    timed = (args.batches - 2) * BATCH

    torchvision_rate = run_torchvision(args.batches)
    print(f"(a) torchvision ImageFolder + DataLoader  {torchvision_rate:8.0f} images/s", flush=True)
    streams, ceilings, ratios, cpu_ratios = [], [], [], []
    for r in range(args.rounds):
        stream, _, stream_cpu = run_gpufeed(args.batches, "none")
        ceiling, ceiling_cpu = run_ceiling(args.ceiling, timed)
        print(f"    round {r + 1}: (b) gpufeed streaming {stream:6.0f} images/s "
              f"({stream_cpu:4.0f} per CPU-second), (d) libjpeg-turbo full decode {ceiling:6.0f} "
              f"images/s ({ceiling_cpu:4.0f} per CPU-second): {stream / ceiling:4.2f}", flush=True)
        streams.append(stream)
        ceilings.append(ceiling)
        ratios.append(stream / ceiling)
        cpu_ratios.append(stream_cpu / ceiling_cpu)
    stream_rate = statistics.median(streams)
    ceiling_rate = statistics.median(ceilings)
    print(f"(b) gpufeed streaming                     {stream_rate:8.0f} images/s (median)")
    print(f"(d) libjpeg-turbo full decode, 2 threads  {ceiling_rate:8.0f} images/s (median)",
          flush=True)
    cached_rate = None
    if not args.skip_cache:
        cached_rate, fill, _ = run_gpufeed(args.batches, "ram")
        print(f"(c) gpufeed from the decoded cache (ram)  {cached_rate:8.0f} images/s "
              f"(first epoch, filling it: {CLASSES * PER_CLASS / fill:.0f} images/s)", flush=True)
    print()
    print(f"streaming / torchvision   {stream_rate / torchvision_rate:5.2f}x  (target >= 3)")
    print(f"streaming / ceiling       {statistics.median(ratios):5.2f}   (target >= 0.8; median "
          f"of the rounds' ratios {', '.join(f'{x:.2f}' for x in ratios)}; per CPU-second "
          f"{statistics.median(cpu_ratios):.2f})")
    if cached_rate is not None:
        print(f"cached / torchvision      {cached_rate / torchvision_rate:5.2f}x  (target >= 10)")
    print(f"({timed} images timed per measurement; CPU only, device='cpu'; "
          f"{os.cpu_count()} CPUs visible)")
    load_end = os.getloadavg()
    print(f"load average (1, 5, 15 min) at the start {load_start[0]:.2f} {load_start[1]:.2f} "
          f"{load_start[2]:.2f}, at the end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
