#!/usr/bin/env bash
# bench/sim-shard.sh BUILD_SIM OUTDIR: sharded data parallelism against the
# one-copy REDUX mode (--data-parallel redux, the mode before sharding), side
# by side on the committed h100x8 platform and roofline (predictions: no
# calibrated history for an H100 here), as issue 22 asks:
#  1. GPT-2 124M bf16, T=1024, 8 sequences and 2 micro-batches per GPU (weak
#     scaling), 1, 2, 4 and 8 GPUs: step, tokens/s, efficiency against 1 GPU,
#     bytes between GPUs, exposed exchange;
#  2. GPT-2 124M fp32, a fixed batch of 8 sequences, 1 and 4 GPUs: there the
#     efficiency column is the speed-up over 1 GPU (1-GPU step / step);
#  3. GPT-2 350M bf16, weak scaling on 1 and 8 GPUs.
# 3 warm-up steps, then 3 measured: the first steps after the start allocate
# the replicas and slots.  Prints a markdown table per part to OUTDIR/shard.md.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bench/sim-shard.sh BUILD_SIM OUTDIR" >&2; exit 2; }
tg="$1/bin/taskgrad" out="$2"
mkdir -p "$out"
g124=(--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 --seq 1024)
g350=(--layers 24 --channels 1024 --heads 16 --vocab 50257 --max-seq 1024 --seq 1024)
field() { sed -n "s/^$1: \([0-9.]*\).*/\1/p" "$2" | head -1; }
# row NAME MODE GPUS BASE_MS args...: one simulation, one table row
row() {
  local name=$1 mode=$2 gpus=$3 base=$4
  shift 4
  local f="$out/$name-$mode-$gpus.txt"
  "$tg" simulate gpt "$@" --platform h100x8 --gpus "$gpus" --data-parallel "$mode" \
    --warmup 3 --steps 3 --cost peak > "$f" 2> "$f.err" || { echo "| $mode | $gpus | failed: $(tail -1 "$f.err") |"; return; }
  local ms tok bytes exposed
  ms=$(field "simulated step ms" "$f")
  tok=$(field "simulated tokens\/s" "$f")
  bytes=$(field "bytes between GPUs" "$f")
  exposed=$(sed -n 's/^exposed exchange and update .*: \([0-9.]*\) ms, \([0-9.]*\)%.*/\1 ms (\2%)/p' "$f")
  awk -v m="$mode" -v g="$gpus" -v ms="$ms" -v t="$tok" -v b="$bytes" -v base="$base" -v e="$exposed" \
    'BEGIN { eff = base > 0 ? sprintf("%.0f%%", 100 * base / ms) : "-";
             printf "| %s | %d | %.1f | %.0fk | %s | %.2f | %s |\n", m, g, ms, t / 1e3, eff, b / 1e9, e }'
}
header() {
  echo "| mode | GPUs | step ms | tokens/s | efficiency | GB between GPUs | exposed exchange + update |"
  echo "|---|---:|---:|---:|---:|---:|---|"
}
ms_of() { field "simulated step ms" "$out/$1"; }
{
  echo "## GPT-2 124M bf16, 8 sequences and 2 micro-batches per GPU (weak scaling)"
  echo
  header
  row w124 redux 1 0 "${g124[@]}" --precision bf16
  base=$(ms_of w124-redux-1.txt)
  for mode in redux shard; do
    for n in 2 4 8; do row w124 $mode $n "$base" "${g124[@]}" --precision bf16; done
  done
  echo
  echo "## GPT-2 124M fp32, a fixed batch of 8 sequences (efficiency column: speed-up over 1 GPU)"
  echo
  header
  row f124 redux 1 0 "${g124[@]}" --precision fp32 --batch 8
  base=$(ms_of f124-redux-1.txt)
  for mode in redux shard; do row f124 $mode 4 "$base" "${g124[@]}" --precision fp32 --batch 8; done
  echo
  echo "## GPT-2 350M bf16, 8 sequences and 2 micro-batches per GPU"
  echo
  header
  row w350 redux 1 0 "${g350[@]}" --precision bf16
  base=$(ms_of w350-redux-1.txt)
  for mode in redux shard; do row w350 $mode 8 "$base" "${g350[@]}" --precision bf16; done
} | tee "$out/shard.md"
