#!/usr/bin/env bash
# Lamina used from outside its tree (docs/install.md):
#   install_consumer.sh BUILD_DIR PLUGIN     (run from the source folder)
# installs BUILD_DIR into a scratch prefix, then builds and runs examples/consumer against
# it with find_package (liblamina.so, then the static component's liblamina.a) and with
# pkg-config; runs the installed tool (its own RPATH finds the library, after the tree is
# moved too) with a plugin; and does the same with the Debian package cpack makes,
# unpacked.
set -euo pipefail
build="$(cd "$1" && pwd)"
plugin="$2"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
unset LD_LIBRARY_PATH

step() { echo "== install_consumer: $*"; }
# Builds and runs the consumer against PREFIX, with find_package and with pkg-config.
consume() {
  local prefix="$1" name="$2"
  step "$name: find_package(Lamina), liblamina.so"
  cmake -S examples/consumer -B "$scratch/$name-shared" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_BUILD_TYPE=Release >"$scratch/$name-shared.log" ||
    { cat "$scratch/$name-shared.log"; return 1; }
  grep "Lamina .* from" "$scratch/$name-shared.log"
  cmake --build "$scratch/$name-shared" >/dev/null
  "$scratch/$name-shared/consumer"
  step "$name: find_package(Lamina COMPONENTS static), liblamina.a"
  cmake -S examples/consumer -B "$scratch/$name-static" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_BUILD_TYPE=Release -DCONSUMER_STATIC=ON >/dev/null
  cmake --build "$scratch/$name-static" >/dev/null
  ! ldd "$scratch/$name-static/consumer" | grep -q liblamina  # no liblamina.so needed
  "$scratch/$name-static/consumer"
  step "$name: pkg-config lamina"
  local pc_dir
  pc_dir="$(dirname "$(find "$prefix" -name lamina.pc | head -1)")"
  local libdir
  libdir="$(PKG_CONFIG_PATH="$pc_dir" pkg-config --variable=libdir lamina)"
  # shellcheck disable=SC2046
  c++ -std=c++17 -O1 examples/consumer/consumer.cpp -o "$scratch/$name-pc" \
      $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs lamina) -Wl,-rpath,"$libdir"
  "$scratch/$name-pc"
}

step "cmake --install into a scratch prefix"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
"$scratch/prefix/bin/lamina" --version
consume "$scratch/prefix" installed
step "the installed tree moved elsewhere: the tool, and a plugin loaded by it"
mv "$scratch/prefix" "$scratch/moved"
"$scratch/moved/bin/lamina" time --model examples/custom_layer/square_net.prototxt \
  --iterations 1 --plugin "$plugin" 2>&1 | grep "layer types Square"

step "cpack -G DEB, unpacked (dpkg-deb -x)"
(cd "$build" && cpack -G DEB -B "$scratch/package" >/dev/null)
deb="$(ls "$scratch"/package/lamina_*.deb)"
dpkg-deb --info "$deb" | grep -E "Package|Version|Depends"
dpkg-deb -x "$deb" "$scratch/deb"
"$scratch/deb/usr/bin/lamina" --version
consume "$scratch/deb/usr" deb
echo "install_consumer.sh: all checks passed"
