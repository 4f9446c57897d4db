# `taskgrad simulate` on 4 simulated H100 (issue 13; SimGrid build only,
# SKIP elsewhere).  For the MLP and a small GPT with --ncpus 0:
#  - every task ran on a simulated CUDA worker;
#  - bytes moved between GPUs are above 0;
#  - a run completes under STARPU_LIMIT_CUDA_MEM at 60% of what it uses
#    without one (so StarPU must evict), staying within the limit;
#  - the trace is JSON in simulated time with events on the CUDA workers;
#  - a --gpus 1,2 sweep writes its CSV and chart.
#  - a 64-core CPU node with calibrated histories runs on 8 and 64 workers;
#  - on one GPU the blocks are fused by default (the header says so): a
#    block's 12 tasks become 2, and the step is not slower than
#    with --no-fused-blocks (a fused task costs its parts' sum); its layers
#    are packed (the header says so), idle less than with
#    --no-packed-layers and not slower;
#  - --cost both prints the expected model's step (longer than the peak
#    roofline's) after the report, and --cost expected times one run with it;
#  - on h100x1 the shipped H100 histories time tasks by default, and a
#    codelet whose sources changed is refused from them; --cost peak uses
#    none.
# These check the simulation's plumbing, not the roofline's figures.
source "$TG_SOURCE_DIR/tests/cli_testlib.sh"

if ! "$tg" --version | grep -q "SimGrid: yes"; then
  echo "SKIP: this taskgrad is not a SimGrid build (-DTG_SIMGRID=ON)"
  exit 77
fi

# value LABEL FILE: the number after "LABEL: " in a report
value() { sed -n "s/^$1: \([0-9.e+-]*\).*/\1/p" "$2" | head -n1; }
# peak MEM_LINE_PREFIX FILE: the largest "peak device memory" in GB
peak_gb() { awk '/^peak device memory CUDA/ { if ($6 > m) m = $6 } END { printf "%.4f", m + 0 }' "$1"; }

check_run() { # NAME OUTFILE
  local name=$1 out=$2
  local line on all gg
  line=$(grep '^tasks on simulated CUDA workers: ' "$out")
  on=$(echo "$line" | awk '{print $6}')
  all=$(echo "$line" | awk '{print $8}')
  if [ -n "$on" ] && [ "$on" -gt 0 ] && [ "$on" = "$all" ]; then
    ok "$name: all $all tasks on simulated CUDA workers"
  else
    bad "$name: tasks on CUDA workers: '$line'"
  fi
  gg=$(value "bytes between GPUs" "$out")
  if [ -n "$gg" ] && awk -v g="$gg" 'BEGIN { exit !(g > 0) }'; then
    ok "$name: $gg bytes per step between GPUs"
  else
    bad "$name: bytes between GPUs '$gg'"
  fi
  local ms
  ms=$(value "simulated step ms" "$out")
  if [ -n "$ms" ] && awk -v m="$ms" 'BEGIN { exit !(m > 0) }'; then
    ok "$name: simulated step $ms ms"
  else
    bad "$name: no simulated step time"
  fi
}

run() { # OUTFILE args...
  local out=$1
  shift
  # a hang (StarPU waiting for memory) fails here instead of at ctest's limit
  if ! timeout 150 "$tg" simulate "$@" > "$out" 2> "$out.err"; then
    bad "simulate $*: exit status $? ($(tail -n 3 "$out.err"))"
    return 1
  fi
}

