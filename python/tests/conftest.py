"""Shared fixtures: small data sets on disk and a way to run scripts in a fresh interpreter.

Run with the package on the path, e.g.
    PYTHONPATH=build/python /usr/bin/python3 -m pytest python/tests
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import gpufeed

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")
REMOTE_TESTS = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "remote")


def make_arrays(samples=103, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "mel": rng.standard_normal((samples, 1, 8, 5), dtype=np.float32),
        "label": rng.integers(0, 10, size=samples, dtype=np.int64),
        "weight": rng.random(samples).astype(np.float16),
    }


def write_numpy_dir(path, arrays):
    os.makedirs(path, exist_ok=True)
    for name, array in arrays.items():
        np.save(os.path.join(path, f"{name}.npy"), array)
    return str(path)


@pytest.fixture
def arrays():
    return make_arrays()


@pytest.fixture
def numpy_dir(tmp_path, arrays):
    return write_numpy_dir(tmp_path / "train", arrays)


def collect(loader):
    """One epoch's batches: [(indices, {field: numpy copy})]."""
    return [(b.indices.numpy(), {k: v.numpy().copy() for k, v in b.items()}) for b in loader]


def script_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def run_script(name, *args, timeout=120, **kwargs):
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, name), *map(str, args)],
                          env=script_env(), capture_output=True, text=True, timeout=timeout,
                          **kwargs)


@pytest.fixture(autouse=True)
def _no_torchrun_env(monkeypatch):
    # The loader shards by $RANK / $WORLD_SIZE when not told otherwise.
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


@pytest.fixture(scope="session")
def _s3_server_session():
    sys.path.insert(0, REMOTE_TESTS)
    import s3_server

    reason = s3_server.unavailable_reason()
    if reason:
        pytest.skip(f"no S3 test server: {reason}")
    with s3_server.S3Server() as server:
        yield server


@pytest.fixture
def s3_server(_s3_server_session):
    """An S3-API server behind a fault proxy (tests/remote/s3_server.py), one per session:
    the proxy's rules and counts start empty in every test; buckets and objects persist, so
    each test uses bucket names of its own."""
    _s3_server_session.reset_proxy()
    yield _s3_server_session
    _s3_server_session.reset_proxy()


__all__ = ["collect", "gpufeed", "make_arrays", "run_script", "script_env", "write_numpy_dir"]
