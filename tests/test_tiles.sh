#!/usr/bin/env bash
# Tiled linear layers (--tiles N, graphs/gpt_tiles.c, codelets/
# linear.c) on CPU workers, in deterministic mode, 3 steps of a
# 3-layer GPT (C 32) against the untiled run of the same model and data:
#  - the losses and the saved parameters: bitwise equal, or within 1e-6
#    relative (fp32; 1e-4 in bf16, where a sum that rounds differently
#    moves a 16-bit activation by an ulp, 2^-8) where the BLAS rounds a
#    column block of a GEMM differently from the whole.  The test prints
#    which it got: on OpenBLAS 0.3.21 (Zen kernels) the fp32 losses were
#    equal and the parameters 4e-7 apart, bf16 with 2 tiles bitwise equal,
#    with 3 tiles 4e-5 apart;
#  - 2 tiles and 3 (unequal tiles: 11, 11 and 10 of C's 32 columns, 43, 43
#    and 42 of 4C), fp32 and bf16, chunked attention in 2 tasks (a second,
#    row, plan on the same attention buffers), with recompute (one set of
#    buffers shared by the layers), 1 and 2 workers;
#  - the --stats table counts N tile tasks per linear layer: 4 layers x 3
#    blocks x 2 micro-batches x 3 steps x N forwards, as many backwards,
#    and with recompute the forwards of qkv, attproj and fc (3 layers) of
#    the 2 recomputed blocks once more; in f32 the classifier's vocabulary
#    tiles too (N logits and N dlogits tiles, one combine and N dlnf
#    backward-data tiles per micro-batch and step), none in bf16;
#  - without --deterministic (the classifier's dwte in row blocks, sums in
#    place in any order): losses within 1e-5 of the untiled run's;
#  - bf16 with the split classifier's dwte in 3 row blocks against 1:
#    losses within 1e-6;
#  - bench gpt's header names the tile count; auto is 1 on 2 workers;
#  - a bad count is refused (exit 2, one message).
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
. "$TG_SOURCE_DIR/tests/recompute_testlib.sh"
export STARPU_NCUDA=0 STARPU_NOPENCL=0
recompute_fixture

# equal bits, or the largest relative difference of the losses and the
# parameters if within 1e-6
close_or_same() { # A B WHAT [TOL]
  local tol=${4:-1e-6}
  if cmp -s "$work/$1.num" "$work/$2.num" && cmp -s "$work/$1.par" "$work/$2.par"; then
    ok "$3: losses and parameters bitwise equal ($(tr '\n' ' ' <"$work/$1.num"))"
    return
  fi
  local d
  d=$("$py" - "$work/$1" "$work/$2" <<'PY'
import sys, numpy as np
a, b = sys.argv[1], sys.argv[2]
la, lb = np.loadtxt(a + ".num"), np.loadtxt(b + ".num")
pa = np.fromfile(a + ".par", dtype=np.uint8)
pb = np.fromfile(b + ".par", dtype=np.uint8)
if pa.size != pb.size: print("sizes"); sys.exit()
# the checkpoints' float payload: compare as f32 past the header
n = (pa.size // 4) * 4
fa = pa[pa.size - n:].view(np.float32).astype(np.float64)
fb = pb[pb.size - n:].view(np.float32).astype(np.float64)
ok = np.isfinite(fa) & np.isfinite(fb)
rl = np.max(np.abs(la - lb) / np.maximum(np.abs(lb), 1e-30))
rp = np.linalg.norm(fa[ok] - fb[ok]) / max(np.linalg.norm(fb[ok]), 1e-30)
print("%.3g %.3g" % (rl, rp))
PY
)
  case $d in
  sizes) bad "$3: checkpoints of different sizes" ;;
  *) if awk -v l="${d% *}" -v p="${d#* }" -v t="$tol" 'BEGIN { exit !(l <= t && p <= t) }'; then
       ok "$3: within $tol relative, not bitwise (losses $(echo "$d" | cut -d' ' -f1), parameters $(echo "$d" | cut -d' ' -f2))"
     else
       bad "$3: tiled and untiled differ: losses rel $(echo "$d" | cut -d' ' -f1), parameters rel $(echo "$d" | cut -d' ' -f2)"
     fi ;;
  esac
}

# N tile tasks per linear layer, forward and backward-data
tiles_counted() { # TAG N RECOMPUTE(0/1) F32(0/1)
  local f b want=$((4 * 3 * 2 * 3 * $2)) wantf lg dg cb
  wantf=$((want + $3 * 3 * 2 * 2 * 3 * $2))
  lg=$(awk '$1 == "tg_lm_logits_tile" {print $2}' "$work/$1.err")
  dg=$(awk '$1 == "tg_lm_dlogits_tile" {print $2}' "$work/$1.err")
  cb=$(awk '$1 == "tg_lm_softmax_combine" {print $2}' "$work/$1.err")
  if [ "${lg:-0}" -eq $(($4 * 2 * 3 * $2)) ] && [ "${dg:-0}" -eq $(($4 * 2 * 3 * $2)) ] &&
     [ "${cb:-0}" -eq $(($4 * 2 * 3)) ]; then
    ok "$1: ${lg:-0} logits, ${dg:-0} dlogits tiles and ${cb:-0} combines"
  else
    bad "$1: ${lg:-0} logits, ${dg:-0} dlogits tiles and ${cb:-0} combines, expected $(($4 * 2 * 3 * $2)) and $(($4 * 2 * 3))"
  fi
  want=$((want + $4 * 2 * 3 * $2))
  f=$(awk '$1 == "tg_linear_fwd_tile" {print $2}' "$work/$1.err")
  b=$(awk '$1 == "tg_linear_bwd_data_tile" {print $2}' "$work/$1.err")
  if [ "${f:-0}" -eq $wantf ] && [ "${b:-0}" -eq $want ]; then
    ok "$1: $f forward and $b backward-data tile tasks"
  else
    bad "$1: ${f:-no} forward and ${b:-no} backward-data tile tasks, expected $wantf and $want"
  fi
}

