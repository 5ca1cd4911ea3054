#!/usr/bin/env bash
# Data-parallel training on 1 and 2 GPUs of one machine (docs/distributed.md): throughput of
# `lamina train --gpu 0` and `--gpu 0,1`, the same number of epochs each, on
#   - the wide MLP 784-4096-4096-10, batch 1024 per GPU, FP32 (no tests),
#   - the MNIST MLP and LeNet of models/mnist, batch 64 per GPU (with their final accuracy),
#   - the wide MLP as two processes under mpirun with NCCL on its socket transport (two
#     machines simulated on one), when mpirun is there,
# then PyTorch DistributedDataParallel on the same GPUs (bench/pytorch_ddp.py, torchrun).
#
#   bench/data_parallel.sh build/tools/lamina OUT_DIR     (from the repository root, with
#                                                          data/mnist holding the IDX files)
set -uo pipefail
tool=$1
out=$2
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A solver for `model` (mlp or lenet) in $work: hidden width, batch, iterations, tests or not.
make_solver() {  # name model width batch max_iter test(0/1)
  local name=$1 model=$2 width=$3 batch=$4 iters=$5 test=$6
  sed -e "s/num_output: 512/num_output: $width/" -e "s/batch_size: 64/batch_size: $batch/" \
      -e "s|data/mnist|$PWD/data/mnist|" models/mnist/${model}_train.prototxt > "$work/${name}_train.prototxt"
  sed -e "s/^net: .*/net: \"${name}_train.prototxt\"/" -e "s/^max_iter: .*/max_iter: $iters/" \
      -e "s/^display: .*/display: 0/" models/mnist/${model}_solver.prototxt > "$work/${name}_solver.prototxt"
  if [ "$test" = 0 ]; then
    sed -i -e "s/^test_interval: .*/test_interval: 1000000/" "$work/${name}_solver.prototxt"
    echo "test_initialization: false" >> "$work/${name}_solver.prototxt"
  fi
  echo "snapshot_prefix: \"$work/${name}\"" >> "$work/${name}_solver.prototxt"
  echo "snapshot_after_train: false" >> "$work/${name}_solver.prototxt"
}

# Trains; prints "<label> samples/s <x> [accuracy <a>]".
run() {  # label log gpu solver [launcher...]
  local label=$1 log=$2 gpu=$3 solver=$4
  shift 4
  "$@" "$tool" train --solver "$solver" --gpu "$gpu" > "$out/$log" 2>&1
  local status=$?
  local rate acc
  rate=$(grep -o "Trained .* samples/s" "$out/$log" | head -1 | sed 's/.*: \([0-9.e+]*\) samples\/s/\1/')
  acc=$(grep -o "final accuracy = [0-9.]*" "$out/$log" | head -1 | awk '{print $4}')
  printf "%-44s status %d  samples/s %s%s\n" "$label" "$status" "${rate:-?}" "${acc:+  accuracy $acc}"
}

# The wide MLP for 5 and for 30 epochs: the difference of their times is 25 epochs of
# training without the start (plans, the CUDA graph's capture, the first iterations), as
# PyTorch's figures leave out a warm-up epoch.
for epochs in 5 30; do
  make_solver wide1_$epochs mlp 4096 1024 $((epochs * 58)) 0  # global batch 1024
  make_solver wide2_$epochs mlp 4096 1024 $((epochs * 29)) 0  # global batch 2048
  make_solver wide2one_$epochs mlp 4096 1024 $((epochs * 29)) 0
  echo "gradient_bucket_mb: 1000" >> "$work/wide2one_${epochs}_solver.prototxt"  # one all-reduce
done
make_solver mlp1 mlp 512 64 14055 1     # 15 epochs at 64
make_solver mlp2 mlp 512 64 7028 1      # 15 epochs at 128
make_solver lenet1 lenet 512 64 10000 1
make_solver lenet2 lenet 512 64 5000 1

echo "== Lamina (lamina train), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
# "<label> ... samples/s <x>" for the 25 epochs (25 x 58 x 1024 samples: 58 iterations at a
# global batch of 1024 or 29 at 2048 make an epoch) between two runs, from their times.
steady() {  # label log5 log30
  local t5 t30
  t5=$(grep -o "in [0-9.e+]* s:" "$out/$2" | head -1 | awk '{print $2}')
  t30=$(grep -o "in [0-9.e+]* s:" "$out/$3" | head -1 | awk '{print $2}')
  awk -v l="$1" -v a="$t5" -v b="$t30" 'BEGIN { n = 25 * 58 * 1024; if (b > a) printf "%-44s %.3f s: samples/s %.0f, 60000-sample epoch %.4f s\n", l, b - a, n / (b - a), 60000 * (b - a) / n }'
}
for epochs in 5 30; do
  run "wide MLP b1024/GPU, 1 GPU, $epochs epochs" wide1_$epochs.log 0 \
      "$work/wide1_${epochs}_solver.prototxt"
  run "wide MLP b1024/GPU, 2 GPUs, $epochs epochs" wide2_$epochs.log 0,1 \
      "$work/wide2_${epochs}_solver.prototxt"
  run "wide MLP, 2 GPUs, one all-reduce, $epochs epochs" wide2one_$epochs.log 0,1 \
      "$work/wide2one_${epochs}_solver.prototxt"
done
steady "wide MLP, 1 GPU, steady" wide1_5.log wide1_30.log
steady "wide MLP, 2 GPUs, steady" wide2_5.log wide2_30.log
steady "wide MLP, 2 GPUs, one all-reduce, steady" wide2one_5.log wide2one_30.log
grep -ho "gradients: .*" "$out/wide2_5.log" "$out/wide2one_5.log"
run "MNIST MLP b64/GPU, 1 GPU" mlp1.log 0 "$work/mlp1_solver.prototxt"
run "MNIST MLP b64/GPU, 2 GPUs" mlp2.log 0,1 "$work/mlp2_solver.prototxt"
run "LeNet b64/GPU, 1 GPU" lenet1.log 0 "$work/lenet1_solver.prototxt"
run "LeNet b64/GPU, 2 GPUs" lenet2.log 0,1 "$work/lenet2_solver.prototxt"
if command -v mpirun > /dev/null; then
  run "wide MLP, 2 processes, mpirun, NCCL sockets" wide_mpi.log local \
      "$work/wide2_5_solver.prototxt" mpirun -np 2 --allow-run-as-root --bind-to none \
      -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 -x NCCL_NVLS_ENABLE=0 -x LD_LIBRARY_PATH
fi

if python3 -c "import torch" 2> /dev/null; then
  echo "== PyTorch DDP (torchrun)"
  for n in 1 2; do
    torchrun --standalone --nproc-per-node $n bench/pytorch_ddp.py --data-dir data/mnist \
      --hidden 4096 --batch-size 1024 2>&1 | tee "$out/pytorch_ddp_$n.txt" | grep "^ddp"
  done
fi
