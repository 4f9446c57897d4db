#!/usr/bin/env bash
# Sharded data parallelism (graphs/shard.h) on emulated devices (PoCL OpenCL
# devices, each a memory node of its own, no CPU workers):
#  - --deterministic: the losses and the saved parameters of 2, 3 and 4
#    devices (fp32) and of 2 devices (bf16) are bitwise those of the
#    CPU-only run, which sums the same micro-batches in the same midpoint
#    tree; the kernels are the CPU ones on mapped device buffers, so equality
#    does not depend on BLAS;
#  - without it, 2 and 3 devices agree with the CPU-only run within 1e-6
#    relative (the devices' sums are added in another order);
#  - a sharded run's checkpoint resumes on another device count (3 devices,
#    then 2, then the CPU alone) and ends bitwise where one run ends: the
#    checkpoint holds the whole model, whatever the sharding;
#  - bytes moved per step (--stats, the difference between runs of 5 and 3
#    steps) within 10% of docs/distributed.md's formula for devices without
#    a peer link, on 2, 3 and 4 devices;
#  - under mpirun, 2 and 4 ranks of 2 devices give the CPU run's bits
#    (--deterministic), 3 ranks of 2 devices agree within 1e-6, and
#    --grad-comm bf16 halves the bytes between the ranks;
#  - --data-parallel shard without 2 devices, or with fewer micro-batches
#    than devices, and an unknown mode exit 2 with one message.
# SKIP (77) when no PoCL device can be started.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
export STARPU_NCUDA=0
. "$TG_SOURCE_DIR/tests/emulated_testlib.sh"
emulated_probe
gpt_fixture

args=(train gpt --init-from "$work/g.bin" --data "$work/tokens.bin" --batch 6 --seq 16
      --micro-batches 6 --lr 1e-3)
# run TAG DEVICES ARGS...: DEVICES 0 is the CPU alone; losses in TAG.num
run() {
  local tag=$1 dev=$2
  shift 2
  local -a where=()
  [ "$dev" -gt 0 ] && where=(--emulated-devices "$dev" --ncpus 0)
  timeout 180 "$tg" "${args[@]}" "${where[@]}" "$@" >"$work/$tag.out" 2>"$work/$tag.err"
  local rc=$?
  [ $rc -eq 0 ] || { bad "$tag: exit status $rc ($(grep 'taskgrad: ' "$work/$tag.err" | head -3))"; return 1; }
  losses "$work/$tag.out" >"$work/$tag.num"
  [ -s "$work/$tag.num" ] || { bad "$tag: no losses"; return 1; }
}
same() { # same A B: bitwise losses and parameters
  if cmp -s "$work/$1.num" "$work/$2.num" && cmp -s "$work/$1.par" "$work/$2.par"; then
    ok "$2: losses and parameters bitwise those of $1"
  else
    bad "$2 differs from $1: $(paste "$work/$1.num" "$work/$2.num" | head -3 | tr '\n' ' ')"
  fi
}

# near A B TOL: parameters (and losses, when both runs printed them) of run
# B within TOL relative of those of run A
near() {
  "$py" - "$work/$1" "$work/$2" "$3" <<'PY' && ok "$2: within $3 of $1" || bad "$2: not within $3 of $1"
import os, sys
import numpy as np
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
pa = np.fromfile(a + '.par', dtype='<f4')[256:].astype(np.float64)
pb = np.fromfile(b + '.par', dtype='<f4')[256:].astype(np.float64)
rel = np.linalg.norm(pa - pb) / np.linalg.norm(pa)
lrel = 0.0
if os.path.getsize(a + '.num') and os.path.getsize(b + '.num'):
    la, lb = np.loadtxt(a + '.num', ndmin=2)[:, 1], np.loadtxt(b + '.num', ndmin=2)[:, 1]
    lrel = np.abs(la - lb).max() / np.abs(la).max()
print(f"parameters {rel:.2g}, losses {lrel:.2g} relative")
sys.exit(0 if rel <= tol and lrel <= tol else 1)
PY
}

