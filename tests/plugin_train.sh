#!/usr/bin/env bash
# The stock lamina tool with the custom-layer example as a plugin (docs/plugins.md):
#   plugin_train.sh LAMINA_TOOL PLUGIN     (run from the source folder: the nets' data paths)
# 1. Without the plugin the net's Square layer is an unknown type, and the error says how
#    to load it. 2. `train --plugin` trains the example's MNIST net to >= 90% test accuracy.
# 3. LAMINA_PLUGIN_PATH naming the plugin's folder loads it too (lamina time).
set -uo pipefail
tool="$1"
plugin="$2"
solver=examples/custom_layer/square_solver.prototxt
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

out="$("$tool" time --model examples/custom_layer/square_net.prototxt --iterations 1 2>&1)"
status=$?
[ "$status" -eq 1 ] || fail "without the plugin: exit status $status, expected 1"
grep -q "unknown type 'Square'" <<<"$out" || fail "without the plugin: no unknown-type error"
grep -q -- "--plugin" <<<"$out" || fail "without the plugin: the error does not name --plugin"

# A copy of the solver and its net, so that the snapshots go to a scratch folder.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cp "$solver" examples/custom_layer/square_net.prototxt "$scratch/"
log="$scratch/train.log"
"$tool" train --solver "$scratch/$(basename "$solver")" --plugin "$plugin" >"$log" 2>&1
status=$?
[ "$status" -eq 0 ] || { tail -n 20 "$log"; fail "train --plugin: exit status $status"; }
grep -q "Plugin $plugin: layer types Square" "$log" || fail "train --plugin: no load line"
accuracy="$(sed -n 's/.*Test net output #[0-9]*: accuracy = \([0-9.]*\).*/\1/p' "$log" | tail -1)"
echo "train --plugin: final test accuracy ${accuracy:-none}"
awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 0.9) }' ||
  fail "train --plugin: test accuracy ${accuracy:-none} < 0.9"

out="$(LAMINA_PLUGIN_PATH="$(dirname "$plugin")" "$tool" time \
       --model examples/custom_layer/square_net.prototxt --iterations 1 2>&1)"
status=$?
[ "$status" -eq 0 ] || { echo "$out" | tail -n 20; fail "LAMINA_PLUGIN_PATH: exit $status"; }
grep -q "layer types Square" <<<"$out" || fail "LAMINA_PLUGIN_PATH: the plugin was not loaded"

[ "$failures" -eq 0 ] && echo "plugin_train.sh: all checks passed"
exit "$failures"
