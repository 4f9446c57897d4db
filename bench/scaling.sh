#!/usr/bin/env bash
# Scaling on the machine at hand (issue: distributed training):
#  1. one process, 1 vs 2 CPU workers: `bench mlp` and `bench gpt` step
#     times, interleaved rounds (the host's speed drifts);
#  2. data parallelism over MPI ranks: `train mlp` on Fashion-MNIST for a
#     fixed number of steps with 1, 2 and 4 ranks of 1 and 2 workers each
#     (global batch 2048 in 8 micro-batches, the same for every row), as
#     samples/s of the training loop; every rank shares the same cores, so
#     rows with ranks x workers > cores are oversubscribed.
# Usage: bench/scaling.sh [BUILD_DIR] [ROUNDS]  (prints a Markdown report)
set -eu
build=${1:-build}
rounds=${2:-3}
tg="$build/bin/taskgrad"
export STARPU_SILENT=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 STARPU_WORKERS_NOBIND=1
export STARPU_HOME=${STARPU_HOME:-$(mktemp -d)}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "# Scaling: workers and MPI ranks"
echo
echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u +%F)"
echo "- command: bench/scaling.sh $build $rounds"
echo
echo "## One process, 1 vs 2 CPU workers (median of $rounds interleaved rounds)"
echo
echo "| step | 1 worker (ms) | 2 workers (ms) | speed-up |"
echo "|---|---:|---:|---:|"
declare -A t
for r in $(seq "$rounds"); do
  for w in 1 2; do
    t[mlp$w]+="$("$tg" bench mlp --ncpus $w 2>&1 | sed -nE 's/^step time: +([0-9.]+) ms.*/\1/p') "
    t[gpt$w]+="$("$tg" bench gpt --ncpus $w --quiet --steps 5 2>&1 | sed -nE 's/^taskgrad median step ms: ([0-9.]+).*/\1/p') "
  done
done
for m in mlp gpt; do
  a=$(echo ${t[${m}1]} | tr ' ' '\n' | median)
  b=$(echo ${t[${m}2]} | tr ' ' '\n' | median)
  label=$([ $m = mlp ] && echo "MLP 784-512-256-10, batch 2048, 2 micro" || echo "GPT L=4 C=256 T=256 B=8, 2 micro")
  echo "| $label | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2fx", a/b}') |"
done
echo
echo "## MPI ranks x workers: train mlp, 60 steps of 2048 samples (8 micro-batches)"
echo
echo "| ranks | workers per rank | samples/s | vs 1 rank, 1 worker |"
echo "|---:|---:|---:|---:|"
base=""
args=(train mlp --steps 60 --batch 2048 --micro-batches 8)
for n in 1 2 4; do
  for w in 1 2; do
    if [ $n = 1 ]; then
      out=$(STARPU_NCPU=$w "$tg" "${args[@]}" 2>&1)
    else
      out=$(STARPU_NCPU=$w mpirun -np $n --bind-to none "$tg" "${args[@]}" 2>&1)
    fi
    sps=$(echo "$out" | sed -nE 's/.*trained 60 steps in .* \(([0-9]+) samples\/s\).*/\1/p')
    [ -n "$base" ] || base=$sps
    echo "| $n | $w | $sps | $(awk -v a="$sps" -v b="$base" 'BEGIN{printf "%.2fx", a/b}') |"
  done
done
