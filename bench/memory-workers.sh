#!/bin/bash
# memory-workers.sh BUILD [BUILD2] [WORKERS...]: peak resident memory of one
# GPT-2 124M training step (random model, B=4 T=64, 4 micro-batches,
# `taskgrad bench gpt`, 1 warm-up + 1 measured step) with each number of CPU
# workers (default 1 2 4 8 16), for one build or two builds interleaved.
# More workers than the StarPU's STARPU_MAXCPUS (Debian's: 4) need a
# CPU-only StarPU built without that limit: scripts/build-starpu --cpu-only,
# then a taskgrad build against it (see README, "Memory").  Workers beyond
# the cores are oversubscribed: only the memory figures mean something then.
# Prints: build workers peak_RSS_MB seconds.
set -euo pipefail
b1=${1:?usage: memory-workers.sh BUILD [BUILD2] [WORKERS...]}
shift
builds=("$b1")
if [ $# -gt 0 ] && [ -x "$1/bin/taskgrad" ]; then builds+=("$1"); shift; fi
workers=("$@")
[ ${#workers[@]} -gt 0 ] || workers=(1 2 4 8 16)
for b in "${builds[@]}"; do [ -x "$b/bin/taskgrad" ] || { echo "no $b/bin/taskgrad" >&2; exit 2; }; done
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "build workers peak_RSS_MB seconds"
for w in "${workers[@]}"; do
  for b in "${builds[@]}"; do
    STARPU_SILENT=1 /usr/bin/time -f "%M %e" -o "$tmp" "$b/bin/taskgrad" bench gpt \
      --layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 --batch 4 --seq 64 \
      --micro-batches 4 --steps 1 --warmup 1 --quiet --ncpus "$w" >/dev/null 2>&1 ||
      { echo "$b with $w workers failed" >&2; exit 1; }
    read -r kb s <"$tmp"
    echo "$b $w $((kb / 1024)) $s"
  done
done
