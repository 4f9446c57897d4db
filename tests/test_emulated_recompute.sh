#!/usr/bin/env bash
# Activation recompute on emulated devices (PoCL OpenCL devices, each a
# memory node of its own): in deterministic mode, 2 devices with and without
# --recompute, with 0 CPU workers (every task on the devices, the shared
# attention buffers moving between them), give the losses and parameters of
# the CPU-only run without recompute, bit for bit, in fp32 and bf16.
# The optimizer offloaded to 2 CPU workers (--offload-optimizer: AdamW on
# the CPUs, every other task on the 2 devices, each micro-batch pinned to a
# device of its own, the gradients summed in leaves) with recompute gives
# the same bits again: the kernels are the CPU
# ones everywhere, and deterministic mode fixes the order of every sum.
# With --grad-scatter and one micro-batch per device the offloaded run
# reduce-scatters the gradients (a leaf per device, block j summed
# on device j, the tree of the deterministic leaves) and relays the weights
# (half of each from the host per device, the other half from the other
# device): the same bits again, and the bits of --no-weight-relay.
# Not deterministic, the offloaded run sums the gradients in place across
# the devices (no leaves), or with --grad-scatter reduce-scatters them; both
# within 1e-5 of the CPU run's losses.
# A GPT whose state is 4 times the devices' memory trains (see below).
# SKIP (77) when no PoCL device can be started.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
. "$TG_SOURCE_DIR/tests/recompute_testlib.sh"
export STARPU_NCUDA=0
. "$TG_SOURCE_DIR/tests/emulated_testlib.sh"
emulated_probe
recompute_fixture

for prec in fp32 bf16; do
  common=(--precision "$prec" --attention chunked --attn-splits 2)
  recompute_run "cpu-$prec" --ncpus 2 "${common[@]}" || continue
  recompute_run "dev-$prec" --ncpus 0 --emulated-devices 2 "${common[@]}" || continue
  recompute_run "devrec-$prec" --ncpus 0 --emulated-devices 2 "${common[@]}" --recompute ||
    continue
  same_bits "cpu-$prec" "dev-$prec" "$prec: 2 emulated devices against the CPU"
  same_bits "cpu-$prec" "devrec-$prec" "$prec: 2 emulated devices with recompute against the CPU"
  recomputed "dev-$prec" "devrec-$prec" 3
  recompute_run "off-$prec" --ncpus 2 --emulated-devices 2 "${common[@]}" --recompute \
    --offload-optimizer --trace "$work/off-$prec.json" || continue
  # where the tasks ran: AdamW on the CPUs only, the layers' tasks on the
  # devices only (the sums' fills and additions may run anywhere)
  if placed=$("$py" - "$work/off-$prec.json" 2>&1 <<'PY'
import json, re, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
opt = dev = pinned = 0
for e in ev:
    if e.get("ph") != "X" or e["tid"] not in names:
        continue
    cl, where = e["args"].get("codelet", e["name"]), names[e["tid"]]
    if cl.startswith("tg_adamw"):
        assert where.startswith("CPU"), f"{cl} on {where}"
        opt += 1
    elif cl.split("_")[1] in ("linear", "gemm", "attention", "layernorm", "residual", "lm"):
        assert where.startswith("OpenCL"), f"{cl} on {where}"
        dev += 1
    # each micro-batch whole on its own device (micro-batch k on device k)
    micro = re.search(r"\bm([0-9]+)\.", e["name"])
    if micro and not cl.startswith("tg_adamw"):
        assert where.startswith(f"OpenCL {micro.group(1)} "), f"{e['name']} on {where}"
        pinned += 1
assert opt > 0 and dev > 0 and pinned > 0, (opt, dev, pinned)
print(f"{opt} optimizer tasks on the CPUs, {dev} layer tasks on the devices, "
      f"{pinned} tasks of micro-batch k on device k")
PY
  ); then ok "$prec: $placed"; else bad "$prec: placement: $placed"; fi
  same_bits "cpu-$prec" "off-$prec" "$prec: optimizer offloaded to 2 CPUs, 2 devices, recompute"
  recompute_run "offsc-$prec" --ncpus 2 --emulated-devices 2 "${common[@]}" --recompute \
    --offload-optimizer --grad-scatter --weight-relay || continue
  same_bits "cpu-$prec" "offsc-$prec" "$prec: the same, gradients reduce-scattered"
  trees=$(awk '$1 == "tg_sum_tree" {print $2}' "$work/offsc-$prec.err")
  if [ -n "$trees" ] && [ "$trees" -gt 0 ] &&
     grep -q "the gradients reduce-scattered over them" "$work/offsc-$prec.err"; then
    ok "$prec: gradients reduce-scattered ($trees sum tasks, one per block)"
  else bad "$prec: no reduce-scatter (${trees:-no} tg_sum_tree tasks)"; fi
  # the weight relay comes with it (graphs/gpt_relay.c): the stages and
  # gathers are tg_gather_rows tasks, which no other part of this run has
  gathers=$(awk '$1 == "tg_gather_rows" {print $2}' "$work/offsc-$prec.err")
  if [ -n "$gathers" ] && [ "$gathers" -gt 0 ] &&
     grep -q "weights relayed" "$work/offsc-$prec.err"; then
    ok "$prec: weights relayed ($gathers stage and gather tasks)"
  else bad "$prec: no weight relay (${gathers:-no} tg_gather_rows tasks)"; fi
  recompute_run "offnr-$prec" --ncpus 2 --emulated-devices 2 "${common[@]}" --recompute \
    --offload-optimizer --grad-scatter --no-weight-relay || continue
  same_bits "offsc-$prec" "offnr-$prec" "$prec: reduce-scattered, with the relay against without"
  if [ -z "$(awk '$1 == "tg_gather_rows" {print $2}' "$work/offnr-$prec.err")" ]; then
    ok "$prec: --no-weight-relay: no tg_gather_rows task"
  else bad "$prec: --no-weight-relay still gathers"; fi
  if grep -q "optimizer on the CPU workers" "$work/off-$prec.err"; then ok "the header says so"
  else bad "the header does not name the offload: $(grep 'taskgrad: GPT' "$work/off-$prec.err")"; fi
