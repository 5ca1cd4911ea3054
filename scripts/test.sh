#!/usr/bin/env bash
# The whole test suite, as `make test` (and CI, .ci/run) runs it after scripts/setup.sh has
# built build/. Three stages, each timed and summarised on one line; any failure fails:
#   1. unit:     ctest in build/ (the normal build, CUDA included when present)
#   2. sanitize: the CPU build with AddressSanitizer + UndefinedBehaviorSanitizer (and
#                LeakSanitizer) in build-asan/, and its ctest
#   3. fuzz:     the libFuzzer targets (clang) in build-fuzz/, each run for
#                LAMINA_FUZZ_SECONDS (default 45) on a scratch copy of tests/fuzz/corpus/
# `scripts/test.sh unit sanitize` runs only the stages named. See docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(unit sanitize fuzz)
fuzz_seconds="${LAMINA_FUZZ_SECONDS:-45}"
jobs="$(nproc)"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1"
# Libraries' own process-lifetime allocations (fontconfig's caches), not Lamina's.
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"

summary=()
note() { echo "== make test: $*"; summary+=("$*"); }

stage_unit() {
  ctest --test-dir build --output-on-failure -j"$jobs"
}

stage_sanitize() {
  # Without MPI: Open MPI's own allocations and memory hooks are not Lamina's to check (the
  # unit stage runs the data-parallel tests under mpirun).
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAMINA_USE_CUDA=OFF \
        -DLAMINA_USE_MPI=OFF -DLAMINA_SANITIZE=address,undefined >/dev/null
  cmake --build build-asan -j"$jobs"
  ctest --test-dir build-asan --output-on-failure -j"$jobs"
}

stage_fuzz() {
  command -v clang++ >/dev/null ||
    { echo "clang++ not found: run LAMINA_TEST_TOOLS=1 scripts/setup.sh"; return 1; }
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
        -DLAMINA_USE_CUDA=OFF -DLAMINA_FUZZ=ON -DLAMINA_BUILD_TESTS=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_targets
  local scratch artifacts=build-fuzz/artifacts failed=0
  scratch="$(mktemp -d)"
  rm -rf "$artifacts" && mkdir -p "$artifacts" build-fuzz/logs  # this run's reproducers only
  for dir in tests/fuzz/corpus/*/; do
    local target log dict=() status=0 start=$SECONDS
    target="$(basename "$dir")"
    log="build-fuzz/logs/$target.log"
    # The fuzzer adds what it finds to its corpus directory: a copy keeps the checkout clean.
    cp -r "$dir" "$scratch/$target"
    [ -f "tests/fuzz/$target.dict" ] && dict=(-dict="tests/fuzz/$target.dict")
    # TMPDIR: libFuzzer ends with _Exit, so the targets' own files go where rm -rf finds them.
    mkdir -p "$scratch/tmp"
    TMPDIR="$scratch/tmp" "build-fuzz/tests/fuzz/$target" "$scratch/$target" "${dict[@]}" \
      -max_total_time="$fuzz_seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts/$target-" >"$log" 2>&1 || status=$?
    local runs
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    if [ "$status" -eq 0 ]; then
      echo "   $target: ${runs:-?} inputs in $((SECONDS - start)) s, no crash"
    else
      failed=1
      echo "   $target: FAILED (exit status $status) after ${runs:-?} inputs; the end of $log:"
      tail -n 60 "$log"
      echo "   Reproducer(s): $(ls "$artifacts"/"$target"-* 2>/dev/null | tr '\n' ' ')"
      echo "   Replay one with build-fuzz/tests/fuzz/$target FILE; once fixed, save it as"
      echo "   tests/fuzz/corpus/$target/crash-<what>: FuzzCorpus.${target#fuzz_} keeps it fixed."
    fi
  done
  rm -rf "$scratch"
  return "$failed"
}

overall=0
for stage in "${stages[@]}"; do
  case "$stage" in
    unit | sanitize | fuzz) ;;
    *) echo "scripts/test.sh: unknown stage '$stage' (unit, sanitize, fuzz)"; exit 2 ;;
  esac
  echo "== make test: stage '$stage' starts"
  start=$SECONDS
  # A subshell outside any condition, so that set -e stops the stage at its first failure.
  set +e
  (set -e; "stage_$stage")
  status=$?
  set -e
  if [ "$status" -eq 0 ]; then
    note "stage '$stage' passed in $((SECONDS - start)) s"
  else
    note "stage '$stage' FAILED after $((SECONDS - start)) s"
    overall=1
  fi
done

echo "== make test: summary"
for line in "${summary[@]}"; do echo "   $line"; done
exit "$overall"
