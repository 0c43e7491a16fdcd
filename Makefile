# Two entry points a newcomer needs:
#   make demo   install what the demo needs (scripts/setup --demo), build the libraries, the
#               CLI and the Python module (no tests, no benchmarks), run `gpufeed demo`
#   make test   install everything (scripts/setup), check the tree's layout, build, run every
#               test (C++, sanitizers, Python, fuzzing)
# The rest are the steps they are made of.
#
# CMAKE_FLAGS goes to the release tree's configure and to scripts/setup, which reads the part
# options from it: `make demo CMAKE_FLAGS=-DGPUFEED_WITH_POSTGRES=OFF` installs no libpq-dev
# and builds no PostgreSQL source. The tests cover every part (a part off builds none of
# them), and the sanitizer trees configure every part on.

JOBS ?= $(shell nproc)
# The benchmark programs (bench/): built by `make build`. CI's `make test` leaves them out of
# its Release tree: nothing tests them, and they cost about a minute and a half of its 30 on 2
# cores. `make demo` builds none.
BENCH ?= ON
PYTHON ?= /usr/bin/python3
BUILD ?= build
CMAKE_FLAGS ?=
# ccache, when installed, makes rebuilds (and the three build trees' shared sources) cheap.
# Paths under the checkout are hashed relative to it, so another clone of the same sources (a
# CI run's, a worktree) hits the compiles this one cached. Looked up when a configure runs,
# after scripts/setup: a first `make demo` configures with the ccache setup just installed (a
# launcher added later would change every compile command, and Ninja would compile it all
# again).
CCACHE = $(shell command -v ccache 2>/dev/null)
export CCACHE_BASEDIR := $(CURDIR)
LAUNCHER = $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_C_COMPILER_LAUNCHER=$(CCACHE))

# The release tree ($(BUILD)), shared by `make demo` and `make build`: the demo configures it
# without tests and benchmarks, `make build` with them, and the library objects serve both.
# CMake keeps an option's value from the tree's last configure, so each configure states every
# option it relies on (the parts on, tests, benchmarks, the Python module) before CMAKE_FLAGS:
# a `make demo` before, or an earlier CMAKE_FLAGS, does not leave `make test` without tests.
CONFIGURE = cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython3_EXECUTABLE=$(PYTHON) $(LAUNCHER) -DGPUFEED_WITH_HDF5=ON -DGPUFEED_WITH_SQLITE=ON \
  -DGPUFEED_WITH_POSTGRES=ON -DGPUFEED_WITH_REMOTE=ON -DGPUFEED_WITH_IMAGES=ON \
  -DGPUFEED_BUILD_PYTHON=ON

.PHONY: demo test setup setup-demo build-demo build test-cpp test-asan test-tsan test-python \
  check-threads check-layout fuzz test-fuzz clean

demo: build-demo
	@test -x $(BUILD)/src/cli/gpufeed || \
	  { echo "make demo: no CLI in $(BUILD) (it needs HDF5 and image support)" >&2; exit 1; }
	./$(BUILD)/src/cli/gpufeed demo

test: check-layout test-cpp test-asan test-tsan test-python test-fuzz
test: BENCH = OFF

setup:
	scripts/setup --tests $(CMAKE_FLAGS)

setup-demo:
	scripts/setup --demo $(CMAKE_FLAGS)

# The libraries, the CLI and the Python module: what the demo runs.
build-demo: setup-demo
	$(CONFIGURE) -DGPUFEED_BUILD_TESTS=OFF -DGPUFEED_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

build: setup
	$(CONFIGURE) -DGPUFEED_BUILD_TESTS=ON -DGPUFEED_BUILD_BENCH=$(BENCH) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test-cpp: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure

