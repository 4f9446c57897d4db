#!/usr/bin/env bash
# GPT training-step speed as a fraction of the sgemm ceiling measured in the
# same run, for one build or an A/B comparison of several:
#   bench/gpt-cpu-ceiling.sh [-r ROUNDS] [-s SIZES] [-g LIBS] [-p PRECISIONS] BUILD [BUILD...]
# LIBS: GEMM libraries to run each build with (--gemm-lib, e.g. "openblas
# onednn libxsmm auto"), interleaved like builds; default: none named (the
# build's own choice, TG_GEMM_LIB or auto).  PRECISIONS: --precision values
# (e.g. "fp32 bf16"), interleaved the same way; default fp32.
# The ceiling: with BUILD/bin/gemm_libs (from 2026-11-25 on), the best
# 2-thread 2048^3 sgemm of any GEMM library (gemm_libs --ceiling: two
# GEMMs, one per thread, or one threaded by the library) and of every
# OpenBLAS kernel set the CPU can run (Haswell, SkylakeX, Cooperlake, each
# set for its one probe; TG_CEILING_CORETYPES names others), else
# bin/ceiling's (OpenBLAS).
# SIZES: d4, 124m and/or 124m-b8t256 (default "d4 124m").  Each round runs the ceiling
# probe (bin/ceiling of the first BUILD that has one, as an older build may
# predate it: 2048^3 sgemm, 1 thread and all cores), then, for each size,
# every build in turn, so that builds are interleaved and a load change on a
# shared machine hits them alike.  Prints one line per run and, per build and
# size, the run with the median step time: step ms, GFLOP/s by llm.c's count
# (6 N + 6 L C T per token, as `bench gpt` prints it) and that as % of the
# all-core ceiling of the same round, and the run's mean step over its whole
# window where the build prints it ("-" for older builds; compare means only
# between builds that all have one).  With each run, the GFLOP/s per core of
# the GEMM codelets and AdamW's share of the worker time, from bench gpt's
# per-codelet table, and with each round the load average: figures taken
# under load are only comparable within a round.  Under load the position in
# the round mattered too (2026-11-24): run a second series with the builds in
# the other order.
set -euo pipefail
rounds=3
sizes="d4 124m"
libs=""
precs="fp32"
while getopts "r:s:g:p:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    s) sizes=$OPTARG ;;
    g) libs=$OPTARG ;;
    p) precs=$OPTARG ;;
    *) echo "usage: $0 [-r ROUNDS] [-s 'd4 124m'] [-g LIBS] [-p PRECISIONS] BUILD [BUILD...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-r ROUNDS] [-s 'd4 124m'] [-g LIBS] BUILD [BUILD...]" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$0: error: -r wants a positive integer" >&2; exit 2; }
builds=("$@")
# the runs of a round: each build, with each library of -g
vbuild=() vlib=() vprec=()
for p in $precs; do
  for b in "${builds[@]}"; do
    for g in $libs; do vbuild+=("$b"); vlib+=("$g"); vprec+=("$p"); done
    [ -n "$libs" ] || { vbuild+=("$b"); vlib+=(""); vprec+=("$p"); }
  done
done
label() { echo "${vbuild[$1]}${vlib[$1]:+ --gemm-lib ${vlib[$1]}} ${vprec[$1]}"; }
ceiling= libs_probe=
for b in "${builds[@]}"; do
  if [ -x "$b/bin/gemm_libs" ]; then libs_probe="$b/bin/gemm_libs"; break; fi
done
for b in "${builds[@]}"; do
  if [ -x "$b/bin/ceiling" ]; then ceiling="$b/bin/ceiling"; break; fi
done
[ -n "$ceiling" ] || { echo "$0: error: no BUILD/bin/ceiling (cmake --build BUILD --target ceiling)" >&2; exit 2; }
for b in "${builds[@]}"; do
  [ -x "$b/bin/taskgrad" ] || { echo "$0: error: no $b/bin/taskgrad: build first" >&2; exit 2; }
done

size_flags() {
  case $1 in
    d4) echo "" ;; # bench gpt's defaults: L=4 C=256 NH=4 T=256 B=8
    124m) echo "--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 \
--batch 4 --seq 64 --steps 3 --warmup 1" ;;
    124m-b8t256) echo "--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 \
--batch 8 --seq 256 --steps 2 --warmup 1" ;;
    *) echo "$0: error: unknown size '$1' (d4, 124m, 124m-b8t256)" >&2; exit 2 ;;
  esac
}
for s in $sizes; do size_flags "$s" >/dev/null; done

