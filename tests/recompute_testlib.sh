# Helpers of the activation-recompute tests (sourced after cli_testlib.sh):
#  - recompute_fixture: $work/r.bin, a 3-layer GPT (C 32, NH 4, V 64), and
#    $work/tokens.bin.  Three layers, so that two blocks are recomputed (the
#    last one never is: its backward follows its forward at once);
#  - recompute_run TAG ARGS...: `train gpt` on them, 3 deterministic steps
#    of B 4, T 16 in 2 micro-batches unless ARGS say otherwise; the printed
#    losses (one line per step) in
#    $work/TAG.num, the parameters in $work/TAG.par, the --stats table in
#    $work/TAG.err; 1 on failure;
#  - same_bits A B WHAT: runs A and B printed the same losses and saved the
#    same parameter bytes;
#  - fused TAG0 TAG1: run TAG1 ran its blocks fused (--fused-blocks) and
#    TAG0 did not (the counts of the 3-layer fixture's runs above);
#  - recomputed TAG0 TAG1 L: run TAG1 submitted (2L-1)/L times the attention
#    forwards of run TAG0 (L layers, all but the last recomputed), so that
#    recompute really ran.
recompute_fixture() {
  "$tg" init gpt --layers 3 --channels 32 --heads 4 --max-seq 32 --vocab 64 --seed 5 \
    --out "$work/r.bin" >/dev/null || { echo "FAIL init gpt"; exit 1; }
  token_file "$work/tokens.bin" 4000 5 11 59 || { echo "FAIL token file"; exit 1; }
}

recompute_run() {
  local tag=$1
  shift
  timeout 120 "$tg" train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --batch 4 \
    --seq 16 --micro-batches 2 --steps 3 --lr 1e-3 --deterministic --stats "$@" \
    --save "$work/$tag.par" >"$work/$tag.out" 2>"$work/$tag.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    bad "$tag: exit status $rc ($(grep 'taskgrad: ' "$work/$tag.err" | head -3))"
    return 1
  fi
  losses "$work/$tag.out" >"$work/$tag.num"
  [ -s "$work/$tag.num" ] || { bad "$tag: no losses printed"; return 1; }
}

same_bits() {
  if ! cmp -s "$work/$1.num" "$work/$2.num"; then
    bad "$3: losses differ: $(paste -d' ' "$work/$1.num" "$work/$2.num" | head -3 | tr '\n' ';')"
  elif ! cmp -s "$work/$1.par" "$work/$2.par"; then
    bad "$3: the saved parameters differ ($(cmp "$work/$1.par" "$work/$2.par" | head -1))"
  else
    ok "$3: losses and parameters bitwise equal ($(tr '\n' ' ' <"$work/$1.num"))"
  fi
}

recomputed() {
  local a b
  a=$(awk '$1 == "tg_attention_fwd" {print $2}' "$work/$1.err")
  b=$(awk '$1 == "tg_attention_fwd" {print $2}' "$work/$2.err")
  if [ -n "$a" ] && [ -n "$b" ] && [ $((a * (2 * $3 - 1))) -eq $((b * $3)) ]; then
    ok "$2: $b attention forwards against $a without recompute"
  else
    bad "$2: ${b:-no} attention forwards against ${a:-no} without recompute, expected $(( ${a:-0} * (2 * $3 - 1) / $3 ))"
  fi
}

# fused TAG0 TAG1: run TAG1 ran 2 fused tasks per layer (3), micro-batch (2)
# and step (3) and no separate linear or attention task; TAG0 none
fused() {
  local f0 f1 sep
  f0=$(awk '$1 == "tg_fused" {print $2}' "$work/$1.err")
  f1=$(awk '$1 == "tg_fused" {print $2}' "$work/$2.err")
  sep=$(awk '$1 ~ /^tg_(linear|attention)/ {n += $2} END {print n + 0}' "$work/$2.err")
  if [ -z "$f0" ] && [ "$f1" = 36 ] && [ "$sep" = 0 ]; then
    ok "$2: 36 fused tasks, no separate linear or attention task ($1: none fused)"
  else
    bad "$2: ${f1:-no} fused tasks and $sep separate linear or attention tasks, expected 36 and 0 ($1: ${f0:-none} fused)"
  fi
}
