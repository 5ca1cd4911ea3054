#!/usr/bin/env bash
# Trains the MNIST MLP with its defaults, on GPU 0 when there is one, else on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
gpus=$(build/tools/lamina device_query --count 2>/dev/null || echo 0)
if [ "${gpus:-0}" -gt 0 ]; then
  echo "demo: a GPU is present; training on it"
  exec build/examples/mnist/mnist mlp --gpu 0 "$@"
fi
echo "demo: no GPU found; training on the CPU"
exec build/examples/mnist/mnist mlp "$@"
