"""Builds gpufeed._gpufeed with the project's CMake (the one build of the C++ engine) for
`pip install --no-build-isolation .`; metadata lives in pyproject.toml.

Environment: CMAKE_BUILD_PARALLEL_LEVEL (default 2) jobs; GPUFEED_CMAKE_ARGS extra
configure arguments. Uses Ninja and ccache when they are installed.
"""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DGPUFEED_BUILD_PYTHON=ON",
            "-DGPUFEED_BUILD_TESTS=OFF",
            "-DGPUFEED_BUILD_BENCH=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            # As the Makefile does: a reinstall (or one beside a `make build`) recompiles
            # only what changed.
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                          "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        configure += shlex.split(os.environ.get("GPUFEED_CMAKE_ARGS", ""))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
        subprocess.check_call(configure)
        # The module and the `gpufeed` command-line tool, which ships inside the package
        # (gpufeed/bin/gpufeed; the `gpufeed` entry point of pyproject.toml runs it).
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "gpufeed_python",
                               "gpufeed_main", "--parallel", jobs])
        built_dir = os.path.join(build_dir, "python", "gpufeed")
        built = [f for f in os.listdir(built_dir) if f.startswith("_gpufeed") and f.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError(f"expected one _gpufeed*.so in {built_dir}, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built_dir, built[0]), target)
        tool = os.path.join(os.path.dirname(target), "bin", "gpufeed")
        os.makedirs(os.path.dirname(tool), exist_ok=True)
        shutil.copy2(os.path.join(build_dir, "src", "cli", "gpufeed"), tool)


setup(
    ext_modules=[CMakeExtension("gpufeed._gpufeed")],
    cmdclass={"build_ext": CMakeBuild},
    # Not "build": that is the CMake build folder of the Makefile.
    options={"build": {"build_base": "build-pip"}},
)
