"""gpufeed.Monitor."""

import time

import pytest

import gpufeed


def test_monitor_samples_the_host_and_says_why_gpu_fields_are_missing(tmp_path):
    jsonl = tmp_path / "run.jsonl"
    with gpufeed.Monitor(interval=0.1, jsonl=jsonl,
                         nvml_library=str(tmp_path / "no-such-libnvidia-ml.so")) as monitor:
        time.sleep(0.35)
        line = monitor.line()
        snapshot = monitor.snapshot()
        figures = monitor.figures()
    assert "CPU" in line and "RAM" in line and "GPU n/a" in line
    assert snapshot["host"]["memory_total_bytes"] > 0 and snapshot["gpus"] == []
    assert set(figures) == {"CPU", "RAM"} or set(figures) == {"RAM"}  # CPU needs 2 samples
    assert "no-such-libnvidia-ml.so" in monitor.nvml_status
    assert len(monitor.history()) >= 3
    assert jsonl.read_text().count("\n") >= 3
    summary = monitor.summary()
    assert summary["samples"] >= 3 and "ram_used" in summary["metrics"]


def test_tqdm_shows_host_figures_from_the_monitor(capsys):
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[4]", samples=64), batch_size=8,
                            device="cpu")
    for _ in gpufeed.tqdm(loader, interval=0.0, mininterval=0):
        time.sleep(0.02)
    err = capsys.readouterr().err
    assert "RAM=" in err
