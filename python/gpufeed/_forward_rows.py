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
                 timer=time.perf_counter, min_seconds=0.02, min_rows=1):
    """Measures `forward` (a model, or any callable taking a batch tensor) over batches of
    each candidate row count, built from `sample` (one row, a tensor on the device the model
    runs on), and returns the smallest count whose rows/s is within `tolerance` of the best:
    the batch size for a packed loader. Counts below `min_rows` are not tried: give twice
    the longest group's rows, so that whole groups pack densely (a batch barely longer than
    a group leaves the rest of it empty whenever the next group does not fit). Each count is
    run once to warm up; then, in `repeats` rounds over all the counts, each count runs for
    at least `min_seconds` per round, and its rate is its best round's, so that a moment the
    machine was busy elsewhere does not decide the size. The figures are in
    `forward_rows.last` ({rows: rows per second}).

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
    if counts[-1] < min_rows:
        raise InvalidArgument(f"forward_rows: no candidate holds min_rows = {min_rows} rows "
                              f"(the largest is {counts[-1]})")
    counts = [c for c in counts if c >= min_rows]
    if repeats < 1 or not 0 <= tolerance < 1 or min_seconds < 0:
        raise InvalidArgument("forward_rows: repeats must be >= 1, tolerance in [0, 1) and "
                              "min_seconds >= 0")
    rates = dict.fromkeys(counts, 0.0)
    with torch.no_grad():
        batches = {rows: sample.unsqueeze(0).expand(rows, *sample.shape).contiguous()
                   for rows in counts}
        for batch in batches.values():
            forward(batch)  # warm-up: allocations, kernels, caches
        _synchronize(sample.device)
        # Rounds over every count, so that a slow moment costs one round of one count, not
        # the whole of a count's measurement.
        for _ in range(repeats):
            for rows, batch in batches.items():
                calls, start = 0, timer()
                while True:
                    forward(batch)
                    _synchronize(batch.device)
                    calls += 1
                    elapsed = timer() - start
                    if elapsed >= min_seconds:
                        break
                rates[rows] = max(rates[rows], rows * calls / max(elapsed, 1e-12))
    forward_rows.last = rates
    best = max(rates.values())
    return next(rows for rows in counts if rates[rows] >= (1 - tolerance) * best)


forward_rows.last = {}
