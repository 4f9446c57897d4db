#!/usr/bin/env bash
# bench/sim-mpi.sh SIM_MPI_DIR OUTDIR MODEL [PRECISION] [NODES...]: multi-node
# predictions (issue 13): taskgrad's data-parallel GPT training (StarPU-MPI,
# the sharded mode's per-block sum over the ranks, parallel/halving.c) on
# NODES simulated nodes of 8 H100 (platforms/h100x8.*) joined by the 400 Gb/s network of
# platforms/cluster-h100x8.xml, through StarPU-MPI over SimGrid's SMPI.
#   SIM_MPI_DIR  where scripts/build-sim-mpi put taskgrad-sim-mpi
#   MODEL        d4 (L=4 C=256 NH=4 V=256, T=256) or 124m (GPT-2 124M, T=1024)
#   PRECISION    fp32 (default) or bf16
#   NODES        node counts from 1 to 8 (the hostfile's nodes), default 1 2 4 8
# Weak scaling, as bench/sim-h100.sh: 8 sequences and 2 micro-batches per GPU,
# so 64 sequences per node; --batch and --micro-batches are global.  3 warm-up
# steps (TG_SIM_WARMUP; the first steps allocate the buffers that later steps
# reuse) and 2 measured ones; lws on 8 GPUs per node, no CPU worker.
# TG_SIM_EXTRA: more `simulate gpt` arguments (e.g. "--grad-comm bf16" or
# "--trace F.json"); TG_SMPI_CFG: more SimGrid --cfg options.  Writes
# OUTDIR/<model>-<precision>-<n>nodes.txt (the run's report, rank 0's node;
# STARPU_COMM_STATS's bytes between ranks) and OUTDIR/<model>-<precision>.csv
# (nodes, step ms, tokens/s, efficiency vs the first NODES entry, peak host
# anonymous memory in MB, bench/sim-mpi/peak-host-mem.sh).
# Roofline predictions (no history is prepared here, so the H100 histories
# that `taskgrad simulate` takes by default are not used).  Needs xsltproc.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: bench/sim-mpi.sh SIM_MPI_DIR OUTDIR d4|124m [fp32|bf16] [NODES...]" >&2; exit 2; }
prog="$(cd "$1" && pwd)/taskgrad-sim-mpi" out="$2" model="$3"
shift 3
precision=fp32
if [ $# -gt 0 ] && [[ "$1" == fp32 || "$1" == bf16 ]]; then precision=$1; shift; fi
nodes=("$@")
[ ${#nodes[@]} -gt 0 ] || nodes=(1 2 4 8)
src="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${XDG_CACHE_HOME:-$HOME/.cache}/taskgrad/starpu-simgrid-mpi-1.3.10"
[ -x "$prog" ] || { echo "sim-mpi: $prog is missing: run scripts/build-sim-mpi" >&2; exit 2; }
command -v xsltproc > /dev/null || { echo "sim-mpi: xsltproc is missing (apt-get install xsltproc)" >&2; exit 2; }
case "$model" in
  d4) shape=(--layers 4 --channels 256 --heads 4 --vocab 256 --max-seq 256 --seq 256) ;;
  124m) shape=(--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 --seq 1024) ;;
  *) echo "sim-mpi: unknown model '$model' (d4 or 124m)" >&2; exit 2 ;;
esac
for n in "${nodes[@]}"; do
  case "$n" in [1-8]) ;; *) echo "sim-mpi: $n nodes: 1 to 8" >&2; exit 2 ;; esac
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# what `taskgrad simulate` prepares for its own simulation process
# (cli/simulate.c): the node platform as StarPU's bus files, no history
mkdir -p "$work/pm/bus" "$work/pm/codelets"
for ext in platform.v4.xml latency bandwidth; do cp "$src/platforms/h100x8.$ext" "$work/pm/bus/"; done
# starpu_smpirun drops the node platform's <config> (network/... props) when
# it merges one copy per rank, and SMPI's own network model (factors fitted
# to an InfiniBand cluster, TCP window) would then time StarPU's simulated
# PCIe and NVLink transfers too: GPT d4 on one node took 59 ms per step
# instead of the 15 of `taskgrad simulate`.  So the node platform's settings
# are passed on the command line, with SimGrid's default model outside SMPI.
network_cfg=(--cfg=network/model:LV08)
while read -r key value; do network_cfg+=("--cfg=$key:$value"); done < <(
  sed -n 's/.*<prop id="\(network\/[^"]*\)" value="\([^"]*\)".*/\1 \2/p' "$src/platforms/h100x8.platform.v4.xml")
