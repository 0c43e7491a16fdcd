"""`python -m gpufeed` from a build tree: the staged package (PYTHONPATH=build/python, or the
source tree's package ahead of it) runs that build's own CLI without $GPUFEED_BIN, as the
README's commands run it."""
import glob
import os
import subprocess
import sys

import pytest

SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def staged_dir():
    """The build tree's python/ folder on this interpreter's path (it holds the module)."""
    for entry in sys.path:
        if entry and glob.glob(os.path.join(entry, "gpufeed", "_gpufeed*.so")):
            if os.path.isfile(os.path.join(entry, "gpufeed", "_build_tree.py")):
                return os.path.abspath(entry)
    pytest.skip("no build tree's staged package on sys.path (an installed package)")


def run_module(pythonpath, *args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFEED_BIN", "PYTHONPATH")}
    env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-m", "gpufeed", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_the_staged_package_runs_its_build_trees_cli(tmp_path):
    done = run_module(staged_dir(), "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for command in ("demo", "bench", "inspect", "watch", "cache", "trials"):
        assert command in done.stdout
    assert "GPUFEED_BIN" not in done.stderr


def test_the_source_package_ahead_of_the_build_tree_finds_it_too(tmp_path):
    path = os.pathsep.join([SOURCE_ROOT, staged_dir()])
    done = run_module(path, "bench", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sqlite:///" in done.stdout


def test_the_build_trees_binary_is_this_builds(tmp_path):
    staged = staged_dir()
    code = ("import gpufeed._cli as c, gpufeed._build_tree as b; "
            "print(c.binary()); print(b.CLI_BINARY)")
    env = {k: v for k, v in os.environ.items() if k not in ("GPUFEED_BIN", "PYTHONPATH")}
    env["PYTHONPATH"] = staged
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    chosen, generated = out.stdout.split()
    assert chosen == generated
    assert os.path.samefile(os.path.dirname(os.path.dirname(os.path.dirname(chosen))),
                            os.path.dirname(staged))  # <build>/src/cli/gpufeed
    assert os.access(chosen, os.X_OK)
