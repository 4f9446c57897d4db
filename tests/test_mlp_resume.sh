#!/usr/bin/env bash
# `taskgrad train mlp --checkpoint / --resume` on a small synthetic data set
# (200 training samples, --batch 32: 7 batches per epoch, the last one of 8,
# reshuffled every epoch), so that 20 steps cross two epoch boundaries and
# step 10 is in the middle of epoch 2.  With one CPU worker (or with
# --deterministic, whatever the workers) a run is deterministic, so
#  - 20 steps in one run and 10 steps + a resumed run to step 20 print the
#    same epoch figures (train loss to 9 digits, accuracies, test loss) and
#    save bitwise identical parameters, for AdamW and SGD, 1 worker and 2
#    deterministic workers with 4 micro-batches (the halves under different
#    schedulers), fp16 with dynamic loss scaling (overflows skip steps: the
#    scale and skip count go on), and --tiles 2; with 2 MPI ranks too when
#    built with StarPU-MPI (that part alone is skipped otherwise);
#  - a requeued job runs one command line (--resume DIR --checkpoint DIR):
#    the first run starts from --seed, is killed (SIGKILL), and the same
#    command resumes from the last periodic checkpoint and ends bitwise
#    equal to an uninterrupted run;
#  - corrupted and truncated checkpoints and flags that disagree with the
#    checkpoint (widths, optimizer, precision, tiles, batch, seed, data set)
#    are refused with exit status 2 and one message naming the difference;
#  - SIGTERM and SIGINT finish the step, write a checkpoint and exit with
#    143 / 130; the run resumed from it ends bitwise equal to an
#    uninterrupted one;
#  - a non-finite loss stops with exit status 2 and leaves the previous
#    checkpoint byte for byte as it was.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
export STARPU_NCPU=1 STARPU_NCUDA=0 STARPU_NOPENCL=0
"$py" "$TG_SOURCE_DIR/tests/make_idx.py" "$work/data" 200 50 >/dev/null ||
  { echo "FAIL make_idx.py"; exit 1; }
base=(--data-dir "$work/data" --batch 32 --hidden 32,16 --epochs 1000)
ck="$work/ck/mlp-checkpoint.bin"

# the epoch figures without the timing: "epoch N/M: train loss .. acc .."
figures() { sed -nE 's/^(epoch [0-9]+\/[0-9]+: .*acc [0-9.]+) \| [0-9.]+ s,.*/\1/p' "$@"; }

# resume_case NAME FLAGS...: 20 steps vs 10 + 10 resumed
resume_case() {
  local name=$1 d="$work/$1"
  shift
  mkdir -p "$d"
  if ! "$tg" train mlp "${base[@]}" "$@" --steps 20 --save "$d/full.st" \
         >"$d/full.out" 2>"$d/full.err" ||
     ! "$tg" train mlp "${base[@]}" "$@" --steps 10 --checkpoint "$d/ck" --checkpoint-every 4 \
         >"$d/a.out" 2>"$d/a.err" ||
     ! "$tg" train mlp "${base[@]}" "$@" --steps 20 --resume "$d/ck" --save "$d/resumed.st" \
         >"$d/b.out" 2>"$d/b.err"; then
    bad "$name: a run failed: $(tail -qn 1 "$d"/*.err | tr '\n' ' ')"
    return
  fi
  figures "$d/full.err" >"$d/f1"
  # the first half's complete epoch (1), then the resumed run's epochs 2, 3
  { figures "$d/a.err" | head -n 1; figures "$d/b.err"; } >"$d/f2"
  if [ "$(wc -l <"$d/f1")" -ne 3 ] || ! cmp -s "$d/f1" "$d/f2"; then
    bad "$name: epoch figures differ: $(diff "$d/f1" "$d/f2" | head -4 | tr '\n' ' ')"
  elif ! cmp -s "$d/full.st" "$d/resumed.st"; then
    bad "$name: the saved parameters differ"
  elif ! grep -q "resuming $d/ck at step 10 (epoch 2, batch 3)" "$d/b.err"; then
    bad "$name: resume message: $(grep taskgrad: "$d/b.err" | head -3)"
  elif ! cmp -s "$d/full.out" "$d/b.out"; then
    bad "$name: test accuracy: $(cat "$d/full.out") vs $(cat "$d/b.out")"
  else
    ok "$name: 20 steps = 10 + 10 resumed ($(tail -1 "$d/f1" | cut -c1-40)...), parameters bitwise"
  fi
}

