#!/usr/bin/env bash
# --trace and --stats: the trace of a short benchmark is valid Chrome
# trace-event JSON (one named track per worker, one slice per task, no
# overlapping slices on a worker, as many slices as the benchmark's tasks),
# an unwritable --trace path is one error before any work, and --stats
# prints the per-codelet table with the bytes moved.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"

steps=3 warmup=1
for run in 1 2; do
  if "$tg" bench mlp --steps $steps --warmup $warmup --batch 256 --trace "$work/t$run.json" \
       >"$work/out$run" 2>"$work/err$run"; then
    ok "bench mlp --trace (run $run)"
  else
    bad "bench mlp --trace (run $run): $(cat "$work/err$run")"
  fi
done
# tasks of the measured steps, from the benchmark's report
measured=$(sed -nE 's/^runtime overhead:.*\(([0-9]+) tasks\).*/\1/p' "$work/out1")
written=$(sed -nE 's/^taskgrad: trace of ([0-9]+) tasks written.*/\1/p' "$work/err1")
if msg=$("$py" - "$work/t1.json" "$work/t2.json" "${measured:-0}" "${written:-0}" $steps $warmup <<'PY' 2>&1
import json, sys
t1, t2, measured, written, steps, warmup = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
def load(path):
    with open(path) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    assert isinstance(ev, list) and ev, "no traceEvents"
    return ev
ev = load(t1)
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
xs = [e for e in ev if e.get("ph") == "X"]
assert xs, "no task slices"
workers = sorted({e["tid"] for e in xs})
for w in workers:
    assert w in names, f"worker track {w} has no thread_name"
tracks = [n for n in names.values() if n != "transfers"]
assert len(tracks) == len(set(tracks)), f"duplicate worker names {tracks}"
assert "transfers" in names.values(), "no transfers track"
for e in xs:
    assert e["ts"] >= 0 and e["dur"] >= 0, f"negative time: {e}"
    assert e["name"].startswith("tg_"), f"slice name is not a codelet's: {e['name']}"
    assert e["name"].split(" ")[0] == e["args"]["codelet"], e
    assert "flops" in e["args"] and "task" in e["args"], e
for w in workers:
    sl = sorted((e["ts"], e["ts"] + e["dur"]) for e in xs if e["tid"] == w)
    for (a0, a1), (b0, b1) in zip(sl, sl[1:]):
        assert b0 >= a1 - 1e-3, f"overlapping slices on worker {w}: [{a0}, {a1}] and [{b0}, {b1}]"
assert len(xs) == written, f"{len(xs)} slices, the CLI reported {written} tasks"
# the trace spans warm-up and measured steps; every step has the same tasks
assert measured > 0 and measured % steps == 0, f"bench reported {measured} tasks"
assert len(xs) >= measured // steps * (steps + warmup), \
    f"{len(xs)} slices for {steps + warmup} steps of {measured // steps} tasks"
xs2 = [e for e in load(t2) if e.get("ph") == "X"]
assert len(xs2) == len(xs), f"runs differ: {len(xs)} and {len(xs2)} slices"
print(f"{len(xs)} slices on {len(workers)} workers ({measured // steps} tasks per step)")
PY
); then ok "trace JSON: $msg"; else bad "trace JSON: $msg"; fi
ls "$work" | grep -q '\.tmp\.' && bad "temporary trace file left behind" || ok "no temporary file left"

expect_fail "unwritable trace directory" "--trace: directory '/nonexistent/dir'" \
  bench mlp --steps 3 --warmup 1 --batch 256 --trace /nonexistent/dir/t.json
grep -q "bench mlp:" "$work/out" && bad "training ran despite the bad --trace path" \
  || ok "nothing ran before the --trace error"
expect_fail "trace path is a directory" "is a directory" \
  bench mlp --steps 1 --warmup 0 --batch 64 --trace "$work"
expect_fail "train mlp: unwritable trace directory" "--trace: directory" \
  train mlp --data-dir "$work/nowhere" --trace /nonexistent/dir/t.json

if "$tg" bench mlp --steps 2 --warmup 1 --batch 256 --stats >"$work/out" 2>"$work/err"; then
  if grep -Eq '^codelet +tasks' "$work/out" && grep -q '^tg_gemm ' "$work/out" &&
     grep -Eq '^bytes moved: +[0-9]+ bytes' "$work/out" && grep -Eq '^worker +tasks +busy' "$work/out"; then
    ok "bench --stats: per-codelet table and bytes moved"
  else
    bad "bench --stats output: $(cat "$work/out")"
  fi
  [ "$(grep -c '^codelet ' "$work/out" "$work/err" | awk -F: '{s+=$2} END{print s}')" -eq 1 ] \
    && ok "bench --stats: one table" || bad "bench --stats: table printed twice"
else
  bad "bench mlp --stats: $(cat "$work/err")"
fi

# train mlp --stats --trace: profiling is turned on by the flags
"$py" "$TG_SOURCE_DIR/tests/make_idx.py" "$work/good" 200 50
if "$tg" train mlp --data-dir "$work/good" --epochs 1 --batch 50 --micro-batches 2 \
     --hidden 32 --stats --trace "$work/train.json" >"$work/out" 2>"$work/err"; then
  if grep -Eq '^codelet +tasks' "$work/err" && grep -Eq '^bytes moved:' "$work/err" &&
     "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(e.get("ph")=="X" for e in d["traceEvents"])' \
       "$work/train.json"; then
    ok "train mlp --stats --trace"
  else
    bad "train mlp --stats --trace: $(cat "$work/err")"
  fi
else
  bad "train mlp --stats --trace: $(cat "$work/err")"
fi
finish test_trace_cli