done
# Not deterministic: each gradient summed in place (one copy passed from
# device to device, TG_COMMUTE) instead of in leaves: no accumulate task
# per gradient; with --grad-scatter reduce-scattered (tg_sum_tree tasks);
# the losses of the CPU run to 1e-5 either way (other orders of the two
# micro-batches' sums)
for mode in scatter inplace; do
  flag=()
  [ "$mode" = scatter ] && flag=(--grad-scatter)
  if timeout 120 "$tg" train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --batch 4 \
       --seq 16 --micro-batches 2 --steps 3 --lr 1e-3 --stats --ncpus 2 --emulated-devices 2 \
       --attention chunked --attn-splits 2 --recompute --offload-optimizer "${flag[@]}" \
       >"$work/$mode.out" 2>"$work/$mode.err"; then
    losses "$work/$mode.out" >"$work/$mode.num"
    acc=$(awk '$1 == "tg_accumulate" {print $2}' "$work/$mode.err")
    trees=$(awk '$1 == "tg_sum_tree" {print $2}' "$work/$mode.err")
    if worst=$(losses_within "$work/cpu-fp32.num" "$work/$mode.num" 3 1e-5); then
      ok "offloaded, not deterministic, $mode: losses within $worst of the CPU run"
    else
      bad "offloaded, not deterministic, $mode: losses $(paste "$work/cpu-fp32.num" "$work/$mode.num" | tr '\n' ';')"
    fi
    # the loss's sums only (the deterministic run adds 7 per step per gradient)
    if [ -n "$acc" ] && [ "$acc" -le 6 ]; then ok "$mode: no leaves ($acc accumulate tasks)"
    else bad "$mode: ${acc:-no} accumulate tasks: leaves?"; fi
    if [ "$mode" = scatter ] && [ "${trees:-0}" -gt 0 ]; then ok "scatter: $trees sum tasks"
    elif [ "$mode" = inplace ] && [ -z "$trees" ]; then ok "in place: no sum tasks"
    else bad "$mode: ${trees:-no} tg_sum_tree tasks"; fi
  else
    bad "offloaded, not deterministic, $mode: exit status $? ($(grep 'taskgrad: ' "$work/$mode.err" | head -2))"
  fi
done

# A model 4 times the devices' memory: 3.29M parameters (L 4, C 256), whose
# f32 weights, gradients and AdamW moments take 50.2 MiB, on 2 devices of 6
# MiB each (STARPU_LIMIT_OPENCL_MEM=6, 12 MiB in all): the automatic fit
# turns recompute and the offload on, StarPU evicts to make room, and the
# losses and parameters are the CPU-only run's, bit for bit.  (Before the
# offload, the AdamW task of one fc weight, 4 MiB of buffers, was refused.)
"$tg" init gpt --layers 4 --channels 256 --heads 4 --max-seq 256 --vocab 256 --seed 2 \
  --out "$work/big.bin" >/dev/null || bad "init gpt (big)"
