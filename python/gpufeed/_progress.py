"""gpufeed.tqdm: a progress bar over a loader with live throughput and stall figures."""

import sys
import time

from gpufeed import _gpufeed

_GIB = 1024.0 ** 3


def _loader_figures(loader, last, now):
    stats = loader.stats()
    samples, seconds = stats["samples"] - last[0], now - last[1]
    figures = {}
    if seconds > 0:
        figures["samples/s"] = f"{samples / seconds:,.0f}"
    figures["wait"] = f"{100 * stats['consumer_wait_fraction']:.1f}%"
    return figures, (stats["samples"], now)


def _refresh(bar, loader, last, now, monitor, status_line, refresh):
    """Sets the bar's postfix: key=value figures, or with `status_line` the monitor's status
    line followed by the loader's figures."""
    figures, last = _loader_figures(loader, last, now)
    if status_line:
        parts = [monitor.line()] + [f"{value} {name}" if name == "samples/s" else
                                    f"{name} {value}" for name, value in figures.items()]
        bar.set_postfix_str(" | ".join(p for p in parts if p), refresh=refresh)
    else:
        if monitor is not None:
            figures.update(monitor.figures())
        bar.set_postfix(figures, refresh=refresh)
    return last


def _snapshots_since(monitor, since):
    """The monitor's snapshots taken after `since` (its elapsed_seconds); for an epoch
    shorter than the monitor's interval, the latest one (the readings in force)."""
    taken = [s for s in monitor.history() if s.get("elapsed_seconds", 0.0) > since]
    return taken or [monitor.snapshot()]


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _peak(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _monitor_summary(snapshots):
    """Mean GPU and CPU use, peak VRAM and RAM over `snapshots`; readings never given left
    out."""
    parts = []
    indices = sorted({g["index"] for s in snapshots for g in s.get("gpus") or []})
    for index in indices:
        gpus = [g for s in snapshots for g in s.get("gpus") or [] if g["index"] == index]
        name = f"GPU{index}" if len(indices) > 1 else "GPU"
        util = _mean([g.get("utilization_ratio") for g in gpus])
        if util is not None:
            parts.append(f"{name} {100 * util:.0f}% mean")
        used = _peak([g.get("memory_used_bytes") for g in gpus])
        total = _peak([g.get("memory_total_bytes") for g in gpus])
        if used is not None:
            of = f"/{total / _GIB:.1f}" if total else ""
            vram = f"VRAM{index}" if len(indices) > 1 else "VRAM"
            parts.append(f"{vram} {used / _GIB:.1f}{of} GiB peak")
    hosts = [s.get("host") or {} for s in snapshots]
    cpu = _mean([h.get("cpu_utilization_ratio") for h in hosts])
    if cpu is not None:
        parts.append(f"CPU {100 * cpu:.0f}% mean")
    ram = _peak([h.get("memory_used_bytes") for h in hosts])
    total = _peak([h.get("memory_total_bytes") for h in hosts])
    if ram is not None:
        of = f"/{total / _GIB:.1f}" if total else ""
        parts.append(f"RAM {ram / _GIB:.1f}{of} GiB peak")
    return parts


def _epoch_summary(epoch, loader, start_stats, seconds, monitor, since):
    """One line for the epoch just iterated: batches, samples, throughput and the share of
    the loop's time spent waiting for data, then the monitor's figures over the epoch."""
    stats = loader.stats()
    batches = stats["batches"] - start_stats["batches"]
    samples = stats["samples"] - start_stats["samples"]
    waited = stats["consumer_wait_s"] - start_stats["consumer_wait_s"]
    loop = waited + stats["consumer_step_s"] - start_stats["consumer_step_s"]
    head = f"epoch {epoch}: {batches:,} batches, {samples:,} samples in {seconds:.2f} s"
    if seconds > 0:
        head += f" ({samples / seconds:,.0f} samples/s)"
    if loop > 0:
        head += f", waited for data {100 * waited / loop:.1f}% of the loop"
    parts = [head]
    if monitor is not None:
        parts += _monitor_summary(_snapshots_since(monitor, since))
    return " | ".join(parts)


def _latest_elapsed(monitor):
    return monitor.snapshot().get("elapsed_seconds", 0.0)


def tqdm(loader, *, interval=0.5, monitor=None, summary=None, **kwargs):
    """Iterates `loader` like tqdm(loader) (the rest of the current epoch), with samples/s
    and the share of time the loop waited for data in the bar's postfix, refreshed every
    `interval` seconds.

    monitor: a running gpufeed.Monitor: the postfix is its status line
             (`GPU 85% | VRAM 12.3/24.0 GiB (51%) | CPU 45% | RAM ...`) followed by the
             loader's figures. None: a monitor runs for the bar's lifetime and its GPU, VRAM,
             CPU and RAM figures join the loader's as key=value.
    summary: "epoch": when the epoch ends, print one line under the bar: batches, samples,
             samples/s and the share of the loop spent waiting for data over the epoch, then
             the monitor's mean GPU and CPU use and peak VRAM and RAM over it. None (the
             default): no summary.

        monitor = gpufeed.Monitor().start()
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in gpufeed.tqdm(loader, monitor=monitor, summary="epoch"):
                ...

    Other keywords go to tqdm.tqdm (file=, desc=, ...)."""
    import tqdm as tqdm_module

    if summary not in (None, "epoch"):
        raise _gpufeed.InvalidArgument(
            f"summary must be None or 'epoch' (a line at the end of each epoch), got "
            f"{summary!r}")
    state = loader.state_dict()
    kwargs.setdefault("total", max(0, len(loader) - state["batch"]))
    kwargs.setdefault("unit", "batch")
    kwargs.setdefault("desc", f"epoch {state['epoch']}")
    status_line = monitor is not None
    own_monitor = None
    if monitor is None:
        from gpufeed._monitor import Monitor

        own_monitor = monitor = Monitor(interval=max(interval, 0.1)).start()
    try:
        with tqdm_module.tqdm(**kwargs) as bar:
            since = _latest_elapsed(monitor)
            start_stats = loader.stats()
            last = start = (start_stats["samples"], time.monotonic())
            next_refresh = last[1] + interval
            for batch in loader:
                yield batch
                bar.update(1)
                now = time.monotonic()
                if now >= next_refresh:
                    last = _refresh(bar, loader, last, now, monitor, status_line, False)
                    next_refresh = now + interval
            # The final figures cover the whole bar: the last interval may hold no batch at
            # all (a refresh just before the end), which would show samples/s=0.
            end = time.monotonic()
            _refresh(bar, loader, start, end, monitor, status_line, True)
            line = None
            if summary == "epoch":
                line = _epoch_summary(state["epoch"], loader, start_stats, end - start[1],
                                      monitor, since)
        if line is not None:  # under the closed bar
            tqdm_module.tqdm.write(line, file=kwargs.get("file") or sys.stderr)
    finally:
        if own_monitor is not None:
            own_monitor.stop()
