#!/usr/bin/env bash
# bench/many-core.sh BUILD BUILD_SIM OUTDIR [strong]: GPT-2 124M (T=64) on simulated
# CPU nodes of 2 to 64 cores (issue 16: "a 124M step should use every core of
# a 32- or 64-core node"), with task times calibrated on this machine.
#  1. calibrate: real `bench gpt --calibrate` runs of BUILD on this machine's
#     2 cores under the host name cpu64, with 64- and 128-row micro-batches
#     (1 and 2 sequences) and the classifier's dwte in 1, 2, 4, 8 and 16 row
#     blocks, and the linear layers in 2, 4, 8 and 16 column tiles (64-row
#     micro-batches), so that every task of the sweeps below has a history;
#  2. simulate on platforms/cpu64 (BUILD_SIM, a SimGrid build) with N = 2, 4,
#     8, 16, 32, 64 CPU workers:
#       strong     B=4, min(N, 4) micro-batches (the 124M step),
#                  linear tiles by default (auto: N / micro-batches, at
#                  most 16, none up to 4 cores) and untiled (1);
#       weak       B=N, N micro-batches of one sequence (64 rows), dwte
#                  blocks by default (auto) and in 1 block (as before);
#       weak2      B=2N, N micro-batches of two sequences, auto and 1 block;
#       strong64   B=64 in 64 micro-batches on every N.
# With `strong`, only the strong sweeps.  Prints one line per run and writes
# OUTDIR/many-core.csv.  What the model
# leaves out: SimGrid shares no memory bandwidth between the simulated cores
# (each runs its tasks as fast as one core of this machine did, with the
# other core busy too), and the calibrated rates are this machine's.
set -euo pipefail
[ $# -eq 3 ] || [ $# -eq 4 ] && [ "${4:-strong}" = strong ] ||
  { echo "usage: bench/many-core.sh BUILD BUILD_SIM OUTDIR [strong]" >&2; exit 2; }
real="$1/bin/taskgrad" sim="$2/bin/taskgrad" out="$3" only=${4:-}
for b in "$real" "$sim"; do
  [ -x "$b" ] || { echo "many-core: $b not found" >&2; exit 2; }
done
"$sim" --version | grep -q "SimGrid: yes" || { echo "many-core: $2 is not a SimGrid build" >&2; exit 2; }
mkdir -p "$out"
work=$(mktemp -d /tmp/taskgrad-many-core-XXXXXX)
trap 'rm -rf "$work"' EXIT
g=(--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 --seq 64)

echo "many-core: calibrating on $(nproc) cores ($(date -u +%H:%M) UTC)" >&2
for r in 1 2 4 8 16; do
  for mb in 2 4; do
    STARPU_HOME="$work" STARPU_HOSTNAME=cpu64 STARPU_SILENT=1 "$real" bench gpt "${g[@]}" \
      --batch 4 --micro-batches $mb --classifier-blocks $r --ncpus 2 --calibrate --steps 3 \
      --warmup 1 --quiet > "$work/cal-$r-$mb.txt" 2>&1 ||
      { echo "many-core: calibration failed:" >&2; tail -n 5 "$work/cal-$r-$mb.txt" >&2; exit 1; }
  done
done
for t in 2 4 8 16; do
  STARPU_HOME="$work" STARPU_HOSTNAME=cpu64 STARPU_SILENT=1 "$real" bench gpt "${g[@]}" \
    --batch 4 --micro-batches 4 --tiles $t --ncpus 2 --calibrate --steps 3 \
    --warmup 1 --quiet > "$work/cal-t$t.txt" 2>&1 ||
    { echo "many-core: calibration failed:" >&2; tail -n 5 "$work/cal-t$t.txt" >&2; exit 1; }
done

csv="$out/many-core.csv"
echo "sweep,cores,batch,micro_batches,dwte_blocks,linear_tiles,step_ms,tokens_per_s,mean_busy_ms,from_history,from_roofline" > "$csv"
sweep() { # NAME BATCH-EXPR MICRO-EXPR BLOCKS(0 = auto) [TILES(0 = auto)]
  local name=$1 bexpr=$2 mexpr=$3 blocks=$4 tiles=${5:-0} n B M extra ms busy hist roof tps lt
  for n in 2 4 8 16 32 64; do
    B=$((bexpr)) M=$((mexpr)) extra=()
    [ "$blocks" = 0 ] || extra=(--classifier-blocks "$blocks")
    [ "$tiles" = 0 ] || extra+=(--tiles "$tiles")
    timeout 900 "$sim" simulate gpt "${g[@]}" "${extra[@]}" --batch $B --micro-batches $M \
      --platform cpu64 --gpus 0 --ncpus $n --perfmodels "$work/.starpu/sampling" --steps 3 \
      --warmup 1 > "$work/sim.txt" 2>&1 ||
      { echo "many-core: simulation failed:" >&2; tail -n 5 "$work/sim.txt" >&2; exit 1; }
    ms=$(sed -n 's/^simulated step ms: //p' "$work/sim.txt")
    lt=$(sed -n 's/.*linear layers in \([0-9]*\) tile.*/\1/p' "$work/sim.txt" | head -n 1)
    lt=${lt:-1}
    busy=$(awk '/^device CPU/ { s += $5; k++ } END { if (k) printf "%.1f", s / k }' "$work/sim.txt")
    hist=$(sed -n 's/^cost model: \([0-9]*\) estimates from calibrated history, .*/\1/p' "$work/sim.txt")
    roof=$(sed -n 's/^cost model: [0-9]* estimates from calibrated history, \([0-9]*\) from.*/\1/p' "$work/sim.txt")
    tps=$(awk -v b=$B -v m="$ms" 'BEGIN { printf "%.0f", b * 64 / m * 1000 }')
    echo "$name cores=$n B=$B micro-batches=$M dwte-blocks=${blocks/#0/auto} step=${ms} ms" \
      "linear-tiles=${lt:-?} tokens/s=$tps busy=${busy} ms/core (history $hist, roofline $roof)"
    echo "$name,$n,$B,$M,${blocks/#0/auto},${lt:-},$ms,$tps,$busy,$hist,$roof" >> "$csv"
  done
}
sweep strong 4 'n < 4 ? n : 4' 0
sweep strong-untiled 4 'n < 4 ? n : 4' 0 1
[ "$only" = strong ] && { echo "many-core: wrote $csv" >&2; exit 0; }
sweep weak n n 0
sweep weak n n 1
sweep weak2 '2 * n' n 0
sweep weak2 '2 * n' n 1
sweep strong64 64 64 0
echo "many-core: wrote $csv" >&2
