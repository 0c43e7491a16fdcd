"""A shared-memory copy, once started, is finished for the node: a process that opens
cache="shm", reads a few batches and exits hands its unfinished build to a detached
`gpufeed cache build`, which publishes the same key; the next process serves from it. Two
processes racing never build twice; detach=False keeps every build in its process; a detached
builder killed with SIGKILL does not block the next one; `gpufeed cache rm KEY` stops one.

Each test runs its loaders in fresh interpreters (the build must outlive them) against an
shm root of its own under /dev/shm, and a log folder of its own ($XDG_CACHE_HOME)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest

from conftest import script_env

h5py = pytest.importorskip("h5py")

BINARY = os.environ.get("GPUFEED_BIN")
pytestmark = pytest.mark.skipif(not BINARY or not os.access(BINARY, os.X_OK),
                                reason="GPUFEED_BIN (the built CLI) is not set")

# Big enough that the in-process build cannot finish while a process reads two batches.
ROWS = 48_000
ROW_FLOATS = 1024  # 4 KiB a row: 196 MB

CHILD = textwrap.dedent("""
    import json, sys, time
    import gpufeed
    path, shm_dir, detach, batches = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
    start = time.perf_counter()
    loader = gpufeed.Loader(path, fields=["x", "y"], batch_size=256, shuffle=True, seed=1,
                            device="cpu", cache=gpufeed.Cache("shm", shm_dir=shm_dir,
                                                              detach=detach))
    first = None
    for i, batch in enumerate(loader):
        if first is None:
            first = time.perf_counter() - start
        if i + 1 >= batches:
            break
    info = loader.cache_info
    print(json.dumps({"key": info["key"], "serving": info["serving"], "first": first,
                      "built_fraction": info["built_fraction"], "reason": info["reason"]}))
    sys.stdout.flush()
""")


@pytest.fixture(scope="module")
def h5_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("detach") / "train.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=rng.standard_normal((ROWS, ROW_FLOATS), dtype=np.float32))
        f.create_dataset("y", data=np.arange(ROWS, dtype=np.int64))
    return str(path)


@pytest.fixture
def shm_root():
    root = tempfile.mkdtemp(prefix="gpufeed-detach-test-", dir="/dev/shm")
    yield root
    _stop_builders(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def env(tmp_path):
    env = script_env()
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")  # the detached builders' log
    return env


def _builders(root):
    """Pids of `gpufeed cache build` processes working in `root`."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"build" in argv and root.encode() in argv:
            pids.append(int(pid))
    return pids


def _stop_builders(root):
    for pid in _builders(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _run_child(h5_file, root, env, detach=True, batches=2):
    out = subprocess.run([sys.executable, "-c", CHILD, h5_file, root, "1" if detach else "0",
                          str(batches)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _ls(root):
    out = subprocess.run([BINARY, "cache", "ls", "--json", "--dir", root], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _published(root, timeout):
    """The published caches once one is there, or [] after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done = [e for e in _ls(root) if ".tmp-" not in e["path"]]
        if done or time.monotonic() > deadline:
            return done
        time.sleep(0.2)


def _log(env):
    path = os.path.join(env["XDG_CACHE_HOME"], "gpufeed", "cache-build.log")
    return open(path).read() if os.path.exists(path) else ""


def test_a_short_process_leaves_a_published_copy_the_next_one_serves_from(h5_file, shm_root,
                                                                         env):
    first, stderr = _run_child(h5_file, shm_root, env)
    assert first["serving"] == "none" and first["built_fraction"] < 1, first  # it stopped a build
    assert "detached `gpufeed cache build`" in stderr, stderr
    published = _published(shm_root, timeout=90)
    assert [e["key"] for e in published] == [first["key"]]  # the loader's own key
    assert published[0]["built_share"] == 1
    assert "published " + first["key"] in _log(env)
    second, _ = _run_child(h5_file, shm_root, env)
    assert second["key"] == first["key"]
    assert second["serving"] == "shm", second


def test_two_processes_racing_build_once(h5_file, shm_root, env):
    script = [sys.executable, "-c", CHILD, h5_file, shm_root, "1", "1"]
    racers = [subprocess.Popen(script, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for _ in range(2)]
    keys = set()
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        keys.add(json.loads(out.strip().splitlines()[-1])["key"])
    assert len(keys) == 1
    published = _published(shm_root, timeout=90)
    assert [e["key"] for e in published] == list(keys)
    deadline = time.monotonic() + 30
    while _builders(shm_root) and time.monotonic() < deadline:
        time.sleep(0.2)
    log = _log(env)
    assert log.count("published " + keys.pop()) == 1, log  # one build; another only found it


def test_detach_false_keeps_the_build_in_the_process(h5_file, shm_root, env):
    first, stderr = _run_child(h5_file, shm_root, env, detach=False)
    assert first["built_fraction"] < 1
    assert "detached" not in stderr
    time.sleep(3)
    assert _builders(shm_root) == []
    assert _published(shm_root, timeout=0) == []
    assert _log(env) == ""


def _start_detached_build(h5_file, root, env):
    subprocess.run([BINARY, "cache", "build", h5_file, "--fields", "x,y", "--dir", root,
                    "--threads", "1", "--detach"], env=env, check=True, timeout=30,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        building = [e for e in _ls(root) if e["state"] == "building"]
        pids = _builders(root)
        if building and pids:
            return pids[0], building[0]["key"]
        time.sleep(0.05)
    pytest.fail("no detached build started")


def test_a_killed_detached_builder_does_not_block_the_next(h5_file, shm_root, env):
    pid, key = _start_detached_build(h5_file, shm_root, env)
    os.kill(pid, signal.SIGKILL)
    # Its lock goes when the process is gone, which on a loaded machine is not at once.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    start = time.monotonic()
    out = subprocess.run([BINARY, "cache", "build", h5_file, "--fields", "x,y", "--dir",
                          shm_root, "--threads", "2"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"built {key}" in out.stdout
    assert "waiting for" not in out.stderr  # the dead builder's lock went with it
    assert "left half-built" in out.stderr
    assert time.monotonic() - start < 60


def test_cache_rm_stops_a_live_detached_builder(h5_file, shm_root, env):
    pid, key = _start_detached_build(h5_file, shm_root, env)
    out = subprocess.run([BINARY, "cache", "rm", key, "--dir", shm_root], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 10
    while pid in _builders(shm_root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid not in _builders(shm_root)
    assert _ls(shm_root) == []


SLOW_CHILD = textwrap.dedent("""
    import sys, time
    import gpufeed
    loader = gpufeed.Loader(sys.argv[1], fields=["x", "y"], batch_size=256, device="cpu",
                            cache=gpufeed.Cache("shm", shm_dir=sys.argv[2]))
    for i, batch in enumerate(loader):
        if i == 0:
            print(loader.cache_info["key"], flush=True)
        time.sleep(0.2)
""")


def test_ctrl_c_in_the_users_process_does_not_cancel_the_nodes_copy(h5_file, shm_root, env):
    child = subprocess.Popen([sys.executable, "-c", SLOW_CHILD, h5_file, shm_root], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    key = child.stdout.readline().strip()
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    published = _published(shm_root, timeout=90)
    assert [e["key"] for e in published] == [key]
