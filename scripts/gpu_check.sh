#!/usr/bin/env bash
# Runs Lamina's test binaries and GPU benchmarks from a build on a machine with a GPU, for a
# build made elsewhere and copied over (no CMake or ctest needed there).
#
#   scripts/gpu_check.sh BIN_DIR OUT_DIR [MNIST_DIR]
#
# BIN_DIR holds the test_* binaries, lamina, mnist, mlp_bench and lenet_bench; logs go to
# OUT_DIR; the summary (tests passed/failed/skipped per binary, then the benchmarks) goes to
# stdout. LAMINA_GPU_TRAIN_EPOCHS=N also trains the MLP and LeNet for N epochs on GPU 0;
# LAMINA_GPU_BENCH=1 runs mlp_bench and lenet_bench on GPU 0 and their PyTorch references;
# LAMINA_GPU_KERNELS=1 runs the custom-kernel example's benchmark against cuBLAS and trains
# the MNIST MLP with it beside the stock one; LAMINA_GPU_ONNX=DIR compares ONNX Runtime with
# Lamina on the set onnx_ort_prepare wrote in DIR (docs/onnx.md). LAMINA_GPU_JOBS=N runs N
# test binaries at a time (default 1), each stopped after LAMINA_GPU_TEST_TIMEOUT seconds
# (default 1800; exit status 124 counts as a failure).
set -uo pipefail
bin="$1"
out="$2"
mnist="${3:-data/mnist}"
mkdir -p "$out"
export LAMINA_MNIST_DIR="$mnist" LAMINA_SOURCE_DIR="$(pwd)" LAMINA_TOOL="$bin/lamina"

nvidia-smi -L 2>&1 | tee "$out/nvidia-smi.txt"
"$bin/lamina" device_query 2>&1 | tee "$out/device_query.txt"

tests=()
for t in "$bin"/test_* "$bin"/custom_layer_test "$bin"/tiled_linear_test; do
  [ -x "$t" ] && tests+=("$t")
done
# Each binary's output in OUT_DIR/NAME.log and its exit status in OUT_DIR/NAME.rc.
printf '%s\n' "${tests[@]}" |
  xargs -P "${LAMINA_GPU_JOBS:-1}" -I{} sh -c \
    'n=$(basename "$1"); timeout "$3" "$1" > "$2/$n.log" 2>&1; echo $? > "$2/$n.rc"' \
    _ {} "$out" "${LAMINA_GPU_TEST_TIMEOUT:-1800}"

total_pass=0 total_fail=0 total_skip=0
for t in "${tests[@]}"; do
  name=$(basename "$t")
  rc=$(cat "$out/$name.rc")
  # A binary that launches itself as several workers (test_data_parallel on 2 GPUs) prints
  # one summary per worker: the counts are their sums.
  pass=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$out/$name.log" | awk '{s += $1} END {print s + 0}')
  skip=$(grep -oP '^\[  SKIPPED \] \K[0-9]+' "$out/$name.log" | awk '{s += $1} END {print s + 0}')
  fail=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$out/$name.log" |
         awk '{s += $1} END {print s + 0}')
  # A binary that crashed before its summary (or a worker that did) counts as one failure.
  if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
    fail=1
    echo "$name exited with status $rc"
  fi
  printf '%-22s passed %4s  failed %3s  skipped %3s\n' "$name" "$pass" "$fail" "$skip"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$out/$name.log" | sort -u | head -20
  total_pass=$((total_pass + pass)) total_fail=$((total_fail + fail)) total_skip=$((total_skip + skip))
done
echo "tests: $total_pass passed, $total_fail failed, $total_skip skipped"

if [ -n "${LAMINA_GPU_TRAIN_EPOCHS:-}" ]; then
  "$bin/mnist" mlp --gpu 0 --epochs "$LAMINA_GPU_TRAIN_EPOCHS" --data-dir "$mnist" 2>&1 |
    tee "$out/mnist_mlp_gpu.txt"
  "$bin/mnist" conv --gpu 0 --epochs "$LAMINA_GPU_TRAIN_EPOCHS" --data-dir "$mnist" 2>&1 |
    tee "$out/mnist_conv_gpu.txt"
fi
if [ -n "${LAMINA_GPU_BENCH:-}" ]; then
  "$bin/mlp_bench" --gpu 0 --batch-sizes 20,64,256 --data-dir "$mnist" 2>&1 | tee "$out/mlp_bench_gpu.txt"
  if python3 -c "import torch" 2>/dev/null; then
    python3 bench/pytorch_mlp.py --data-dir "$mnist" --batch-sizes 20,64,256 2>&1 |
      tee "$out/pytorch_mlp.txt"
  fi
  "$bin/lenet_bench" --gpu 0 --batch-sizes 64,256 --data-dir "$mnist" 2>&1 |
    tee "$out/lenet_bench_gpu.txt"
  if python3 -c "import torch" 2>/dev/null; then
    python3 bench/pytorch_lenet.py --data-dir "$mnist" --batch-sizes 64,256 2>&1 |
      tee "$out/pytorch_lenet.txt"
  fi
fi
if [ -n "${LAMINA_GPU_KERNELS:-}" ]; then
  "$bin/tiled_linear_bench" --gpu 0 2>&1 | tee "$out/tiled_linear_bench.txt"
  "$bin/tiled_linear_train" --gpu 0 --data-dir "$mnist" 2>&1 | tee "$out/tiled_linear_train_gpu.txt"
  "$bin/mnist" mlp --gpu 0 --epochs 15 --data-dir "$mnist" 2>&1 | tee "$out/mnist_mlp_15_gpu.txt"
fi
if [ -n "${LAMINA_GPU_ONNX:-}" ]; then
  python3 tests/onnx/compare_ort.py "$LAMINA_GPU_ONNX" 2>&1 | tee "$out/onnx_runtime.txt"
fi
