#!/usr/bin/env python3
"""Trains a small CNN on the synthetic ImageFolder of bench/images_vs_torchvision.py twice:
fed by gpufeed (JPEG decode, RandomResizedCrop and flip in C++ threads, uint8 batches) and
by torchvision's ImageFolder + DataLoader (PIL), and prints images/s and the share of the
time the training loop spent waiting for data.

Both sides get the same work: RandomResizedCrop(--size) + horizontal flip, uint8 [B, 3, S, S],
converted to float and normalized in the training step (on the GPU where there is one). The
default run is short (--steps batches) so it finishes in a few minutes on two cores.

usage: PYTHONPATH=build/python /usr/bin/python3 examples/train_images.py [--workers 2]
       [--steps 30] [--batch-size 128] [--size 112] [--root FOLDER]
"""

import argparse
import os
import sys
import time

import torch
from torch import nn

import gpufeed

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def model_for(classes):
    return nn.Sequential(
        nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, classes))


def train(name, batches, classes, steps, device):
    """Runs `steps` steps; returns (images/s, data-wait share) over steps 3.. (start-up out)."""
    torch.manual_seed(0)
    model = model_for(classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    mean, std = MEAN.to(device), STD.to(device)
    wait = busy = 0.0
    images = 0
    t = time.perf_counter()
    for step, (image, label) in enumerate(batches):
        got = time.perf_counter()
        image = image.to(device, non_blocking=True)
        label = label.to(device, non_blocking=True)
        x = (image.float() - mean) / std  # uint8 -> normalized float, on the device
        loss = nn.functional.cross_entropy(model(x), label)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        done = time.perf_counter()
        if step >= 2:
            wait += got - t
            busy += done - got
            images += len(label)
        t = done
        if step + 1 >= steps:
            break
    total = wait + busy
    print(f"{name:28s} {images / total:8.0f} images/s   data wait {100 * wait / total:5.1f}% "
          f"of the loop   (last loss {loss.item():.2f})", flush=True)


def gpufeed_batches(root, args):
    source = gpufeed.images(root, size=args.size)
    loader = gpufeed.Loader(source, batch_size=args.batch_size, shuffle=True, seed=0,
                            workers=args.workers, device="cpu")
    for batch in loader:
        yield batch["image"], batch["label"]


def torchvision_batches(root, args):
    from torchvision import datasets, transforms
    dataset = datasets.ImageFolder(root, transform=transforms.Compose([
        transforms.RandomResizedCrop(args.size), transforms.RandomHorizontalFlip(),
        transforms.PILToTensor()]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers,
                                         pin_memory=torch.cuda.is_available())
    yield from loader


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.expanduser("~/.cache/gpufeed/images-bench"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--size", type=int, default=112)
    args = parser.parse_args()
    if not os.path.isdir(args.root):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
        import images_vs_torchvision
        images_vs_torchvision.build_folder()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    classes = len([e for e in os.scandir(args.root) if e.is_dir()])
    print(f"{args.root}: {classes} classes; {args.steps} steps of {args.batch_size} images at "
          f"{args.size}x{args.size}, {args.workers} workers, training on {device}")
    train("gpufeed", gpufeed_batches(args.root, args), classes, args.steps, device)
    train("torchvision DataLoader", torchvision_batches(args.root, args), classes, args.steps,
          device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
