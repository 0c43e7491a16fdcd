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