big=(--init-from "$work/big.bin" --batch 4 --seq 64)
big_run() { # TAG ARGS...: recompute_run on the big model (the last flags win)
  local tag=$1
  shift
  recompute_run "$tag" "${big[@]}" "$@"
}
if big_run bigcpu --ncpus 2 && STARPU_LIMIT_OPENCL_MEM=6 big_run bigdev --ncpus 2 --emulated-devices 2; then
  same_bits bigcpu bigdev "4x the devices' memory (2 x 6 MiB, 50.2 MiB of state)"
  if grep -q "recompute on" "$work/bigdev.err" && grep -q "optimizer offloaded" "$work/bigdev.err"; then
    ok "the fit turned recompute and the offload on"
  else
    bad "the fit: $(grep 'taskgrad: ' "$work/bigdev.err" | head -3)"
  fi
  ev=$(sed -nE 's/^evictions: +([0-9]+) device buffers.*/\1/p' "$work/bigdev.err")
  if [ -n "$ev" ] && [ "$ev" -gt 0 ]; then ok "$ev device buffers evicted to make room"
  else bad "no evictions reported ('$ev'): did the limit apply?"; fi
  # the same model with the gradients reduce-scattered and the weights
  # relayed (shards and copies that evict like the rest), under 10 MiB a
  # device (2.5x): the reduce-scatter's leaves live on the devices, and at
  # 8 MiB StarPU 1.3 stalled allocating, relay or not
  if STARPU_LIMIT_OPENCL_MEM=10 big_run bigrelay --ncpus 2 --emulated-devices 2 \
       --micro-batches 2 --grad-scatter --weight-relay; then
    same_bits bigcpu bigrelay "2.5x the devices' memory, gradients reduce-scattered, weights relayed"
    grep -q "weights relayed" "$work/bigrelay.err" && ok "bigrelay: the header says so" ||
      bad "bigrelay: no relay: $(grep 'taskgrad: ' "$work/bigrelay.err" | head -3)"
  fi
fi
# refused without devices, with one message
expect_fail "offload without devices" "no devices" train gpt --init-from "$work/r.bin" \
  --data "$work/tokens.bin" --batch 4 --seq 16 --steps 1 --ncpus 2 --offload-optimizer
expect_fail "offload with the sharded data parallelism" "do not go together yet" train gpt \
  --init-from "$work/r.bin" --data "$work/tokens.bin" --batch 4 --seq 16 --steps 1 --ncpus 2 \
  --emulated-devices 2 --micro-batches 2 --offload-optimizer --data-parallel shard
expect_fail "--grad-scatter without the offload" "offloaded optimizer with micro-batches pinned" \
  train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --batch 4 --seq 16 --steps 1 \
  --ncpus 2 --emulated-devices 2 --micro-batches 2 --grad-scatter
expect_fail "--weight-relay without the reduce-scatter" "runs with the gradients' reduce-scatter" \
  train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --batch 4 --seq 16 --steps 1 \
  --ncpus 2 --emulated-devices 2 --micro-batches 2 --offload-optimizer --no-grad-scatter \
  --weight-relay
expect_fail "--grad-scatter, deterministic, 2 micro-batches a device" \
  "needs one micro-batch per device" train gpt --init-from "$work/r.bin" \
  --data "$work/tokens.bin" --batch 8 --seq 16 --steps 1 --ncpus 2 --emulated-devices 2 \
  --micro-batches 4 --offload-optimizer --grad-scatter --deterministic
expect_fail "offload without CPU workers" "CPU workers, and there are none" train gpt \
  --init-from "$work/r.bin" --data "$work/tokens.bin" --batch 4 --seq 16 --steps 1 --ncpus 0 \
  --emulated-devices 1 --offload-optimizer

# The reduce-scatter's default (TG_GPT_SCATTER_AUTO_BYTES: on from 80 MiB
# of f32 gradients per layer) never refuses: deterministic, a layer of C
# 1344 is reduce-scattered with one micro-batch per device, and with two a
# device it runs with the gradients summed as before (--grad-scatter would
# be refused there, above).
"$tg" init gpt --layers 1 --channels 1344 --heads 8 --max-seq 32 --vocab 64 --seed 5 \
  --out "$work/wide.bin" >/dev/null || bad "init gpt (C 1344)"
for m in 2:1 4:0; do
  if timeout 120 "$tg" train gpt --init-from "$work/wide.bin" --data "$work/tokens.bin" \
       --batch 4 --seq 16 --micro-batches "${m%%:*}" --steps 1 --ncpus 2 --emulated-devices 2 \
       --offload-optimizer --deterministic >"$work/wide.out" 2>"$work/wide.err"; then
    said=$(grep -c "reduce-scattered" "$work/wide.err")
    if [ "$said" -eq "${m##*:}" ]; then
      ok "C 1344, deterministic, ${m%%:*} micro-batches on 2 devices: reduce-scattered $said"
    else bad "C 1344, ${m%%:*} micro-batches: reduce-scattered $said, expected ${m##*:}"; fi
  else bad "C 1344, ${m%%:*} micro-batches: status $? ($(grep 'taskgrad: ' "$work/wide.err" | head -2))"; fi
done

echo "emulated recompute: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
