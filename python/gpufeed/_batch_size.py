"""Batch size from measured headroom: ``gpufeed.suggest_batch_size``.

A process's VRAM is not all proportional to the batch: weights, optimizer state, the CUDA
context and a device cache stay put while activations grow with it. So one reading cannot say
how large a batch fits. This helper runs the user's step at two (or more) batch sizes, reads
the peak memory PyTorch's allocator saw for each (``torch.cuda.max_memory_allocated`` after
``reset_peak_memory_stats``), fits ``peak = fixed + per_sample * batch`` and suggests the
largest batch that leaves ``headroom`` of the card free beside everything PyTorch does not
allocate (other processes, the context, gpufeed's own device cache and buffers). It never
changes the loader's setting.
"""

import dataclasses
import math

__all__ = ["BatchSizeSuggestion", "fit_batch_size", "suggest_batch_size"]


def _gb(n):
    return f"{n / 1e9:.2f} GB"


@dataclasses.dataclass
class BatchSizeSuggestion:
    """What :func:`suggest_batch_size` found. ``batch_size`` is None when it could not
    measure (``reason`` says why)."""

    batch_size: object = None
    current: object = None
    fixed_bytes: int = 0
    per_sample_bytes: float = 0.0
    budget_bytes: int = 0
    total_bytes: int = 0
    other_bytes: int = 0
    measurements: dict = dataclasses.field(default_factory=dict)
    reason: str = ""
    headroom_text: str = "10%"

    @property
    def text(self):
        if self.batch_size is None:
            return f"no batch size suggested: {self.reason}"
        points = ", ".join(f"batch {b}: peak {_gb(p)}" for b, p in sorted(self.measurements.items()))
        return (
            f"about {self.batch_size} fits (now {self.current}): the step's peak memory grows "
            f"{self.per_sample_bytes / 1e6:.2f} MB per sample over a fixed {_gb(self.fixed_bytes)} "
            f"({points}); with {_gb(self.other_bytes)} used outside PyTorch's allocator and "
            f"{self.headroom_text} of the {_gb(self.total_bytes)} card kept free, "
            f"{_gb(self.budget_bytes)} is available to the step. A suggestion: your setting "
            f"stands until you change it.")

    def __str__(self):
        return self.text


def fit_batch_size(measurements, total_bytes, other_bytes=0, headroom=0.10, current=None,
                   multiple=8):
    """The largest batch whose fitted peak stays within the budget.

    ``measurements``: {batch size: peak bytes of the step at that size} (two sizes or more);
    ``total_bytes``: the card's memory; ``other_bytes``: what is in use outside PyTorch's
    allocator (other processes, the CUDA context, a device cache); ``headroom``: the share
    of the card kept free. The batch is rounded down to a multiple of ``multiple``.
    """
    points = sorted((int(b), int(p)) for b, p in measurements.items())
    if len(points) < 2 or points[0][0] == points[-1][0]:
        raise ValueError("fit_batch_size needs peaks measured at two different batch sizes, "
                         f"got {dict(points)}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1), got {headroom}")
    # Least squares over the points: peak = fixed + per_sample * batch.
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_p = sum(p for _, p in points) / n
    var = sum((b - mean_b) ** 2 for b, _ in points)
    per_sample = sum((b - mean_b) * (p - mean_p) for b, p in points) / var
    fixed = mean_p - per_sample * mean_b
    budget = int(total_bytes * (1 - headroom) - other_bytes)
    result = BatchSizeSuggestion(current=current, fixed_bytes=int(max(fixed, 0)),
                                 per_sample_bytes=float(per_sample), budget_bytes=budget,
                                 total_bytes=int(total_bytes), other_bytes=int(other_bytes),
                                 measurements=dict(points),
                                 headroom_text=f"{headroom * 100:.0f}%")
    if per_sample <= 0:
        result.reason = ("the step's peak memory did not grow with the batch "
                         f"({', '.join(f'{b}: {_gb(p)}' for b, p in points)}): nothing to fit")
        return result
    fits = math.floor((budget - fixed) / per_sample)
    fits = fits // multiple * multiple if fits >= multiple else fits
    if fits < 1:
        result.reason = (f"even one sample does not fit: the fixed {_gb(fixed)} already takes the "
                         f"{_gb(budget)} available")
        return result
    result.batch_size = int(fits)
    return result


def _resize(batch, size):
    """The batch cut or repeated to `size` rows (memory per sample does not depend on the
    values)."""
    import torch

    out = {}
    for name, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            out[name] = value
            continue
        rows = value.shape[0]
        if size <= rows:
            out[name] = value[:size]
        else:
            reps = -(-size // rows)
            out[name] = value.repeat(reps, *([1] * (value.dim() - 1)))[:size]
    return out


def suggest_batch_size(step, loader, sizes=None, *, headroom=0.10):
    """Measures ``step`` at two batch sizes and suggests the largest batch that fits.

    ``step(batch)``: one training step on a batch dict (forward, backward, optimizer step:
    whatever the real loop does, so the peak is the real one). ``loader``: a
    :class:`gpufeed.Loader` on a CUDA device (one batch is drawn from it; the loader's
    setting is not changed) or a batch dict already on the GPU. ``sizes``: the batch sizes
    to measure (default: half the current batch and the current batch). Returns a
    :class:`BatchSizeSuggestion`; on a machine without CUDA it says it needs CUDA.
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of the package's tensors
        return BatchSizeSuggestion(reason="needs PyTorch with CUDA: torch is not importable")
    if isinstance(loader, dict):
        batch = loader
        current = None
    else:
        current = getattr(loader, "batch_size", None)
        batch = None
    if not torch.cuda.is_available():
        return BatchSizeSuggestion(current=current, reason=(
            "needs CUDA: it measures the step's peak GPU memory at two batch sizes "
            "(torch.cuda.max_memory_allocated), and torch.cuda.is_available() is False here"))
    if batch is None:
        for b in loader:
            batch = dict(b)
            break
        if batch is None:
            return BatchSizeSuggestion(current=current, reason="the loader yielded no batch")
    tensors = [v for v in batch.values() if isinstance(v, torch.Tensor)]
    if not tensors or not all(t.is_cuda for t in tensors):
        return BatchSizeSuggestion(current=current, reason=(
            "needs CUDA: the batch's tensors are not on a CUDA device (create the loader "
            "with device='cuda')"))
    device = tensors[0].device
    rows = tensors[0].shape[0] if tensors[0].dim() > 0 else 1
    if current is None:
        current = rows
    if sizes is None:
        sizes = sorted({max(1, current // 2), current})
    sizes = sorted({int(s) for s in sizes})
    if len(sizes) < 2:
        raise ValueError(f"suggest_batch_size needs two different sizes, got {sizes}")
    peaks = {}
    with torch.cuda.device(device):
        for size in sizes:
            sub = _resize(batch, size)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            step(sub)
            torch.cuda.synchronize()
            peaks[size] = torch.cuda.max_memory_allocated()
            del sub
        free, total = torch.cuda.mem_get_info()
        # Everything in use that PyTorch's allocator does not hold: other processes, this
        # process's CUDA context, gpufeed's device cache and batch buffers.
        other = max(0, (total - free) - torch.cuda.memory_reserved())
    return fit_batch_size(peaks, total, other, headroom=headroom, current=current)
