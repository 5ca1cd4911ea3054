#!/usr/bin/env bash
# Builds the module lamina._lamina with g++ for the interpreter $PY (default python3) against
# a liblamina.so built elsewhere, then runs python/tests with pytest: for a machine that has
# Lamina's libraries but not its CMake project (a GPU machine given a build). From the
# repository root:
#
#   PY=/path/to/python python/build_on_device.sh LIB_DIR GENERATED_DIR OUT_DIR [INCLUDE_DIR...]
#
#   LIB_DIR        holds liblamina.so or liblamina.so.0.1 (and, through LD_LIBRARY_PATH,
#                  what it links)
#   GENERATED_DIR  the build's generated/ folder: lamina/lamina.pb.h, lamina/version.hpp
#   OUT_DIR        receives the package: OUT_DIR/lamina/{__init__.py,_lamina*.so}
#   INCLUDE_DIR    the headers of the protobuf, glog and gflags that liblamina.so was built
#                  with, where the machine lacks them
#
# pybind11's headers: PYBIND11_INCLUDE when set (a folder holding pybind11/; keep it apart
# from the INCLUDE_DIRs, which come first), else `$PY -m pybind11 --includes` when that
# module is installed, else the copy PyTorch ships (torch/include/pybind11). Python.h comes from
# $PY's sysconfig. PYTEST_ARGS are passed to pytest (default: -q -rs python/tests); with
# LAMINA_BUILD_ONLY=1 nothing is run.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,21p' "$0"; exit 2; }
lib_dir="$1" generated="$2" out="$3"
shift 3
PY="${PY:-python3}"

python_include="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
[ -f "$python_include/Python.h" ] ||
  { echo "no Python.h in $python_include: $PY cannot build extensions here (install its" \
         "development headers, or build the module elsewhere for this Python version:" \
         "docs/python.md)"; exit 1; }
if [ -n "${PYBIND11_INCLUDE:-}" ]; then
  pybind11_flags="-I$python_include -I$PYBIND11_INCLUDE"
  echo "pybind11: $PYBIND11_INCLUDE"
elif pybind11_flags="$("$PY" -m pybind11 --includes 2>/dev/null)"; then
  echo "pybind11: $("$PY" -m pybind11 --version)"
elif torch_include="$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))' 2>/dev/null)" &&
     [ -f "$torch_include/pybind11/pybind11.h" ]; then
  pybind11_flags="-I$python_include -I$torch_include"
  echo "pybind11: PyTorch's copy in $torch_include"
else
  echo "no pybind11 for $PY: pip's pybind11, PyTorch or PYBIND11_INCLUDE=<dir holding" \
       "pybind11/> (Debian's /usr/include of pybind11-dev, carried over) is needed"
  exit 1
fi
# Lamina's and the given headers first: PyTorch's include folder may hold other versions of
# the libraries' headers.
includes=(-Iinclude -I"$generated")
for dir in "$@"; do includes+=(-I"$dir"); done

suffix="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
mkdir -p "$out/lamina"
# One compiler per source file, side by side; then the link. Symbols of glog and protobuf
# resolve through liblamina.so's own dependencies when the module is loaded.
objects=()
for source in python/src/*.cpp; do
  object="$out/$(basename "$source" .cpp).o"
  objects+=("$object")
  # shellcheck disable=SC2086
  g++ -O2 -std=c++17 -fPIC -fvisibility=hidden "${includes[@]}" $pybind11_flags \
      -c "$source" -o "$object" &
done
for job in $(jobs -p); do wait "$job" || { echo "compiling the module failed"; exit 1; }; done
# liblamina.so, or the file its soname names (liblamina.so.0.1) when only that was copied.
library=""
for candidate in "$lib_dir"/liblamina.so "$lib_dir"/liblamina.so.*; do
  if [ -z "$library" ] && [ -f "$candidate" ]; then library="$candidate"; fi
done
[ -n "$library" ] || { echo "no liblamina.so* in $lib_dir"; exit 1; }
g++ -shared "${objects[@]}" "$library" -Wl,-rpath,"$(cd "$lib_dir" && pwd)" \
    -o "$out/lamina/_lamina$suffix"
rm -f "${objects[@]}"
cp python/lamina/*.py "$out/lamina/"
echo "built $out/lamina/_lamina$suffix for $("$PY" --version)"
[ "${LAMINA_BUILD_ONLY:-0}" = 1 ] && exit 0

# shellcheck disable=SC2086
PYTHONPATH="$(cd "$out" && pwd)${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -p no:cacheprovider \
  ${PYTEST_ARGS:--q -rs python/tests}
