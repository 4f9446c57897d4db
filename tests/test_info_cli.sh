#!/usr/bin/env bash
# taskgrad info (cli/info.c) and the GEMM back end's choice
# (codelets/gemm_choice.c):
#  - each section (cpu, gemm libraries, gemm choice, starpu) is present, in
#    order, with its keys well-formed (family/model numbers, yes/no features,
#    a version and kernel set per library, a known library and GFLOP/s per
#    shape class, StarPU's version and limits);
#  - the choice: forced by TG_GEMM_LIB and --gemm-lib (every class that
#    library, no measurement); "auto" measures, writes the cache under
#    XDG_CACHE_HOME, and the next run reads it; a cache of another key (a
#    library update) is measured again; a cache directory that cannot be
#    written means no cache and no error;
#  - --help, a bad flag, an unknown library (flag, environment) each exit as
#    the CLI does (0, or 2 with one message);
#  - bench mlp's header carries the one-line summary.
. "$(dirname "$0")/cli_testlib.sh"
export XDG_CACHE_HOME="$work/cache"
unset TG_GEMM_LIB

# ---- sections ------------------------------------------------------------
if ! "$tg" info >"$work/info" 2>"$work/err"; then
  bad "info failed: $(cat "$work/err")"
  finish test_info_cli
  exit
fi
sections=$(grep -E '^[a-z].*:$' "$work/info" | tr '\n' ' ')
if [ "$sections" = "cpu: gemm libraries: gemm choice: starpu: " ]; then
  ok "sections in order: $sections"
else
  bad "sections: '$sections'"
fi
# section KEY-REGEX: the lines of one section, indented key: value
section() { awk -v s="$1:" '$0 == s {on = 1; next} /^[^ ]/ {on = 0} on' "$work/info"; }
expect_line() { # SECTION REGEX DESCRIPTION
  if section "$1" | grep -Eq -e "$2"; then ok "$1: $3"; else bad "$1: $3 (/$2/ in: $(section "$1" | tr '\n' '|'))"; fi
}
expect_line cpu '^  model: .+' "model name"
expect_line cpu '^  family/model: [0-9]+/[0-9]+$' "family/model"
expect_line cpu '^  cores: [1-9][0-9]*$' "core count"
for f in avx2 fma avx512f avx512bw avx512vl avx512dq avx512_bf16 amx; do
  expect_line cpu "^  $f: (yes|no)$" "feature $f"
done
# the features agree with the kernel's flags (amx: amx_tile)
for f in avx2 fma avx512f avx512_bf16; do
  has=no
  grep -m1 '^flags' /proc/cpuinfo | grep -qw "$f" && has=yes
  expect_line cpu "^  $f: $has$" "$f agrees with /proc/cpuinfo ($has)"
done
expect_line "gemm libraries" '^  openblas: OpenBLAS [0-9.]+ .*, kernels [A-Za-z0-9]+ \((from OPENBLAS_CORETYPE=.+|chosen by OpenBLAS for this CPU)\)$' "OpenBLAS version, kernels, origin"
# a kernel set the user did not name is taskgrad's own correction, said so
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  expect_line "gemm libraries" '^  openblas: .*kernels [A-Za-z0-9]+ \((from OPENBLAS_CORETYPE=[A-Za-z0-9]+, set by taskgrad: OpenBLAS had picked [A-Za-z0-9]+ for this CPU|chosen by OpenBLAS for this CPU)\)$' "OpenBLAS origin without the user's variable"
fi
expect_line "gemm libraries" '^  onednn: oneDNN [0-9]+\.[0-9]+\.[0-9]+ .*max ISA [a-z0-9_]+$' "oneDNN version, ISA"
expect_line "gemm libraries" '^  libxsmm: libxsmm [0-9.]+, JIT target [a-z0-9_]+' "libxsmm version, target"
expect_line "gemm choice" '^  how: measured now, cached, .*/cache/taskgrad/gemm-choice.txt$' "auto measured and cached"
num='[0-9]+\.[0-9]'
for c in forward data-grad weight-grad classifier; do
  expect_line "gemm choice" "^  $c: (openblas|onednn|libxsmm), $num GFLOP/s \\(openblas $num, onednn $num, libxsmm $num\\)$" "class $c"
