#!/usr/bin/env bash
# bench/sim-mpi-probe.sh [NODES]: can StarPU 1.3.10 + SimGrid 3.32 simulate
# StarPU-MPI on a cluster of h100x8 nodes (issue 13, multi-node)?  Builds
# bench/sim-mpi/probe.c (rank 0 owns 4 MB, a task on every other rank reads
# it) with smpicc against the static StarPU-MPI of
# `scripts/build-starpu-simgrid --mpi`, and runs it with StarPU's
# starpu_smpirun on platforms/cluster-h100x8.xml (NODES ranks, default 2).
# Needs xsltproc (starpu_smpirun merges the node platforms with it).
# Notes: smpicc puts -L/usr/lib/x86_64-linux-gnu before our flags, so
# -lstarpumpi-1.3 would pick Debian's shared StarPU: the archives are linked
# by path.  taskgrad itself: scripts/build-sim-mpi and bench/sim-mpi.sh.
set -euo pipefail
nodes=${1:-2}
src="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${XDG_CACHE_HOME:-$HOME/.cache}/taskgrad/starpu-simgrid-mpi-1.3.10"
[ -f "$prefix/lib/libstarpumpi-1.3.a" ] || { echo "sim-mpi-probe: run scripts/build-starpu-simgrid --mpi first" >&2; exit 2; }
command -v xsltproc > /dev/null || { echo "sim-mpi-probe: xsltproc is missing (apt-get install xsltproc)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pm/bus"
for ext in platform.v4.xml latency bandwidth; do cp "$src/platforms/h100x8.$ext" "$work/pm/bus/"; done
smpicc -o "$work/probe" "$src/bench/sim-mpi/probe.c" -I"$prefix/include/starpu/1.3" \
  "$prefix/lib/libstarpumpi-1.3.a" "$prefix/lib/libstarpu-1.3.a" -lsimgrid -lstdc++ -lm -lpthread -lrt
head -n "$nodes" "$src/platforms/cluster-h100x8.hostfile" > "$work/hostfile"
cd "$work"
STARPU_PERF_MODEL_DIR="$work/pm" STARPU_HOSTNAME=h100x8 STARPU_NCPU=1 STARPU_NCUDA=1 \
  "$prefix/bin/starpu_smpirun" -np "$nodes" -platform "$src/platforms/cluster-h100x8.xml" \
  -hostfile "$work/hostfile" ./probe 2>&1 | grep -v 'INFO\|simgrid_update_xml\|^$'