cases=("fp32 chunked:1e-6:0:1:--precision fp32 --attention chunked --attn-splits 2"
       "bf16 chunked:1e-4:0:0:--precision bf16 --attention chunked --attn-splits 2"
       "fp32 recompute:1e-6:1:1:--precision fp32 --attention chunked --attn-splits 2 --recompute")
i=0
for c in "${cases[@]}"; do
  IFS=: read -r name tol rec f32 rest <<<"$c"
  read -r -a args <<<"$rest"
  i=$((i + 1))
  recompute_run "base$i" --ncpus 2 "${args[@]}" --tiles 1 || continue
  for n in 2 3; do
    recompute_run "t$i-$n" --ncpus 2 "${args[@]}" --tiles $n || continue
    close_or_same "base$i" "t$i-$n" "$name, $n tiles, 2 CPU workers" "$tol"
    tiles_counted "t$i-$n" $n "$rec" "$f32"
  done
done
if ! grep -q "tg_linear_fwd_tile" "$work/base1.err"; then
  ok "--tiles 1 submits no tile task"
else
  bad "--tiles 1 submitted tile tasks"
fi
# one worker: another task order
recompute_run t1w --ncpus 1 --precision fp32 --attention chunked --attn-splits 2 --tiles 3 &&
  close_or_same base1 t1w "fp32 chunked, 3 tiles, 1 CPU worker against 2 untiled"

# 0 when the loss files A and B have the same shape and every loss is
# within TOL relative
losses_close() { # A B TOL
  "$py" - "$1" "$2" "$3" <<'PY'
import sys, numpy as np
a, b = np.loadtxt(sys.argv[1]), np.loadtxt(sys.argv[2])
ok = a.shape == b.shape and a.size and np.max(np.abs(a - b) / np.abs(a)) <= float(sys.argv[3])
sys.exit(0 if ok else 1)
PY
}

# train_losses TAG FLAGS...: 3 steps without --deterministic (sums in place,
# in any order), the losses to $work/TAG.num
train_losses() {
  local tag=$1
  shift
  timeout 120 "$tg" train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --batch 4 \
    --seq 16 --micro-batches 2 --steps 3 --lr 1e-3 --ncpus 2 "$@" \
    >"$work/$tag.out" 2>"$work/$tag.err" ||
    bad "$tag ($*): exit status $? ($(grep 'taskgrad: ' "$work/$tag.err" | head -2))"
  losses "$work/$tag.out" >"$work/$tag.num"
}

# same_losses A B TOL WHAT: the runs' losses within TOL relative
same_losses() {
  if losses_close "$work/$1.num" "$work/$2.num" "$3"; then
    ok "$4: losses within $3 ($(tr '\n' ' ' <"$work/$2.num"))"
  else
    bad "$4: losses $(tr '\n' ' ' <"$work/$2.num") against $(tr '\n' ' ' <"$work/$1.num")"
  fi
}

# not deterministic: the split classifier's dwte blocks, 3 tiles against
# the untiled run
train_losses nd1 --classifier-blocks 2 --tiles 1
train_losses nd3 --classifier-blocks 2 --tiles 3
same_losses nd1 nd3 1e-5 "not deterministic, 3 tiles against the untiled run"

# bf16, not deterministic: dwte in 3 row blocks (lm_classifier_dwte on the
# bf16 dlogits, natively where the CPU has AVX512-BF16) against one block
# (one gemm_lowp): each row of dwte is the same dot products
train_losses cb1 --precision bf16 --classifier-blocks 1
train_losses cb3 --precision bf16 --classifier-blocks 3
same_losses cb1 cb3 1e-6 "bf16, dwte in 3 blocks against 1"

# bench's header: the count used; auto on 2 workers is 1
for n in 0 3; do
  extra=()
  [ $n = 0 ] || extra=(--tiles $n)
  want=$n
  [ $n = 0 ] && want=1
  out=$("$tg" bench gpt --layers 2 --channels 32 --heads 4 --vocab 64 --max-seq 32 --seq 16 \
    --batch 4 --micro-batches 2 --steps 1 --warmup 0 --ncpus 2 "${extra[@]}" 2>&1)
  if echo "$out" | grep -q "linear layers in $want tile(s)"; then
    ok "bench gpt ${extra[*]:-(auto)}: linear layers in $want tile(s)"
  else
    bad "bench gpt ${extra[*]:-(auto)}: header $(echo "$out" | grep 'bench gpt:')"
  fi
done

expect_fail "--tiles 0" "--tiles" bench gpt --tiles 0 --steps 1
expect_fail "--tiles 65" "--tiles" bench gpt --tiles 65 --steps 1
expect_fail "more tiles than channels" "33 linear tiles for 32 channels" bench gpt \
  --layers 1 --channels 32 --heads 4 --vocab 64 --max-seq 32 --seq 16 --batch 2 --steps 1 \
  --tiles 33
echo "tiles: $pass passed, $fail failed"
[ $fail -eq 0 ]
