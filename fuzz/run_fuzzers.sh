#!/usr/bin/env bash
# Runs every fuzzer built in BUILD/fuzz for SECONDS each, one at a time, on its corpus:
# BUILD/corpus/<target> (where libFuzzer keeps what it finds), the generated seeds in
# BUILD/seeds/<target> and the regression inputs kept in git (fuzz/corpus/<target>).
# Fails on the first crash, leak, timeout or sanitizer report (the reproducer lands in
# BUILD/artifacts/). Prints executions and time per target.
#   fuzz/run_fuzzers.sh BUILD SECONDS [TARGET...]
set -euo pipefail
build=$1
seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for t in "$build"/fuzz/*_fuzz; do [ -x "$t" ] && targets+=("$(basename "$t")"); done
fi
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/seeds/$t" "$here/corpus/$t"
  log="$build/artifacts/$t.log"
  echo "fuzz: $t for ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$build/fuzz/$t" ${FUZZ_SEED:+-seed="$FUZZ_SEED"} -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2560 \
        -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
        "$build/corpus/$t" "$build/seeds/$t" "$here/corpus/$t" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $t FAILED (log: $log)"
    exit 1
  fi
  runs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  echo "fuzz: $t ok: ${runs:-?} executions in ${seconds}s"
done
