#!/usr/bin/env bash
# The lamina tool turns user mistakes into one clear message and exit status 1 (no abort, no
# stack trace, no CLI11 boilerplate), and the flags meant to work do. Usage: tool_errors.sh
# path/to/lamina
set -u
lamina="$1"
cd "$(dirname "$0")/data"
program=lamina
# shellcheck source=cli_cases.sh
source ../cli_cases.sh

# A solver in $tmp (input_net.prototxt unless NET is given), its path on stdout:
#   solver_file NAME [NET] [extra lines...]; base_lr is 0.1 unless an extra line sets it.
solver_file() {
  local name="$1" net="${2:-$PWD/input_net.prototxt}"
  shift
  [ $# -gt 0 ] && shift
  printf 'net: "%s"\nmax_iter: 2\nrandom_seed: 1\nsnapshot_prefix: "%s"\n' \
    "$net" "$tmp/$name" > "$tmp/$name.prototxt"
  case " $* " in *base_lr*) ;; *) echo "base_lr: 0.1" >> "$tmp/$name.prototxt" ;; esac
  for line in "$@"; do echo "$line" >> "$tmp/$name.prototxt"; done
  echo "$tmp/$name.prototxt"
}

expect_error "missing solver file" "lamina: error: solver file 'no_such_solver.prototxt': cannot open" \
  "$lamina" train --solver no_such_solver.prototxt
expect_error "unknown solver field" "malformed_solver.prototxt:3:.*max_iterations" \
  "$lamina" train --solver malformed_solver.prototxt
expect_error "unknown layer type" "unknown_layer_net.prototxt:3:.*unknown type 'Convolutionn'.*Known types:" \
  "$lamina" train --solver unknown_layer_solver.prototxt
expect_error "GPU that does not exist" \
  "lamina: error: GPU 7 was requested, but .* (--gpu -1 trains on the CPU)$" \
  "$lamina" train --solver unknown_layer_solver.prototxt --gpu 7
expect_error "lamina time: GPU that does not exist" \
  "lamina: error: GPU 7 was requested, but .* (--gpu -1 trains on the CPU)$" \
  "$lamina" time --model input_net.prototxt --gpu 7 --iterations 1

expect_error "device_id without solver_mode GPU" "device_id is set but solver_mode is CPU" \
  "$lamina" train --solver cpu_device_id_solver.prototxt

# Precisions: only those there are.
expect_error "--precision that is not one" "lamina: error: --precision 'tf16' is not a precision" \
  "$lamina" train --solver unknown_layer_solver.prototxt --precision tf16
# FP16's loss scaling: its fields are checked, and refused where no layer runs in FP16.
scale_solver=$(solver_file loss_scale "" "loss_scale: 1024")
expect_error "loss_scale without FP16" "the solver sets loss_scale, but no layer of the TRAIN net 'input_net' runs in FP16, so nothing would use it: remove it, or train in FP16" \
  "$lamina" train --solver "$scale_solver"
zero_scale_solver=$(solver_file zero_scale "" "loss_scale: 0" "precision: FP16")
expect_error "loss_scale 0" "zero_scale.prototxt:[0-9]*: loss_scale is 0; give the scale (at least 2^-24" \
  "$lamina" train --solver "$zero_scale_solver"
expect_success "lamina time --precision fp16" "FP16 in x_FP16, fc; FP32 in y_FP32; FP32 (no FP16 path) in data, loss" \
  "$lamina" time --model input_net.prototxt --precision fp16 --iterations 1
expect_success "lamina time --precision tf32" "every layer in TF32" \
  "$lamina" time --model input_net.prototxt --precision tf32 --iterations 1
expect_success "lamina time --precision bf16" "BF16 in" \
  "$lamina" time --model input_net.prototxt --precision bf16 --iterations 1