done
expect_line starpu '^  version: [0-9]+\.[0-9]+\.[0-9]+$' "version"
expect_line starpu '^  max CPU workers \(STARPU_MAXCPUS\): [1-9][0-9]*$' "STARPU_MAXCPUS"
expect_line starpu '^  max buffers per task \(STARPU_NMAXBUFS\): [1-9][0-9]*$' "STARPU_NMAXBUFS"
expect_line starpu '^  CUDA: (yes|no)$' "CUDA"
expect_line starpu '^  OpenCL: (yes|no)$' "OpenCL"
# the chosen library is the fastest of the measured ones, or OpenBLAS when
# none beats it by 3% (each line: "  CLASS: LIB, G GFLOP/s (openblas G1,
# onednn G2, libxsmm G3)")
slow=$(section "gemm choice" | grep GFLOP | grep -v '^  bf16:' | sed -E 's/[:,()]/ /g' | awk '{
  best = 0; for (i = 5; i < NF; i += 2) if ($(i + 1) + 0 > best) best = $(i + 1) + 0
  if ($2 == "openblas" ? best > 1.031 * $6 : $3 + 0 < best || $3 < 1.029 * $6) print $1 }')
[ -z "$slow" ] && ok "each class gets its fastest library (OpenBLAS within 3%)" \
  || bad "not the fastest: $slow"

# bf16 GEMMs: native exactly when the CPU has AVX512-BF16 (oneDNN's ISA) and
# native measured over 3% faster than widening
bf16=$(section "gemm choice" | grep '^  bf16:')
if grep -q '^  avx512_bf16: yes' "$work/info" && grep -q 'max ISA avx512_core_\(bf16\|amx\)' "$work/info"; then
  echo "$bf16" | sed -E 's/.*widened ([0-9.]+), native ([0-9.]+)\).*/\1 \2/' | {
    read -r w n
    want=$(awk -v w="$w" -v n="$n" 'BEGIN { print (n > 1.03 * w) ? "native" : "widened" }')
    case "$bf16" in
      "  bf16: native (oneDNN, AVX512-BF16), measured, "*) got=native ;;
      "  bf16: widened to f32, measured, "*) got=widened ;;
      *) got="?" ;;
    esac
    [ "$got" = "$want" ] && ok "bf16: $got, the faster by measurement ($w vs $n GFLOP/s)" \
      || bad "bf16 choice: '$bf16' (want $want)"
  }
else
  [ "$bf16" = "  bf16: widened to f32, widened: no AVX512-BF16 (oneDNN ISA)" ] \
    && ok "bf16: widened, no AVX512-BF16 here" || bad "bf16 line without AVX512-BF16: '$bf16'"
fi
for mode in native widen; do
  TG_GEMM_BF16=$mode "$tg" info >"$work/f" 2>&1
  line=$(grep '^  bf16:' "$work/f")
  if grep -q 'max ISA avx512_core_\(bf16\|amx\)' "$work/info"; then
    case $mode in native) want="  bf16: native (oneDNN, AVX512-BF16), forced by TG_GEMM_BF16" ;;
                  widen) want="  bf16: widened to f32, forced by TG_GEMM_BF16" ;; esac
  else
    want="  bf16: widened to f32, widened: no AVX512-BF16 (oneDNN ISA)"
  fi
  [ "$line" = "$want" ] && ok "TG_GEMM_BF16=$mode" || bad "TG_GEMM_BF16=$mode: '$line'"
done
TG_GEMM_BF16=fast expect_fail "unknown TG_GEMM_BF16" "unknown TG_GEMM_BF16 'fast'" info

# ---- the cache -----------------------------------------------------------
cache="$XDG_CACHE_HOME/taskgrad/gemm-choice.txt"
if [ -f "$cache" ] && head -1 "$cache" | grep -q '^taskgrad-gemm-choice 3|cpu=.*|openblas=.*|onednn=.*|libxsmm=.*|OPENBLAS_CORETYPE=' \
   && [ "$(wc -l <"$cache")" -eq 6 ] && tail -1 "$cache" | grep -qE '^bf16 (native|widen) '; then
  ok "cache file: key line, 4 classes and bf16"
else
  bad "cache file: $(cat "$cache" 2>&1)"
fi
"$tg" info >"$work/info2" 2>&1
grep -q '^  how: measured, from the cache' "$work/info2" && ok "second run reads the cache" \
  || bad "second run: $(grep how: "$work/info2")"
diff <(grep -A6 '^gemm choice:' "$work/info" | tail -5) <(grep -A6 '^gemm choice:' "$work/info2" | tail -5) >/dev/null \
  && ok "the cached choice is the measured one" || bad "cached choice differs"
