#!/usr/bin/env bash
# Fused blocks (--fused-blocks, run.fused_blocks: each transformer block's
# forward as one task and its backward as one, codelets/fuse.c).  The fused
# task runs its parts' own functions in their order, so in deterministic
# mode the losses and saved parameters after 3 steps equal the unfused
# run's bit for bit: on 2 CPU workers (fp32 chunked, bf16 flash, fp32
# naive) and on 1 against 2 (emulated devices: test_emulated_fused.sh).
# --stats counts the fused tasks: 2 per layer,
# micro-batch and step, and no separate linear or attention task left.  By
# default a run without CUDA workers does not fuse.  --trace lists a fused
# task's parts.  With --recompute the recomputed forwards are fused too, the
# same bits again.  --fused-blocks with tiles or split attention is refused
# (exit 2, one message).
# Packed layers (--packed-layers, on by default with fused blocks: each
# layer's parameters, gradients and moments one buffer each, the tensors
# views of it, codelets/fuse.c): the same bits again, with fused blocks or
# without, on 1 worker or 2, with recompute; the fused backward names fewer
# buffers; where the tensors are split (the offloaded optimizer) it is
# refused.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
. "$TG_SOURCE_DIR/tests/recompute_testlib.sh"
export STARPU_NCUDA=0
recompute_fixture

cases=("fp32 chunked:--precision fp32 --attention chunked"
       "bf16 flash:--precision bf16 --attention flash"
       "fp32 naive:--precision fp32 --attention naive")
i=0
for c in "${cases[@]}"; do
  name=${c%%:*}
  read -r -a args <<<"${c#*:}"
  i=$((i + 1))
  common=(--attn-splits 1 --tiles 1 "${args[@]}")
  recompute_run "base$i" --ncpus 2 "${common[@]}" || continue
  recompute_run "fused$i" --ncpus 2 "${common[@]}" --fused-blocks --no-packed-layers || continue
  same_bits "base$i" "fused$i" "$name, 2 CPU workers, fused against not"
  fused "base$i" "fused$i"
  recompute_run "packed$i" --ncpus 2 "${common[@]}" --fused-blocks &&
    same_bits "base$i" "packed$i" "$name, 2 CPU workers, fused and packed against neither"
done
recompute_run packnf --ncpus 2 --attn-splits 1 --tiles 1 --precision bf16 --attention flash \
  --no-fused-blocks --packed-layers &&
  same_bits base2 packnf "bf16 flash, packed without fused blocks against neither"
recompute_run fused1w --ncpus 1 --attn-splits 1 --tiles 1 --precision fp32 \
  --attention chunked --fused-blocks &&
  same_bits base1 fused1w "fp32 chunked, fused on 1 CPU worker against unfused on 2"
# the default without CUDA workers: not fused (base1 ran with neither flag)
recompute_run default1 --ncpus 2 --attn-splits 1 --tiles 1 --precision fp32 \
  --attention chunked &&
  if grep -q "^tg_fused " "$work/default1.err"; then
    bad "a CPU run fused its blocks by default"
  else
    ok "a CPU run does not fuse by default"
  fi

# a trace names each fused task's parts in order (a forward: its LayerNorm,
# then the QKV linear, then attention ...)
recompute_run traced --ncpus 2 --attn-splits 1 --tiles 1 --fused-blocks --no-packed-layers \
  --trace "$work/t.json" &&
  if parts=$("$py" - "$work/t.json" 2>&1 <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
      if e.get("ph") == "X" and e["args"].get("codelet") == "tg_fused"]
fwd = [e for e in ev if e["args"]["task"].endswith(".fwd")]
assert fwd and len(fwd) * 2 == len(ev), f"{len(fwd)} forwards of {len(ev)} fused tasks"
# the first to start is a layer 0 forward (the others wait on one); the
# file's order is not the start order (under ASan a later layer came first)
p = min(fwd, key=lambda e: e["ts"])["args"]["parts"]
assert p[:3] == ["tg_layernorm_fwd", "tg_linear_fwd", "tg_attention_fwd"], p
print(" ".join(p))
PY
  ); then
    ok "the trace names the parts: $parts"
  else
    bad "the trace's fused tasks: $parts"
  fi

# packed, micro-batch 0's block backward (named after its first part, a
# weight gradient) names four packs (the layer's weights, its gradients,
# its activations, the micro-batch's backward buffers) and the codelets'
# scratch instead of 6 + 12 parameter handles, a dozen activations and the
# backward's temporaries (micro-batch 1's deterministic leaves are
# temporaries of their own, per tensor)
recompute_run tracedp --ncpus 2 --attn-splits 1 --tiles 1 --fused-blocks \
  --trace "$work/tp.json" &&
  if nb=$("$py" - "$work/t.json" "$work/tp.json" 2>&1 <<'PY'
import json, sys
def bufs(path):
    ev = [e for e in json.load(open(path))["traceEvents"]
          if e.get("ph") == "X" and e["args"].get("codelet") == "tg_fused"
          and e["args"]["task"] == "L1.m0.wgrad"]
    assert ev, path
    return max(e["args"]["buffers"] for e in ev)
a, b = bufs(sys.argv[1]), bufs(sys.argv[2])
assert a >= 30 and b <= 6, f"{b} buffers packed against {a}"
print(f"{a} -> {b}")
PY
  ); then
    ok "packed, a fused backward's buffers: $nb"
  else
    bad "packed buffers: $nb"
  fi

# with recompute the block forward submitted again is fused too (3 layers,
# the last not recomputed: 2 more fused tasks per micro-batch and step)
recompute_run recf1 --ncpus 2 --attn-splits 1 --tiles 1 --precision fp32 --attention chunked \
  --recompute --fused-blocks --no-packed-layers && {
  same_bits base1 recf1 "fp32 chunked, fused with recompute against unfused without"
  n=$(awk '$1 == "tg_fused" {print $2}' "$work/recf1.err")
  if [ "$n" = 48 ]; then ok "recf1: 48 fused tasks (36 and 12 recomputed forwards)"
  else bad "recf1: ${n:-no} fused tasks, expected 48"; fi
}
recompute_run recp1 --ncpus 2 --attn-splits 1 --tiles 1 --precision fp32 --attention chunked \
  --recompute --fused-blocks &&
  same_bits base1 recp1 "fp32 chunked, fused and packed with recompute against neither without"

for extra in "--tiles 2:--attn-splits 1" "--attn-splits 2:--tiles 1"; do
  read -r -a a1 <<<"${extra%%:*}"
  read -r -a a2 <<<"${extra#*:}"
  expect_fail "--fused-blocks with ${extra%%:*}" \
    "fused blocks need untiled linear layers .* one attention task per micro-batch" \
    train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --ncpus 2 --batch 4 --seq 16 \
    --steps 1 --fused-blocks "${a1[@]}" "${a2[@]}"
done

echo "fused blocks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
