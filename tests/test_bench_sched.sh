#!/usr/bin/env bash
# taskgrad bench sched: a small scheduler sweep writes the CSV (header and one
# numeric row per scheduler) and a PNG chart; bad flags, unknown schedulers
# included, exit 2 with one message before any run (the calibration first).
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"

small=(--model mlp --steps 5 --warmup 1 --batch 64 --hidden 32)

expect_fail "steps below 5" "--steps: 3 is out of range" bench sched "${small[@]}" --steps 3
expect_fail "unknown model" "unknown model 'resnet'" bench sched --model resnet
expect_fail "missing model" "needs --model" bench sched --schedulers eager
expect_fail "empty scheduler list" "--schedulers: empty list" bench sched "${small[@]}" --schedulers ''
expect_fail "empty scheduler name" "--schedulers: empty name" bench sched "${small[@]}" --schedulers eager,,lws
expect_fail "unknown scheduler" "--schedulers: unknown scheduling policy 'eagr'; known: tg-critpath .* eager" \
  bench sched "${small[@]}" --schedulers eager,eagr --perfmodel-dir "$work/early"
expect_fail "unknown scheduler +nopri" "--schedulers: unknown scheduling policy 'nosuch'" \
  bench sched "${small[@]}" --schedulers nosuch+nopri --perfmodel-dir "$work/early"
[ ! -e "$work/early/.starpu" ] && ok "no calibration before the refusal" || bad "calibrated first"
expect_fail "missing out-dir" "--out-dir: .* not a writable directory" \
  bench sched "${small[@]}" --out-dir "$work/nowhere"
touch "$work/afile"
expect_fail "out-dir is a file" "--out-dir: .* not a writable directory" \
  bench sched "${small[@]}" --out-dir "$work/afile"
# root may write anywhere permissions allow nothing to stop it, but not in /proc
expect_fail "unwritable out-dir" "--out-dir: '/proc' is not a writable directory" \
  bench sched "${small[@]}" --out-dir /proc
expect_fail "--sched instead of --schedulers" "--schedulers" bench sched "${small[@]}" --sched eager
expect_fail "bad model flag" "--batch: 'abc' is not an integer" bench sched "${small[@]}" --batch abc
expect_fail "unknown model flag" "unknown flag '--bogus'" bench sched "${small[@]}" --bogus
[ ! -e "$work/sched-mlp.csv" ] && ok "no CSV after bad flags" || bad "a CSV after bad flags"

if ! command -v gnuplot >/dev/null; then
  echo "SKIP the sweep: gnuplot is not installed (apt-get install gnuplot-nox)"
  finish test_bench_sched || exit 1
  exit 77
fi

mkdir -p "$work/results"
start=$SECONDS
if "$tg" bench sched "${small[@]}" --schedulers eager,lws --out-dir "$work/results" \
     --perfmodel-dir "$work/perfmodels" >"$work/stdout" 2>"$work/stderr"; then
  ok "sweep eager,lws ran in $((SECONDS - start)) s"
else
  bad "sweep failed: $(tail -3 "$work/stderr")"
fi
csv="$work/results/sched-mlp.csv"
if [ -f "$csv" ]; then
  [ "$(head -1 "$csv")" = "scheduler,median_ms,min_ms,max_ms,idle_pct,bytes_transferred,tasks" ] \
    && ok "CSV header" || bad "CSV header: $(head -1 "$csv")"
  [ "$(wc -l <"$csv")" -eq 3 ] && ok "CSV has 2 rows" || bad "CSV rows: $(cat "$csv")"
  num='[0-9]+(\.[0-9]+)?'
  for s in eager lws; do
    if grep -Eq "^$s,$num,$num,$num,$num,[0-9]+,[0-9]+$" "$csv"; then
      ok "CSV row $s: $(grep "^$s," "$csv")"
    else
      bad "CSV row $s: '$(grep "^$s," "$csv")'"
    fi
  done
  awk -F, 'NR > 1 && !($3 <= $2 && $2 <= $4 && $2 > 0 && $7 > 0) {exit 1}' "$csv" \
    && ok "min <= median <= max, tasks > 0" || bad "inconsistent row: $(cat "$csv")"
else
  bad "no CSV written"
fi
png="$work/results/sched-mlp.png"
if [ -s "$png" ] && [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; then
  ok "PNG chart ($(wc -c <"$png") bytes)"
else
  bad "no PNG chart (or not a PNG)"
fi
grep -q '^| scheduler | median ms' "$work/stdout" && grep -q '^| lws | ' "$work/stdout" \
  && ok "Markdown table on stdout" || bad "Markdown table: $(cat "$work/stdout")"
[ -d "$work/perfmodels/.starpu/sampling" ] && ok "perfmodels calibrated in --perfmodel-dir" \
  || bad "no perfmodels in $work/perfmodels"

# SIGINT while a scheduler's run is in progress: the run (a child process)
# ends too, and bench sched exits 130 within 5 s
"$tg" bench sched --model mlp --steps 4096 --warmup 1 --batch 512 --hidden 256 \
  --schedulers eager --perfmodel-dir "$work/perfmodels" --out-dir "$work/results" \
  >"$work/int.out" 2>"$work/int.err" &
pid=$!
# the measured run (not the calibration run before it) is in progress
for _ in $(seq 1 300); do
  grep -q "round 1/" "$work/int.err" 2>/dev/null && break
  sleep 0.1
done
sleep 0.5
children=$(pgrep -P "$pid" | tr '\n' ' ')
kill -INT "$pid"
t0=$SECONDS
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  bad "bench sched still running 10 s after SIGINT"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
else
  wait "$pid"
  rc=$?
  [ "$rc" -eq 130 ] && [ $((SECONDS - t0)) -le 5 ] && ok "SIGINT: exit 130 in $((SECONDS - t0)) s" \
    || bad "SIGINT: exit $rc after $((SECONDS - t0)) s"
fi
sleep 0.5
left=""
for c in $children; do kill -0 "$c" 2>/dev/null && left="$left $c"; done
if [ -z "$children" ]; then
  bad "no scheduler run was in progress when SIGINT was sent"
elif [ -n "$left" ]; then
  bad "the scheduler's run ($left) outlived bench sched"
  kill -KILL $left 2>/dev/null
else
  ok "the scheduler's run ($children) ended with bench sched"
fi

finish test_bench_sched
