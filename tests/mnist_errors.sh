#!/usr/bin/env bash
# The mnist example uses every flag it is given or refuses it with one message and exit
# status 1; no value is silently replaced by the prototxt's. It trains on a tiny IDX set
# written here, so it needs no MNIST download. Usage: mnist_errors.sh path/to/mnist
set -u
mnist="$1"
cd "$(dirname "$0")/data"
program=mnist
# shellcheck source=cli_cases.sh
source ../cli_cases.sh

# Tiny IDX files (zeros) with the names the models' prototxt files use (cli_cases.sh).
data="$tmp/data"
tiny_mnist "$data"

run() { "$mnist" linear --data-dir "$data" --epochs 1 "$@"; }

# Values no default may stand in for.
expect_error "--batch-size 0" "mnist: error: --batch-size: must be an integer > 0, got '0'" run --batch-size 0
expect_error "--batch-size -5" "--batch-size: must be an integer > 0, got '-5'" run --batch-size -5
expect_error "--batch-size abc" "--batch-size: must be an integer > 0, got 'abc'" run --batch-size abc
expect_error "--batch-size above the data" "batch size 201 is larger than the 200 training images" \
  run --batch-size 201
for lr in -1 0 nan inf; do
  expect_error "--learning-rate $lr" "--learning-rate: must be a finite number > 0, got '$lr'" \
    run --learning-rate "$lr"
done
for momentum in 1.5 1 -0.1 nan; do
  expect_error "--momentum $momentum" "--momentum: must be in \[0, 1), got '$momentum'" \
    run --momentum "$momentum"
done
expect_error "--epochs 0" "--epochs: must be an integer from 1 to 100000, got '0'" \
  "$mnist" linear --data-dir "$data" --epochs 0
expect_error "--epochs 100001" "got '100001'" "$mnist" linear --data-dir "$data" --epochs 100001
expect_error "--seed -1" "--seed: must be an integer >= 0, got '-1'" run --seed -1
expect_error "--gpu -2" "mnist: error: --gpu -2 is not a device.*-1 for the CPU" run --gpu -2
expect_error "--gpu x" "--gpu must be an integer.*got 'x'" run --gpu x
expect_error "--data-dir ''" "--data-dir: must be a directory, got ''" "$mnist" linear --data-dir ""
expect_error "--models-dir ''" "--models-dir: must be a directory, got ''" run --models-dir ""
expect_error "unknown model" "mnist: error: model: mpl not in" "$mnist" mpl --data-dir "$data"
expect_error "data directory that is not there" "$tmp/none" "$mnist" linear --data-dir "$tmp/none"
expect_error "--precision x" "mnist: error: --precision 'x' is not a precision; give fp32, tf32, bf16 or fp16" \
  run --precision x

# Values given are used: the header line shows them.
expect_success "every override is applied" \
  "linear on native in TF32: batch 50, lr 0.05 (fixed), momentum 0.5, weight decay 0, seed 7, 1 epochs of 4 iterations" \
  run --batch-size 50 --learning-rate 0.05 --momentum 0.5 --seed 7 --precision tf32
expect_success "FP32 unless asked" "linear on native in FP32:" run --batch-size 50
expect_success "momentum 0 is a value, not 'unset'" "momentum 0," run --batch-size 100 --momentum 0
# --gpu -1 trains on the CPU even when the solver says solver_mode: GPU.
mkdir "$tmp/models"
cp ../../models/mnist/linear_train.prototxt "$tmp/models/"
{ cat ../../models/mnist/linear_solver.prototxt; echo "solver_mode: GPU"; echo "device_id: 97"; } \
  > "$tmp/models/linear_solver.prototxt"
expect_success "--gpu -1 overrides solver_mode: GPU" "linear on native" \
  run --models-dir "$tmp/models" --batch-size 100 --gpu -1
expect_error "solver_mode: GPU without the GPU" "GPU 97.*solver_mode is GPU.*mnist: --gpu -1 trains on the CPU" \
  run --models-dir "$tmp/models" --batch-size 100

# Seeing training: --progress and --metrics.
expect_error "--progress that is not a mode" "mnist: error: --progress: fancy not in {auto,bar,log,none}" \
  run --progress fancy
expect_error "--metrics of an unknown format" "metrics file '$tmp/run.txt': name it \*.csv or \*.jsonl" \
  run --batch-size 100 --metrics "$tmp/run.txt"
expect_success "--metrics records each epoch" "final test accuracy" \
  run --batch-size 100 --metrics "$tmp/run.jsonl" --progress none
grep -q '^{"kind":"test","iteration":2,"epoch":1,' "$tmp/run.jsonl" ||
  { echo "FAIL: the metrics file lacks the epoch's test"; cat "$tmp/run.jsonl"; failures=$((failures + 1)); }
rm -f "$tmp/run.jsonl"
expect_success "--progress log prints a status line each epoch" "iter 2/2 100% | epoch 1.00 | loss" \
  run --batch-size 100 --progress log

report
