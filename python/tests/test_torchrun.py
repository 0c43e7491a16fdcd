"""torchrun, 2 processes on the CPU (gloo): equal shards that cover the data set, one report
naming the slowest rank, rank 0's listing of remote data delivered to rank 1, and a state of
another world size resumed by both ranks."""

import importlib.util
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import SCRIPTS, make_arrays, script_env, write_numpy_dir

SAMPLES = 150


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    if importlib.util.find_spec("torch.distributed.run") is None:
        pytest.skip("torchrun (torch.distributed.run) is not available")
    tmp = tmp_path_factory.mktemp("torchrun")
    data = write_numpy_dir(tmp / "data", make_arrays(samples=SAMPLES, seed=2))
    out = tmp / "out"
    out.mkdir()
    env = script_env()
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
         # torch 1.13 on Python 3.11 cannot parse the default "0" of these two (IntFlag
         # iteration skips 0): give per-rank mappings it can parse.
         "--redirects", "0:1,1:1", "--tee", "0:1,1:1", "--log_dir", str(tmp / "logs"),
         os.path.join(SCRIPTS, "torchrun_dist.py"), data, str(out)],
        env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = []
    for r in range(2):
        with open(out / f"rank{r}.json") as f:
            results.append(json.load(f))
    return results, proc


def test_both_ranks_run_equal_batches_that_cover_the_data_set(ranks):
    results, _ = ranks
    counts = [len(r["batches"]) for r in results]
    assert counts[0] == counts[1] == 5  # 150 samples: 75 per rank, batches of 16
    seen = [i for r in results for b in r["batches"] for i in b]
    assert set(seen) == set(range(SAMPLES)) and len(seen) == SAMPLES


def test_report_names_the_slowest_rank_on_every_rank(ranks):
    results, proc = ranks
    reports = [r["report"] for r in results]
    assert reports[0] == reports[1]
    summaries = reports[0]["ranks"]
    assert [s["rank"] for s in summaries] == [0, 1]
    slowest = reports[0]["slowest"]
    assert slowest["wait_fraction"] == max(s["wait_fraction"] for s in summaries)
    assert f"slowest: rank {slowest['rank']} waited" in reports[0]["ranks_text"]
    # Printed once, by rank 0.
    assert (proc.stdout + proc.stderr).count("slowest: rank") == 1


def test_rank_0_lists_remote_data_once_for_both_ranks(ranks):
    results, _ = ranks
    r0, r1 = results
    assert r0["listed"] == ["s3://bucket/train/", "s3://bucket/other/", "s3://bucket/missing/"]
    assert r1["listed"] == []  # rank 1 never listed
    assert r1["registered"]["s3://bucket/train/"] == r0["shared"] == r1["shared"]
    assert r1["registered"]["s3://bucket/train/"][0] == [
        "s3://bucket/train/mel.npy", 4096, '"etag-of-rank-0"']
    assert "s3://bucket/other/" in r1["registered"]  # the Loader listed before opening
    assert r0["missing"] == "IoError: s3://bucket/missing/: 404 Not Found"
    assert r1["missing"].startswith("IoError: rank 0 could not list s3://bucket/missing/")


def test_a_state_of_four_ranks_resumes_on_two(ranks):
    results, _ = ranks
    consumed = results[0]["consumed"]
    assert consumed == 3 * 8 * 4
    rest = [i for r in results for b in r["resumed"] for i in b]
    assert len(results[0]["resumed"]) == len(results[1]["resumed"])
    assert len(rest) == SAMPLES - consumed  # 54 left: no padding over 2 ranks
    assert sorted(rest) == sorted(results[0]["order"][consumed:])
