"""The `gpufeed` command of a pip install: runs the C++ CLI shipped inside the package
(gpufeed/bin/gpufeed), so `gpufeed inspect`, `gpufeed cache gc`, `gpufeed watch` exist for a
pip user. From a build tree's staged package (PYTHONPATH=build/python) it runs that build's
own binary, whose path CMake wrote into gpufeed/_build_tree.py. $GPUFEED_BIN names another
binary."""

import os
import sys


def _build_tree_binary():
    """The CLI of the build tree this package was staged in, or None (an installed package)."""
    try:
        from gpufeed._build_tree import CLI_BINARY
    except ImportError:
        return None
    return CLI_BINARY


def binary():
    """The path of the gpufeed CLI binary: $GPUFEED_BIN; else the one in the package; else,
    from a build tree, the one that tree built."""
    given = os.environ.get("GPUFEED_BIN")
    if given:
        return given
    shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "gpufeed")
    if os.access(shipped, os.X_OK):
        return shipped
    return _build_tree_binary() or shipped


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["trials"]:
        # Reads an Optuna storage, which takes Optuna: implemented in Python, not the binary.
        from gpufeed.optuna import main as trials_main

        return trials_main(args[1:])
    path = binary()
    if not os.access(path, os.X_OK):
        if path == _build_tree_binary():
            why = "is not built at"
            how = "build it: cmake --build <build> --target gpufeed"
        else:
            why = "is not installed at"
            how = ("reinstall the package (pip install .), or build it with `make build` and "
                   "set GPUFEED_BIN to build/src/cli/gpufeed")
        sys.stderr.write(f"gpufeed: the command-line tool {why} {path}: {how}\n")
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, ["gpufeed", *args])  # replaces this process: signals and exit codes as is
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
