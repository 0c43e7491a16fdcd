"""`pip install .` for real: a virtual environment in a temporary folder, the package built by
setup.py (CMake), then, outside the repository and without its PYTHONPATH, `import gpufeed`, a
Loader over a .npy file, and the `gpufeed` command on the environment's PATH.

Opt-in, too slow for `make test`: the wheel build compiles the module and the CLI in a CMake
tree of its own (build-pip/), 16 minutes on the 2-core machine the first time. Run it with
    GPUFEED_TEST_INSTALL=1 /usr/bin/python3 -m pytest -q python/tests/test_install.py
"""

import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(os.environ.get("GPUFEED_TEST_INSTALL") != "1",
                                reason="set GPUFEED_TEST_INSTALL=1 to pip-install the package")


def _clean_env(venv):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "GPUFEED_BIN", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("install")
    venv = str(root / "venv")
    # Debian's torch, numpy and setuptools come from the system site-packages; nothing from
    # the network (--no-index).
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv],
                   check=True)
    pip = subprocess.run(
        [os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index",
         REPO],
        env=_clean_env(venv), cwd=str(root), capture_output=True, text=True, timeout=1800)
    assert pip.returncode == 0, pip.stdout[-4000:] + pip.stderr[-4000:]
    return venv


def _run(venv, args, cwd, **kwargs):
    return subprocess.run(args, env=_clean_env(venv), cwd=str(cwd), capture_output=True,
                          text=True, timeout=300, **kwargs)


def test_the_installed_package_loads_batches_outside_the_repository(venv, tmp_path):
    data = tmp_path / "train"
    data.mkdir()
    np.save(data / "x.npy", np.arange(40, dtype=np.float32).reshape(10, 4))
    np.save(data / "label.npy", np.arange(10, dtype=np.int64))
    script = (
        "import gpufeed, torch\n"
        "print(gpufeed.__file__)\n"
        f"loader = gpufeed.Loader({str(data)!r}, batch_size=4, shuffle=False, device='cpu')\n"
        "rows = [b['label'].tolist() for b in loader]\n"
        "print(rows)\n"
        "print(float(sum(b['x'].sum() for b in loader)))\n")
    out = _run(venv, [os.path.join(venv, "bin", "python"), "-c", script], tmp_path)
    assert out.returncode == 0, out.stderr
    path, rows, total = out.stdout.splitlines()[-3:]
    assert path.startswith(venv) and "site-packages" in path, path  # not the source tree
    assert rows == "[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]"
    assert float(total) == sum(range(40))


def test_the_gpufeed_command_is_on_the_path(venv, tmp_path):
    command = os.path.join(venv, "bin", "gpufeed")
    assert os.access(command, os.X_OK)
    help_ = _run(venv, ["gpufeed", "--help"], tmp_path)
    assert help_.returncode == 0, help_.stderr
    for sub in ("bench", "inspect", "watch", "cache"):
        assert sub in help_.stdout, help_.stdout
    shm = tmp_path / "shm"
    shm.mkdir()
    ls = _run(venv, ["gpufeed", "cache", "ls", "--dir", str(shm)], tmp_path)
    assert ls.returncode == 0, ls.stderr
    # python -m gpufeed runs the same tool.
    version = _run(venv, [os.path.join(venv, "bin", "python"), "-m", "gpufeed", "--version"],
                   tmp_path)
    assert version.returncode == 0 and "gpufeed" in version.stdout, version
