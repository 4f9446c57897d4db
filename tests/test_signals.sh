#!/usr/bin/env bash
# SIGINT ends a run promptly in every phase, and every file it had written
# stays valid (docs/reliability.md, "Signals"); temporaries of killed
# writers do not outlive the next run:
#  - train gpt: during --sample (after --save and the final checkpoint) and
#    during the final validation: exit status 130 within 5 s, "stopped
#    during <phase>", the --save model loads, the checkpoint resumes, no
#    temporary file is left;
#  - bench gpt and bench mlp, started in the background of this script
#    (where bash makes them inherit SIGINT ignored): exit status 130 within
#    5 s;
#  - a run killed with SIGKILL mid-write leaves ck/checkpoint.bin.tmp.<pid>
#    (planted here with the dead run's pid, the state a kill during the
#    write leaves): the requeued command line removes it and only it (not a
#    live process's temporary, not a name of another pattern), and a --save
#    removes its own target's.
# The runs are started in the background and signalled once a line on their
# output shows them in the phase, not after a fixed sleep alone.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
export STARPU_NCPU=1 STARPU_NCUDA=0

"$tg" init gpt --layers 1 --channels 16 --heads 2 --max-seq 16 --vocab 64 --out "$work/m.bin" \
  >/dev/null || { echo "FAIL init gpt"; exit 1; }
token_file "$work/t.bin" 3000 7 13 61 || { echo "FAIL token file"; exit 1; }
token_file "$work/v.bin" 1000000 5 11 61 || { echo "FAIL token file"; exit 1; }
gpt=(train gpt --data "$work/t.bin" --batch 4 --seq 16 --micro-batches 1)

# interrupt NAME PATTERN FILE taskgrad-args...: runs taskgrad in the
# background (stdout NAME.out, stderr NAME.err), sends SIGINT 0.2 s after a
# line of FILE (out or err) matches PATTERN, and sets rc and secs (from the
# signal to the exit; SIGKILL after 10 s); rc=timeout when the line never
# came in 30 s
interrupt() {
  local name=$1 pattern=$2 file=$3 pid i t0
  shift 3
  "$tg" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  for i in $(seq 1 300); do
    grep -Eq -e "$pattern" "$work/$name.$file" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -Eq -e "$pattern" "$work/$name.$file"; then
    kill -KILL "$pid" 2>/dev/null
    wait "$pid"
    rc=timeout secs=0
    return
  fi
  sleep 0.2
  t0=$(date +%s%N)
  kill -INT "$pid"
  for i in $(seq 1 100); do  # a run that ignores it is killed after 10 s
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  secs=$(( ($(date +%s%N) - t0) / 1000000 ))
  secs=$((secs / 1000)).$(printf %03d $((secs % 1000)))
}

# prompt NAME WANT_PHASE: exit 130 within 5 s, and "stopped during PHASE"
prompt() {
  local name=$1 phase=$2
  if [ "$rc" != 130 ] || [ "${secs%.*}" -ge 5 ]; then
    bad "$name: exit status $rc $secs s after SIGINT (expected 130 within 5 s): $(tail -2 "$work/$name.err")"
  elif [ -n "$phase" ] && ! grep -q "SIGINT: stopped during $phase" "$work/$name.err"; then
    bad "$name: no 'stopped during $phase': $(tail -2 "$work/$name.err")"
  else
    ok "$name: exit status 130, $secs s after SIGINT"
  fi
}

no_temps() {
  local left
  left=$(find "$work" -name '*.tmp.[0-9]*' | tr '\n' ' ')
  [ -z "$left" ] && ok "$1: no temporary file left" || bad "$1: temporaries left: $left"
}

# resumes NAME DIR STEPS: the checkpoint in DIR continues to STEPS
resumes() {
  if "$tg" "${gpt[@]}" --resume "$2" --steps "$3" >"$work/$1-r.out" 2>"$work/$1-r.err" &&
     grep -q "^step $3 loss" "$work/$1-r.out"; then
    ok "$1: the checkpoint resumes"
  else
    bad "$1: the checkpoint does not resume: $(tail -2 "$work/$1-r.err")"
  fi
}