gpt=(gpt --layers 2 --channels 128 --heads 4 --vocab 256 --max-seq 128 --seq 128)
# one GPU and CPU workers, no scheduler named: every task on the GPU (the
# CPU workers would take GPU work under StarPU's default lws), gradients
# summed in place there, nothing through the host during the step; a named
# policy may use the CPU workers (runtime.h: tg_cuda_tasks_stay_on_gpus)
if run "$work/gpu1" "${gpt[@]}" --platform h100x4 --gpus 1 --ncpus 3 --precision bf16 \
     --micro-batches 2 --steps 2 --cost peak; then
  line=$(grep '^tasks on simulated CUDA workers: ' "$work/gpu1")
  on=$(echo "$line" | awk '{print $6}') all=$(echo "$line" | awk '{print $8}')
  if [ -n "$on" ] && [ "$on" -gt 0 ] && [ "$on" = "$all" ]; then
    ok "1 GPU + 3 CPU workers, default scheduler: all $all tasks on the GPU"
  else
    bad "1 GPU + 3 CPU workers, default scheduler: '$line'"
  fi
  if run "$work/gpu1-nofuse" "${gpt[@]}" --platform h100x4 --gpus 1 --ncpus 3 --precision bf16 \
       --micro-batches 2 --steps 2 --cost peak --no-fused-blocks; then
    t1=$(echo "$line" | awk '{print $8}')
    t0=$(grep '^tasks on simulated CUDA workers: ' "$work/gpu1-nofuse" | awk '{print $8}')
    ms1=$(value "simulated step ms" "$work/gpu1") ms0=$(value "simulated step ms" "$work/gpu1-nofuse")
    # counted over the 2 timed steps: 2 layers x 2 micro-batches x 2 steps x
    # (12 - 2) tasks fewer, and the gradients' zero fills inside the blocks
    if grep -q '^blocks fused' "$work/gpu1" && ! grep -q '^blocks fused' "$work/gpu1-nofuse" &&
       [ -n "$t0" ] && [ -n "$t1" ] && [ $((t0 - t1)) -ge 80 ] &&
       awk -v a="$ms1" -v b="$ms0" 'BEGIN { exit !(a > 0 && a <= b) }'; then
      ok "1 GPU: blocks fused by default, $t1 tasks against $t0, $ms1 ms against $ms0"
    else
      bad "1 GPU: fused blocks: $t1 tasks against $t0 ($((t0 - t1)) fewer, expected 80 or more), $ms1 ms against $ms0, header '$(grep '^blocks' "$work/gpu1")'"
    fi
  fi
  # packed layers (on by default with fused blocks): the same tasks, less
  # of StarPU's per-buffer time, so less idle and not slower
  if run "$work/gpu1-nopack" "${gpt[@]}" --platform h100x4 --gpus 1 --ncpus 3 --precision bf16 \
       --micro-batches 2 --steps 2 --cost peak --no-packed-layers; then
    ms1=$(value "simulated step ms" "$work/gpu1") ms2=$(value "simulated step ms" "$work/gpu1-nopack")
    i1=$(grep '^device CUDA 0' "$work/gpu1" | sed 's/.*idle \([0-9.]*\) ms.*/\1/')
    i2=$(grep '^device CUDA 0' "$work/gpu1-nopack" | sed 's/.*idle \([0-9.]*\) ms.*/\1/')
    if grep -q '^layers packed' "$work/gpu1" && ! grep -q '^layers packed' "$work/gpu1-nopack" &&
       awk -v a="$ms1" -v b="$ms2" -v c="$i1" -v d="$i2" \
         'BEGIN { exit !(a > 0 && a <= b && c < d) }'; then
      ok "1 GPU: layers packed by default, $ms1 ms against $ms2, idle $i1 against $i2 ms"
    else
      bad "1 GPU: packed layers: $ms1 ms against $ms2, idle $i1 against $i2 ms, header '$(grep '^layers' "$work/gpu1")'"
    fi
  fi
  if grep -q '^link ' "$work/gpu1"; then
    bad "1 GPU + 3 CPU workers: traffic with the host during the step: $(grep '^link ' "$work/gpu1" | tr '\n' ' ')"
  else
    ok "1 GPU + 3 CPU workers: no traffic with the host during the step"
  fi
fi
if run "$work/mlp" mlp --platform h100x4 --gpus 4 --ncpus 0 --steps 2; then
  check_run mlp "$work/mlp"
fi
if run "$work/gpt" "${gpt[@]}" --platform h100x4 --gpus 4 --ncpus 0 --steps 2 \
  --cost both --trace "$work/gpt.json"; then
  check_run gpt "$work/gpt"
  if "$py" - "$work/gpt.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
names = {e.get("args", {}).get("name", "") for e in ev if e.get("ph") == "M"}
assert sum(1 for e in ev if e.get("ph") == "X") > 0, "no task events"
assert any("CUDA" in n for n in names), names
PY
  then ok "gpt: trace is JSON with CUDA worker tracks"; else bad "gpt: trace"; fi
  # --cost both (the default for a single run on h100x4 before the
  # shipped histories made it --cost calibrated): the expected
  # model's run follows; every GPU task class is at <= 90% of its peak
  # there, so its step is longer than the peak roofline's
  peak_ms=$(value "simulated step ms" "$work/gpt")
  exp_ms=$(value "expected step ms" "$work/gpt")
  if [ -n "$exp_ms" ] && awk -v e="$exp_ms" -v p="$peak_ms" 'BEGIN { exit !(e > p) }' &&
     grep -q '^expected MFU: ' "$work/gpt"; then
    ok "gpt: expected model $exp_ms ms, beside the peak roofline's $peak_ms ms"
  else
    bad "gpt: expected step '$exp_ms' ms not above the peak's '$peak_ms'"
  fi
