#!/usr/bin/env bash
# bench/sim-mpi/peak-host-mem.sh COMMAND...: runs COMMAND and prints, on
# stderr at its end, "host peak anonymous memory: X MB": the largest sum,
# sampled every half second, of RssAnon over COMMAND and its descendants
# (the simulation process: taskgrad-sim, or SimGrid's smpimain running
# taskgrad-sim-mpi; their names are SimGrid actors', hence the process tree).
# Exits with COMMAND's status.
#
# Why not /usr/bin/time's maximum RSS: in simulation the big host tensors
# are "folded" mappings (src/tensor.c), one small file mapped thousands of
# times; RSS counts each mapping, so it reports tens of GB that take no RAM.
# RssAnon is the process's own memory (malloc, stacks), what fills the host.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: peak-host-mem.sh COMMAND..." >&2; exit 2; }
"$@" &
cmd=$!
peak=0
while kill -0 "$cmd" 2> /dev/null; do
  tree=$(ps -eo pid=,ppid= | awk -v root="$cmd" '{ parent[$1] = $2 }
        END { for (p in parent) { q = p; while (q in parent && q != root) q = parent[q];
              if (q == root) print "/proc/" p "/status" } }')
  now=$(awk '/^RssAnon:/ { s += $2 } END { print s + 0 }' $tree 2> /dev/null)
  [ "${now:-0}" -gt "$peak" ] && peak=$now
  sleep 0.5
done
wait "$cmd"
rc=$?
echo "host peak anonymous memory: $((peak / 1024)) MB" >&2
exit $rc
