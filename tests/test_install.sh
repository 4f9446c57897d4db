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
# taskgrad.pc requires starpu-1.3 or starpu-1.4: the one taskgrad was built
# against (both series can be installed side by side), which must be the
# StarPU that libtaskgrad.so loads
export PKG_CONFIG_PATH="$libdir/pkgconfig:${TG_STARPU_PCDIR:+$TG_STARPU_PCDIR:}${PKG_CONFIG_PATH:-}"
starpu_mod=$(pkg-config --print-requires taskgrad | awk '{ print $1 }')
starpu_libdir=$(pkg-config --variable=libdir "$starpu_mod") \
  || { echo "FAIL taskgrad.pc requires '$starpu_mod', unknown to pkg-config"; exit 1; }
loaded_starpu() { # the libstarpu file the program or library $1 loads
  LD_LIBRARY_PATH="$libdir:$starpu_libdir:${LD_LIBRARY_PATH:-}" ldd "$1" |
    awk '$1 ~ /^libstarpu-/ { print $3 }' | xargs -r readlink -f
}
want=$(loaded_starpu "$libdir/libtaskgrad.so")
case "$want" in
  "$(readlink -f "$starpu_libdir")"/libstarpu-*) ;;
  *) echo "FAIL libtaskgrad.so loads '$want', taskgrad.pc requires $starpu_mod in $starpu_libdir"
     exit 1 ;;
esac
[ "$(loaded_starpu "$work/cm/build/consumer")" = "$want" ] \
  || { echo "FAIL find_package(taskgrad) consumer loads another StarPU than libtaskgrad.so ($want)"; exit 1; }
cc -std=gnu11 -o "$work/pc_consumer" "$TG_SOURCE_DIR/examples/gemm_chain.c" \
  $(pkg-config --cflags --libs taskgrad) -lm \
  || { echo "FAIL pkg-config consumer"; exit 1; }
[ "$(loaded_starpu "$work/pc_consumer")" = "$want" ] \
  || { echo "FAIL pkg-config consumer loads another StarPU than libtaskgrad.so ($want)"; exit 1; }
LD_LIBRARY_PATH="$libdir:$starpu_libdir:${LD_LIBRARY_PATH:-}" "$work/pc_consumer"
echo "ok   pkg-config taskgrad consumer builds and runs ($starpu_mod)"

# 3. the installed CLI finds its library through its rpath
"$prefix/bin/taskgrad" --version
echo "test_install: 3 passed, 0 failed"
