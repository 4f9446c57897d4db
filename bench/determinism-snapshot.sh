#!/bin/bash
# determinism-snapshot.sh BUILD OUT: runs a fixed set of --deterministic
# training commands with BUILD/bin/taskgrad and writes, into OUT, each run's
# step lines and a sha256 of each file it saved.  Two snapshots of two
# builds compare with `diff -r OUT1 OUT2`: a refactoring that must keep
# deterministic results bitwise (issue 14) shows no difference.
# Covers: the MLP (plain, tiled, micro-batched, bf16 with loss scaling), the
# GPT (fp32 and bf16, micro-batches, chunked and naive attention, cosine
# schedule, weight decay), each saving its model/checkpoint.  Every run
# names its --micro-batches, so a change of the default does not show here.
set -euo pipefail
build=${1:?usage: determinism-snapshot.sh BUILD OUT}
out=${2:?usage: determinism-snapshot.sh BUILD OUT}
tg="$(cd "$build" && pwd)/bin/taskgrad"
[ -x "$tg" ] || { echo "no $tg" >&2; exit 2; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STARPU_SILENT=1 STARPU_HOME="$work/starpu-home"
# one GEMM back end, not a timing-based choice (codelets/gemm_choice.c):
# OpenBLAS unless the caller names another, as the test suite runs
export TG_GEMM_LIB=${TG_GEMM_LIB:-openblas}

run() { # NAME ARGS...: step lines and saved files' hashes into OUT/NAME
  local name=$1; shift
  (cd "$work" && "$tg" "$@") >"$work/$name.out" 2>"$work/$name.err" ||
    { echo "$name failed: $(tail -2 "$work/$name.err")" >&2; exit 1; }
  # numbers only: losses, accuracies, parameter hashes; no timings
  cat "$work/$name.out" "$work/$name.err" |
    grep -E '^(step [0-9]+ loss|val|epoch [0-9]+/[0-9]+:|test accuracy)|parameters fnv1a64' |
    sed -E -e 's/ \| [0-9.]+ s, .*$//' -e 's/^(step [0-9]+ loss [^ ]+).*$/\1/' \
      >"$out/$name.steps" || true
  for f in "$work"/"$name"-*; do
    if [ -f "$f" ]; then sha256sum "$f" | sed "s|$work/||"; fi
  done >"$out/$name.files"
  echo "$name: $(wc -l <"$out/$name.steps") lines"
}

"$tg" init gpt --layers 2 --channels 64 --heads 4 --max-seq 64 --vocab 97 --seed 5 \
  --out "$work/g.bin" >/dev/null
python3 -c "
import struct,random
random.seed(7); n=20000
hdr=[20240520,1,n]+[0]*253
open('$work/tok.bin','wb').write(struct.pack('<256i',*hdr)+struct.pack('<%dH'%n,*[random.randrange(97) for _ in range(n)]))"

mlp=(train mlp --epochs 1 --steps 12 --batch 64 --hidden 96,48 --deterministic)
run mlp "${mlp[@]}" --micro-batches 2 --save mlp-model.safetensors
run mlp_mb "${mlp[@]}" --micro-batches 2 --ncpus 2 --save mlp_mb-model.safetensors
run mlp_tiled "${mlp[@]}" --tiles 3 --micro-batches 2 --save mlp_tiled-model.safetensors
run mlp_bf16 "${mlp[@]}" --micro-batches 2 --precision bf16 --loss-scale 1024 --save mlp_bf16-model.safetensors

gpt=(train gpt --init-from "$work/g.bin" --data "$work/tok.bin" --batch 4 --seq 32 --steps 8
     --deterministic)
run gpt "${gpt[@]}" --micro-batches 1 --save gpt-model.bin
run gpt_mb "${gpt[@]}" --micro-batches 2 --ncpus 2 --lr-schedule cosine --warmup 2 \
  --weight-decay 0.1 --checkpoint gpt_mb-ck --save gpt_mb-model.bin
run gpt_naive "${gpt[@]}" --attention naive --micro-batches 4 --data-order shuffled --seed 3 \
  --save gpt_naive-model.bin
run gpt_bf16 "${gpt[@]}" --precision bf16 --loss-scale 4096 --micro-batches 2 \
  --save gpt_bf16-model.bin
# the checkpoint directory's file
for f in "$work"/gpt_mb-ck/*; do sha256sum "$f" | sed "s|$work/||"; done >>"$out/gpt_mb.files"
