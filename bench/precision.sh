#!/usr/bin/env bash
# Training in each precision on GPU 0 (docs/precision.md), all in one run:
#   - the wide MLP 784-4096-4096-10 at batch 1024: Lamina's epoch time (bench/mlp_bench) and
#     PyTorch's, eager and as a CUDA graph (bench/pytorch_mlp.py), in FP32, TF32, BF16 and
#     FP16 (PyTorch: torch.autocast, FP16 with a GradScaler);
#   - the MNIST MLP and LeNet of models/mnist trained for their default epochs by the mnist
#     example in each precision, with their final test accuracy;
#   - a compute-bound convolutional net (bench/resnet_blocks.prototxt) on random data:
#     bench/conv_bench against bench/pytorch_conv.py (channels-last, AMP), images/s.
#
#   bench/precision.sh BIN_DIR OUT_DIR [MNIST_DIR]   (from the repository root; BIN_DIR holds
#                                                     mlp_bench, conv_bench and mnist)
set -uo pipefail
bin=$1
out=$2
mnist=${3:-data/mnist}
mkdir -p "$out"

for precision in fp32 tf32 bf16 fp16; do
  "$bin/mlp_bench" --gpu 0 --hidden 4096 --batch-sizes 1024 --epochs 5 --precision "$precision" \
    --data-dir "$mnist" 2>&1 | tee "$out/wide_mlp_$precision.txt"
  if python3 -c "import torch" 2>/dev/null; then
    flag=""
    [ "$precision" = tf32 ] && flag="--tf32"
    [ "$precision" = bf16 ] && flag="--amp bf16"
    [ "$precision" = fp16 ] && flag="--amp fp16"
    python3 bench/pytorch_mlp.py --data-dir "$mnist" --hidden 4096 --batch-sizes 1024 \
      --epochs 5 $flag 2>&1 | tee "$out/pytorch_wide_mlp_$precision.txt"
  fi
done
for model in mlp conv; do
  for precision in fp32 tf32 bf16 fp16; do
    "$bin/mnist" "$model" --gpu 0 --precision "$precision" --data-dir "$mnist" \
      > "$out/mnist_${model}_$precision.txt" 2>&1
    echo "mnist $model $precision: $(grep 'final test accuracy' "$out/mnist_${model}_$precision.txt")"
  done
done
"$bin/conv_bench" --gpu 0 --precisions fp32,tf32,bf16,fp16 2>&1 | tee "$out/conv_net.txt"
if python3 -c "import torch" 2>/dev/null; then
  python3 bench/pytorch_conv.py 2>&1 | tee "$out/pytorch_conv_net.txt"
fi