csv="$out/$model-$precision.csv"
echo "nodes,step_ms,tokens_per_s,efficiency,host_anon_mb" > "$csv"
base=""
for n in "${nodes[@]}"; do
  head -n "$n" "$src/platforms/cluster-h100x8.hostfile" > "$work/hostfile"
  report="$out/$model-$precision-${n}nodes.txt"
  args=(simulate gpt "${shape[@]}" --precision "$precision" --platform h100x8 --gpus 8
        --batch $((64 * n)) --micro-batches $((16 * n)) --steps 2 --warmup "${TG_SIM_WARMUP:-3}")
  echo "== $n node(s): starpu_smpirun -np $n ${network_cfg[*]} taskgrad-sim-mpi ${args[*]}" | tee "$report"
  t0=$(date +%s)
  # Under SMPI, src/tensor.c's folded host tensors are SMPI_SHARED_MALLOC's
  # mappings of one file per block: 16 MiB blocks, not 1, keep 124M on 8
  # ranks of 8 GPUs below Linux's 65530 mappings per process.
  # contexts/guard-size:0: no guard page per actor stack (two mappings per
  # actor otherwise: 4 nodes of 124M passed the 65530 mappings; no simulated
  # cost depends on it).  STARPU_SIMGRID_GPU_GPU_CONCURRENT and
  # STARPU_CUDA_PIPELINE: as `taskgrad simulate` sets them (cli/simulate.c),
  # which TG_SIM_PREPARED skips here.
  # SimGrid warns at exit about actions StarPU-MPI's progress loop leaves
  # behind ("Probable bug ... not removed before the LMM system destruction"):
  # after the last step, so they change no figure; kept in the .err file
  (cd "$work" && TG_SIM_PREPARED=1 STARPU_PERF_MODEL_DIR="$work/pm" STARPU_HOSTNAME=h100x8 \
     STARPU_NCPU=0 STARPU_NCUDA=8 STARPU_COMM_STATS=1 STARPU_SILENT=1 TG_SOURCE_DIR="$src" \
     STARPU_SIMGRID_GPU_GPU_CONCURRENT="${STARPU_SIMGRID_GPU_GPU_CONCURRENT:-1}" \
     STARPU_CUDA_PIPELINE="${STARPU_CUDA_PIPELINE:-1}" \
     "$src/bench/sim-mpi/peak-host-mem.sh" \
     "$prefix/bin/starpu_smpirun" -np "$n" -platform "$src/platforms/cluster-h100x8.xml" \
     -hostfile "$work/hostfile" --cfg=smpi/shared-malloc-blocksize:$((16 << 20)) "${network_cfg[@]}" \
     --cfg=contexts/guard-size:0 ${TG_SMPI_CFG:-} \
     "$prog" --log=root.thres:critical "${args[@]}" ${TG_SIM_EXTRA:-}) \
     >> "$report" 2> "$report.err" || echo "(exit status $?)" >> "$report"
  grep -h 'starpu_comm_stats\|host peak anonymous' "$report.err" >> "$report" || true
  echo "(wall $(( $(date +%s) - t0 )) s)" >> "$report"
  ms=$(sed -n 's/^simulated step ms: //p' "$report")
  rate=$(sed -n 's/^simulated tokens\/s: //p' "$report")
  rss=$(sed -n 's/^host peak anonymous memory: \([0-9]*\) MB/\1/p' "$report")
  if [ -z "$ms" ]; then echo "$n,,,,failed" >> "$csv"; continue; fi
  [ -n "$base" ] || base=$(awk -v r="$rate" -v n="$n" 'BEGIN { print r / n }')
  awk -v n="$n" -v ms="$ms" -v r="$rate" -v b="$base" -v mb="${rss:-0}" \
    'BEGIN { printf "%d,%s,%s,%.3f,%s\n", n, ms, r, r / (n * b), mb }' >> "$csv"
  grep '^simulated\|^bytes between' "$report"
done
column -s, -t "$csv"
