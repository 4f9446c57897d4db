#!/usr/bin/env bash
# `taskgrad train gpt --checkpoint / --resume`: with one CPU worker and one
# micro-batch (or with --deterministic, whatever the workers) a run is
# deterministic, so
#  - 20 steps in one run and 10 steps + a resumed run to step 20 print the
#    same 20 losses (textually) and save bitwise identical models, with
#    sequential and with shuffled data, and with packed layers (the
#    parameters and AdamW moments views of a pack per layer, checkpointed
#    through it);
#  - a requeued job runs one command line (--init-from, --resume DIR and
#    --checkpoint DIR together): the first run starts from --init-from, is
#    killed (SIGKILL, as a scheduler's preemption), and the same command
#    resumes from the last periodic checkpoint and ends bitwise equal to an
#    uninterrupted run;
#  - a corrupted checkpoint, --resume with neither a checkpoint nor
#    --init-from, a checkpoint of another model than --init-from's, and an
#    unusable --checkpoint directory are refused with exit status 2 and one
#    message;
#  - SIGTERM (SIGINT) during a run finishes the step, writes a checkpoint and
#    exits with 143 (130); the run resumed from it continues with the losses
#    an uninterrupted run has;
#  - a non-finite loss (--lr 10 --weight-decay 10 makes the weights grow
#    about 99x per step) stops with exit status 2 and leaves the previous
#    checkpoint byte for byte as it was.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
export STARPU_NCPU=1 STARPU_NCUDA=0

"$tg" init gpt --layers 2 --channels 32 --heads 4 --max-seq 32 --vocab 64 --seed 3 \
  --out "$work/m.bin" >/dev/null || { echo "FAIL init gpt"; exit 1; }
token_file "$work/train.bin" 6000 7 13 61 || { echo "FAIL token file"; exit 1; }
common=(--data "$work/train.bin" --batch 4 --seq 16 --micro-batches 1 --lr 3e-3)


# "packed": the layers' parameters, moments and activations packed (fused
# blocks, --packed-layers: tensor views, whose checkpoints are read and
# written through their packs), resumed into a packed run
for order in sequential shuffled packed; do
  d="$work/$order" name=$order
  mkdir -p "$d"
  extra=()
  [ $order = packed ] && extra=(--fused-blocks --packed-layers --attn-splits 1 --tiles 1) &&
    order=shuffled
  if "$tg" train gpt --init-from "$work/m.bin" "${common[@]}" "${extra[@]}" --data-order $order --steps 20 \
       --save "$d/full.bin" >"$d/full.out" 2>"$d/full.err" &&
     "$tg" train gpt --init-from "$work/m.bin" "${common[@]}" "${extra[@]}" --data-order $order --steps 10 \
       --checkpoint "$d/ck" --checkpoint-every 4 >"$d/a.out" 2>"$d/a.err" &&
     "$tg" train gpt --resume "$d/ck" "${common[@]}" "${extra[@]}" --data-order $order --steps 20 \
       --checkpoint "$d/ck" --save "$d/resumed.bin" >"$d/b.out" 2>"$d/b.err"; then
    losses "$d/full.out" >"$d/l1"
    losses "$d/a.out" "$d/b.out" >"$d/l2"
    if [ "$(wc -l <"$d/l1")" -eq 20 ] && cmp -s "$d/l1" "$d/l2"; then
      ok "$name: 20 losses of one run = 10 + 10 resumed"
    else
      bad "$name: losses differ: $(diff "$d/l1" "$d/l2" | head -4 | tr '\n' ' ')"
    fi
    cmp -s "$d/full.bin" "$d/resumed.bin" && ok "$name: final parameters bitwise identical" \
      || bad "$name: final parameters differ"
    grep -q 'resuming .* at step 10 (batch 10)' "$d/b.err" && ok "$name: resumed at step 10" \
      || bad "$name: resume message: $(cat "$d/b.err")"
  else
    bad "$name: a run failed: $(tail -2 "$d"/*.err | tr '\n' ' ')"
  fi