for prec in fp32 bf16; do
  run "cpu-$prec" 0 --steps 3 --deterministic --precision $prec --save "$work/cpu-$prec.par" || continue
  devs="2 3 4"
  [ $prec = bf16 ] && devs=2
  for n in $devs; do
    run "e$n-$prec" $n --steps 3 --deterministic --precision $prec --data-parallel shard \
      --save "$work/e$n-$prec.par" && same "cpu-$prec" "e$n-$prec"
  done
done

run cpu-free 0 --steps 3 --save "$work/cpu-free.par"
for n in 2 3; do
  run "e$n-free" $n --steps 3 --save "$work/e$n-free.par" || continue
  grep -q "sharded over $n devices" "$work/e$n-free.err" \
    && ok "e$n-free: sharding is the default on $n devices" \
    || bad "e$n-free: no 'sharded over $n devices' line: $(grep 'taskgrad: GPT' "$work/e$n-free.err")"
  near cpu-free "e$n-free" 1e-6
done

# resume across device counts: 6 steps in one run = 2 on 3 devices + 2 on 2
# devices + 2 on the CPU, through checkpoints
ck="$work/ck"
run whole 0 --steps 6 --deterministic --save "$work/whole.par" &&
run part1 3 --steps 2 --deterministic --checkpoint "$ck" &&
run part2 2 --steps 4 --deterministic --resume "$ck" --checkpoint "$ck" &&
run part3 0 --steps 6 --deterministic --resume "$ck" --save "$work/part3.par" && {
  cat "$work/part1.num" "$work/part2.num" "$work/part3.num" >"$work/parts.num"
  if cmp -s "$work/whole.num" "$work/parts.num" && cmp -s "$work/whole.par" "$work/part3.par"; then
    ok "3 devices -> 2 devices -> CPU through checkpoints: bitwise one run"
  else
    bad "resumed runs differ: $(paste "$work/whole.num" "$work/parts.num" | tr '\n' ' ')"
  fi
}

# bytes per step against the formula (docs/distributed.md, devices without a
# peer link: a block crosses device -> host -> device)
stats_bytes() { awk '/ -> / && / bytes / {for (i = 1; i <= NF; i++) if ($i == "bytes") s += $(i-1)} END {print s+0}' "$1"; }
for n in 2 3 4; do
  run "b$n-3" $n --steps 3 --stats && run "b$n-5" $n --steps 5 --stats || continue
  measured=$(( ($(stats_bytes "$work/b$n-5.err") - $(stats_bytes "$work/b$n-3.err")) / 2 ))
  "$py" - "$work/g.bin" "$n" "$measured" <<'PY' && ok "$n devices: bytes per step within 10% of the formula" || bad "$n devices: bytes per step off the formula"
import struct, sys
path, n, measured = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
h = struct.unpack('<256i', open(path, 'rb').read(1024))
T, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
gemm = Vp * C + L * (3 * C * C + C * C + 4 * C * C + 4 * C * C)  # wte, qkvw, attprojw, fcw, fcprojw
emb = T * C                                                        # wpe (f32 readers only)
small = 2 * C + L * (2 * C + 3 * C + C + 2 * C + 4 * C + C)        # lnf; ln1, qkvb, attprojb, ln2, fcb, fcprojb
P = gemm + emb + small
# reduce-scatter: each slot's blocks (or whole small tensors) not on their
# owner cross device -> host -> device; all-gather: each updated block goes
# to the host once and to the N - 1 other devices (f32 here)
formula = 2 * (n - 1) * 4 * P + n * 4 * P
rel = abs(measured - formula) / formula
print(f"{n} devices: measured {measured} bytes per step, formula {formula}, {100 * rel:.1f}% off")
sys.exit(0 if rel <= 0.10 else 1)
PY
done

