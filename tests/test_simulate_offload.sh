#!/usr/bin/env bash
# Memory-saving runs of `taskgrad simulate gpt` (SimGrid build only, SKIP
# elsewhere) on a small GPT, one simulated H100 and 2 CPU workers:
#  - --recompute prints the FLOPs it adds and lowers the peak device memory;
#  - automatic fit: STARPU_LIMIT_CUDA_MEM of 100 MiB makes simulate print its
#    estimates of a step's device memory without recompute (X), with it (Y)
#    and with the optimizer offloaded too (Z) (the run is then refused by
#    the device memory guard: a task is larger).  A limit between Y and X
#    turns recompute alone on; one between Z and Y turns on the offload too,
#    and that run completes with every AdamW task on the CPU workers and at
#    least the f32 gradients (4 bytes per parameter) sent to the host;
#  - the model's host-backed state is checked against --host-memory (or
#    the platform's host_mem_bytes): too small is refused (exit 2);
#  - on 2 GPUs the offloaded gradients reach the host from both when
#    reduce-scattered, from one when summed in place (see below), and the
#    reduce-scatter's default follows the size of a layer's gradients.
source "$TG_SOURCE_DIR/tests/cli_testlib.sh"
if ! "$tg" --version | grep -q "SimGrid: yes"; then
  echo "SKIP: this taskgrad is not a SimGrid build (-DTG_SIMGRID=ON)"
  exit 77
fi
args=(simulate gpt --platform h100x1 --gpus 1 --ncpus 2 --sched dmdas --layers 4
      --channels 256 --heads 4 --vocab 256 --max-seq 256 --seq 256 --batch 16
      --micro-batches 1 --precision bf16 --warmup 1 --steps 1 --cost peak)
# the model's parameters: 12 L C^2 + 13 L C + (Vp + maxT + 2) C
N=$(( 12 * 4 * 256 * 256 + 13 * 4 * 256 + (256 + 256 + 2) * 256 ))
peak() { awk '/^peak device memory CUDA/ {print $6}' "$1"; }
sim() { # TAG [ENV=VALUE...] -- extra args: stdout in $work/TAG.out, stderr .err
  local tag=$1
  shift
  local -a envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local t0=$SECONDS
  env "${envs[@]}" timeout 150 "$tg" "${args[@]}" "$@" >"$work/$tag.out" 2>"$work/$tag.err"
  local rc=$?
  echo "($tag: $((SECONDS - t0)) s)"
  return $rc
}

sim plain -- || bad "plain run: status $? $(tail -2 "$work/plain.err")"
if sim rec -- --recompute; then
  line=$(grep '^recompute: ' "$work/rec.out")
  [ -n "$line" ] && ok "--recompute: $line" || bad "--recompute: no FLOPs line"
  a=$(peak "$work/plain.out") b=$(peak "$work/rec.out")
  if awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }'; then
    ok "--recompute: peak device memory $b GB against $a GB"
  else
    bad "--recompute: peak device memory $b GB, not below $a GB"
  fi
else
  bad "--recompute run: status $? $(tail -2 "$work/rec.err")"
fi

# the estimates, from a run refused for its 100 MiB (a smaller limit
# passes the guard, then StarPU stalls until the watchdog: minutes)
sim tiny STARPU_LIMIT_CUDA_MEM=100 --
X=$(sed -nE 's/.*recompute on .* about ([0-9.]+) GB on a device without it, ([0-9.]+) GB.*/\1/p' "$work/tiny.err")
Y=$(sed -nE 's/.*recompute on .* about ([0-9.]+) GB on a device without it, ([0-9.]+) GB.*/\2/p' "$work/tiny.err")
Z=$(sed -nE 's/.*optimizer offloaded .* there, ([0-9.]+) GB without it.*/\1/p' "$work/tiny.err")
if [ -z "$X" ] || [ -z "$Y" ] || [ -z "$Z" ]; then
  bad "no estimates printed under a 100 MiB device: $(head -3 "$work/tiny.err")"
