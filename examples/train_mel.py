#!/usr/bin/env python3
"""Trains a small CNN on log-mel segments twice: fed by gpufeed, then by torch's DataLoader
over a per-sample h5py Dataset, and prints each epoch's time and the share of it the training
loop spent waiting for data.

The data is the demo set of `gpufeed demo` (mel float32[1,64,32], label int64, 10 classes)
where it exists, else a small set of the same kind made here (NumPy, plus an HDF5 copy for
the DataLoader side). Runs on the GPU where there is one, else on the CPU; the default run is
short (a subset of --steps batches an epoch) so it finishes in under a minute on two cores.

usage: PYTHONPATH=build/python /usr/bin/python3 examples/train_mel.py [--amp] [--accumulate 2]
"""

import argparse
import os
import shutil
import time

import h5py
import numpy as np
import torch
from torch import nn

import gpufeed

CLASSES = 10
BINS, FRAMES = 64, 32


def demo_folder():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.environ.get("HOME", "/tmp"), ".cache")
    return os.path.join(cache, "gpufeed", "demo-mel")


def make_mel_set(samples, seed=0):
    """Log-mel-like segments where each class lights up its own band of bins over noise
    (the recipe of `gpufeed demo`)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=samples, dtype=np.int64)
    base = (-4.0 - 0.05 * np.arange(BINS, dtype=np.float32))[:, None]
    mel = base + 1.5 * rng.random((samples, 1, BINS, FRAMES), dtype=np.float32)
    band = BINS // CLASSES
    for cls in range(CLASSES):
        mel[labels == cls, :, cls * band:(cls + 1) * band, :] += 3.0
    return mel, labels


def data_set(args):
    """(NumPy folder, HDF5 copy) of the samples to train on: the first `samples` of the demo
    set when there is one, else made here. Whole epochs over a small set rather than a few
    batches of a large one: the loaders run as they would in a real training run."""
    samples = args.steps * args.batch_size
    cache = os.path.dirname(demo_folder())
    folder = os.path.join(cache, f"train-mel-{samples}")
    h5_path = folder + ".h5"
    if os.path.exists(os.path.join(folder, "label.npy")) and os.path.exists(h5_path):
        return folder, h5_path
    demo = args.data or demo_folder()
    try:
        mel = np.load(os.path.join(demo, "mel.npy"), mmap_mode="r")[:samples]
        labels = np.load(os.path.join(demo, "label.npy"), mmap_mode="r")[:samples]
        assert mel.shape[1:] == (1, BINS, FRAMES) and len(mel) == samples
        print(f"taking the first {samples} samples of {demo}")
    except (OSError, AssertionError):
        print(f"no demo set of {samples}+ samples at {demo} (`gpufeed demo` makes one); "
              f"making {samples} samples")
        mel, labels = make_mel_set(samples)
    tmp = f"{folder}.tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    np.save(os.path.join(tmp, "mel.npy"), mel)  # gpufeed reads NumPy folders as they are
    np.save(os.path.join(tmp, "label.npy"), labels)
    with h5py.File(h5_path + ".tmp", "w") as f:  # the DataLoader side reads HDF5 with h5py
        f.create_dataset("mel", data=mel, chunks=(64, 1, BINS, FRAMES))
        f.create_dataset("label", data=labels)
    shutil.rmtree(folder, ignore_errors=True)  # a half-made set from an interrupted run
    os.replace(tmp, folder)
    os.replace(h5_path + ".tmp", h5_path)
    return folder, h5_path


class H5Mel(torch.utils.data.Dataset):
    """The usual per-sample h5py Dataset: one __getitem__ (two small reads) per sample."""

    def __init__(self, path):
        self.path, self.file = path, None
        with h5py.File(path, "r") as f:
            self.length = len(f["label"])

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if self.file is None:  # opened in each worker process, after the fork
            self.file = h5py.File(self.path, "r")
        return torch.from_numpy(self.file["mel"][i]), torch.tensor(self.file["label"][i])


def small_cnn():
    return nn.Sequential(
        nn.BatchNorm2d(1),
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(16, CLASSES))


def train(name, next_batch, start_epoch, args, device):
    """Trains --epochs epochs of --steps batches; prints time and data wait per epoch."""
    torch.manual_seed(0)
    model = small_cnn().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp and device.type == "cuda")
    results = []
    for epoch in range(args.epochs):
        batches = start_epoch(epoch)
        correct = seen = 0
        loss_sum = 0.0
        wait = 0.0
        begin = time.perf_counter()
        for step in range(args.steps):
            t = time.perf_counter()
            mel, label = next_batch(batches)
            wait += time.perf_counter() - t
            with torch.autocast(device.type, dtype=amp_dtype, enabled=args.amp):
                logits = model(mel)
                loss = nn.functional.cross_entropy(logits.float(), label)
            scaler.scale(loss / args.accumulate).backward()
            if (step + 1) % args.accumulate == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            if step % 4 == 0:  # .item() syncs with the GPU: not every step
                loss_sum += loss.item()
                correct += (logits.argmax(1) == label).sum().item()
                seen += len(label)
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - begin
        results.append((elapsed, wait / elapsed))
        print(f"  {name:<10} epoch {epoch}: {elapsed:6.2f} s, data wait {100 * wait / elapsed:5.1f}%"
              f", {args.steps * args.batch_size / elapsed:8,.0f} samples/s, loss "
              f"{loss_sum / max(1, (args.steps + 3) // 4):.3f}, accuracy {correct / max(1, seen):.2f}",
              flush=True)
    return results


def run_gpufeed(folder, args, device):
    loader = gpufeed.Loader(folder, fields=["mel", "label"], batch_size=args.batch_size,
                            shuffle=True, seed=0, drop_last=True, workers=args.workers,
                            device="cuda" if device.type == "cuda" else "cpu")

    def start_epoch(epoch):
        loader.set_epoch(epoch)
        return iter(loader)

    def next_batch(it):
        batch = next(it)
        return batch["mel"], batch["label"]

    results = train("gpufeed", next_batch, start_epoch, args, device)
    stats = loader.stats()
    print(f"  gpufeed's own figures: consumer wait {100 * stats['consumer_wait_fraction']:.1f}% "
          f"of the loop, read {stats['read_s']:.2f} s over {stats['workers']} workers")
    loader.close()
    return results


def run_dataloader(h5_path, args, device):
    data = torch.utils.data.DataLoader(
        H5Mel(h5_path), batch_size=args.batch_size, shuffle=True, drop_last=True,
        num_workers=args.workers, pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0)

    def start_epoch(epoch):
        return iter(data)

    def next_batch(it):
        mel, label = next(it)
        return mel.to(device, non_blocking=True), label.to(device, non_blocking=True)

    return train("DataLoader", next_batch, start_epoch, args, device)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="the demo set's NumPy folder (default: where "
                        "`gpufeed demo` puts it)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=24,
                        help="batches per epoch: trains on steps * batch-size samples")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="for both loaders")
    parser.add_argument("--accumulate", type=int, default=1,
                        help="micro-batches per optimizer step (gradient accumulation)")
    parser.add_argument("--amp", action="store_true",
                        help="mixed precision (float16 on CUDA, bfloat16 on the CPU)")
    parser.add_argument("--only", choices=["gpufeed", "dataloader"])
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    folder, h5_path = data_set(args)
    samples = len(np.load(os.path.join(folder, "label.npy"), mmap_mode="r"))
    print(f"{samples} samples in {folder}; {args.epochs} epochs of {args.steps} batches of "
          f"{args.batch_size} on {device}, accumulate {args.accumulate}, amp {args.amp}")
    summary = {}
    if args.only != "dataloader":
        summary["gpufeed"] = run_gpufeed(folder, args, device)
    if args.only != "gpufeed":
        summary["DataLoader"] = run_dataloader(h5_path, args, device)
    # The first epoch pays for start-up (worker processes, first reads): compare the rest.
    print("after the first epoch (mean):")
    for name, results in summary.items():
        rest = results[1:] or results
        print(f"  {name:<10} {np.mean([r[0] for r in rest]):6.2f} s/epoch, data wait "
              f"{100 * np.mean([r[1] for r in rest]):5.1f}%")


if __name__ == "__main__":
    main()
