"""The `gpufeed` command of a pip install: runs the C++ CLI shipped inside the package
(gpufeed/bin/gpufeed), so `gpufeed inspect`, `gpufeed cache gc`, `gpufeed watch` exist for a
pip user. $GPUFEED_BIN names another binary (a build tree's, in the tests)."""

import os
import sys


def binary():
    """The path of the gpufeed CLI binary: $GPUFEED_BIN, else the one in the package."""
    given = os.environ.get("GPUFEED_BIN")
    if given:
        return given
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "gpufeed")


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["trials"]:
        # Reads an Optuna storage, which takes Optuna: implemented in Python, not the binary.
        from gpufeed.optuna import main as trials_main

        return trials_main(args[1:])
    path = binary()
    if not os.access(path, os.X_OK):
        sys.stderr.write(
            f"gpufeed: the command-line tool is not installed at {path}: reinstall the package "
            f"(pip install .), or build it with `make build` and set GPUFEED_BIN to "
            f"build/src/cli/gpufeed\n")
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, ["gpufeed", *args])  # replaces this process: signals and exit codes as is
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