resume_case adamw --micro-batches 1
resume_case sgd --micro-batches 1 --optimizer sgd
det=(--deterministic --ncpus 2 --micro-batches 4)
resume_case det-adamw "${det[@]}"
resume_case det-tiles-sgd "${det[@]}" --tiles 2 --optimizer sgd
# an initial scale of 1e7 overflows fp16 now and then (5 of the 20 steps
# skipped), and a window of 3 makes it climb back
resume_case det-fp16 "${det[@]}" --precision fp16 --loss-scale 1e7 --loss-scale-window 3
d="$work/det-fp16"
if [ -f "$d/full.err" ]; then
  s1=$(grep -o 'loss scale .*' "$d/full.err")
  s2=$(grep -o 'loss scale .*' "$d/b.err")
  k=$(echo "$s1" | sed -nE 's/.*skipped steps: ([0-9]+)/\1/p')
  [ -n "$s1" ] && [ "$s1" = "$s2" ] && [ "${k:-0}" -ge 1 ] && [ "${k:-0}" -lt 19 ] &&
    ok "fp16: the resumed run ends with the same $s1" ||
    bad "fp16: scaler '$s1' vs '$s2' (some skipped and some applied steps expected)"
fi
# the fresh-start scheduler must not matter in deterministic mode either
d="$work/det-sched"
mkdir -p "$d"
"$tg" train mlp "${base[@]}" "${det[@]}" --sched lws --steps 10 --checkpoint "$d/ck" \
  >/dev/null 2>&1 &&
  "$tg" train mlp "${base[@]}" "${det[@]}" --sched eager --steps 20 --resume "$d/ck" \
    --save "$d/resumed.st" >/dev/null 2>"$d/b.err" &&
  cmp -s "$d/resumed.st" "$work/det-adamw/full.st" &&
  ok "deterministic: halves under lws and eager end as one run under the default" ||
  bad "deterministic: halves under other schedulers differ: $(tail -1 "$d/b.err")"

# 2 MPI ranks (rank 0 writes, every rank reads the checkpoint), when built
# with StarPU-MPI: the same 20 = 10 + 10
if command -v mpirun >/dev/null && "$tg" --version | grep -q "StarPU-MPI: yes"; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STARPU_WORKERS_NOBIND=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  d="$work/mpi"
  mkdir -p "$d"
  mpi=(timeout 300 mpirun -np 2 --bind-to none "$tg" train mlp "${base[@]}" --deterministic
       --micro-batches 2)
  if "${mpi[@]}" --steps 20 --save "$d/full.st" >/dev/null 2>"$d/full.err" &&
     "${mpi[@]}" --steps 10 --checkpoint "$d/ck" >/dev/null 2>"$d/a.err" &&
     "${mpi[@]}" --steps 20 --resume "$d/ck" --save "$d/resumed.st" >/dev/null 2>"$d/b.err" &&
     cmp -s "$d/full.st" "$d/resumed.st"; then
    ok "2 MPI ranks: 20 steps = 10 + 10 resumed, parameters bitwise"
  else
    bad "2 MPI ranks: resume differs or failed: $(tail -qn 1 "$d"/*.err | tr '\n' ' ')"
  fi
else
  echo "skip 2 MPI ranks: no mpirun or no StarPU-MPI"
fi

# refusals, against the 1-worker AdamW checkpoint of step 10
src="$work/adamw/ck"
refuse() {
  local what=$1 pattern=$2
  shift 2
  expect_fail "$what" "$pattern" train mlp "${base[@]}" --micro-batches 1 --steps 20 "$@"
}
refuse "other widths" "layer widths 784,64,16,10 .* checkpoint's 784,32,16,10" \
  --resume "$src" --hidden 64,16
refuse "other optimizer" "--optimizer sgd differs from the checkpoint's adamw" \
  --resume "$src" --optimizer sgd
refuse "other precision" "--precision bf16 differs from the checkpoint's fp32" \
  --resume "$src" --precision bf16
refuse "other tiles" "--tiles 2 differs from the checkpoint's 1" --resume "$src" --tiles 2
refuse "other batch" "--batch 16 differs from the checkpoint's 32" --resume "$src" --batch 16
refuse "other seed" "--seed 7 differs from the checkpoint's 1" --resume "$src" --seed 7
"$py" "$TG_SOURCE_DIR/tests/make_idx.py" "$work/data300" 300 50 >/dev/null
expect_fail "other data set" "training samples \\(--data-dir\\) 300 differs from the checkpoint's 200" \
  train mlp "${base[@]}" --micro-batches 1 --steps 20 --resume "$src" --data-dir "$work/data300"
refuse "checkpoint past --steps" "checkpoint is at step 10, past this run's 5" --resume "$src" \
  --steps 5
mkdir -p "$work/corrupt"
"$py" - "$src/mlp-checkpoint.bin" "$work/corrupt/mlp-checkpoint.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0x04
open(sys.argv[2], "wb").write(b)
PY
refuse "corrupted checkpoint" "mlp-checkpoint.bin: layer 0 weight .*CRC mismatch" \
  --resume "$work/corrupt"
