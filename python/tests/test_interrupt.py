"""Ctrl-C during iteration: the process exits promptly, with the loader's threads joined."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import SCRIPTS, script_env


def _interrupt(mode):
    proc = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "interrupt.py"), mode],
                            env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready"), line + proc.stderr.read()
        time.sleep(0.5)  # iterating by now
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        return proc.returncode, time.monotonic() - sent, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("mode", ["close", "exit"])
def test_keyboard_interrupt_exits_cleanly(mode):
    code, seconds, out, err = _interrupt(mode)
    # An uncaught KeyboardInterrupt ends Python by SIGINT, as the shell expects.
    assert code == -signal.SIGINT, (code, out, err)
    assert "KeyboardInterrupt" in err
    assert "Fatal" not in err and "terminate called" not in err, err
    assert seconds < 10, f"took {seconds:.1f}s to exit after SIGINT"
    if mode == "close":
        _, baseline, during, after = out.split()
        assert int(during) > int(baseline)  # the loader's workers were running
        assert int(after) == int(baseline)  # and close() joined every one


# Ctrl-C while a Loader is being opened: the cache build or preload runs in C++ threads, and
# the constructor cancels it (gpufeed/cancel.h) when Python's SIGINT handler raises.

def _fill_samples(folder):
    """Samples of 64 KiB for a fill that takes seconds on one CPU: 4 GiB, or less where a
    quarter of the available memory (an explicit cache must fit half of it) or half the free
    space of `folder` (where an shm cache is built) is less. The fill is interrupted long
    before it is done: only its first tens of MB are ever written."""
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f
                         if line.startswith("MemAvailable:"))
    disk = os.statvfs(folder)
    fill = min(4 << 30, available // 4, disk.f_bavail * disk.f_frsize // 2)
    if fill < 512 << 20:
        pytest.skip(f"{fill >> 20} MiB of memory or disk to spare: too little for a fill of "
                    f"seconds")
    return fill // (64 << 10)


def _anon_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))


def _wait_for(condition, proc, what, seconds=60):
    # Generous: the child's torch import alone takes seconds on a loaded 2-core machine.
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, f"the child ended before {what}: " + proc.stderr.read()
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.02)


def _interrupt_once(proc, started, what):
    """Waits for `started()`, sends SIGINT, and returns (stdout, stderr, seconds to exit); the
    child is killed if anything fails on the way."""
    try:
        _wait_for(started, proc, what)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        return out, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("tier", ["shm", "ram"])
def test_ctrl_c_stops_a_cache_fill_in_the_loader_constructor(tier, tmp_path):
    user_dir = tmp_path / f"gpufeed-user-{os.getuid()}"
    proc = subprocess.Popen(
        [sys.executable, os.path.join(SCRIPTS, "interrupt_open.py"), tier, str(tmp_path),
         str(_fill_samples(tmp_path))],
        env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("opening"):
        proc.kill()
        proc.wait()
        pytest.fail(line + proc.stderr.read())
    if tier == "shm":
        # The builder's tmp file (gpufeed-<key>.tmp-<pid>) is there: the build is under way.
        out, err, seconds = _interrupt_once(
            proc, lambda: any(".tmp-" in p.name for p in user_dir.glob("gpufeed-*")),
            "shm build")
    else:
        # The preload has written 32 MB of the RAM copy.
        before = _anon_bytes(proc.pid)
        out, err, seconds = _interrupt_once(
            proc, lambda: _anon_bytes(proc.pid) > before + (32 << 20), "preload")
    assert "opened" not in out, "the fill ended before the signal: " + out
    assert proc.returncode == -signal.SIGINT, (proc.returncode, out, err)
    assert "KeyboardInterrupt" in err, err
    assert "Fatal" not in err and "terminate called" not in err, err
    # The fill stops at its next 4 MB task (milliseconds) and the constructor hears the signal
    # within 50 ms; the bound leaves seconds for a loaded machine and the interpreter's exit.
    assert seconds < 5, f"took {seconds:.1f} s to exit after SIGINT"
    _, baseline, after = out.split()
    assert int(after) == int(baseline), out  # the open's threads were all joined
    if tier == "shm":
        # No half-built file and no published cache: only the (free) build lock is left.
        left = sorted(p.name for p in user_dir.iterdir() if p.name != "secret")
        assert len(left) == 1 and left[0].endswith(".lock"), left


def test_ctrl_c_stops_gpufeed_cache_build_and_removes_its_file(tmp_path):
    binary = os.environ.get("GPUFEED_BIN")
    if not binary:
        pytest.skip("GPUFEED_BIN (the built CLI) is not set")
    import numpy as np

    # A sparse .npy of seconds' worth of samples (its holes read as zeros at memory speed).
    data = tmp_path / "data"
    data.mkdir()
    np.lib.format.open_memmap(data / "x.npy", mode="w+", dtype=np.float32,
                              shape=(_fill_samples(tmp_path), 16384)).flush()
    shm = tmp_path / "shm"
    shm.mkdir()
    user_dir = shm / f"gpufeed-user-{os.getuid()}"
    cpu = min(os.sched_getaffinity(0))

    def child_setup():
        os.sched_setaffinity(0, {cpu})  # one CPU: the build takes seconds on any machine
        # A test run in the background of a non-interactive shell inherits SIGINT ignored,
        # which the CLI (rightly) keeps ignoring; this test wants the terminal's Ctrl-C.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen([binary, "cache", "build", str(data), "--dir", str(shm)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=child_setup)
    out, err, seconds = _interrupt_once(
        proc, lambda: user_dir.is_dir() and
        any(".tmp-" in p.name for p in user_dir.glob("gpufeed-*")), "shm build")
    # Exit code 130 (cancelled) with a message naming what stopped, not death by the signal.
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "cancelled: building the shared-memory cache" in err, err
    assert "interrupted" in err, err
    assert seconds < 5, f"took {seconds:.1f} s to exit after SIGINT"  # as for the Loader above
    left = sorted(p.name for p in user_dir.iterdir() if p.name != "secret")
    assert len(left) == 1 and left[0].endswith(".lock"), left
