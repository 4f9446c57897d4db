# `taskgrad train mlp` under StarPU's memory limit (STARPU_LIMIT_CPU_MEM, MB).
#
# Contract: under a limit training completes (StarPU evicts and reuses
# buffers) or stops with a clear message and a non-zero status; never a
# crash (no signal, no abort).
#
# Model: 784-512-512-10 MLP, AdamW, batch 500 (2 micro-batches), 2 CPU
# workers, 2000 synthetic training images (tests/make_idx.py), 1 epoch.
# Working set, estimated: parameters 669,706 floats = 2.55 MiB, times 4
# with gradients and AdamW's two moments = 10.2 MiB; a batch of 500 inputs
# 1.5 MiB (plus 2 prefetched); hidden activations and their gradients
# 500 x 512 floats = 0.98 MiB each, ~8 such = 7.8 MiB; about 22 MiB in all.
# StarPU 1.3 counts against the limit only the buffers it allocates itself.
# Measured (StarPU 1.3.10, 2 CPU workers): when gradients were reduced with
# STARPU_REDUX (a copy per worker) training completed at 64, 16, 12 and
# 10 MB, and at 9 MB and below StarPU 1.3 retried the allocation forever (no
# message, no progress).  Gradients now add in place on a CPU-only run
# (TG_COMMUTE, no copies): it completes at 9, 7 and 6 MB too.  The CLI
# refuses, before training, a limit below what StarPU must manage
# (tg_mlp_managed_bytes: activations in flight, plus one gradient copy per
# worker with STARPU_REDUX or deterministic leaves; 6 MiB here), with one
# message and exit status 2.
#
# Checked: (1) 12 and 7 MB: exit 0 and the usual "test accuracy" line, the
# same accuracy as unlimited; (2) 5 MB (below the estimate) and 1 MB: exit 2
# with one message naming STARPU_LIMIT_CPU_MEM, quickly; never a crash or a
# hang.
. "$(dirname "$0")/cli_testlib.sh"

export STARPU_SILENT=1 OPENBLAS_NUM_THREADS=1
data="$work/data"
mkdir -p "$data"
"$py" "$TG_SOURCE_DIR/tests/make_idx.py" "$data" 2000 500 || {
  echo "make_idx.py failed"
  exit 1
}
train=(train mlp --data-dir "$data" --batch 500 --hidden 512,512 --epochs 1
       --ncpus 2 --ncuda 0)

# run LIMIT TIMEOUT: runs training under STARPU_LIMIT_CPU_MEM=LIMIT (none:
# unset); status in $rc, output in $work/out.LIMIT, $work/err.LIMIT
run() {
  local lim=$1 t=$2
  if [ "$lim" = none ]; then
    (unset STARPU_LIMIT_CPU_MEM; timeout -k 5 "$t" "$tg" "${train[@]}") \
      >"$work/out.$lim" 2>"$work/err.$lim"
  else
    STARPU_LIMIT_CPU_MEM=$lim timeout -k 5 "$t" "$tg" "${train[@]}" \
      >"$work/out.$lim" 2>"$work/err.$lim"
  fi
  rc=$?
}

crashed() { # LIMIT: a signal, an abort or a segfault
  [ "$rc" -ge 128 ] && [ "$rc" -ne 124 ] && return 0
  grep -Eq 'Aborted|Segmentation fault|core dumped|Assertion' \
    "$work/err.$1" "$work/out.$1"
}

run none 300
ref=$(grep -E '^test accuracy: ' "$work/out.none")
if [ $rc -eq 0 ] && [ -n "$ref" ]; then
  ok "no limit: $ref"
else
  bad "no limit: status $rc: $(tail -c 300 "$work/err.none")"
fi

for lim in 12 7; do
  run $lim 300
  acc=$(grep -E '^test accuracy: ' "$work/out.$lim")
  if crashed $lim; then
    bad "$lim MB: crashed (status $rc): $(tail -c 300 "$work/err.$lim")"
  elif [ $rc -ne 0 ] || [ -z "$acc" ]; then
    bad "$lim MB: status $rc, no 'test accuracy' line: $(tail -c 300 "$work/err.$lim")"
  elif [ "$acc" != "$ref" ]; then
    bad "$lim MB: '$acc' differs from the unlimited run's '$ref'"
  else
    ok "$lim MB (below the ~22 MiB working set): completed, $acc"
  fi
done

for lim in 5 1; do
  run $lim 60
  if crashed $lim; then
    bad "$lim MB: crashed (status $rc): $(tail -c 300 "$work/err.$lim")"
  elif [ $rc -eq 124 ]; then
    bad "$lim MB: no result and no message after 60 s"
  elif [ $rc -eq 2 ] && [ "$(grep -c 'taskgrad: error: STARPU_LIMIT_CPU_MEM' "$work/err.$lim")" -eq 1 ]; then
    ok "$lim MB: refused before training: $(grep 'taskgrad: error' "$work/err.$lim")"
  else
    bad "$lim MB: status $rc: $(tail -c 300 "$work/err.$lim")"
  fi
done

finish test_memory_limit