# ---- train gpt: sampling (after --save and the final checkpoint) -----------
interrupt sample '^sample:' out "${gpt[@]}" --init-from "$work/m.bin" --steps 2 \
  --checkpoint "$work/ck" --save "$work/s.bin" --sample 1000000
prompt sample sampling
if "$tg" "${gpt[@]}" --init-from "$work/s.bin" --steps 1 >/dev/null 2>"$work/load.err"; then
  ok "sample: the --save model loads"
else
  bad "sample: the --save model does not load: $(tail -1 "$work/load.err")"
fi
resumes sample "$work/ck" 3
no_temps sample

# ---- train gpt: the final validation --------------------------------------
interrupt val '^step 2 loss' out "${gpt[@]}" --init-from "$work/m.bin" --steps 2 \
  --checkpoint "$work/vck" --val "$work/v.bin" --val-batches 1000000 --save "$work/never.bin"
prompt val validation
[ ! -e "$work/never.bin" ] && ok "val: --save, after the validation, not started" ||
  bad "val: --save written after an interrupted validation"
resumes val "$work/vck" 3
no_temps val

# ---- bench: SIGINT inherited as ignored, still ends the run ----------------
interrupt bench-gpt 'micro-batches auto' err bench gpt --layers 1 --channels 16 --heads 2 \
  --vocab 64 --max-seq 16 --seq 16 --batch 2 --steps 1000000 --warmup 0 --quiet
prompt bench-gpt ""
interrupt bench-mlp 'micro-batches auto' err bench mlp --batch 64 --hidden 16 \
  --steps 1000000 --warmup 0 --quiet
prompt bench-mlp ""

# ---- temporaries of a killed writer -----------------------------------------
req=("${gpt[@]}" --init-from "$work/m.bin" --resume "$work/ck" --checkpoint "$work/ck")
"$tg" "${req[@]}" --steps 1000000 --checkpoint-every 1 >"$work/k.out" 2>"$work/k.err" &
pid=$!
for i in $(seq 1 300); do
  grep -q '^step 4 loss' "$work/k.out" 2>/dev/null && break
  sleep 0.1
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
head -c 1000 "$work/m.bin" >"$work/ck/checkpoint.bin.tmp.$pid"  # as the kill left it
echo live >"$work/ck/checkpoint.bin.tmp.$$"       # this shell's: alive
echo user >"$work/ck/checkpoint.bin.tmp.${pid}x"  # not our pattern
echo user >"$work/ck/notes.tmp.$pid"              # not our name
echo half >"$work/s.bin.tmp.$pid"
n=$(losses "$work/k.out" | tail -1)
n=${n%% *}
if "$tg" "${req[@]}" --steps $((n + 2)) --save "$work/s.bin" >"$work/q.out" 2>"$work/q.err"; then
  [ ! -e "$work/ck/checkpoint.bin.tmp.$pid" ] && grep -q "removed 1 temporary file of killed" "$work/q.err" &&
    ok "requeued run: the killed run's checkpoint temporary removed" ||
    bad "requeued run: ck/checkpoint.bin.tmp.$pid left ($(ls "$work/ck" | tr '\n' ' '))"
  [ -e "$work/ck/checkpoint.bin.tmp.$$" ] && [ -e "$work/ck/checkpoint.bin.tmp.${pid}x" ] &&
    [ -e "$work/ck/notes.tmp.$pid" ] &&
    ok "requeued run: a live process's temporary and other names kept" ||
    bad "requeued run: removed a file it must keep ($(ls "$work/ck" | tr '\n' ' '))"
  [ ! -e "$work/s.bin.tmp.$pid" ] && ok "--save: the killed writer's temporary removed" ||
    bad "--save: s.bin.tmp.$pid left"
else
  bad "requeued run failed: $(tail -2 "$work/q.err")"
fi
finish test_signals