else
  ok "estimates: $X GB, with recompute $Y GB, offloaded too $Z GB"
  mib() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (a + b) / 2 * 1e9 / 1048576 }'; }
  if sim fit1 STARPU_LIMIT_CUDA_MEM="$(mib "$X" "$Y")" --; then
    if grep -q "recompute on" "$work/fit1.err" && ! grep -q "offloaded" "$work/fit1.err"; then
      ok "a device between them: recompute alone, and the step runs"
    else
      bad "a device between X and Y: $(grep taskgrad: "$work/fit1.err" | head -3)"
    fi
  else
    bad "a device between X and Y: status $? $(tail -2 "$work/fit1.err")"
  fi
  if sim fit2 STARPU_LIMIT_CUDA_MEM="$(mib "$Y" "$Z")" -- --trace "$work/fit2.json"; then
    up=$(awk '/^link CUDA 0 -> NUMA 0:/ {print $7 * 1e6}' "$work/fit2.out")
    if grep -q "recompute on" "$work/fit2.err" && grep -q "optimizer offloaded" "$work/fit2.err" &&
       [ -n "$up" ] && awk -v u="$up" -v n="$N" 'BEGIN { exit !(u >= 4 * n) }'; then
      ok "a device between Y and Z: recompute and offload, $up bytes to the host per step (4N = $((4 * N)))"
    else
      bad "a device between Y and Z: up '$up', $(grep taskgrad: "$work/fit2.err" | head -3)"
    fi
    if "$py" - "$work/fit2.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
opt = [names[e["tid"]] for e in ev if e.get("ph") == "X" and e["tid"] in names
       and e["args"].get("codelet", "").startswith("tg_adamw")]
assert opt and all(w.startswith("CPU") for w in opt), opt[:5]
PY
    then ok "offloaded: every AdamW task on a CPU worker"
    else bad "offloaded: AdamW tasks off the CPU workers"; fi
  else
    bad "a device between Y and Z: status $? $(tail -2 "$work/fit2.err")"
  fi
fi

expect_fail "--host-memory not a number" "--host-memory" "${args[@]}" --host-memory lots
expect_fail "host memory too small" "need about .* GB of host memory .* platform h100x1's host" \
  "${args[@]}" --host-memory 0.01

# StarPU's clean-buffer thresholds (src/runtime.c): off where the step fits
# (no restart), back by a restart where it evicts (a 13B shape on one
# H100, refused after the fit by a 1 GB host: no step runs), and the
# user's values kept as they are
clean_msg="restarting with StarPU's clean-buffer thresholds"
big=(simulate gpt --platform h100x1 --gpus 1 --ncpus 2 --layers 40 --channels 5120 --heads 40
     --vocab 50257 --max-seq 1024 --seq 1024 --batch 8 --micro-batches 1 --precision bf16
     --warmup 0 --steps 1 --cost peak --host-memory 1)
if grep -q "$clean_msg" "$work/plain.err"; then
  bad "clean buffers: a step that fits restarted"
else
  ok "clean buffers: a step that fits runs once"
fi
timeout 120 "$tg" "${big[@]}" >"$work/big.out" 2>"$work/big.err"
rc=$?
if [ "$rc" -eq 2 ] && [ "$(grep -c "$clean_msg" "$work/big.err")" -eq 1 ] &&
   [ "$(grep -c "StarPU evicts host-backed data" "$work/big.err")" -eq 1 ]; then
  ok "clean buffers: a step that evicts restarted once, its fit said once"
else
  bad "clean buffers: evicting step: status $rc, $(grep -c "$clean_msg" "$work/big.err") restarts: $(tail -2 "$work/big.err")"
fi
STARPU_MINIMUM_CLEAN_BUFFERS=5 timeout 120 "$tg" "${big[@]}" >"$work/big2.out" 2>"$work/big2.err"
rc=$?
if [ "$rc" -eq 2 ] && ! grep -q "$clean_msg" "$work/big2.err"; then
  ok "clean buffers: the user's STARPU_MINIMUM_CLEAN_BUFFERS kept, no restart"
else
  bad "clean buffers: with the user's value: status $rc, $(tail -2 "$work/big2.err")"
fi

