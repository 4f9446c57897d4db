#!/usr/bin/env bash
# The GPT step (bench gpt's default d4 model: L=4 C=256 NH=4 T=256 B=8) on
# emulated accelerators only (--emulated-devices N --ncpus 0), with StarPU's
# prefetch on and off (STARPU_PREFETCH) and with and without a per-device
# memory limit (STARPU_LIMIT_OPENCL_MEM), under dmdas (a policy that
# prefetches).  Prints a Markdown table: median step time, bytes moved per
# step, evictions per step, and the share of the devices' worker time spent
# waiting for data (mean over the OpenCL workers of the --stats "data wait"
# column: each task's acquire_data_start..end from StarPU's profiling).
#
#   bench/emulated.sh [BUILD_DIR] [STEPS] [LIMIT_MIB] [DEVICE_COUNTS]
#   (defaults: build, 5, 96, "1 3")
set -euo pipefail
build=${1:-build}
steps=${2:-5}
limit=${3:-96}
counts=${4:-1 3}
tg="$build/bin/taskgrad"
export STARPU_SILENT=1 STARPU_HOME=${STARPU_HOME:-$build/bench-emulated-home}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "| devices | prefetch | limit MiB | step ms (median) | MiB moved / step | evictions / step | data wait |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in $counts; do
  for lim in none "$limit"; do
    for pf in 1 0; do
      args=(bench gpt --emulated-devices "$n" --ncpus 0 --sched dmdas --steps "$steps" --warmup 2)
      limit_env=()
      [ "$lim" = none ] || limit_env=(STARPU_LIMIT_OPENCL_MEM="$lim")
      if ! env STARPU_PREFETCH=$pf "${limit_env[@]}" "$tg" "${args[@]}" >"$out/o" 2>&1; then
        echo "| $n | $pf | $lim | failed: $(grep 'taskgrad: error' "$out/o" | head -1) | | | |"
        continue
      fi
      ms=$(sed -nE 's/^taskgrad median step ms: ([0-9.]+).*/\1/p' "$out/o")
      bytes=$(sed -nE 's/^bytes moved: +([0-9]+) .*/\1/p' "$out/o")
      ev=$(sed -nE 's/^evictions: +([0-9]+) .*/\1/p' "$out/o")
      wait=$(awk '/^OpenCL/ {s += $NF; n++} END {if (n) printf "%.1f%%", s / n}' "$out/o")
      awk -v n="$n" -v pf="$pf" -v lim="$lim" -v ms="$ms" -v b="$bytes" -v ev="$ev" -v w="$wait" \
          -v s="$steps" 'BEGIN {printf "| %s | %s | %s | %.0f | %.1f | %.1f | %s |\n",
                                n, pf ? "on" : "off", lim, ms, b / s / 1048576, ev / s, w}'
    done
  done
done
