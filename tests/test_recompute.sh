#!/usr/bin/env bash
# Activation recompute (--recompute, graphs/gpt.c) on CPU workers: the same
# tasks on the same inputs, so in deterministic mode the losses and the
# saved parameters after 3 steps are bitwise equal to the run without it,
# for fp32 and bf16, chunked attention in 2 tasks per micro-batch (the
# layers' shared attention buffers and their partition plans) and naive
# attention in 1; the --stats table shows the recomputed attention
# forwards.  The header says it is on.
# Automatic fit: with B 64, T 32 in one micro-batch the step needs 12 MiB of
# StarPU-managed memory without recompute and 7 with it (tg_gpt_managed_bytes
# of this model), so STARPU_LIMIT_CPU_MEM=9 turns recompute on, says so and
# gives the unlimited run's losses bit for bit; 4 is refused (exit 2, one
# message with the 7 MiB needed), and so is 9 with --no-recompute.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
. "$TG_SOURCE_DIR/tests/recompute_testlib.sh"
export STARPU_NCUDA=0 STARPU_NOPENCL=0
recompute_fixture

cases=("fp32 chunked:--precision fp32 --attention chunked --attn-splits 2"
       "bf16 chunked:--precision bf16 --attention chunked --attn-splits 2"
       "fp32 naive:--precision fp32 --attention naive --attn-splits 1")
i=0
for c in "${cases[@]}"; do
  name=${c%%:*}
  read -r -a args <<<"${c#*:}"
  i=$((i + 1))
  recompute_run "base$i" --ncpus 2 "${args[@]}" || continue
  recompute_run "rec$i" --ncpus 2 "${args[@]}" --recompute || continue
  same_bits "base$i" "rec$i" "$name, 2 CPU workers"
  recomputed "base$i" "rec$i" 3
done
if grep -q "activation recompute" "$work/rec1.err"; then
  ok "the header names it"
else
  bad "the header does not say recompute is on: $(grep 'taskgrad: GPT' "$work/rec1.err")"
fi
# one worker: another task order, the same bits
recompute_run rec1w --ncpus 1 --precision fp32 --attention chunked --attn-splits 2 --recompute &&
  same_bits base1 rec1w "fp32 chunked, 1 CPU worker against 2 without recompute"

# automatic fit
big=(--batch 64 --seq 32 --micro-batches 1 --steps 2)
recompute_run free --ncpus 2 "${big[@]}" &&
  STARPU_LIMIT_CPU_MEM=9 recompute_run limited --ncpus 2 "${big[@]}" && {
  if grep -q "activation recompute on (--recompute): .* needs 12 MiB .* 7 MiB with it" \
      "$work/limited.err"; then
    ok "STARPU_LIMIT_CPU_MEM=9: $(grep 'recompute on' "$work/limited.err")"
  else
    bad "STARPU_LIMIT_CPU_MEM=9 did not turn recompute on: $(grep taskgrad: "$work/limited.err" | head -2)"
  fi
  if cmp -s "$work/free.num" "$work/limited.num"; then ok "its losses are the unlimited run's"
  else bad "its losses differ: $(tr '\n' ' ' <"$work/limited.num") against $(tr '\n' ' ' <"$work/free.num")"; fi
}
STARPU_LIMIT_CPU_MEM=9 expect_fail "--no-recompute under a limit that needs it" \
  "below the 12 MiB .* \\(with --no-recompute\\)" \
  train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --ncpus 2 "${big[@]}" --no-recompute
STARPU_LIMIT_CPU_MEM=4 expect_fail "a limit too small even with recompute" \
  "STARPU_LIMIT_CPU_MEM=4 MiB is below the 7 MiB .* even with activation recompute" \
  train gpt --init-from "$work/r.bin" --data "$work/tokens.bin" --ncpus 2 "${big[@]}"

echo "recompute: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
