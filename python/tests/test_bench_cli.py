"""`gpufeed bench --json`: both ceilings and the ratio to each, from the same run."""
import json
import os
import subprocess

import pytest


def test_bench_json_reports_memcpy_and_same_work_ceilings():
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    out = subprocess.run(
        [binary, "bench", "--synthetic", "x:float32[64],label:int64", "--samples", "4000",
         "-b", "256", "-w", "2", "-e", "2", "-d", "cpu", "--json", "-q"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["samples"] == 8000
    for key in ("ceiling_samples_per_s", "same_work_samples_per_s"):
        assert result[key] > 0, key
    # Each ratio is the loader's rate over that ceiling's, whatever the machine's speed.
    assert result["ratio_to_ceiling"] == pytest.approx(
        result["samples_per_s"] / result["ceiling_samples_per_s"], rel=1e-6)
    assert result["ratio_to_same_work"] == pytest.approx(
        result["samples_per_s"] / result["same_work_samples_per_s"], rel=1e-6)