# A layer that another absorbed (BatchNorm runs the Scale after it) is listed with that layer.
cat > "$tmp/bn_scale_net.prototxt" <<'NET'
name: "bn_scale"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 dim: 2 dim: 2 } shape { dim: 4 } } }
layer { name: "bn" type: "BatchNorm" bottom: "data" top: "data" }
layer { name: "scale" type: "Scale" bottom: "data" top: "data" scale_param { bias_term: true } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" }
NET
expect_success "lamina time: an absorbed layer" "^scale  *Scale  *(runs in bn)  *data (4, 3, 2, 2)$" \
  "$lamina" time --model "$tmp/bn_scale_net.prototxt" --iterations 1
expect_success "lamina time: each layer's times, share and tops" "^fc  *InnerProduct  *[0-9.]*  *[0-9.]*  *[0-9.]*%  fc (4, 3)$" \
  "$lamina" time --model "$tmp/bn_scale_net.prototxt" --iterations 1

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

# The command line: misspelt subcommands and options are named with the closest one.
expect_error "misspelt subcommand" "'trian' is not a lamina command; did you mean 'train'?" \
  "$lamina" trian --solver input_solver.prototxt
expect_error "misspelt subcommand, test" "did you mean 'test'?" \
  "$lamina" tets --model input_net.prototxt --weights x
expect_error "unknown subcommand" "'xyzzy' is not a lamina command (commands: train, test" \
  "$lamina" xyzzy
expect_error "misspelt option" "lamina train: unknown option '--sovler'; did you mean '--solver'?" \
  "$lamina" train --sovler input_solver.prototxt
expect_error "missing required option" "lamina: error: --solver is required" "$lamina" train
expect_error "option value that is not a number" "--iterations = many" \
  "$lamina" time --model input_net.prototxt --iterations many

# --gpu: N >= 0 a device, -1 the CPU (overriding solver_mode: GPU), anything else an error.
for cmd in "train --solver input_solver.prototxt" "test --model input_net.prototxt --weights x" \
           "time --model input_net.prototxt"; do
  # shellcheck disable=SC2086
  expect_error "lamina ${cmd%% *} --gpu -2" "lamina: error: --gpu -2 is not a device.*-1 for the CPU" \
    "$lamina" $cmd --gpu -2
  # shellcheck disable=SC2086
  expect_error "lamina ${cmd%% *} --gpu abc" "--gpu must be an integer.*got 'abc'" \
    "$lamina" $cmd --gpu abc
done
expect_error "--gpu 1.5" "got '1.5'" "$lamina" train --solver input_solver.prototxt --gpu 1.5
gpu_solver=$(solver_file gpu "" "solver_mode: GPU" "device_id: 97")
expect_success "--gpu -1 overrides solver_mode: GPU" "Training on native" \
  "$lamina" train --solver "$gpu_solver" --gpu -1
expect_error "solver_mode: GPU without the GPU" \
  "GPU 97.*solver_mode is GPU, device_id 97; solver_mode: CPU trains on the CPU) (lamina train: --gpu -1 for solver_mode: CPU)$" \
  "$lamina" train --solver "$gpu_solver"
expect_success "lamina time --gpu -1" "Timing input_net on native" \
  "$lamina" time --model input_net.prototxt --gpu -1 --iterations 1
forbid="--gpu"
expect_error "device_query --name -3" "--name must be a device number >= 0, got -3" \
  "$lamina" device_query --name -3
forbid="--gpu"
expect_error "device_query --name of a GPU that is not there" "--name 97: there is no GPU 97" \
  "$lamina" device_query --name 97

# --weights that match no parameter of the net: an error naming both sides, unless allowed.
expect_success "train input_net" "Training on native" "$lamina" train --solver "$(solver_file input)"
sed 's/name: "fc"/name: "fc9"/; s/name: "input_net"/name: "other_net"/' input_net.prototxt \
  > "$tmp/other_net.prototxt"
other_solver=$(solver_file other "$tmp/other_net.prototxt")
# Fine-tuning from a snapshot of the same prefix would overwrite it at its iteration: refused
# before training, and the file is left as it was.
sum_before=$(cksum < "$tmp/input_iter_2.lamina")
expect_error "train --weights from its own prefix" \
  "snapshot at iteration 2 would overwrite '$tmp/input_iter_2.lamina'.*training did not start" \
  "$lamina" train --solver "$tmp/input.prototxt" --weights "$tmp/input_iter_2.lamina"
[ "$(cksum < "$tmp/input_iter_2.lamina")" = "$sum_before" ] ||
  { echo "FAIL: the weights fine-tuned from were overwritten"; failures=$((failures + 1)); }
expect_error "train --weights that match nothing" \
  "weights file '$tmp/input_iter_2.lamina' matches no parameter of the net 'other_net'.*'fc9/weight'.*'fc/weight'.*--allow-unmatched-weights" \
  "$lamina" train --solver "$other_solver" --weights "$tmp/input_iter_2.lamina"
expect_success "train --weights that match nothing, allowed" "Training on native" \
  "$lamina" train --solver "$other_solver" --weights "$tmp/input_iter_2.lamina" \
  --allow-unmatched-weights
expect_error "--allow-unmatched-weights without --weights" "--allow-unmatched-weights is for --weights" \
  "$lamina" train --solver "$other_solver" --allow-unmatched-weights
forbid="allow-unmatched"
expect_error "lamina test --weights that match nothing" \
  "TEST net of $tmp/other_net.prototxt: weights file '$tmp/input_iter_2.lamina' matches no parameter of the TEST net" \
  "$lamina" test --model "$tmp/other_net.prototxt" --weights "$tmp/input_iter_2.lamina"
expect_success "lamina test with its own weights" "loss = " \
  "$lamina" test --model input_net.prototxt --weights "$tmp/input_iter_2.lamina" --iterations 2

# Errors of the TEST net say TEST.
expect_error "lamina test: a net that cannot be built" "TEST net of unknown_layer_net.prototxt: .*Convolutionn" \
  "$lamina" test --model unknown_layer_net.prototxt --weights "$tmp/input_iter_2.lamina"

# A library message naming a solver field that a flag can set names the flag too.
sed 's/num_output: 4 }/num_output: 4 bias_filler { type: "constant" value: 1 } }/' \
  input_net.prototxt > "$tmp/diverging_net.prototxt"
diverging_solver=$(solver_file diverging "$tmp/diverging_net.prototxt" "base_lr: 1e30")
expect_error "divergence" "diverged.*nonfinite: CONTINUE.*--nonfinite continue" \
  "$lamina" train --solver "$diverging_solver"

# A file-size limit is a write error naming the snapshot, not death by SIGXFSZ (the tool
# ignores the signal, so write() fails with EFBIG); training goes on past failed periodic
# snapshots only with snapshot_failure: CONTINUE, and a final snapshot that could not be
# written still makes the exit status 1.
mkdir "$tmp/fsz"
fsz_solver=$(solver_file fsz/run "" "snapshot: 1")
expect_error "ulimit -f: a file-size limit" \
  "cannot write '$tmp/fsz/run_iter_1.lamina'.*File too large.*--snapshot-failure continue" \
  bash -c 'ulimit -f 0; exec "$0" "$@"' "$lamina" train --solver "$fsz_solver"
expect_error "ulimit -f with --snapshot-failure continue: the final snapshot" \
  "final snapshot could not be written: cannot write '$tmp/fsz/run_iter_2.lamina'.*File too large" \
  bash -c 'ulimit -f 0; exec "$0" "$@"' "$lamina" train --solver "$fsz_solver" \
  --snapshot-failure continue

# Net state flags (Caffe's --stage and --level): the layers the net's state keeps.
expect_success "lamina time --stage --level" "deploy_and_fast *ReLU" \
  "$lamina" time --model net_state_net.prototxt --stage deploy,fast --level 2 --iterations 1
forbid="not_deploy"
expect_success "lamina time --stage drops not_stage layers" "deploy_or_fast *ReLU" \
  "$lamina" time --model net_state_net.prototxt --stage deploy --iterations 1
expect_success "lamina time: layers that share a name are listed by it" "^data  *Input" \
  "$lamina" time --model staged_net.prototxt --stage euclid --iterations 1
expect_error "lamina time --level that is not a number" "lamina: error: .*--level" \
  "$lamina" time --model net_state_net.prototxt --level high --iterations 1
# Several test nets: each one's last test, numbered.
cp two_test_nets_solver.prototxt staged_net.prototxt "$tmp/"  # its snapshots' lock goes there
expect_success "lamina train with two test nets" "final #1 accuracy = " \
  "$lamina" train --solver "$tmp/two_test_nets_solver.prototxt"
expect_error "snapshot_diff" "snapshot_diff is true, but Lamina's snapshots do not store gradients" \
  "$lamina" train --solver "$(solver_file diff "" "snapshot_diff: true")"
expect_error "train_state phase" "train_state sets phase: TEST" \
  "$lamina" train --solver "$(solver_file train_state "" "train_state { phase: TEST }")"

# Seeing training: --progress, --metrics, lamina plot and lamina draw_net.
expect_error "--progress that is not a mode" "lamina: error: --progress must be auto, bar, log or none; got 'fancy'" \
  "$lamina" train --solver input_solver.prototxt --progress fancy
expect_error "--metrics of an unknown format" "metrics file '$tmp/run.txt': name it \*.csv or \*.jsonl" \
  "$lamina" train --solver "$(solver_file metrics_txt)" --metrics "$tmp/run.txt"
seen_solver=$(solver_file seen "" "display: 1")
expect_success "train --progress log --metrics" "^iter 1/2 50% | loss [0-9.e-]* | lr 0.1 | .* | ETA " \
  "$lamina" train --solver "$seen_solver" --progress log --metrics "$tmp/seen.csv"
expect_error "--metrics over another run's file" "'$tmp/seen.csv' already holds records and this run starts at iteration 0" \
  "$lamina" train --solver "$seen_solver" --metrics "$tmp/seen.csv"
forbid="iter 1/2"
expect_success "train --progress none" "Training on native" \
  "$lamina" train --solver "$seen_solver" --progress none
# A run resumed from a snapshot appends to its metrics file, marking where it resumed.
resume_solver=$(solver_file resumed "" "display: 1" "snapshot: 1")
expect_success "train --metrics, snapshotting" "Training on native" \
  "$lamina" train --solver "$resume_solver" --metrics "$tmp/resumed.csv" --progress none
expect_success "train --snapshot --metrics appends" "Training on native" \
  "$lamina" train --solver "$resume_solver" --snapshot "$tmp/resumed_iter_1.solverstate" \
  --metrics "$tmp/resumed.csv" --progress none
[ "$(grep -c '^train,' "$tmp/resumed.csv")" -eq 3 ] && grep -q '^resume,1,' "$tmp/resumed.csv" ||
  { echo "FAIL: the resumed run did not append"; cat "$tmp/resumed.csv"; failures=$((failures + 1)); }
# The final test results are those at the last iteration, 3, not the test at 2 repeated.
final_solver=$(solver_file final "" "max_iter: 3" "test_iter: 1" "test_interval: 2" "display: 1")
sed -i '/^max_iter: 2$/d' "$final_solver"
expect_success "the final test is at the last iteration" "^final test, at iteration 3:$" \
  "$lamina" train --solver "$final_solver" --metrics "$tmp/final.jsonl" --progress none
grep -q '^{"kind":"test","iteration":3,' "$tmp/final.jsonl" ||
  { echo "FAIL: no test at iteration 3 in $tmp/final.jsonl"; failures=$((failures + 1)); }
expect_success "lamina plot" "wrote $tmp/seen.svg (640x300)" \
  "$lamina" plot "$tmp/seen.csv" --output "$tmp/seen.svg" --size 640x300 --log-loss
expect_error "lamina plot: a missing metrics file" "metrics file '$tmp/none.csv': cannot open" \
  "$lamina" plot "$tmp/none.csv" --output "$tmp/none.png"
expect_error "lamina plot: a picture format it does not write" "'$tmp/seen.jpg': name the picture \*.png or \*.svg" \
  "$lamina" plot "$tmp/seen.csv" --output "$tmp/seen.jpg"
expect_error "lamina plot --x" "--x must be iteration, epoch or time; got 'wall'" \
  "$lamina" plot "$tmp/seen.csv" --output "$tmp/seen.png" --x wall
expect_error "lamina plot --size" "--size must be WIDTHxHEIGHT in pixels, from 200x150 to 10000x10000; got '10x10'" \
  "$lamina" plot "$tmp/seen.csv" --output "$tmp/seen.png" --size 10x10
expect_error "lamina plot without --output" "--output is required" "$lamina" plot "$tmp/seen.csv"
expect_success "lamina draw_net" "wrote $tmp/input_net.svg" \
  "$lamina" draw_net input_net.prototxt --output "$tmp/input_net.svg" --rankdir TB
grep -q ">(EuclideanLoss)<" "$tmp/input_net.svg" ||
  { echo "FAIL: the drawing lacks the loss layer"; failures=$((failures + 1)); }
expect_error "lamina draw_net: a missing net" "net file 'no_such_net.prototxt': cannot open" \
  "$lamina" draw_net no_such_net.prototxt --output "$tmp/x.png"
expect_error "lamina draw_net --phase" "--phase must be TRAIN or TEST; got 'ALL'" \
  "$lamina" draw_net input_net.prototxt --output "$tmp/x.png" --phase ALL
expect_error "lamina draw_net --rankdir" "--rankdir must be LR, TB, BT or RL" \
  "$lamina" draw_net input_net.prototxt --output "$tmp/x.png" --rankdir UP
expect_error "lamina draw_net: a format it does not write" "name the drawing \*.png, \*.svg or \*.dot" \
  "$lamina" draw_net input_net.prototxt --output "$tmp/x.pdf"

# Caffe's data tools over images (images/: two PNGs and their list).
expect_success "convert_imageset" "wrote 2 records to LMDB database '$tmp/images_lmdb'" \
  "$lamina" convert_imageset images/ images/list.txt "$tmp/images_lmdb" --shuffle --seed 3
expect_success "compute_image_mean of the images" "mean_value channel \[2\]: " \
  "$lamina" compute_image_mean "$tmp/images_lmdb" "$tmp/images_mean.binaryproto"
expect_error "convert_imageset over an existing database" "images_lmdb'.*already exists" \
  "$lamina" convert_imageset images/ images/list.txt "$tmp/images_lmdb"
expect_error "convert_imageset: a missing list file" "image list file 'nothing.txt'" \
  "$lamina" convert_imageset images/ nothing.txt "$tmp/none_lmdb"
printf 'red.png 1\nred.png\n' > "$tmp/no_label.txt"
expect_error "convert_imageset: a line without a label" \
  "list file '$tmp/no_label.txt', line 2: 'red.png' has no label" \
  "$lamina" convert_imageset images/ "$tmp/no_label.txt" "$tmp/none_lmdb"
printf 'blue.png 1\n' > "$tmp/missing.txt"
expect_error "convert_imageset: a missing image" \
  "list file '$tmp/missing.txt', line 1: image 'images/blue.png'" \
  "$lamina" convert_imageset images/ "$tmp/missing.txt" "$tmp/none_lmdb"
[ ! -e "$tmp/none_lmdb" ] ||
  { echo "FAIL: a failed convert_imageset left a database"; failures=$((failures + 1)); }
expect_error "convert_imageset: one resize dimension" "give both" \
  "$lamina" convert_imageset images/ images/list.txt "$tmp/x_lmdb" --resize_height 4
expect_error "compute_image_mean: both force flags" "--force_color or --force_gray, not both" \
  "$lamina" compute_image_mean "$tmp/images_lmdb" "$tmp/x.binaryproto" --force_color \
  --force_gray

# export_onnx (built with ONNX): the training net names its loss; its deploy net exports.
if "$lamina" export_onnx --help > /dev/null 2>&1 &&
   ! "$lamina" export_onnx --model input_net.prototxt --weights none --output "$tmp/x.onnx" 2>&1 |
     grep -q "built without ONNX"; then
  expect_error "export_onnx without --output" "lamina: error: --output is required" \
    "$lamina" export_onnx --model input_net.prototxt --weights w.lamina
  expect_error "export_onnx: a missing weights file" "no_such.lamina" \
    "$lamina" export_onnx --model input_net.prototxt --weights no_such.lamina --output "$tmp/x.onnx"
  "$lamina" train --solver "$(solver_file onnx_weights)" > /dev/null 2>&1
  expect_error "export_onnx of a training net" \
    "layer 'loss' (EuclideanLoss) cannot be exported to ONNX: a loss or accuracy layer" \
    "$lamina" export_onnx --model input_net.prototxt --weights "$tmp/onnx_weights_iter_2.lamina" \
    --output "$tmp/x.onnx"
  grep -v EuclideanLoss input_net.prototxt > "$tmp/input_deploy.prototxt"
  expect_success "export_onnx of the deploy net" \
    "Wrote $tmp/input.onnx: ONNX opset 17, 1 nodes, 16 weights; inputs x, t, outputs t, y" \
    "$lamina" export_onnx --model "$tmp/input_deploy.prototxt" \
    --weights "$tmp/onnx_weights_iter_2.lamina" --output "$tmp/input.onnx"
else
  expect_error "export_onnx without ONNX" "built without ONNX export: install Debian's libonnx-dev" \
    "$lamina" export_onnx --model input_net.prototxt --weights none --output "$tmp/x.onnx"
fi
report
