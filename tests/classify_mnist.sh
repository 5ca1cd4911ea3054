#!/usr/bin/env bash
# End to end on real data: `lamina train` trains LeNet (models/mnist's net and Caffe's solver
# settings) for 300 iterations on the CPU, then the classify example classifies the first
# 2,000 MNIST test images with the weights it wrote and must reach 93% top-1 (it reaches
# 94.6% on them, 95.8% on all 10,000 images), the accuracy `lamina test` reports for the same
# weights on the same images (to 0.05 percentage points, one image), and, on the PNG of test
# image 0 (a 7), the probabilities it gives that image from the IDX file.
# MNIST is read from $LAMINA_MNIST_DIR, else the source tree's data/mnist.
# Usage: classify_mnist.sh path/to/lamina path/to/classify
set -u
lamina="$1"
classify="$2"
source_dir="$(cd "$(dirname "$0")/.." && pwd)"
mnist="${LAMINA_MNIST_DIR:-$source_dir/data/mnist}"
for file in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
            t10k-labels-idx1-ubyte; do
  if [ ! -e "$mnist/$file" ] && [ ! -e "$mnist/$file.gz" ]; then
    echo "FAIL: $mnist/$file is missing: run scripts/fetch_mnist.sh $mnist" \
         "(or set LAMINA_MNIST_DIR)"
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

models="$source_dir/models/mnist"
sed "s|data/mnist/|$mnist/|" "$models/lenet_train.prototxt" > "$tmp/lenet_train.prototxt"
# Caffe's LeNet solver (models/mnist/lenet_solver.prototxt) for 300 iterations, without tests.
sed -e "s|^net: .*|net: \"$tmp/lenet_train.prototxt\"|" -e "s|^max_iter: .*|max_iter: 300|" \
    -e "/^test_/d" "$models/lenet_solver.prototxt" > "$tmp/solver.prototxt"
echo "snapshot_prefix: \"$tmp/lenet\"" >> "$tmp/solver.prototxt"
"$lamina" train --solver "$tmp/solver.prototxt" > "$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; fail "lamina train failed"; }
weights="$tmp/lenet_iter_300.lamina"
deploy="$models/lenet_deploy.prototxt"

run() { "$classify" --model "$deploy" --weights "$weights" "$@" 2>&1; }
# shellcheck disable=SC2046
run --idx "$mnist/t10k-images-idx3-ubyte" --labels "$mnist/t10k-labels-idx1-ubyte" \
  --index $(seq 0 1999) > "$tmp/classify.txt" || { cat "$tmp/classify.txt"; fail "classify failed"; }
summary=$(tail -1 "$tmp/classify.txt")
echo "classify: $summary"
accuracy=$(echo "$summary" | sed -n 's/^top-1 accuracy: \([0-9.]*\)% (.* of 2000 images)$/\1/p')
[ -n "$accuracy" ] || fail "classify printed no accuracy over 2000 images: $summary"
awk -v a="$accuracy" 'BEGIN { exit !(a >= 93) }' || fail "top-1 accuracy $accuracy% < 93%"

# lamina test scores the same weights on the training net's TEST phase: 20 batches of 100 are
# the same first 2,000 test images.
"$lamina" test --model "$tmp/lenet_train.prototxt" --weights "$weights" --iterations 20 \
  > "$tmp/test.log" 2>&1 || { cat "$tmp/test.log"; fail "lamina test failed"; }
scored=$(grep -o "accuracy = [0-9.]*" "$tmp/test.log" | tail -1 | sed 's/accuracy = //')
[ -n "$scored" ] || { cat "$tmp/test.log"; fail "lamina test printed no accuracy"; }
echo "lamina test: accuracy = $scored"
awk -v a="$accuracy" -v b="$scored" 'BEGIN { d = a - 100 * b; exit !(d <= 0.05 && d >= -0.05) }' ||
  fail "classify's $accuracy% is not lamina test's $scored"

# The PNG of test image 0 gives the probabilities its IDX pixels give.
png=$(run --png "$source_dir/tests/data/mnist_test_0.png") || fail "classify --png: $png"
idx=$(run --idx "$mnist/t10k-images-idx3-ubyte" --index 0) || fail "classify --index 0: $idx"
echo "$png"
echo "$idx"
[ "${png#*:}" = "${idx#*:}" ] || fail "the PNG and the IDX image give different probabilities"
[ "$(echo "${png#*:}" | awk '{ print $1 }')" = 7 ] || fail "test image 0 (a 7) is not classified 7"
echo "passed"
