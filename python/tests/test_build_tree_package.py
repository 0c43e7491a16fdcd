"""The build tree's staged package (<build>/python/gpufeed): every module of python/gpufeed
is there, and `PYTHONPATH=build/python` alone imports it, as the README's commands run."""
import os
import subprocess
import sys

import pytest

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpufeed")


def build_python_dir():
    binary = os.environ.get("GPUFEED_BIN")  # <build>/src/cli/gpufeed
    if not binary or not os.path.exists(binary):
        pytest.skip("GPUFEED_BIN names no built gpufeed binary")
    staged = os.path.join(os.path.dirname(os.path.abspath(binary)), "..", "..", "python")
    if not os.path.isdir(os.path.join(staged, "gpufeed")):
        pytest.skip("this build has no Python package (GPUFEED_BUILD_PYTHON=OFF)")
    return os.path.normpath(staged)


def test_every_module_is_staged():
    staged = os.path.join(build_python_dir(), "gpufeed")
    modules = sorted(f for f in os.listdir(SOURCE) if f.endswith(".py"))
    assert "__init__.py" in modules
    missing = [m for m in modules if not os.path.isfile(os.path.join(staged, m))]
    assert missing == []


def test_the_staged_package_imports_alone(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = build_python_dir()
    done = subprocess.run(
        [sys.executable, "-c",
         "import gpufeed, gpufeed._cli, gpufeed.optuna; print(gpufeed.__file__)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(build_python_dir())
