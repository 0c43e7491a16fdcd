"""Rows of hundreds of MiB under an address-space limit (`ulimit -v`, what a cluster job's
memory limit gives): the open does no work in proportion to the rows, unwritten chunks are
the fill value, the buffers in flight leave room for the user's own copy of a batch, and a
batch that cannot fit is refused before anything is allocated, naming what would fit."""

import json

import h5py
import numpy as np
import pytest

from conftest import run_script

ROW = 2**28  # int8: 256 MiB a row


@pytest.fixture(scope="module")
def unwritten(tmp_path_factory):
    path = tmp_path_factory.mktemp("huge") / "fill.h5"
    with h5py.File(path, "w") as f:  # nothing written: every chunk is the fill value
        f.create_dataset("x", shape=(3, ROW), dtype="i1", chunks=(1, 2**22), fillvalue=7)
    return str(path)


def _run(path, room_mib, batch_size):
    done = run_script("huge_rows.py", path, room_mib, batch_size, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_rows_of_fill_value_fit_and_leave_room_for_a_copy(unwritten):
    # 2.5 GiB of address space: the defaults (2 workers, their prefetch, 3 held and a copy)
    # would take 11 buffers of 256 MiB; the loader keeps fewer, and says so once.
    out, log = _run(unwritten, 2560, 1)
    assert "error" not in out, out
    assert out["copy_shape"] == [1, ROW]
    assert out["copy_sum"] == 7 * (ROW // 4096)  # h5py's fill value, every sampled element
    assert out["open_s"] < 0.5
    assert log.count("would not fit") == 1, log


def test_a_batch_that_cannot_fit_is_refused_naming_what_would(unwritten):
    out, _ = _run(unwritten, 2560, 3)
    assert out["error"].startswith("InvalidArgument: a batch of 3 samples of x: int8[268435456]")
    for part in ("RLIMIT_AS", "held by the consumer", "batch_size=1 fits"):
        assert part in out["error"], out["error"]


def test_one_row_that_cannot_fit_is_said_so(unwritten):
    out, _ = _run(unwritten, 900, 1)
    assert "one sample alone does not fit" in out["error"], out


def test_h5py_reads_the_same_fill_value(unwritten):
    with h5py.File(unwritten, "r") as f:
        assert np.all(f["x"][0, :4096] == 7)
