"""A 2-process torchrun on the CPU (gloo): disjoint shards that cover the data set, DDP trains
in step, and uneven shards run the same steps of the same sizes on both ranks."""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import SCRIPTS, make_arrays, script_env, write_numpy_dir


def test_torchrun_two_ranks_shard_the_data_and_train(tmp_path):
    arrays = make_arrays(samples=160, seed=3)
    data = write_numpy_dir(tmp_path / "data", arrays)
    out = tmp_path / "out"
    out.mkdir()
    env = script_env()
    env["OMP_NUM_THREADS"] = "1"
    if importlib.util.find_spec("torch.distributed.run") is None:
        pytest.skip("torchrun (torch.distributed.run) is not available")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         # torch 1.13 on Python 3.11 cannot parse the default "0" of these two (IntFlag
         # iteration skips 0): give per-rank mappings it can parse.
         "--redirects", "0:1,1:1", "--tee", "0:1,1:1", "--log_dir", str(tmp_path / "logs"),
         os.path.join(SCRIPTS, "ddp_train.py"), data, str(out)],
        env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shards = [np.load(out / f"indices{r}.npy") for r in range(2)]
    assert len(shards[0]) == len(shards[1]) == 80
    assert not set(shards[0]) & set(shards[1])
    assert sorted(np.concatenate(shards)) == list(range(160))
    # DDP kept the replicas identical through 10 steps (5 batches x 2 epochs).
    np.testing.assert_array_equal(np.load(out / "weights0.npy"), np.load(out / "weights1.npy"))
    assert proc.stdout.count("10 steps") == 2, proc.stdout

    # Uneven shards (9 samples, batch 4): padded, both ranks ran [4, 1] per epoch and every
    # all_reduce paired with the other rank's.
    uneven = sorted(line.split("uneven ", 1)[1] for line in proc.stdout.splitlines()
                    if "uneven rank" in line)
    want = "len 2 sizes [4, 1, 4, 1] sums [8, 2, -2, 8, 2, -2]"
    assert uneven == [f"rank 0: {want}", f"rank 1: {want}"], proc.stdout