head -c 3000 "$src/mlp-checkpoint.bin" >"$work/corrupt/mlp-checkpoint.bin"
refuse "truncated checkpoint" "mlp-checkpoint.bin: .*truncated" --resume "$work/corrupt"
printf 'TGCK' >"$work/corrupt/mlp-checkpoint.bin"
refuse "not an MLP checkpoint" "bad magic .*not a taskgrad MLP checkpoint" --resume "$work/corrupt"
touch "$work/afile"
refuse "unusable --checkpoint directory" "--checkpoint: cannot create" \
  --checkpoint "$work/afile/sub"
refuse "--checkpoint-every without --checkpoint" "--checkpoint-every needs" --checkpoint-every 2

# requeue: one command line, killed once a periodic checkpoint exists
d="$work/requeue"
req=(train mlp "${base[@]}" --micro-batches 1 --steps 1000 --resume "$d" --checkpoint "$d"
     --checkpoint-every 3)
"$tg" train mlp "${base[@]}" --micro-batches 1 --steps 1000 --save "$work/full1000.st" \
  >/dev/null 2>&1
kill_when "$d/mlp-checkpoint.bin" /dev/null "$work/q1.err" "${req[@]}" --save "$work/requeue.st"
qrc=$?
if "$tg" "${req[@]}" --save "$work/requeue.st" >/dev/null 2>"$work/q2.err"; then
  from=$(sed -nE 's/.*resuming .* at step ([0-9]+) .*/\1/p' "$work/q2.err")
  if [ "$qrc" -ne 137 ]; then
    bad "requeue: the first run was not killed mid-run (exit status $qrc)"
  elif ! grep -q "no checkpoint in $d yet: starting from --seed 1" "$work/q1.err"; then
    bad "requeue: first run: $(head -2 "$work/q1.err")"
  elif [ -z "$from" ] || [ $((from % 3)) -ne 0 ]; then
    bad "requeue: no resume from a periodic checkpoint: $(head -3 "$work/q2.err")"
  elif ! cmp -s "$work/requeue.st" "$work/full1000.st"; then
    bad "requeue: final parameters differ from the uninterrupted run's"
  else
    ok "requeue: killed, the same command resumed at step $from and ended bitwise equal"
  fi
else
  bad "requeue: second run failed: $(tail -1 "$work/q2.err")"
fi

# a signal during a long run: the step finishes, a checkpoint, 128 + signal
signal_run() {
  local sig=$1 want=$2 d="$work/sig$1"
  local run=(train mlp "${base[@]}" --micro-batches 1)
  "$tg" "${run[@]}" --steps 1000000 --checkpoint "$d" >/dev/null 2>"$d.err" &
  local pid=$! i n rc
  for i in $(seq 1 300); do # up to 30 s for the first epoch
    grep -q '^epoch 1/1000:' "$d.err" 2>/dev/null && break
    sleep 0.1
  done
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  n=$(sed -nE "s/.*SIG$sig: stopped after step ([0-9]+); checkpoint written.*/\1/p" "$d.err")
  if [ "$rc" -ne "$want" ] || [ -z "$n" ]; then
    bad "SIG$sig: exit status $rc (expected $want): $(tail -1 "$d.err")"
    return
  fi
  if "$tg" "${run[@]}" --steps $((n + 5)) --resume "$d" --save "$d-r.st" >/dev/null 2>&1 &&
     "$tg" "${run[@]}" --steps $((n + 5)) --save "$d-u.st" >/dev/null 2>&1 &&
     cmp -s "$d-r.st" "$d-u.st"; then
    ok "SIG$sig: exit status $rc after step $n; resumed to step $((n + 5)) bitwise equal"
  else
    bad "SIG$sig: the run resumed after step $n differs from an uninterrupted one"
  fi
}
signal_run TERM 143
signal_run INT 130

# non-finite loss (SGD, --lr 100 --weight-decay 10 diverges in a few steps):
# the checkpoint of the last finite step stays as it was
nan=(train mlp "${base[@]}" --micro-batches 1 --optimizer sgd --lr 100 --weight-decay 10)
"$tg" "${nan[@]}" --steps 30 --checkpoint "$work/nan" --checkpoint-every 1 \
  >/dev/null 2>"$work/nan.err"
nrc=$?
at=$(sed -nE 's/.*loss is not finite at step ([0-9]+);.*/\1/p' "$work/nan.err")
if [ "$nrc" -ne 2 ] || [ -z "$at" ] || [ "$at" -lt 2 ]; then
  bad "non-finite loss: exit status $nrc, $(tail -1 "$work/nan.err")"
else
  # the same run stopped one step earlier writes the same checkpoint
  "$tg" "${nan[@]}" --steps $((at - 1)) --checkpoint "$work/nan-good" >/dev/null 2>&1
  if cmp -s "$work/nan/mlp-checkpoint.bin" "$work/nan-good/mlp-checkpoint.bin" &&
     ! ls "$work/nan" | grep -q tmp; then
    ok "non-finite loss at step $at: exit status 2, checkpoint of step $((at - 1)) kept"
  else
    bad "non-finite loss: the checkpoint is not step $((at - 1))'s, or a temporary file is left"
  fi
fi
finish test_mlp_resume
