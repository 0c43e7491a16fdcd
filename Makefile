# Two entry points a newcomer needs:
#   make demo   install what is missing, build, run `gpufeed demo`
#   make test   install what is missing, check the tree's layout, build, run every test (C++,
#               sanitizers, Python, fuzzing)
# The rest are the steps they are made of.

JOBS ?= $(shell nproc)
# The benchmark programs (bench/): built by `make build` and `make demo`. CI's `make test`
# leaves them out of its Release tree: nothing tests them, and they cost about a minute and a
# half of its 30 on 2 cores.
BENCH ?= ON
PYTHON ?= /usr/bin/python3
BUILD ?= build
CMAKE_FLAGS ?=
# ccache, when installed, makes rebuilds (and the three build trees' shared sources) cheap.
# Paths under the checkout are hashed relative to it, so another clone of the same sources (a
# CI run's, a worktree) hits the compiles this one cached.
CCACHE := $(shell command -v ccache 2>/dev/null)
export CCACHE_BASEDIR := $(CURDIR)
LAUNCHER := $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_C_COMPILER_LAUNCHER=$(CCACHE))

.PHONY: demo test setup build test-cpp test-asan test-tsan test-python check-threads check-layout fuzz \
  test-fuzz clean

demo: build
	./$(BUILD)/src/cli/gpufeed demo

test: check-layout test-cpp test-asan test-tsan test-python test-fuzz
test: BENCH = OFF

setup:
	scripts/setup

build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUFEED_BUILD_BENCH=$(BENCH) \
	  -DPython3_EXECUTABLE=$(PYTHON) $(LAUNCHER) $(CMAKE_FLAGS)
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
THREAD_CHECKED ?= $(wildcard src/pipeline/*.cc)
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