done

# --deterministic (fixed-order gradient sums): the same holds with 2 workers
# and 4 micro-batches, even when the first half and the resumed half run
# under different schedulers
d="$work/det"
mkdir -p "$d"
det=(--data "$work/train.bin" --batch 8 --seq 16 --micro-batches 4 --lr 3e-3 --ncpus 2
     --deterministic --data-order shuffled)
if "$tg" train gpt --init-from "$work/m.bin" "${det[@]}" --sched dmdas --steps 20 \
     --save "$d/full.bin" >"$d/full.out" 2>"$d/full.err" &&
   "$tg" train gpt --init-from "$work/m.bin" "${det[@]}" --sched lws --steps 10 \
     --checkpoint "$d/ck" >"$d/a.out" 2>"$d/a.err" &&
   "$tg" train gpt --resume "$d/ck" "${det[@]}" --sched eager --steps 20 \
     --save "$d/resumed.bin" >"$d/b.out" 2>"$d/b.err"; then
  losses "$d/full.out" >"$d/l1"
  losses "$d/a.out" "$d/b.out" >"$d/l2"
  if [ "$(wc -l <"$d/l1")" -eq 20 ] && cmp -s "$d/l1" "$d/l2" && cmp -s "$d/full.bin" "$d/resumed.bin"; then
    ok "deterministic, 2 workers, 4 micro-batches: 20 losses ($(tail -1 "$d/l1")) and parameters of one run = 10 + 10 resumed"
  else
    bad "deterministic resume differs: $(diff "$d/l1" "$d/l2" | head -4 | tr '\n' ' ')"
  fi
else
  bad "deterministic: a run failed: $(tail -2 "$d"/*.err | tr '\n' ' ')"
fi

# fp16 with dynamic loss scaling: overflows skip steps (a small window
# makes the scale climb back and overflow again); the resumed half continues
# with the interrupted run's scale, skipped count and AdamW step
d="$work/fp16"
mkdir -p "$d"
amp=("${det[@]}" --precision fp16 --loss-scale 1e8 --loss-scale-window 3)
scales() { sed -nE 's/^step ([0-9]+) loss ([^ ]+) .* scale ([^ ]+) skipped ([0-9]+)$/\1 \2 \3 \4/p' "$@"; }
if "$tg" train gpt --init-from "$work/m.bin" "${amp[@]}" --steps 20 --save "$d/full.bin" \
     >"$d/full.out" 2>"$d/full.err" &&
   "$tg" train gpt --init-from "$work/m.bin" "${amp[@]}" --steps 10 --checkpoint "$d/ck" \
     >"$d/a.out" 2>"$d/a.err" &&
   "$tg" train gpt --resume "$d/ck" "${amp[@]}" --steps 20 --save "$d/resumed.bin" \
     >"$d/b.out" 2>"$d/b.err"; then
  scales "$d/full.out" >"$d/l1"
  scales "$d/a.out" "$d/b.out" >"$d/l2"
  k=$(awk 'END {print $4}' "$d/l1")
  if [ "$(wc -l <"$d/l1")" -eq 20 ] && [ "${k:-0}" -ge 1 ] && cmp -s "$d/l1" "$d/l2" &&
     cmp -s "$d/full.bin" "$d/resumed.bin"; then
    ok "fp16, loss scaling, deterministic: 20 losses, scales and skip counts ($k skipped) and parameters of one run = 10 + 10 resumed"
  else
    bad "fp16 resume differs: $(diff "$d/l1" "$d/l2" | head -4 | tr '\n' ' ') (skipped: ${k:-none})"
  fi
else
  bad "fp16: a run failed: $(tail -2 "$d"/*.err | tr '\n' ' ')"
fi

# refusals
cp -r "$work/sequential/ck" "$work/corrupt"
flip_bit "$work/corrupt/checkpoint.bin" $(($(stat -c %s "$work/corrupt/checkpoint.bin") / 2)) 4
expect_fail "corrupted checkpoint" "checkpoint.bin.*CRC mismatch" train gpt \
  --resume "$work/corrupt" "${common[@]}" --steps 20
