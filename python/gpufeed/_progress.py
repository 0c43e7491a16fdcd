"""gpufeed.tqdm: a progress bar over a loader with live throughput and stall figures."""

import time


def _postfix(loader, last, now, monitor):
    stats = loader.stats()
    samples, seconds = stats["samples"] - last[0], now - last[1]
    figures = {}
    if seconds > 0:
        figures["samples/s"] = f"{samples / seconds:,.0f}"
    figures["wait"] = f"{100 * stats['consumer_wait_fraction']:.1f}%"
    if monitor is not None:
        figures.update(monitor.figures())
    return figures, (stats["samples"], now)


def tqdm(loader, *, interval=0.5, monitor=None, **kwargs):
    """Iterates `loader` like tqdm(loader), with samples/s and the share of time the loop
    waited for data in the bar's postfix, refreshed every `interval` seconds. With the
    monitor built in, GPU, VRAM, CPU and RAM figures join them (pass a running
    gpufeed.Monitor as `monitor`, or let one start for the bar's lifetime). Other keywords go
    to tqdm.tqdm."""
    import tqdm as tqdm_module

    state = loader.state_dict()
    kwargs.setdefault("total", max(0, len(loader) - state["batch"]))
    kwargs.setdefault("unit", "batch")
    kwargs.setdefault("desc", f"epoch {state['epoch']}")
    own_monitor = None
    if monitor is None:
        from gpufeed._monitor import Monitor

        own_monitor = monitor = Monitor(interval=max(interval, 0.1)).start()
    try:
        with tqdm_module.tqdm(**kwargs) as bar:
            last = start = (loader.stats()["samples"], time.monotonic())
            next_refresh = last[1] + interval
            for batch in loader:
                yield batch
                bar.update(1)
                now = time.monotonic()
                if now >= next_refresh:
                    figures, last = _postfix(loader, last, now, monitor)
                    bar.set_postfix(figures, refresh=False)
                    next_refresh = now + interval
            # The final figures cover the whole bar: the last interval may hold no batch at
            # all (a refresh just before the end), which would show samples/s=0.
            figures, _ = _postfix(loader, start, time.monotonic(), monitor)
            bar.set_postfix(figures)
    finally:
        if own_monitor is not None:
            own_monitor.stop()
