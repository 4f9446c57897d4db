# Mixed precision on real text: a small GPT (L=2 C=64 NH=4, byte-level KJV,
# 8 x 64 tokens per step) trained for 300 steps from the same initialisation
# in fp32 and in bf16 must reach validation losses within 2% of each other
# (bf16's relative to fp32's).  bench/precision-kjv.sh does the same for a
# larger model.  SKIP without Debian's bible-kjv or in sanitizer builds
# (600 steps under ASan take too long for CI).
. "$(dirname "$0")/cli_testlib.sh"
[ -n "${TG_SANITIZE:-}" ] && { echo "SKIP: sanitizer build (${TG_SANITIZE})"; exit 77; }
command -v bible >/dev/null || { echo "SKIP: no bible (Debian's bible-kjv)"; exit 77; }
"$tg" prepare kjv --out "$work/kjv" >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
"$tg" init gpt --layers 2 --channels 64 --heads 4 --max-seq 64 --vocab 256 --seed 5 \
  --out "$work/init.bin" >/dev/null || exit 1
declare -A val
for p in fp32 bf16; do
  start=$(date +%s)
  if "$tg" train gpt --init-from "$work/init.bin" --data "$work/kjv/kjv_train.bin" \
       --val "$work/kjv/kjv_val.bin" --batch 8 --seq 64 --steps 300 --lr 2e-3 \
       --lr-schedule cosine --warmup 20 --val-batches 20 --log-every 100 --precision $p \
       >"$work/$p.out" 2>"$work/$p.err"; then
    val[$p]=$(awk '/^val loss/ {print $3}' "$work/$p.out")
    echo "     $p: val loss ${val[$p]} in $(( $(date +%s) - start )) s ($(grep '^step 300' "$work/$p.out"))"
  else
    bad "$p run failed: $(tail -2 "$work/$p.err")"
  fi
done
if [ -n "${val[fp32]:-}" ] && [ -n "${val[bf16]:-}" ]; then
  rel=$("$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'{abs(b - a) / a:.4f}')" "${val[fp32]}" "${val[bf16]}")
  # the runs learned something: below ln(256) = 5.55 by a margin
  if "$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 0.02 and float(sys.argv[2]) < 3.5 else 1)" "$rel" "${val[fp32]}"; then
    ok "300 steps: bf16 val loss ${val[bf16]} within 2% of fp32's ${val[fp32]} (relative $rel)"
  else
    bad "300 steps: bf16 val loss ${val[bf16]} vs fp32 ${val[fp32]} (relative $rel; at most 0.02, fp32 below 3.5)"
  fi
fi
finish test_precision_kjv
