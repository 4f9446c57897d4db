#!/usr/bin/env bash
# Scheduling-policy sweep for the record: `taskgrad bench sched` on the MLP
# step (784-512-256-10, batch 2048) and the GPT step (bench gpt's default
# model and batch), every scheduler of the default list, written to
# bench/results/ with a date prefix:
#   DATE-sched-mlp.csv/.png, DATE-sched-gpt.csv/.png, DATE-sched-cpu.md
# Run it on a quiet machine: timings taken under load are worthless.
#   bench/sched-sweep.sh [BUILD_DIR]
# Environment (for a reduced run): STEPS (5), WARMUP (2), ROUNDS (3),
# SCHEDULERS (the default list plus NAME+nopri variants), MODELS ("mlp gpt"), MLP_FLAGS ("--batch 2048"), GPT_FLAGS
# (""), RESULTS (bench/results), DATE (today).
set -euo pipefail
build=${1:-build}
tg="$build/bin/taskgrad"
[ -x "$tg" ] || { echo "no $tg: build first" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
results=${RESULTS:-$here/results}
date=${DATE:-$(date +%F)}
steps=${STEPS:-5}
warmup=${WARMUP:-2}
models=${MODELS:-mlp gpt}
rounds=${ROUNDS:-3}
# the default list, plus the priority-aware ones without the graph's
# priorities (NAME+nopri) for comparison
schedulers=${SCHEDULERS:-eager+nopri,eager,prio+nopri,prio,ws,lws+nopri,lws,dm,dmda,dmdar,dmdas+nopri,dmdas,heteroprio,tg-critpath+nopri,tg-critpath,tg-memaware}
sched_flag=(--schedulers "$schedulers" --rounds "$rounds")
export STARPU_SILENT=1
mkdir -p "$results"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

md="$results/$date-sched-cpu.md"
{
  echo "# Scheduling policies on the CPU machine ($date)"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//');"
  echo "StarPU $(pkg-config --modversion starpu-1.3 2>/dev/null || echo '?'), $(uname -sr)."
  echo "Each row: \`taskgrad bench sched\`, perfmodels calibrated first (dmda,"
  echo "STARPU_CALIBRATE=1) in $build/sched-perfmodels; $rounds interleaved rounds over"
  echo "the scheduler list, each run $steps measured steps after $warmup warm-up steps"
  echo "(bench gpt; bench mlp --per-step): median of the rounds' medians, min and"
  echo "max over all steps.  NAME+nopri: NAME with the graph's priorities off."
} >"$md"
for model in $models; do
  case $model in
    mlp) flags=(${MLP_FLAGS:---batch 2048}) ;;
    gpt) flags=(${GPT_FLAGS:-}) ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  echo "sched-sweep: $model ${flags[*]}" >&2
  "$tg" bench sched --model "$model" --steps "$steps" --warmup "$warmup" \
    "${sched_flag[@]}" --out-dir "$tmp" "${flags[@]}" >"$tmp/$model.md"
  cp "$tmp/sched-$model.csv" "$results/$date-sched-$model.csv"
  cp "$tmp/sched-$model.png" "$results/$date-sched-$model.png"
  {
    echo
    echo "## $model"
    echo
    echo "Command: \`taskgrad bench sched --model $model --steps $steps --warmup $warmup --rounds $rounds --schedulers $schedulers ${flags[*]}\`"
    echo "(chart: $date-sched-$model.png)"
    echo
    grep '^|' "$tmp/$model.md"
  } >>"$md"
done
cat "$md"
echo "sched-sweep: wrote $md and the CSV/PNG files beside it" >&2
