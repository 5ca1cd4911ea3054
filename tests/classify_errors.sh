#!/usr/bin/env bash
# The classify example uses every flag it is given or refuses it with one message and exit
# status 1. Its model's weights come from one `lamina train` iteration on tiny IDX files
# (zeros) written here, so it needs no MNIST download.
# Usage: classify_errors.sh path/to/lamina path/to/classify
set -u
lamina="$1"
classify="$2"
cd "$(dirname "$0")/data"
program=classify
# shellcheck source=cli_cases.sh
source ../cli_cases.sh

# Tiny IDX files (zeros) with the names the models' prototxt files use (cli_cases.sh), and
# 10 labels.
data="$tmp/data"
tiny_mnist "$data"
idx "$data/few-labels-idx1-ubyte" 001 012         # 012 = 10

# LeNet's weights after one iteration on them.
models=../../models/mnist
sed "s|data/mnist/|$data/|" "$models/lenet_train.prototxt" > "$tmp/lenet_train.prototxt"
sed -e "s|^net: .*|net: \"$tmp/lenet_train.prototxt\"|" -e "s|^max_iter: .*|max_iter: 1|" \
    -e "/^test_/d" "$models/lenet_solver.prototxt" > "$tmp/solver.prototxt"
echo "snapshot_prefix: \"$tmp/lenet\"" >> "$tmp/solver.prototxt"
if ! "$lamina" train --solver "$tmp/solver.prototxt" > "$tmp/train.log" 2>&1; then
  echo "FAIL: lamina train did not write the weights"; cat "$tmp/train.log"; exit 1
fi
weights="$tmp/lenet_iter_1.lamina"
deploy="$models/lenet_deploy.prototxt"
images="$data/t10k-images-idx3-ubyte"
run() { "$classify" --model "$deploy" --weights "$weights" "$@"; }

expect_error "no images" "classify: error: one of --idx and --png" run
expect_error "both --idx and --png" "excludes" run --idx "$images" --png mnist_test_0.png
expect_error "--index without --idx" "--index requires --idx" run --png mnist_test_0.png --index 1
expect_error "--labels without --idx" "--labels requires --idx" \
  run --png mnist_test_0.png --labels "$data/t10k-labels-idx1-ubyte"
for index in -1 x; do
  expect_error "--index $index" "--index: must be an image number >= 0, got '$index'" \
    run --idx "$images" --index "$index"
done
expect_error "--index past the images" "--index 100 is out of range: .* holds 100 images (0 to 99)" \
  run --idx "$images" --index 3 --index 100
expect_error "--top-k 0" "--top-k" run --idx "$images" --top-k 0
expect_error "--top-k past the classes" "--top-k 11 is more than the 10 classes" \
  run --idx "$images" --top-k 11
expect_error "--batch 0" "--batch" run --idx "$images" --batch 0
expect_error "--gpu -2" "classify: error: --gpu -2 is not a device.*-1 for the CPU" \
  run --idx "$images" --gpu -2
expect_error "--gpu x" "--gpu must be an integer.*got 'x'" run --idx "$images" --gpu x
expect_error "--model missing" "--model: File does not exist: $tmp/none" \
  "$classify" --model "$tmp/none" --weights "$weights" --idx "$images"
expect_error "--weights missing" "--weights: File does not exist: $tmp/none" \
  "$classify" --model "$deploy" --weights "$tmp/none" --idx "$images"
expect_error "--weights of another net" "matches no parameter of the deploy net 'mnist_mlp'" \
  "$classify" --model "$models/mlp_deploy.prototxt" --weights "$weights" --idx "$images"
expect_error "--idx given labels" "holds an array of 1 dimensions; MNIST images are (N, H, W)" \
  run --idx "$data/t10k-labels-idx1-ubyte"
expect_error "--labels of other images" "holds 10 labels but --idx .* holds 100 images" \
  run --idx "$images" --labels "$data/few-labels-idx1-ubyte"
expect_error "--png of another size" "the images are 2 x 2 in one channel" \
  run --png "images/gray dot.png"

# Values given are used.
expect_success "--index and --top-k" "t10k-images-idx3-ubyte #7:  [0-9] 0\.[0-9]*  [0-9] 0\." \
  run --idx "$images" --index 7 --top-k 2
expect_success "--labels" "top-1 accuracy: .* of 100 images)" \
  run --idx "$images" --labels "$data/t10k-labels-idx1-ubyte" --batch 30
expect_success "--png" "mnist_test_0.png:  [0-9] 0\." run --png mnist_test_0.png
expect_success "--gpu -1" "mnist_test_0.png:" run --png mnist_test_0.png --gpu -1

report