# AddressSanitizer + UndefinedBehaviorSanitizer over every C++ suite, built with clang-14, the
# parsers with libFuzzer's coverage instrumentation: the same tree builds the fuzz targets
# (`make fuzz`), so CI compiles the parsers once for both. Unoptimized (-O0 -g1): ASan needs no
# optimizer to see what it checks, and the tree compiles in about half the CPU time, which CI
# on 2 cores needs more than the tests' minute or so of extra run time.
ASAN_CONFIGURE = CC=clang-14 CXX=clang++-14 cmake -S . -B $(BUILD)-asan -G Ninja \
  -DCMAKE_BUILD_TYPE=Sanitize -DGPUFEED_SANITIZE=address,undefined -DGPUFEED_FUZZ=ON \
  -DGPUFEED_SANITIZE_OPT=-O0 \
  -DGPUFEED_BUILD_PYTHON=OFF -DGPUFEED_BUILD_BENCH=OFF $(LAUNCHER)
test-asan: setup
	$(ASAN_CONFIGURE)
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ctest -j $(JOBS) --output-on-failure

# ThreadSanitizer over the suites labelled "tsan" (everything with threads). Files/Hdf5CaseTest
# (each h5py case decoded and compared on one thread) is left to the normal and ASan trees:
# under TSan it took 110 of the suite's 270 test-seconds with no thread to look at.
test-tsan: setup
	cmake -S . -B $(BUILD)-tsan -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DGPUFEED_SANITIZE=thread \
	  -DGPUFEED_BUILD_PYTHON=OFF -DGPUFEED_BUILD_BENCH=OFF $(LAUNCHER)
	cmake --build $(BUILD)-tsan -j $(JOBS) --target gpufeed_tsan_tests
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1 ctest -j $(JOBS) -L tsan \
	  -E '^Files/Hdf5CaseTest' --output-on-failure

test-python: build
	@if [ -d python/tests ]; then \
	  PYTHONPATH=$(CURDIR)/python:$(CURDIR)/$(BUILD)/python GPUFEED_BIN=$(CURDIR)/$(BUILD)/src/cli/gpufeed \
	    $(PYTHON) -m pytest -q python/tests; \
	else echo "no Python tests yet"; fi

# The tree's shape: files of at most 500 lines, functions of at most 80, no include up the
# layer order (scripts/check-layout says how each is measured).
check-layout: setup
	scripts/check-layout

# Clang's thread-safety analysis (GUARDED_BY, REQUIRES, ... from src/core/thread_annotations.h)
# over the sources whose locks are annotated: a syntax-only pass, the normal build's compiler
# stays g++.
THREAD_CHECKED ?= $(wildcard src/pipeline/*.cc src/pipeline/*/*.cc)
CLANGXX ?= clang++-14
check-threads:
	@for f in $(THREAD_CHECKED); do \
	  echo "thread-safety: $$f"; \
	  $(CLANGXX) -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety \
	    -Iinclude -Isrc $$f || exit 1; \
	done

# libFuzzer targets (fuzz/), built in the ASan tree (clang-14, address,undefined; the parser
# libraries with -fsanitize=fuzzer-no-link); each runs FUZZ_SECONDS on its corpus, JOBS
# targets at a time. The 10-minute campaigns: FUZZ_SECONDS=600.
FUZZ_SECONDS ?= 60
# In `make test` (CI): 30 s per target (four rounds of two: about 2 minutes of CI's 35),
# with a fixed seed so a red run reproduces.
CI_FUZZ_SECONDS ?= 30
fuzz: setup
	$(ASAN_CONFIGURE)
	cmake --build $(BUILD)-asan -j $(JOBS) --target gpufeed_fuzzers
	$(PYTHON) fuzz/make_corpus.py $(BUILD)-asan/seeds
	$(PYTHON) fuzz/make_corpus_hdf5.py $(BUILD)-asan/seeds/hdf5_fuzz
	$(PYTHON) fuzz/make_corpus_chunks.py $(BUILD)-asan/seeds/hdf5_chunk_fuzz
	FUZZ_JOBS=$(JOBS) fuzz/run_fuzzers.sh $(BUILD)-asan $(FUZZ_SECONDS)

test-fuzz:
	FUZZ_SEED=1 $(MAKE) fuzz FUZZ_SECONDS=$(CI_FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
