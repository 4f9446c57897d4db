#!/usr/bin/env bash
# bench/sim-validate.sh BUILD BUILD_SIM: how well does `taskgrad simulate`
# predict a step that we can measure? (issue 13)
#
#  1. calibrate: real runs of BUILD on this machine's CPUs (2 CPU workers)
#     with STARPU_CALIBRATE=1, under a private STARPU_HOME and the host name
#     tg-validate, so StarPU writes the bus platform (its own bus
#     calibration) and the codelets' histories there;
#  2. measure: the same benchmarks again, calibrated, timing each step;
#  3. predict: BUILD_SIM simulates the same machine (--gpus 0 --ncpus 2)
#     from those files: the platform StarPU generated, the histories as
#     --perfmodels.
# Prints one line per model:
#   validation: NAME predicted X ms, measured Y ms, error Z%
# Models: the MLP bench (784-512-256-10, batch 2048, 2 micro-batches) and
# GPT d4 (L=4 C=256 NH=4 T=256 B=8, 2 micro-batches).
#
# Environment: STEPS (measured steps, default 10), KEEP=1 keeps the work
# directory (its path is printed).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: bench/sim-validate.sh BUILD BUILD_SIM" >&2
  exit 2
fi
real="$1/bin/taskgrad" sim="$2/bin/taskgrad"
for b in "$real" "$sim"; do
  [ -x "$b" ] || { echo "sim-validate: $b not found" >&2; exit 2; }
done
"$sim" --version | grep -q "SimGrid: yes" || { echo "sim-validate: $2 is not a SimGrid build" >&2; exit 2; }
if "$real" --version | grep -q "SimGrid: yes"; then
  echo "sim-validate: $1 is a SimGrid build; give the real one first" >&2
  exit 2
fi
steps=${STEPS:-10}
work=$(mktemp -d /tmp/taskgrad-sim-validate-XXXXXX)
[ "${KEEP:-0}" = 1 ] && echo "sim-validate: work directory $work" || trap 'rm -rf "$work"' EXIT
host=tg-validate
export STARPU_HOME="$work" STARPU_HOSTNAME=$host STARPU_SILENT=1
sampling="$work/.starpu/sampling"

mlp=(mlp --batch 2048 --micro-batches 2 --ncpus 2)
gpt=(gpt --layers 4 --channels 256 --heads 4 --vocab 256 --max-seq 256 --seq 256 --batch 8
     --micro-batches 2 --ncpus 2)

echo "sim-validate: calibrating on $(nproc) cores (host name $host)" >&2
for k in 1 2 3; do
  "$real" bench "${mlp[@]}" --calibrate --steps 10 --warmup 2 --quiet > "$work/cal-mlp-$k" 2>&1
  "$real" bench "${gpt[@]}" --calibrate --steps 4 --warmup 1 --quiet > "$work/cal-gpt-$k" 2>&1
done
[ -f "$sampling/bus/$host.platform.v4.xml" ] ||
  { echo "sim-validate: StarPU wrote no bus platform in $sampling/bus" >&2; exit 1; }

# the simulated machine: StarPU's calibrated bus files plus a CPU roofline,
# which only times tasks the histories lack (the report counts them)
plat="$work/platforms"
mkdir -p "$plat"
for ext in platform.v4.xml latency bandwidth; do cp "$sampling/bus/$host.$ext" "$plat/"; done
cat > "$plat/$host.roofline" <<'EOF'
# fallback for tasks without a calibrated history: no GPU here
gpu_fp32_flops 1e12
gpu_tf32_flops 1e12
gpu_bf16_flops 1e12
gpu_mem_bytes_per_s 1e11
cpu_core_flops 3e10
cpu_core_bytes_per_s 5e9
launch_us 1
EOF

validate() { # NAME EXTRA-BENCH-FLAG model-args...
  local name=$1 extra=$2 measured predicted err
  shift 2
  "$real" bench "$@" --steps "$steps" --warmup 2 --quiet $extra > "$work/measure-$name" 2>&1
  measured=$(sed -n 's/^taskgrad median step ms: \([0-9.]*\).*/\1/p' "$work/measure-$name")
  TG_PLATFORM_DIR="$plat" "$sim" simulate "$@" --platform $host --gpus 0 \
    --perfmodels "$sampling" --steps "$steps" --warmup 2 > "$work/sim-$name" 2> "$work/sim-$name.err" ||
    { echo "sim-validate: simulation of $name failed:" >&2; tail -n 5 "$work/sim-$name.err" >&2; exit 1; }
  predicted=$(sed -n 's/^simulated step ms: \([0-9.]*\).*/\1/p' "$work/sim-$name")
  err=$(awk -v p="$predicted" -v m="$measured" 'BEGIN { printf "%+.1f", 100 * (p - m) / m }')
  echo "validation: $name predicted $predicted ms, measured $measured ms, error $err%"
  # the same with StarPU's scheduling time charged to simulated time
  # (STARPU_SIMGRID_SCHED_COST=1: the real time its push/pop take here)
  local p2
  STARPU_SIMGRID_SCHED_COST=1 TG_PLATFORM_DIR="$plat" "$sim" simulate "$@" --platform $host \
    --gpus 0 --perfmodels "$sampling" --steps "$steps" --warmup 2 > "$work/sim2-$name" 2>/dev/null &&
    p2=$(sed -n 's/^simulated step ms: \([0-9.]*\).*/\1/p' "$work/sim2-$name") &&
    echo "  $name with STARPU_SIMGRID_SCHED_COST=1: predicted $p2 ms, error $(awk -v p="$p2" -v m="$measured" 'BEGIN { printf "%+.1f", 100 * (p - m) / m }')%"
  grep '^cost model' "$work/sim-$name" | sed "s/^/  $name /"
  grep '^device' "$work/sim-$name" | sed "s/^/  $name simulated /"
  grep '^device\|^ *[A-Z].*busy\|idle' "$work/measure-$name" | head -4 | sed "s/^/  $name measured /" || true
}
# bench mlp pipelines its steps unless --per-step; simulate waits for each
validate mlp --per-step "${mlp[@]}"
validate gpt "" "${gpt[@]}"
