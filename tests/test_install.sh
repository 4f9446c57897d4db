#!/usr/bin/env bash
# The installed library is usable without the source tree: install into a
# temporary prefix, then build the GEMM example as an outside project twice,
# through find_package(taskgrad) and through pkg-config, and run both.
set -eu
if [ -n "${TG_SANITIZE:-}" ]; then
  # outside programs would link a sanitized library without the runtime
  echo "SKIP: sanitizer build ($TG_SANITIZE): the install test needs a plain build"
  exit 77
fi
build_dir="$(dirname "$TG_BIN")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" \
  || { echo "FAIL cmake --install"; cat "$work/install.log"; exit 1; }
for f in include/taskgrad/taskgrad.h include/taskgrad/codelets.h bin/taskgrad; do
  [ -e "$prefix/$f" ] || { echo "FAIL not installed: $f"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'libtaskgrad.so' | head -1)")
[ -n "$libdir" ] || { echo "FAIL libtaskgrad.so not installed"; exit 1; }

# 1. CMake package
mkdir -p "$work/cm"
cp "$TG_SOURCE_DIR/examples/gemm_chain.c" "$work/cm/"
cat >"$work/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.22)
project(consumer C)
find_package(taskgrad REQUIRED)
add_executable(consumer gemm_chain.c)
target_link_libraries(consumer PRIVATE taskgrad::taskgrad m)
CM
cmake -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cm.log" 2>&1 \
  && cmake --build "$work/cm/build" >>"$work/cm.log" 2>&1 \
  || { echo "FAIL find_package(taskgrad) consumer"; cat "$work/cm.log"; exit 1; }
LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$work/cm/build/consumer"
echo "ok   find_package(taskgrad) consumer builds and runs"

# 2. pkg-config
# taskgrad.pc requires starpu-1.3: the one taskgrad was built against
export PKG_CONFIG_PATH="$libdir/pkgconfig:${TG_STARPU_PCDIR:+$TG_STARPU_PCDIR:}${PKG_CONFIG_PATH:-}"
cc -std=gnu11 -o "$work/pc_consumer" "$TG_SOURCE_DIR/examples/gemm_chain.c" \
  $(pkg-config --cflags --libs taskgrad) -lm \
  || { echo "FAIL pkg-config consumer"; exit 1; }
LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" "$work/pc_consumer"
echo "ok   pkg-config taskgrad consumer builds and runs"

# 3. the installed CLI finds its library through its rpath
"$prefix/bin/taskgrad" --version
echo "test_install: 3 passed, 0 failed"
