#!/usr/bin/env bash
# MLP training-step benchmark series: `taskgrad bench mlp` over several
# batch sizes and micro-batch counts, RUNS runs each, printed as a Markdown
# table of medians.  Run it on a quiet machine (nothing else compiling or
# installing): timings taken under load are worthless.
#   bench/mlp-cpu.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=${1:-build}
runs=${2:-5}
tg="$build/bin/taskgrad"
[ -x "$tg" ] || { echo "no $tg: build first" >&2; exit 2; }
export STARPU_SILENT=1
export STARPU_HOME=${STARPU_HOME:-$build/starpu-home}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
field() { # file, line prefix, awk field number
  grep -E "^$2" "$1" | awk -v f="$3" '{print $f}' | tr -d '%'
}

echo "| batch | micro-batches | step ms | samples/s | GFLOP/s | GEMM share % | overhead us/task | overhead % |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for cfg in "1024 2" "2048 2" "2048 4" "4096 4"; do
  set -- $cfg
  for i in $(seq "$runs"); do
    "$tg" bench mlp --batch "$1" --micro-batches "$2" --quiet >"$out/$i.txt"
  done
  row="| $1 | $2 "
  for spec in "step time:/3" "samples\/s:/2" "GFLOP\/s:/2" "GEMM share:/3" \
              "runtime overhead:/3" "runtime overhead:/9"; do
    prefix=${spec%/*}
    col=${spec##*/}
    row+="| $(for i in $(seq "$runs"); do field "$out/$i.txt" "$prefix" "$col"; done | median) "
  done
  echo "$row|"
done