head -c 1000 "$work/sequential/ck/checkpoint.bin" >"$work/corrupt/checkpoint.bin"
expect_fail "truncated checkpoint" "checkpoint.bin.*truncated" train gpt \
  --resume "$work/corrupt" "${common[@]}" --steps 20
expect_fail "--resume: no checkpoint, no --init-from" "nowhere: no checkpoint there yet; give --init-from" \
  train gpt --resume "$work/nowhere" "${common[@]}" --steps 20
"$tg" init gpt --layers 1 --channels 32 --heads 4 --max-seq 32 --vocab 64 --seed 3 \
  --out "$work/other.bin" >/dev/null
expect_fail "--resume: checkpoint of another model" "other.bin \\(L=1 .* is not the model of the checkpoint" \
  train gpt --init-from "$work/other.bin" --resume "$work/sequential/ck" "${common[@]}" --steps 20

# requeue: the same command line, killed and run again (400 short steps, so
# that the kill, once the first periodic checkpoint exists, lands mid-run)
d="$work/requeue"
"$tg" train gpt --init-from "$work/m.bin" "${common[@]}" --steps 400 --save "$work/full400.bin" \
  >"$work/full400.out" 2>/dev/null
req=(train gpt --init-from "$work/m.bin" --resume "$d" --checkpoint "$d" --checkpoint-every 3
     "${common[@]}" --steps 400 --save "$work/requeue-final.bin")
kill_when "$d/checkpoint.bin" "$work/q1.out" "$work/q1.err" "${req[@]}" # first checkpoint: step 3
qrc=$?
if "$tg" "${req[@]}" >"$work/q2.out" 2>"$work/q2.err"; then
  from=$(sed -nE 's/.*resuming .* at step ([0-9]+) .*/\1/p' "$work/q2.err")
  if [ "$qrc" -ne 137 ]; then
    bad "requeue: the first run was not killed (exit status $qrc)"
  elif ! grep -q "no checkpoint in $d yet: starting from $work/m.bin" "$work/q1.err"; then
    bad "requeue: first run: $(head -3 "$work/q1.err")"
  elif [ -z "$from" ] || [ $((from % 3)) -ne 0 ]; then
    bad "requeue: second run did not resume from a periodic checkpoint: $(head -3 "$work/q2.err")"
  elif [ "$(losses "$work/q2.out")" != "$(losses "$work/full400.out" | tail -n $((400 - from)))" ]; then
    bad "requeue: losses after step $from differ from the uninterrupted run's"
  elif ! cmp -s "$work/requeue-final.bin" "$work/full400.bin"; then
    bad "requeue: final parameters differ from the uninterrupted run's"
  else
    ok "requeue: killed mid-run, the same command resumed at step $from; losses and parameters equal the uninterrupted run's"
  fi
else
  bad "requeue: second run failed: $(tail -2 "$work/q2.err")"
fi
expect_fail "--resume with another data order" "--data-order shuffled disagrees" train gpt \
  --resume "$work/sequential/ck" "${common[@]}" --data-order shuffled --steps 20
touch "$work/afile"
expect_fail "unusable --checkpoint directory" "--checkpoint: cannot create" train gpt \
  --init-from "$work/m.bin" "${common[@]}" --steps 2 --checkpoint "$work/afile/sub"
expect_fail "--checkpoint-every without --checkpoint" "--checkpoint-every needs" train gpt \
  --init-from "$work/m.bin" "${common[@]}" --checkpoint-every 2