fi
if run "$work/gpt-exp" "${gpt[@]}" --platform h100x4 --gpus 2 --ncpus 0 --steps 2 \
  --cost expected && grep -q '^cost model: .* from the expected model' "$work/gpt-exp" &&
  ! grep -q '^expected step ms' "$work/gpt-exp"; then
  ok "gpt --cost expected: one run, timed by the expected model"
else
  bad "gpt --cost expected: $(grep '^cost model' "$work/gpt-exp")"
fi

# memory limit: the GPT's data per GPU without a limit, then a limit of
# 60% of it (at 40% StarPU 1.3 waits for memory forever): the run must complete with at most the limit in use, so StarPU
# had to evict (write back or drop) data to make room
# (--data-parallel redux: the sharded mode's per-device replicas and
# gradient slots are homed on their GPU, so they cannot be evicted: under
# such a limit sharding is refused, next)
run "$work/gpt-redux" "${gpt[@]}" --platform h100x4 --gpus 4 --ncpus 0 --steps 2 \
  --data-parallel redux
peak=$(peak_gb "$work/gpt-redux")
limit=$(awk -v p="$peak" 'BEGIN { m = int(p * 1e9 / 1048576 * 0.6); print (m < 4 ? 4 : m) }')
if STARPU_LIMIT_CUDA_MEM=$limit run "$work/gpt-lim" "${gpt[@]}" --platform h100x4 --gpus 4 \
  --ncpus 0 --steps 2 --data-parallel redux; then
  check_run "gpt under ${limit} MiB per GPU" "$work/gpt-lim"
  lim_peak=$(peak_gb "$work/gpt-lim")
  if awk -v a="$peak" -v b="$lim_peak" -v l="$limit" \
    'BEGIN { exit !(a * 1e9 > l * 1048576 && b * 1e9 <= l * 1048576 * 1.01 && b > 0) }'; then
    ok "limit of $limit MiB: completes using $lim_peak GB per GPU (needs $peak GB without)"
  else
    bad "limit of $limit MiB: peak $lim_peak GB under it, $peak GB without"
  fi
fi

# sharded under the same limit: it completes, or, when its GPU-homed state
# does not fit, says so and exits 2 before the first step; never a hang
timeout 150 env STARPU_LIMIT_CUDA_MEM=$limit "$tg" simulate "${gpt[@]}" --platform h100x4 \
  --gpus 4 --ncpus 0 --steps 2 --data-parallel shard >"$work/shard-lim.out" 2>"$work/shard-lim.err"
rc=$?
if [ $rc -eq 0 ] && grep -q '^simulated step ms: [0-9]' "$work/shard-lim.out"; then
  ok "sharded under $limit MiB: completes"
elif [ $rc -eq 2 ] && grep -q "out of memory on memory node" "$work/shard-lim.err"; then
  ok "sharded under $limit MiB: refused with '$(grep 'taskgrad: error' "$work/shard-lim.err" | head -1)'"
else
  bad "sharded under $limit MiB: exit status $rc ($(tail -2 "$work/shard-lim.err"))"
fi

# a CPU node (platforms/cpu64) with calibrated histories on 8 and 64
# workers (tests/data/sim-cpu64: `bench gpt --calibrate` of this small GPT on
# the development machine, host name cpu64).  Loading a history from inside a
# worker once held a pthread mutex across StarPU's SimGrid locks, and with
# more than a few workers the simulation hung for good: `run` times out.
for n in 8 64; do
  if run "$work/cpu$n" "${gpt[@]}" --batch 8 --micro-batches 4 --platform cpu64 --gpus 0 \
    --ncpus $n --perfmodels "$TG_SOURCE_DIR/tests/data/sim-cpu64" --steps 2; then
    ms=$(value "simulated step ms" "$work/cpu$n")
    hist=$(sed -n 's/^cost model: \([0-9]*\) estimates from calibrated history.*/\1/p' "$work/cpu$n")
    busy=$(grep -c '^device CPU [0-9]*: busy' "$work/cpu$n")
    if [ -n "$ms" ] && awk -v m="$ms" 'BEGIN { exit !(m > 0) }' && [ "${hist:-0}" -gt 0 ] &&
      [ "$busy" = "$n" ]; then
      ok "cpu64, $n CPU workers: step $ms ms, $hist estimates from the histories"
    else
      bad "cpu64, $n CPU workers: step '$ms', histories '$hist', $busy device lines"
    fi
  fi
