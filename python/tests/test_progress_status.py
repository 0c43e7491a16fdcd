"""gpufeed.tqdm with a monitor: the bar's postfix is the monitor's status line (GPU % | VRAM |
CPU % | RAM) followed by the loader's figures, and summary="epoch" prints one line per epoch
under the bar. Host-only monitors, and the fake NVML where the build tree has it."""
import glob
import io
import os
import sys

import pytest

import gpufeed

pytest.importorskip("tqdm")


def _loader(samples=64, batch_size=8):
    return gpufeed.Loader(gpufeed.synthetic("x:float32[4]", samples), batch_size=batch_size,
                          device="cpu")


def _host_monitor():
    # A long interval: the first sample is taken at start(), the next an hour later, so the
    # status line stays the same while the test reads it.
    return gpufeed.Monitor(interval=3600, nvml_library="/no-such-libnvidia-ml.so.1").start()


def _bar_lines(out):
    return [line for line in out.getvalue().replace("\r", "\n").splitlines() if line.strip()]


def test_the_postfix_is_the_monitors_status_line():
    monitor = _host_monitor()
    try:
        out = io.StringIO()
        count = sum(1 for _ in gpufeed.tqdm(_loader(), monitor=monitor, interval=0.0,
                                            mininterval=0, file=out))
        line = monitor.line()
    finally:
        monitor.stop()
    assert count == 8
    last = _bar_lines(out)[-1]
    assert line.startswith("GPU n/a | VRAM n/a | CPU ") and "| RAM " in line
    assert line in last, (line, last)
    assert " samples/s | wait " in last
    assert "RAM=" not in last and "CPU=" not in last  # not key=value


def test_without_a_monitor_the_figures_stay_key_value():
    out = io.StringIO()
    assert sum(1 for _ in gpufeed.tqdm(_loader(), interval=0.0, mininterval=0, file=out)) == 8
    last = _bar_lines(out)[-1]
    assert "samples/s=" in last and "GPU n/a" not in last


def test_summary_epoch_prints_a_line_under_each_epochs_bar():
    loader = _loader(samples=64, batch_size=8)
    monitor = _host_monitor()
    out = io.StringIO()
    try:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for _ in gpufeed.tqdm(loader, monitor=monitor, summary="epoch", file=out):
                pass
    finally:
        monitor.stop()
    lines = _bar_lines(out)
    summaries = [line for line in lines if line.startswith("epoch ") and " batches, " in line]
    assert [s.split(":")[0] for s in summaries] == ["epoch 0", "epoch 1"]
    for s in summaries:
        assert s.split(" in ")[0].endswith("8 batches, 64 samples")
        assert "samples/s)" in s and "waited for data" in s and "% of the loop" in s
        assert "| RAM " in s and "GiB peak" in s
        assert "GPU" not in s  # a host-only monitor measured no GPU
    # Each summary comes after its epoch's bar.
    assert lines.index(summaries[0]) > max(i for i, line in enumerate(lines)
                                           if line.startswith("epoch 0: 100%"))


def test_no_summary_unless_asked_and_a_bad_value_is_refused():
    out = io.StringIO()
    for _ in gpufeed.tqdm(_loader(), file=out):
        pass
    assert not [line for line in _bar_lines(out) if " batches, " in line]
    with pytest.raises(gpufeed.InvalidArgument, match="summary must be None or 'epoch'"):
        next(gpufeed.tqdm(_loader(), summary="batch"))


def _fake_nvml():
    for entry in sys.path:
        staged = os.path.join(entry, "gpufeed")
        if entry and glob.glob(os.path.join(staged, "_gpufeed*.so")):
            path = os.path.join(os.path.dirname(os.path.abspath(entry)), "tests", "monitor",
                                "fake_nvml", "libnvidia-ml.so.1")
            if os.path.exists(path):
                return path
    pytest.skip("the build tree has no fake NVML (tests/monitor/fake_nvml)")


def test_with_a_gpu_the_status_line_and_the_summary_show_it(tmp_path, monkeypatch):
    script = tmp_path / "nvml.txt"
    script.write_text("devices 1\nname 0 Fake GPU\nutil 0 85\nmemory_used 0 6442450944\n"
                      "memory_total 0 25769803776\n")
    monkeypatch.setenv("GPUFEED_FAKE_NVML_SCRIPT", str(script))
    monitor = gpufeed.Monitor(interval=3600, nvml_library=_fake_nvml()).start()
    out = io.StringIO()
    try:
        for _ in gpufeed.tqdm(_loader(), monitor=monitor, summary="epoch", interval=0.0,
                              mininterval=0, file=out):
            pass
        line = monitor.line()
    finally:
        monitor.stop()
    assert line.startswith("GPU 85% | VRAM 6.0/24.0 GiB"), line
    lines = _bar_lines(out)
    bar = [l for l in lines if "100%" in l][-1]
    assert line in bar
    summary = [l for l in lines if " batches, " in l][-1]
    assert "| GPU 85% mean | VRAM 6.0/24.0 GiB peak |" in summary, summary
