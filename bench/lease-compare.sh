#!/usr/bin/env bash
# bench/lease-compare.sh: after a GPU lease (docs/benchmarks.md, "GPU
# lease"), here: does the simulator predict the lease's measured steps from
# the histories calibrated in that lease (issue 51, item 7: within 10%)?
#
#   bench/lease-compare.sh [--sim BIN] [--dry-run] DIR
#     DIR        the lease's folder (what came back in $OUT: summary.tsv,
#                perfmodels.tar.xz)
#     --sim BIN  the SimGrid build's taskgrad (default build-sim/bin/taskgrad;
#                its StarPU from ~/.cache/taskgrad/starpu-simgrid-1.3.10)
#     --dry-run  print the commands, run none (PERFMODELS: DIR/perfmodels.tar.xz
#                unpacked)
#
# For GPT-2 124M and 350M bf16 (B 8, T 1024, 2 micro-batches, one GPU: the
# lease's graph and simulate's default) it prints the measured step (the
# median of the A/B "after" runs' medians, summary.tsv), then the
# predictions: from the lease's histories (--perfmodels, on h100x1 and on
# h100x8 --gpus 1: bench/gpu-session.sh files them under both hosts), and
# from the platform's shipped histories (no --perfmodels: what `simulate`
# does by default, which takes the new lease once platforms/gen-history.py
# lists it), each with its difference and its cost-model line (how many
# estimates came from history). Exit 1 when a prediction from the lease's
# histories is more than 10% off; 2 on bad arguments or missing files.
set -u
die() { echo "lease-compare: $*" >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 2
sim=build-sim/bin/taskgrad dry=0 dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sim) [ -n "${2:-}" ] || die "--sim needs a program"; sim=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown flag '$1' (see --help)" ;;
    *) [ -z "$dir" ] || die "one folder only"; dir=$1; shift ;;
  esac
done
[ -n "$dir" ] || die "name the lease's folder (see --help)"
if [ $dry -eq 0 ]; then
  [ -r "$dir/summary.tsv" ] || die "$dir/summary.tsv is missing"
  [ -r "$dir/perfmodels.tar.xz" ] || die "$dir/perfmodels.tar.xz is missing"
  [ -x "$sim" ] || die "$sim is not a SimGrid build's taskgrad"
fi
export LD_LIBRARY_PATH="${XDG_CACHE_HOME:-$HOME/.cache}/taskgrad/starpu-simgrid-1.3.10/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pm=$(mktemp -d)
trap 'rm -rf "$pm"' EXIT
[ $dry -eq 1 ] || tar -C "$pm" -xJf "$dir/perfmodels.tar.xz" || die "cannot unpack $dir/perfmodels.tar.xz"
# shellcheck disable=SC2034 # read through ${!shape}
shape124=(--layers 12 --channels 768 --heads 12)
# shellcheck disable=SC2034

shape350=(--layers 24 --channels 1024 --heads 16)
common=(--vocab 50257 --max-seq 1024 --seq 1024 --precision bf16 --batch 8 --micro-batches 2 --steps 3)
worst=0
for m in 124 350; do
  shape="shape${m}[@]"
  meas=""
  [ $dry -eq 1 ] || meas=$(awk -F'\t' -v m="$m" '$1 ~ "^ab" m "-r[0-9]-after$" && $5 != "" {s += $5; n++}
    END {if (n) printf "%.1f", s / n}' "$dir/summary.tsv")
  echo "GPT-2 ${m}M: measured ${meas:-?} ms (the A/B 'after' runs)"
  for how in "h100x1 lease" "h100x8 lease" "h100x8 shipped"; do
    read -r plat src <<< "$how"
    cmd=("$sim" simulate gpt --platform "$plat" --gpus 1 "${!shape}" "${common[@]}")
    [ "$src" = lease ] && cmd+=(--perfmodels "$pm/sampling")
    [ "$src" = lease ] && [ $dry -eq 1 ] && cmd[${#cmd[@]} - 1]="PERFMODELS/sampling"
    if [ $dry -eq 1 ]; then
      echo "+ ${cmd[*]}"
      continue
    fi
    "${cmd[@]}" > "$pm/sim.txt" 2>&1
    pred=$(sed -n 's/^simulated step ms: \([0-9.]*\).*/\1/p' "$pm/sim.txt" | tail -1)
    cost=$(grep -m1 '^cost model:' "$pm/sim.txt")
    if [ -z "$pred" ] || [ -z "$meas" ]; then
      echo "  $plat, $src histories: no prediction ($(tail -2 "$pm/sim.txt" | tr '\n' ' '))"
      [ "$src" = lease ] && worst=100
      continue
    fi
    diff=$(awk -v p="$pred" -v a="$meas" 'BEGIN {printf "%+.1f", (p - a) / a * 100}')
    echo "  $plat, $src histories: predicted $pred ms ($diff%); $cost"
    [ "$src" = lease ] && worst=$(awk -v w="$worst" -v d="$diff" 'BEGIN {d = d < 0 ? -d : d; print (d > w ? d : w)}')
  done
done
[ $dry -eq 1 ] && exit 0
echo "largest difference from the lease's histories: $worst%"
awk -v w="$worst" 'BEGIN {exit !(w <= 10)}'
