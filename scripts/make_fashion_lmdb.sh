#!/usr/bin/env bash
# Makes the two LMDBs of models/fashion_mnist/lenet_lmdb_train.prototxt from the
# Fashion-MNIST IDX files, as Caffe's examples/mnist/create_mnist.sh does for MNIST:
#   DIR/fashion_train_lmdb  60,000 Datums (1 x 28 x 28 bytes and the label), keys %08d
#   DIR/fashion_test_lmdb   10,000 Datums
# in the IDX files' order (`lamina convert_mnist`). A database already there is left alone;
# each is written under a temporary name and renamed, so an interrupted run leaves none half
# made. DIR defaults to data/ under the repository root. The IDX files (.gz) are read from
# data/fashion-mnist (scripts/fetch_mnist.sh links it), else from the Debian package
# dataset-fashion-mnist. LAMINA names the lamina tool (default build/tools/lamina).
#
#   scripts/make_fashion_lmdb.sh [DIR]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/data}"
lamina="${LAMINA:-$root/build/tools/lamina}"

die() { echo "make_fashion_lmdb.sh: error: $*" >&2; exit 1; }

idx=""
for candidate in "$root/data/fashion-mnist" /usr/share/datasets/fashion-mnist; do
  if [[ -e "$candidate/train-images-idx3-ubyte.gz" || -e "$candidate/train-images-idx3-ubyte" ]]
  then
    idx="$candidate"
    break
  fi
done
[[ -n "$idx" ]] || die "no Fashion-MNIST IDX files in $root/data/fashion-mnist or
  /usr/share/datasets/fashion-mnist. Install them (apt-get install dataset-fashion-mnist, which
  scripts/setup.sh does) or copy train-images-idx3-ubyte(.gz) and the three others into
  $root/data/fashion-mnist"
[[ -x "$lamina" ]] || die "the lamina tool is not at $lamina. Build it
  (cmake --build build --target lamina_tool) or set LAMINA to its path"

mkdir -p "$dir"
# make_db NAME IMAGES LABELS: DIR/NAME from the IDX pair, unless it exists.
make_db() {
  local db="$dir/$1" tmp="$dir/.$1.partial"
  if [[ -e "$db" ]]; then
    echo "left $db alone: it exists (remove it to make it again)"
    return
  fi
  rm -rf "$tmp"
  "$lamina" convert_mnist "$idx/$2" "$idx/$3" "$tmp" --backend lmdb
  mv "$tmp" "$db"
  echo "made $db"
}
make_db fashion_train_lmdb train-images-idx3-ubyte train-labels-idx1-ubyte
make_db fashion_test_lmdb t10k-images-idx3-ubyte t10k-labels-idx1-ubyte