# OpenBLAS 0.3.21's kernel sets this CPU can run, beyond the one the
# environment gives (TG_CEILING_CORETYPES overrides; "" for none)
if [ -z "${TG_CEILING_CORETYPES+set}" ]; then
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  has() { [[ " $flags " == *" $1 "* ]]; }
  coretypes=""
  has avx2 && has fma && coretypes="Haswell"
  has avx512f && has avx512bw && has avx512vl && has avx512dq && coretypes="$coretypes SkylakeX"
  has avx512_bf16 && coretypes="$coretypes Cooperlake"
else
  coretypes=$TG_CEILING_CORETYPES
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export STARPU_SILENT=1

for r in $(seq "$rounds"); do
  "$ceiling" --reps 5 >"$out/ceiling.txt"
  one=$(awk '/^ceiling 1 thread:/ {print $4}' "$out/ceiling.txt")
  all=$(awk '/^ceiling [0-9]+ threads:/ {print $4}' "$out/ceiling.txt")
  if [ -n "$libs_probe" ]; then # "ceiling LIB 1t | 2 GEMMs | threaded": the best 2-thread
    "$libs_probe" --ceiling >"$out/libs.txt"
    # OpenBLAS's other kernel sets, each for this one command (the issue's
    # ceiling is the best of any library or OpenBLAS kernel set; the
    # environment's own setting is the run above): named openblas-SET
    for c in $coretypes; do
      OPENBLAS_CORETYPE=$c "$libs_probe" --ceiling |
        awk -v c="$c" '$1 == "ceiling" && $2 == "openblas" { $2 = "openblas-" c; print }' >>"$out/libs.txt"
    done
    all=$(awk '$1 == "ceiling" && $2 ~ /^(openblas|onednn|libxsmm)/ {
                 for (i = 5; i <= NF; i += 2) if ($i + 0 > c) { c = $i + 0; l = $2 } }
               END {printf "%.1f", c}' "$out/libs.txt")
    echo "round $r: ceiling $all GFLOP/s (best 2-thread sgemm of any library: $(awk '$1 == "ceiling" && $2 ~ /^(openblas|onednn|libxsmm)/ {printf "%s %s/%s ", $2, $5, $7}' "$out/libs.txt")); $(uptime | sed 's/.*load/load/')"
  else
    echo "round $r: ceiling $one GFLOP/s (1 thread), $all (all cores); $(uptime | sed 's/.*load/load/')"
  fi
  for s in $sizes; do
    for i in "${!vbuild[@]}"; do
      b=${vbuild[$i]}
      # shellcheck disable=SC2046  # the flags are words
      STARPU_HOME="$b/starpu-home" "$b/bin/taskgrad" bench gpt $(size_flags "$s") \
        ${vlib[$i]:+--gemm-lib "${vlib[$i]}"} --precision "${vprec[$i]}" \
        >"$out/run.txt" 2>&1 || { echo "$b bench gpt $s failed:"; tail -3 "$out/run.txt"; exit 1; }
      ms=$(awk '/^taskgrad median step ms:/ {print $5}' "$out/run.txt")
      # the mean over the whole window (builds from 2026-11-24 on): the
      # steadier figure when steps are long and their intervals scatter
      mean=$(awk '/^taskgrad mean step ms:/ {print $5}' "$out/run.txt")
      mean=${mean:--}
      gf=$(awk '/^taskgrad GFLOP\/s:/ {print $3}' "$out/run.txt")
      pct=$(awk -v g="$gf" -v c="$all" 'BEGIN {printf "%.1f", 100 * g / c}')
      # in a fixed order, whatever the table's
      codelets=$(awk '{ rate[$1] = $5; share[$1] = $6 } END {
          n = split("lm_classifier linear_fwd linear_bwd_data gemm", c, " ")
          for (i = 1; i <= n; i++) printf "%s %s, ", c[i], rate["tg_" c[i]]
          # AdamW: a task per parameter group (tg_adamw_multi), per block of a
          # large one (tg_adamw)
          a = share["tg_adamw_multi"] + share["tg_adamw"]
          printf "adamw %s%% share", a }' "$out/run.txt")
      echo "  $s $(label "$i"): step $ms ms (mean $mean), $gf GFLOP/s, $pct% of ceiling; GFLOP/s per core: $codelets"
      echo "$ms $gf $pct $mean" >>"$out/$s.$i"
    done
  done
done

echo
echo "| size | build | step ms | GFLOP/s | % of ceiling | mean step ms |"
echo "| --- | --- | --- | --- | --- | --- |"
for s in $sizes; do
  for i in "${!vbuild[@]}"; do
    # the run with the median step time, whole (its GFLOP/s and % belong to it)
    sort -g "$out/$s.$i" | awk -v b="$(label "$i")" -v s="$s" '{r[NR] = $0} END {
        split(r[int((NR + 1) / 2)], f, " ")
        printf "| %s | %s | %s | %s | %s | %s |\n", s, b, f[1], f[2], f[3], f[4] }'
  done
done
