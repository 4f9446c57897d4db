#!/usr/bin/env bash
# Fused blocks (--fused-blocks, codelets/fuse.c) on 2 emulated devices (PoCL
# OpenCL devices, each a memory node of its own, 0 CPU workers): the
# micro-batches pinned to the devices, each block's forward and backward one
# task through the OpenCL adapter, whose parts map their own buffers.  In
# deterministic mode the losses and parameters equal the CPU-only unfused
# run's bit for bit, fp32 and bf16, with flash attention; --stats counts
# the fused tasks.  Packed layers (--packed-layers, on by default with
# fused blocks in deterministic mode) the same bits again, views mapped
# inside their wholes' OpenCL buffers; without deterministic mode, where
# StarPU's reductions sum the gradients, --packed-layers is refused (exit 2).
# SKIP (77) when no PoCL device can be started.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
. "$TG_SOURCE_DIR/tests/recompute_testlib.sh"
export STARPU_NCUDA=0
. "$TG_SOURCE_DIR/tests/emulated_testlib.sh"
emulated_probe
recompute_fixture

for prec in fp32 bf16; do
  common=(--attn-splits 1 --tiles 1 --precision "$prec" --attention flash)
  recompute_run "cpu-$prec" --ncpus 2 "${common[@]}" || continue
  recompute_run "dev-$prec" --ncpus 0 --emulated-devices 2 "${common[@]}" --fused-blocks \
    --no-packed-layers || continue
  same_bits "cpu-$prec" "dev-$prec" "$prec: fused on 2 emulated devices against unfused on the CPU"
  fused "cpu-$prec" "dev-$prec"
  recompute_run "pack-$prec" --ncpus 0 --emulated-devices 2 "${common[@]}" --fused-blocks &&
    same_bits "cpu-$prec" "pack-$prec" \
      "$prec: fused and packed on 2 emulated devices against neither on the CPU"
done
expect_fail "--packed-layers with StarPU's reductions" \
  "packed layers need .* deterministic mode" \
  train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --ncpus 0 --emulated-devices 2 \
  --batch 4 --seq 16 --steps 1 --packed-layers

echo "emulated fused blocks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