done

# the H100 platforms' shipped histories (platforms/h100.history), the
# default there: a codelet's history is taken while its sources hash as they
# did at the measured commit, refused once one of them changes.  On a copy
# of the sources with codelets/embedding.c changed by one comment line, the
# embedding's histories must be refused, the others still taken (the linear
# layers' are refused already: their cuBLASLt path came after lease 4).
hist_count() { sed -n 's/^calibrated history: \([0-9]*\) codelets from .*/\1/p' "$1"; }
src="$work/src"
mkdir -p "$src/bench/results/2026-11-27-h100-2"
cp -r "$TG_SOURCE_DIR/platforms" "$TG_SOURCE_DIR/codelets" "$src/"
mkdir -p "$src/kernels" && cp -r "$TG_SOURCE_DIR/kernels/cuda" "$src/kernels/"
cp "$TG_SOURCE_DIR"/bench/results/2026-11-27-h100-2/perfmodels-4.tar.xz "$src/bench/results/2026-11-27-h100-2/"
if run "$work/hist" "${gpt[@]}" --platform h100x1 --steps 1 &&
  TG_SOURCE_DIR="$src" run "$work/hist-same" "${gpt[@]}" --platform h100x1 --steps 1; then
  n=$(hist_count "$work/hist")
  if [ "${n:-0}" -ge 10 ] && [ "$(hist_count "$work/hist-same")" = "$n" ] &&
    grep -q '^cost model: [0-9]* estimates from calibrated history (H100 lease .*commit [0-9a-f]*), [0-9]* from the expected model' "$work/hist" &&
    ! grep -q '^calibrated history refused.*taskgrad_embedding_fwd' "$work/hist"; then
    ok "h100x1 by default: $n codelets' histories, the rest timed by the expected model"
  else
    bad "h100x1 by default: '$(grep -E '^(calibrated history|cost model)' "$work/hist")'"
  fi
  echo "/* changed */" >> "$src/codelets/embedding.c"
  if TG_SOURCE_DIR="$src" run "$work/hist-changed" "${gpt[@]}" --platform h100x1 --steps 1 &&
    [ "$(hist_count "$work/hist-changed")" = "$((n - 2))" ] &&
    grep -q '^calibrated history refused.*taskgrad_embedding_bwd.*taskgrad_embedding_fwd' "$work/hist-changed"; then
    ok "codelets/embedding.c changed: embedding_fwd's and embedding_bwd's histories refused"
  else
    bad "codelets/embedding.c changed: '$(grep '^calibrated history' "$work/hist-changed")'"
  fi
fi
if run "$work/hist-peak" "${gpt[@]}" --platform h100x1 --steps 1 --cost peak &&
  grep -q '^cost model: 0 estimates from calibrated history, [0-9]* from the peak roofline (an upper bound' "$work/hist-peak" &&
  ! grep -q '^calibrated history' "$work/hist-peak"; then
  ok "h100x1 --cost peak: the roofline alone, an upper bound"
else
  bad "h100x1 --cost peak: '$(grep '^cost model' "$work/hist-peak")'"
fi

# a sweep writes its rows and chart
if "$tg" simulate mlp --platform h100x2 --gpus 1,2 --steps 1 --warmup 0 \
  --csv "$work/sweep.csv" --chart "$work/sweep.png" > "$work/sweep" 2> "$work/sweep.err"; then
  rows=$(grep -c '^[12],' "$work/sweep.csv")
  if [ "$rows" = 2 ] && [ -s "$work/sweep.png" ]; then
    ok "sweep: 2 rows and a chart"
  else
    bad "sweep: $rows rows, chart $(ls -l "$work/sweep.png" 2>&1)"
  fi
else
  bad "sweep failed: $(tail -n 3 "$work/sweep.err")"
fi
finish test_simulate
