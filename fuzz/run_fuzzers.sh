#!/usr/bin/env bash
# A single input may take up to 20 s (libFuzzer's -timeout): a crafted HDF5 chunk geometry
# (fuzz/corpus/hdf5_fuzz/regression-slow-chunk-geometry, a sample cut into 2^20 pieces) once
# took 19 s in the ASan tree and now takes about 1 s of CPU there; anything slower is a
# finding (a hang or a quadratic walk), with room for a loaded CI machine.
# Runs every fuzzer built in BUILD/fuzz for SECONDS each on its corpus, FUZZ_JOBS targets at
# a time (default 1): BUILD/corpus/<target> (where libFuzzer keeps what it finds), the
# generated seeds in BUILD/seeds/<target> and the regression inputs kept in git
# (fuzz/corpus/<target>). Fails on any crash, leak, timeout or sanitizer report (the
# reproducer lands in BUILD/artifacts/, the target's log is printed). Prints executions and
# time per target.
#   [FUZZ_JOBS=N] [FUZZ_SEED=S] fuzz/run_fuzzers.sh BUILD SECONDS [TARGET...]
set -euo pipefail
build=$1
seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for t in "$build"/fuzz/*_fuzz; do [ -x "$t" ] && targets+=("$(basename "$t")"); done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets in $build/fuzz (build the gpufeed_fuzzers target first)"
  exit 1
fi
mkdir -p "$build/artifacts"

# One target: its log in BUILD/artifacts/<target>.log, exit status non-zero on a finding.
run_one() {
  local t=$1
  mkdir -p "$build/corpus/$t" "$build/seeds/$t" "$here/corpus/$t"
  local log="$build/artifacts/$t.log"
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$build/fuzz/$t" ${FUZZ_SEED:+-seed="$FUZZ_SEED"} -max_total_time="$seconds" -timeout=20 \
        -rss_limit_mb=2560 -malloc_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t-" \
        "$build/corpus/$t" "$build/seeds/$t" "$here/corpus/$t" >"$log" 2>&1; then
    echo "fuzz: $t FAILED (log: $log)"
    return 1
  fi
  local runs
  runs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  echo "fuzz: $t ok: ${runs:-?} executions in ${seconds}s"
}

jobs=${FUZZ_JOBS:-1}
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, $jobs at a time"
failed=()
pids=()
names=()
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  run_one "$t" &
  pids+=($!)
  names+=("$t")
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed+=("${names[$i]}")
done
if [ ${#failed[@]} -ne 0 ]; then
  for t in "${failed[@]}"; do
    echo "---- $t: the end of $build/artifacts/$t.log"
    tail -n 60 "$build/artifacts/$t.log"
  done
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
