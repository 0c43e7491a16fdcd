"""gpufeed.Monitor: GPU, VRAM, CPU and RAM while training runs."""

import json

from gpufeed import _gpufeed

_GIB = 1024.0 ** 3


class Monitor:
    """Samples every GPU (through NVML, when the driver is there) and the host (/proc and
    cgroup v2: CPU, RAM, and this process tree's CPU, RSS and reads) every `interval` seconds
    on a C++ thread.

        with gpufeed.Monitor(jsonl="run.jsonl") as monitor:
            train()
            print(monitor.line())   # GPU 85% | VRAM 12.3/24.0 GiB (51%) | CPU 45% | RAM ...
        print(monitor.summary_text())

    jsonl:      write every snapshot to this JSON lines file.
    prometheus: serve Prometheus text at "PORT" or "HOST:PORT" (port 0: a free one).
    live:       print a live status line on stderr.
    low_utilization, low_utilization_seconds: warn when a GPU stays below that ratio so long.
    A reading the driver or the OS does not give is None, never 0.
    """

    def __init__(self, interval=1.0, *, pid=0, jsonl=None, prometheus=None, live=False,
                 low_utilization=0.30, low_utilization_seconds=10.0, nvml_library=None):
        self._impl = _gpufeed._Monitor(
            interval=float(interval), pid=int(pid), jsonl=str(jsonl or ""),
            prometheus=str(prometheus or ""), live=bool(live),
            low_utilization=float(low_utilization),
            low_utilization_seconds=float(low_utilization_seconds),
            nvml_library=str(nvml_library or ""))

    def start(self):
        """Takes a first sample at once, then one per interval. Returns the monitor."""
        self._impl.start()
        return self

    def stop(self):
        """Takes a last sample and joins the sampler thread. Idempotent."""
        self._impl.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()

    def snapshot(self):
        """The latest snapshot as a dict (the JSON lines format); a fresh one when the
        sampler has none yet."""
        text = self._impl.latest_json()
        if text is None:
            text = self._impl.sample_now_json()
        return json.loads(text)

    def line(self):
        """The status line of the latest snapshot: `GPU 85% | VRAM 12.3/24.0 GiB | ...`."""
        line = self._impl.latest_line()
        if line is None:
            self._impl.sample_now_json()
            line = self._impl.latest_line()
        return line or ""

    def history(self):
        return [json.loads(text) for text in self._impl.history_json()]

    def warnings(self):
        return list(self._impl.warnings())

    def summary(self):
        """{duration_seconds, samples, metrics: {name: {unit, count, mean, p5, p95}},
        warnings}."""
        return self._impl.summary()

    def summary_text(self):
        return self._impl.summary_text()

    @property
    def nvml_status(self):
        return self._impl.nvml_status

    @property
    def prometheus_port(self):
        return self._impl.prometheus_port

    def figures(self):
        """Short figures for a progress bar's postfix: GPU, VRAM, CPU, RAM (missing ones
        left out)."""
        text = self._impl.latest_json()
        if text is None:
            return {}
        snap = json.loads(text)
        out = {}
        gpus = snap.get("gpus") or []
        for gpu in gpus:
            suffix = str(gpu["index"]) if len(gpus) > 1 else ""
            if gpu.get("utilization_ratio") is not None:
                out[f"GPU{suffix}"] = f"{100 * gpu['utilization_ratio']:.0f}%"
            if gpu.get("memory_used_bytes") is not None:
                out[f"VRAM{suffix}"] = f"{gpu['memory_used_bytes'] / _GIB:.1f}G"
        host = snap.get("host") or {}
        if host.get("cpu_utilization_ratio") is not None:
            out["CPU"] = f"{100 * host['cpu_utilization_ratio']:.0f}%"
        if host.get("memory_used_bytes") is not None:
            out["RAM"] = f"{host['memory_used_bytes'] / _GIB:.1f}G"
        return out