# The offloaded optimizer on 2 simulated GPUs, a micro-batch each: with
# --grad-scatter each GPU sends the host about half of the step's f32
# gradients (its blocks of the reduce-scatter); by default the sums pass
# from one GPU to the other and the host receives nearly all of it from
# one.  (Tree sums placed on one device, or the target joined
# through one, would fail the first.)
two=(simulate gpt --platform h100x8 --gpus 2 --ncpus 2 --layers 4 --channels 256 --heads 4
     --vocab 256 --max-seq 256 --seq 256 --batch 16 --micro-batches 2 --precision bf16
     --warmup 1 --steps 1 --cost peak --offload-optimizer)
to_host() { # FILE: MB per step from CUDA 0 and CUDA 1 to the host
  for d in 0 1; do
    awk -v l="CUDA $d -> NUMA 0:" 'index($0, "link " l) == 1 {print $7 + 0; f = 1} END {if (!f) print 0}' "$1"
  done | tr '\n' ' '
}
for mode in scatter no; do
  flag=()
  [ "$mode" = scatter ] && flag=(--grad-scatter)
  if ! timeout 120 "$tg" "${two[@]}" "${flag[@]}" >"$work/two-$mode.out" 2>"$work/two-$mode.err"; then
    bad "2 GPUs, $mode: status $? $(tail -2 "$work/two-$mode.err")"
    continue
  fi
  read -r a b <<<"$(to_host "$work/two-$mode.out")"
  said=$(grep -c "gradients reduce-scattered over 2 devices" "$work/two-$mode.out")
  if [ "$mode" = scatter ]; then
    if [ "$said" -eq 1 ] && awk -v a="$a" -v b="$b" 'BEGIN {a += 0; b += 0; exit !(a > 0.4 * (a + b) && b > 0.4 * (a + b))}'; then
      ok "2 GPUs, reduce-scattered: $a and $b MB to the host from each"
    else bad "2 GPUs, reduce-scattered: $a and $b MB to the host ($said reports)"; fi
  else
    if [ "$said" -eq 0 ] && awk -v a="$a" -v b="$b" 'BEGIN {a += 0; b += 0; m = a < b ? a : b; exit !(a + b > 0 && m < 0.1 * (a + b))}'; then
      ok "2 GPUs, in place: $a and $b MB to the host from each"
    else bad "2 GPUs, in place: $a and $b MB to the host ($said reports)"; fi
  fi
done

# The defaults by size.  The reduce-scatter's (TG_GPT_SCATTER_AUTO_BYTES, 80
# MiB of f32 gradients per layer: 48 C^2 + 52 C floats, C >= 1322): one
# layer of C 1344 is reduce-scattered unless --no-grad-scatter says
# otherwise; C 1280 is not.  The weight relay's (TG_GPT_RELAY_AUTO_BYTES,
# 128 MiB of a layer's bf16 GEMM weights: 12 C^2 halves, C >= 2365): C 2432
# is relayed unless --no-weight-relay says otherwise, C 2304 and C 1344 are
# not.  (A rule that ignored a size, or a flag, fails one.)
auto=(simulate gpt --platform h100x8 --gpus 2 --ncpus 2 --layers 1 --heads 8 --vocab 256
      --max-seq 64 --seq 64 --batch 2 --micro-batches 2 --precision bf16 --warmup 1
      --steps 1 --cost peak --offload-optimizer)
for c in "1344:1:0" "1344 --no-grad-scatter:0:0" "1280:0:0" "2432:1:1" \
         "2432 --no-weight-relay:1:0" "2304:1:0"; do
  read -r -a extra <<<"${c%%:*}"
  want=${c#*:}
  if timeout 120 "$tg" "${auto[@]}" --channels "${extra[@]}" >"$work/auto.out" 2>"$work/auto.err"; then
    said=$(grep -c "gradients reduce-scattered over 2 devices" "$work/auto.out")
    said=$said:$(grep -c "^weights relayed" "$work/auto.out")
    if [ "$said" = "$want" ]; then ok "C ${extra[*]}: reduce-scattered:relayed $want"
    else bad "C ${extra[*]}: reduce-scattered:relayed $said, expected $want"; fi
  else bad "C ${extra[*]}: status $? $(tail -2 "$work/auto.err")"; fi
done

echo "simulate offload: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
