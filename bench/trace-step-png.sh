#!/usr/bin/env bash
# bench/trace-step-png.sh TRACE.json STEP_MS OUT.png [TITLE]: draws the last
# STEP_MS milliseconds of a `taskgrad simulate --trace` Chrome trace, one row
# per worker, with gnuplot: forward tasks grey, backward tasks blue, the
# exchange (reduce-scatter sums, named "... .exchange", and the accumulates
# of the ranks' sums) red, AdamW ("... .opt<j>") green, the all-gathers
# ("... .gather") orange.  Used for the pictures in bench/results/.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: bench/trace-step-png.sh TRACE.json STEP_MS OUT.png [TITLE]" >&2; exit 2; }
trace=$1 step_ms=$2 png=$3 title=${4:-simulated step}
command -v gnuplot > /dev/null || { echo "trace-step-png: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$trace" "$step_ms" "$work" <<'PY'
import json, sys
trace, step_ms, work = sys.argv[1], float(sys.argv[2]), sys.argv[3]
d = json.load(open(trace))
ev = d["traceEvents"] if isinstance(d, dict) else d
names = {e["tid"]: e["args"]["name"] for e in ev
         if e.get("ph") == "M" and e.get("name") == "thread_name"}
tasks = [e for e in ev if e.get("ph") == "X"]
if not tasks:
    sys.exit("trace-step-png: no task in the trace")
end = max(e["ts"] + e["dur"] for e in tasks)
start = end - step_ms * 1000
def kind(n):
    if ".exchange" in n or n.startswith("tg_accumulate") or n.startswith("tg_convert"): return 2
    if ".opt" in n: return 3
    if ".gather" in n: return 4
    if "bwd" in n or "wgrad" in n or n.startswith("tg_fill"): return 1
    return 0
tids = sorted({e["tid"] for e in tasks})
row = {t: i for i, t in enumerate(tids)}
with open(work + "/boxes.dat", "w") as f:
    for e in tasks:
        if e["ts"] + e["dur"] < start: continue
        t0, t1 = (max(e["ts"], start) - start) / 1000, (e["ts"] + e["dur"] - start) / 1000
        f.write("%.4f %.4f %d %d\n" % (t0, t1, row[e["tid"]], kind(e["name"])))
with open(work + "/labels.gp", "w") as f:
    f.write("set ytics (%s)\n" % ", ".join('"%s" %d' % (names.get(t, str(t)).split(" (")[0], row[t])
                                          for t in tids))
    f.write("set yrange [-0.6:%f]\n" % (len(tids) - 0.4))
open(work + "/rows", "w").write("%d\n" % len(tids))
PY
gnuplot <<EOF
set terminal pngcairo size 1400,$((140 + 36 * $(cat "$work/rows"))) font ",10"
set output "$png"
set title "$title"
set xlabel "ms into the step"
set xrange [0:$step_ms]
load "$work/labels.gp"
set style fill solid 1.0 noborder
set palette defined (0 "#b0b0b0", 1 "#4a78c2", 2 "#d62728", 3 "#2ca02c", 4 "#ff9f1c")
set cbrange [0:4]
unset colorbox
set key off
plot "$work/boxes.dat" using (\$1+\$2)/2:3:(\$1):(\$2):(\$3-0.4):(\$3+0.4):4 with boxxyerror fc palette
EOF
echo "trace-step-png: $png"