# hierarchical: ranks of 2 devices each (reduce-scatter on the devices, each
# block's sum over the ranks in segments, all-gather); skipped without mpirun
# or StarPU-MPI
if command -v mpirun >/dev/null && "$tg" --version | grep -q "StarPU-MPI: yes"; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export STARPU_WORKERS_NOBIND=1
  mpirun_run() { # TAG RANKS ARGS...
    local tag=$1 n=$2
    shift 2
    timeout 300 mpirun -np "$n" --bind-to none "$tg" "${args[@]}" --emulated-devices 2 --ncpus 0 \
      "$@" >"$work/$tag.out" 2>"$work/$tag.err" ||
      { bad "$tag: exit status $? ($(grep 'taskgrad: ' "$work/$tag.err" | head -2))"; return 1; }
    losses "$work/$tag.out" >"$work/$tag.num"
  }
  mpirun_run r2 2 --steps 3 --deterministic --precision fp32 --save "$work/r2.par" &&
    same cpu-fp32 r2
  # 4 ranks: two levels of recursive halving and doubling over pieces of
  # each block (parallel/halving.c), the same pairs as the CPU's tree
  if run cpu-b8 0 --steps 2 --deterministic --precision fp32 --batch 8 --micro-batches 8 \
      --save "$work/cpu-b8.par" &&
    mpirun_run r4 4 --steps 2 --deterministic --precision fp32 --batch 8 --micro-batches 8 \
      --save "$work/r4.par"; then
    same cpu-b8 r4
  fi
  # 3 ranks (not a power of two), 2 micro-batches each: not the CPU run's
  # tree, so within 1e-6 of it
  if mpirun_run r3 3 --steps 3 --save "$work/r3.par"; then
    near cpu-free r3 1e-6
  fi
  # --grad-comm bf16: half the bytes from rank 1 to rank 0 (StarPU-MPI's
  # own count; the loss, 4 bytes a step, stays f32), parameters within bf16
  # rounding of the CPU run
  for gc in f32 bf16; do
    STARPU_COMM_STATS=1 mpirun_run "gc-$gc" 2 --steps 3 --grad-comm $gc --save "$work/gc-$gc.par" || continue
    sed -n 's/.*comm_stats\]\[1:0\][[:space:]]*\([0-9.]*\) B.*/\1/p' "$work/gc-$gc.out" "$work/gc-$gc.err" \
      | head -1 >"$work/gc-$gc.bytes"
  done
  if [ -s "$work/gc-f32.bytes" ] && [ -s "$work/gc-bf16.bytes" ]; then
    awk -v a="$(cat "$work/gc-f32.bytes")" -v b="$(cat "$work/gc-bf16.bytes")" \
      'BEGIN { exit !(a > 0 && b >= a / 2 && b <= a / 2 * 1.001) }' \
      && ok "--grad-comm bf16: rank 1 sent $(cat "$work/gc-bf16.bytes") bytes, half of f32's" \
      || bad "--grad-comm bf16: $(cat "$work/gc-bf16.bytes") bytes against f32's $(cat "$work/gc-f32.bytes")"
    near cpu-free gc-bf16 2e-3
  else
    bad "--grad-comm: no StarPU-MPI byte count printed"
  fi
else
  echo "skip the MPI part: no mpirun or no StarPU-MPI in this build"
fi
expect_fail "--grad-comm bf16 without sharding" "need the sharded" \
  "${args[@]}" --steps 1 --grad-comm bf16
expect_fail "--grad-comm f16" "not f32 or bf16" "${args[@]}" --steps 1 --grad-comm f16

expect_fail "shard on the CPU alone" "at least 2 devices" \
  "${args[@]}" --steps 1 --data-parallel shard
expect_fail "shard with fewer micro-batches than devices" "one micro-batch per device" \
  "${args[@]}" --steps 1 --micro-batches 2 --emulated-devices 3 --ncpus 0 --data-parallel shard
expect_fail "unknown mode" "not shard, redux or auto" "${args[@]}" --steps 1 --data-parallel zero

echo "passed $pass, failed $fail"
[ "$fail" -eq 0 ]
