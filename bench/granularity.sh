#!/usr/bin/env bash
# bench/granularity.sh BUILD_SIM OUTDIR: task granularity against a step's
# time on one simulated H100 (issue 23: "fewer, bigger tasks where the step
# is launch-bound; enough of them left for overlap. Show the trade-off in a
# sweep").  GPT-2 124M and 350M, bf16, T=1024, 8 sequences, flash attention,
# peak roofline; each knob alone from the default layout (1 micro-batch,
# fused backward, untiled, one attention task per micro-batch):
#   micro-batches  1, 2, 4, 8     (rows per task: 8192 down to 1024)
#   backward       fused, apart   (3 to 5 tasks per linear layer)
#   tiles          1, 2, 4        (column tiles per linear layer)
#   attn-splits    1, 2, 4        (attention tasks per micro-batch)
# Prints one line per run and writes OUTDIR/granularity.csv: step, GPU busy
# and idle per step, tasks per step, MFU.  The simulation is deterministic:
# one run per point.  The many-core CPU side of the same trade-off (more,
# smaller tasks win there) is bench/many-core.sh.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bench/granularity.sh BUILD_SIM OUTDIR" >&2; exit 2; }
tg="$1/bin/taskgrad" out="$2"
[ -x "$tg" ] || { echo "granularity: $tg not found" >&2; exit 2; }
"$tg" --version | grep -q "SimGrid: yes" ||
  { echo "granularity: $1 is not a SimGrid build" >&2; exit 2; }
mkdir -p "$out"
csv="$out/granularity.csv"
echo "model,knob,value,step_ms,busy_ms,idle_ms,busy_pct,tasks_per_step,mfu_pct" > "$csv"
base=(--platform h100x8 --gpus 1 --vocab 50257 --max-seq 1024 --seq 1024 --batch 8
      --precision bf16 --attention flash --cost peak --warmup 3 --steps 3)
run() { # MODEL KNOB VALUE args...
  local model=$1 knob=$2 value=$3 shape log step busy idle pct tasks mfu
  shift 3
  case $model in
    124M) shape=(--layers 12 --channels 768 --heads 12) ;;
    350M) shape=(--layers 24 --channels 1024 --heads 16) ;;
  esac
  log="$out/$model-$knob-$value.txt"
  "$tg" simulate gpt "${shape[@]}" "${base[@]}" "$@" > "$log" 2>&1 ||
    { echo "granularity: $model $knob $value failed:" >&2; tail -n 3 "$log" >&2; exit 1; }
  step=$(sed -n 's/^simulated step ms: //p' "$log")
  mfu=$(sed -n 's/^simulated MFU: \([0-9.]*\)%.*/\1/p' "$log")
  read -r busy idle pct tasks < <(sed -n 's/^device CUDA 0.0.*busy \([0-9.]*\) ms, idle \([0-9.]*\) ms per step (\([0-9.]*\)% busy), \([0-9]*\) tasks.*/\1 \2 \3 \4/p' "$log")
  [ -n "$step" ] && [ -n "$tasks" ] ||
    { echo "granularity: no figures in $log" >&2; exit 1; }
  tasks=$((tasks / 3)) # 3 measured steps
  echo "$model,$knob,$value,$step,$busy,$idle,$pct,$tasks,$mfu" >> "$csv"
  printf '%-5s %-13s %-6s step %8s ms  busy %5s%%  idle %7s ms  %5s tasks  MFU %5s%%\n' \
    "$model" "$knob" "$value" "$step" "$pct" "$idle" "$tasks" "$mfu"
}
for model in 124M 350M; do
  for m in 1 2 4 8; do run $model micro-batches $m --micro-batches $m; done
  run $model backward apart --micro-batches 1 --no-fused-backward
  for t in 2 4; do run $model tiles $t --micro-batches 1 --tiles $t; done
  for s in 2 4; do run $model attn-splits $s --micro-batches 1 --attn-splits $s; done
done
echo "granularity: $csv" >&2