sed -i '1s/libxsmm=[^|]*/libxsmm=0.0/' "$cache"
"$tg" info >"$work/info3" 2>&1
grep -q '^  how: measured now, cached' "$work/info3" && head -1 "$cache" | grep -qv 'libxsmm=0.0|' \
  && ok "another library version: measured again, cache rewritten" \
  || bad "stale key: $(grep how: "$work/info3"); $(head -1 "$cache")"
touch "$work/file"
XDG_CACHE_HOME="$work/file/sub" "$tg" info >"$work/info4" 2>"$work/err4"
rc=$?
if [ $rc -eq 0 ] && grep -q '^  how: measured now$' "$work/info4" && [ ! -s "$work/err4" ]; then
  ok "unwritable cache directory: measured, no cache, no error"
else
  bad "unwritable cache: rc $rc, $(grep how: "$work/info4"), stderr $(cat "$work/err4")"
fi

# ---- forced choices --------------------------------------------------------
for lib in openblas onednn libxsmm; do
  TG_GEMM_LIB=$lib "$tg" info >"$work/f" 2>&1
  n=$(grep -cE "^  (forward|data-grad|weight-grad|classifier): $lib$" "$work/f")
  grep -q '^  how: forced by TG_GEMM_LIB$' "$work/f" && [ "$n" -eq 4 ] \
    && ok "TG_GEMM_LIB=$lib: every class, not measured" || bad "TG_GEMM_LIB=$lib: $(grep -A5 '^gemm choice' "$work/f" | tr '\n' '|')"
  TG_GEMM_LIB=openblas "$tg" info --gemm-lib $lib >"$work/f" 2>&1
  n=$(grep -cE "^  (forward|data-grad|weight-grad|classifier): $lib$" "$work/f")
  grep -q '^  how: forced by --gemm-lib$' "$work/f" && [ "$n" -eq 4 ] \
    && ok "--gemm-lib $lib wins over TG_GEMM_LIB" || bad "--gemm-lib $lib: $(grep -A5 '^gemm choice' "$work/f" | tr '\n' '|')"
done

# ---- help and errors ---------------------------------------------------------
if "$tg" info --help >"$work/h" 2>&1 && grep -q '^usage: taskgrad info' "$work/h" \
   && grep -q -- '--gemm-lib NAME' "$work/h"; then
  ok "--help"
else
  bad "--help: $(head -3 "$work/h")"
fi
"$tg" help | grep -q '^  info ' && ok "info in taskgrad help" || bad "info missing from taskgrad help"
expect_fail "bad flag" "info: unknown flag '--bogus'" info --bogus
expect_fail "--gemm-lib without a value" "--gemm-lib" info --gemm-lib
expect_fail "unknown --gemm-lib" "--gemm-lib: unknown GEMM library 'mkl'" info --gemm-lib mkl
TG_GEMM_LIB=mkl expect_fail "unknown TG_GEMM_LIB (info)" "unknown GEMM library 'mkl' \\(forced by TG_GEMM_LIB\\)" info
expect_fail "unknown --gemm-lib (bench gpt)" "--gemm-lib: unknown GEMM library 'blis'" bench gpt --gemm-lib blis

# ---- the bench header ----------------------------------------------------------
TG_GEMM_LIB=onednn "$tg" bench mlp --steps 1 --hidden 32 >"$work/b" 2>&1
if grep -q '^machine: .*, [0-9]* cores, .*OpenBLAS.*oneDNN.*libxsmm.*StarPU [0-9.]*$' "$work/b" \
   && grep -qE '^gemm: forward=onednn data-grad=onednn weight-grad=onednn classifier=onednn bf16=(native|widened)(\([0-9]+ GF/s\))? \[forced by TG_GEMM_LIB\]$' "$work/b"; then
  ok "bench mlp header: machine and gemm lines"
else
  bad "bench mlp header: $(head -3 "$work/b")"
fi
# ---- the process keeps its name ---------------------------------------------------
# Where the CLI restarts itself for OpenBLAS's kernels (main.c), it must
# exec its own path: through /proc/self/exe the new process was named "exe",
# which ps, pgrep and top show (test_mpi_requeue looks its ranks up by name).
"$tg" bench gpt --steps 100000 --quiet >/dev/null 2>&1 &
pid=$!
sleep 1
comm=$(cat "/proc/$pid/comm" 2>/dev/null || echo "(gone)")
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ "$comm" = taskgrad ]; then
  ok "a running taskgrad is named taskgrad"
else
  bad "a running taskgrad is named '$comm', expected 'taskgrad'"
fi
finish test_info_cli
