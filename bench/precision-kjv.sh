#!/usr/bin/env bash
# Mixed precision on the KJV text: the same GPT (L=4 C=128 NH=4, byte-level,
# 16 x 128 tokens per step, the `train gpt` demonstration's shape) trained
# for 300 steps from one initialisation in each precision; prints each run's
# final training loss, validation loss and time.
#
#   bench/precision-kjv.sh [BUILD_DIR] [PRECISIONS...]   (default: build fp32 bf16)
#
# Writes its files under a temporary directory (removed at the end).
set -euo pipefail
build=${1:-build}
shift || true
precisions=("$@")
[ ${#precisions[@]} -gt 0 ] || precisions=(fp32 bf16)
tg="$build/bin/taskgrad"
[ -x "$tg" ] || { echo "precision-kjv: $tg not found (build first)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$tg" prepare kjv --out "$work" >/dev/null
"$tg" init gpt --layers 4 --channels 128 --heads 4 --max-seq 128 --vocab 256 --seed 1 \
  --out "$work/init.bin" >/dev/null
echo "| precision | final train loss | val loss (20 batches) | training time |"
echo "| --- | --- | --- | --- |"
for p in "${precisions[@]}"; do
  "$tg" train gpt --init-from "$work/init.bin" --data "$work/kjv_train.bin" \
    --val "$work/kjv_val.bin" --batch 16 --seq 128 --steps 300 --lr 1e-3 \
    --lr-schedule cosine --warmup 30 --val-batches 20 --log-every 50 --precision "$p" \
    ${NCPUS:+--ncpus "$NCPUS"} >"$work/$p.out" 2>"$work/$p.err"
  train=$(awk '/^step 300 loss/ {print $4}' "$work/$p.out")
  val=$(awk '/^val loss/ {print $3}' "$work/$p.out")
  secs=$(grep -o 'steps in [0-9.]* s' "$work/$p.err" | awk '{print $3}')
  echo "| $p | $train | $val | $secs s |"
done
