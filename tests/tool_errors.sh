#!/usr/bin/env bash
# The lamina tool turns user mistakes into one clear message and exit status 1: no abort,
# no stack trace. Usage: tool_errors.sh path/to/lamina
set -u
lamina="$1"
cd "$(dirname "$0")/data"
failures=0
cases=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_error() {  # expect_error "description" "pattern" command...
  local what="$1" pattern="$2"
  shift 2
  local out status
  cases=$((cases + 1))
  out=$("$@" 2>&1)
  status=$?
  if [ "$status" -ne 1 ]; then
    echo "FAIL: $what: exit status $status, expected 1"; echo "$out"; failures=$((failures + 1))
  elif ! echo "$out" | grep -q -- "$pattern"; then
    echo "FAIL: $what: output lacks '$pattern'"; echo "$out"; failures=$((failures + 1))
  elif echo "$out" | grep -q -e "Check failed" -e "Aborted" -e "terminate called" -e "\*\*\*"; then
    echo "FAIL: $what: crashed instead of reporting"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok: $what: $(echo "$out" | grep -- "lamina: error" | head -1)"
  fi
}

expect_error "missing solver file" "lamina: error: solver file 'no_such_solver.prototxt': cannot open" \
  "$lamina" train --solver no_such_solver.prototxt
expect_error "unknown solver field" "malformed_solver.prototxt:3:.*max_iterations" \
  "$lamina" train --solver malformed_solver.prototxt
expect_error "unknown layer type" "unknown_layer_net.prototxt:3:.*unknown type 'Convolutionn'.*Known types:" \
  "$lamina" train --solver unknown_layer_solver.prototxt
expect_error "GPU that does not exist" "lamina: error: .*GPU\|lamina: error: .*device" \
  "$lamina" train --solver unknown_layer_solver.prototxt --gpu 7

expect_error "device_id without solver_mode GPU" "device_id is set but solver_mode is CPU" \
  "$lamina" train --solver cpu_device_id_solver.prototxt

# Snapshots and weights: missing, foreign, truncated files; flags that do not fit.
printf 'not a snapshot at all' > "$tmp/garbage.lamina"
printf 'LAMINAW\0\1\0\0\0' > "$tmp/truncated.lamina"
expect_error "lamina test: missing weights file" "weights file '$tmp/none.lamina': cannot open" \
  "$lamina" test --model input_net.prototxt --weights "$tmp/none.lamina"
expect_error "lamina test: foreign weights file" "weights file '$tmp/garbage.lamina': bad magic" \
  "$lamina" test --model input_net.prototxt --weights "$tmp/garbage.lamina"
expect_error "lamina train --weights: truncated file" "weights file '$tmp/truncated.lamina': truncated" \
  "$lamina" train --solver input_solver.prototxt --weights "$tmp/truncated.lamina"
expect_error "lamina train --snapshot: a foreign solver state" \
  "solver state file '$tmp/garbage.lamina': bad magic" \
  "$lamina" train --solver input_solver.prototxt --snapshot "$tmp/garbage.lamina"
expect_error "--snapshot and --weights together" "not both" \
  "$lamina" train --solver input_solver.prototxt --snapshot a --weights b
expect_error "unknown signal effect" "--sighup-effect must be stop, snapshot or none" \
  "$lamina" train --solver input_solver.prototxt --sighup-effect reload
expect_error "unknown failure policy" "--snapshot-failure must be stop or continue" \
  "$lamina" train --solver input_solver.prototxt --snapshot-failure retry
expect_error "lamina test: iterations" "--iterations must be > 0" \
  "$lamina" test --model input_net.prototxt --weights x --iterations 0

echo "$((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
