"""forward_rows: the rows per forward pass at which a model runs fastest per row, measured.

Whole-file evaluation packs whole files into batches (Loader(..., groups=Groups(...))); the
batch size is then the model's forward pass, and the best one depends on the device: a GPU
runs a pass over thousands of rows at little more per row than one over hundreds, while on a
CPU a pass over thousands of rows leaves the caches and costs several times more per row. Smaller
batches also fill better (the packer needs as few batches as the rows allow, so the last one
is the only partly empty one)."""

import time

import torch

from gpufeed._gpufeed import InvalidArgument

DEFAULT_CANDIDATES = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forward_rows(forward, sample, candidates=DEFAULT_CANDIDATES, repeats=3, tolerance=0.05,
                 timer=time.perf_counter):
    """Measures `forward` (a model, or any callable taking a batch tensor) over batches of
    each candidate row count, built from `sample` (one row, a tensor on the device the model
    runs on), and returns the smallest count whose rows/s is within `tolerance` of the best:
    the batch size for a packed loader. Each count is run once to warm up, then `repeats`
    times; the figures are in `forward_rows.last` ({rows: rows per second}).

        rows = gpufeed.forward_rows(model, torch.zeros(1, 64, 32))
        loader = gpufeed.Loader("eval.h5", fields=["mel"], batch_size=rows, shuffle=False,
                                groups=gpufeed.Groups(offsets="file_offsets"))
    """
    if not isinstance(sample, torch.Tensor):
        raise InvalidArgument(f"forward_rows: sample must be a tensor (one row), not "
                              f"{type(sample).__name__}")
    counts = sorted({int(c) for c in candidates})
    if not counts or counts[0] < 1:
        raise InvalidArgument(f"forward_rows: candidates must be row counts >= 1, not "
                              f"{list(candidates)}")
    if repeats < 1 or not 0 <= tolerance < 1:
        raise InvalidArgument("forward_rows: repeats must be >= 1 and tolerance in [0, 1)")
    rates = {}
    with torch.no_grad():
        for rows in counts:
            batch = sample.unsqueeze(0).expand(rows, *sample.shape).contiguous()
            forward(batch)  # warm-up: allocations, kernels, caches
            _synchronize(batch.device)
            start = timer()
            for _ in range(repeats):
                forward(batch)
            _synchronize(batch.device)
            elapsed = max(timer() - start, 1e-12)
            rates[rows] = rows * repeats / elapsed
    forward_rows.last = rates
    best = max(rates.values())
    return next(rows for rows in counts if rates[rows] >= (1 - tolerance) * best)


forward_rows.last = {}