# a signal during a long run: exit 128 + signal, a checkpoint that resumes
signal_run() {
  local sig=$1 want=$2 d="$work/sig$1"
  "$tg" train gpt --init-from "$work/m.bin" "${common[@]}" --steps 1000000 \
    --checkpoint "$d" >"$work/sig.out" 2>"$work/sig.err" &
  local pid=$! i
  for i in $(seq 1 200); do  # up to 20 s for the first step
    grep -q '^step 1 loss' "$work/sig.out" 2>/dev/null && break
    sleep 0.1
  done
  sleep 0.3
  kill -"$sig" "$pid"
  wait "$pid"
  local rc=$?
  local n
  n=$(sed -nE "s/.*SIG$sig: stopped after step ([0-9]+); checkpoint written.*/\1/p" "$work/sig.err")
  if [ "$rc" -ne "$want" ] || [ -z "$n" ]; then
    bad "SIG$sig: exit status $rc (expected $want), message: $(tail -2 "$work/sig.err")"
    return
  fi
  ok "SIG$sig: exit status $rc after step $n"
  local last
  last=$(losses "$work/sig.out" | tail -1)
  [ "${last%% *}" = "$n" ] \
    && ok "SIG$sig: the step in progress finished (last printed step $n)" \
    || bad "SIG$sig: last printed step '$last', stopped after $n"
  # resume for 2 more steps; an uninterrupted run to the same step agrees
  if "$tg" train gpt --resume "$d" "${common[@]}" --steps $((n + 2)) >"$work/r.out" 2>"$work/r.err" &&
     "$tg" train gpt --init-from "$work/m.bin" "${common[@]}" --steps $((n + 2)) \
       >"$work/u.out" 2>"$work/u.err"; then
    if [ "$(losses "$work/r.out")" = "$(losses "$work/u.out" | tail -2)" ] &&
       [ "$(losses "$work/r.out" | wc -l)" -eq 2 ]; then
      ok "SIG$sig: resumed run continues with the uninterrupted losses"
    else
      bad "SIG$sig: resumed losses '$(losses "$work/r.out" | tr '\n' ' ')' vs" \
          "'$(losses "$work/u.out" | tail -2 | tr '\n' ' ')'"
    fi
  else
    bad "SIG$sig: resume failed: $(tail -2 "$work/r.err" "$work/u.err")"
  fi
}
signal_run TERM 143
signal_run INT 130

# non-finite loss: the checkpoint of the last good step stays untouched
nan=(--init-from "$work/m.bin" "${common[@]}" --lr 10 --weight-decay 10)
"$tg" train gpt "${nan[@]}" --steps 30 >"$work/nan0.out" 2>"$work/nan0.err"
nrc=$?
bad_step=$(sed -nE 's/.*loss is not finite at step ([0-9]+).*/\1/p' "$work/nan0.err")
if [ "$nrc" -ne 2 ] || [ -z "$bad_step" ] || [ "$bad_step" -lt 2 ]; then
  echo "SKIP non-finite loss: --lr 10 --weight-decay 10 gave exit $nrc, no non-finite loss" \
       "after a good step ($(tail -1 "$work/nan0.err"))"
else
  good=$((bad_step - 1))
  "$tg" train gpt "${nan[@]}" --steps $good --checkpoint "$work/nanck" >/dev/null 2>&1
  cp "$work/nanck/checkpoint.bin" "$work/nan_before.bin"
  "$tg" train gpt --resume "$work/nanck" "${common[@]}" --lr 10 --weight-decay 10 --steps 30 \
    --checkpoint "$work/nanck" --checkpoint-every 1 >"$work/nan.out" 2>"$work/nan.err"
  rc=$?
  if [ $rc -eq 2 ] && grep -q "not finite at step $bad_step" "$work/nan.err"; then
    ok "non-finite loss at step $bad_step: exit status 2"
  else
    bad "non-finite loss: exit status $rc, $(tail -1 "$work/nan.err")"
  fi
  cmp -s "$work/nanck/checkpoint.bin" "$work/nan_before.bin" \
    && ok "checkpoint of step $good untouched by the non-finite step" \
    || bad "the checkpoint changed after a non-finite loss"
  ls "$work/nanck" | grep -q tmp && bad "temporary file left in the checkpoint directory" \
    || ok "no temporary file left"
fi
finish test_resume
