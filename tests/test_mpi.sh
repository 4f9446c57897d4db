# Data-parallel training over MPI ranks (StarPU-MPI) and deterministic
# reductions, on one machine:
#  - train mlp / train gpt with 2 and 4 ranks: parameters after 5 steps equal
#    the single-process run over the same global batches (relative 1e-6 with
#    StarPU reductions, bitwise with --deterministic), and every rank's
#    parameters are identical (checksums);
#  - --deterministic: eager and dmdas, 1 and 2 workers print bit-identical
#    losses and save identical parameters;
#  - train mlp --tiles 3: equal to the untiled run (relative 1e-6), and with
#    2 ranks bitwise equal to 1 process;
#  - a rank that fails (bad data directory on rank 1 only) ends every rank
#    with a non-zero status and a message, within a time limit (no hang).
# SKIP (77) without mpirun or a taskgrad built with StarPU-MPI.
. "$(dirname "$0")/cli_testlib.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
"$tg" --version | grep -q "StarPU-MPI: yes" || { echo "SKIP: built without StarPU-MPI"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export STARPU_WORKERS_NOBIND=1
# every rank's StarPU with one CPU worker (the 2-core CI machine)
mpi() { local n=$1; shift; STARPU_NCPU=1 timeout 300 mpirun -np "$n" --bind-to none "$tg" "$@"; }

# compare FILE_A FILE_B FORMAT TOL: max relative difference of the parameters
compare() {
  "$py" - "$@" <<'PY'
import json, struct, sys
import numpy as np
a, b, fmt, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def load(p):
    raw = open(p, 'rb').read()
    if fmt == 'st':
        n = struct.unpack('<Q', raw[:8])[0]
        return np.frombuffer(raw[8 + n:], dtype='<f4')
    return np.frombuffer(raw[256 * 4:], dtype='<f4')  # llm.c: 256-int header
x, y = load(a).astype(np.float64), load(b).astype(np.float64)
assert x.shape == y.shape and x.size > 0, (x.shape, y.shape)
# relative difference of the parameter vectors (2-norm), and the largest
# element difference relative to the largest parameter, for the record
rel = np.linalg.norm(x - y) / np.linalg.norm(x)
elem = np.abs(x - y).max() / np.abs(x).max()
print(f"relative difference {rel:.3g} (largest element {elem:.3g}) over {x.size} parameters")
sys.exit(0 if rel <= tol else 1)
PY
}

# every "rank R parameters fnv1a64 H" line of a log has the same H, n lines
same_checksums() {
  local log=$1 n=$2
  local lines=$(grep -c "parameters fnv1a64" "$log") uniq=$(grep "parameters fnv1a64" "$log" | awk '{print $NF}' | sort -u | wc -l)
  [ "$lines" -eq "$n" ] && [ "$uniq" -eq 1 ]
}

# ---- MLP ------------------------------------------------------------------
mlp="train mlp --steps 5 --batch 256 --micro-batches 4 --hidden 64,32"
"$tg" $mlp --ncpus 2 --save "$work/mlp1.st" >/dev/null 2>"$work/log" || bad "mlp single: $(tail -3 "$work/log")"
"$tg" $mlp --ncpus 2 --deterministic --save "$work/mlp1d.st" >/dev/null 2>"$work/log1d" || bad "mlp single det"
for n in 2 4; do
  if mpi $n $mlp --save "$work/mlp$n.st" >"$work/out" 2>"$work/log"; then
    grep -q "test accuracy" "$work/out" || bad "mlp $n ranks: no result line"
    if same_checksums "$work/log" $n; then ok "mlp $n ranks: all ranks' parameters identical"
    else bad "mlp $n ranks: checksums differ: $(grep fnv1a64 "$work/log")"; fi
    if r=$(compare "$work/mlp1.st" "$work/mlp$n.st" st 1e-6); then ok "mlp $n ranks vs 1 process: $r"
    else bad "mlp $n ranks vs 1 process: $r"; fi
  else
    bad "mlp $n ranks failed: $(tail -5 "$work/log")"
  fi
  if mpi $n $mlp --deterministic --save "$work/mlp${n}d.st" >/dev/null 2>"$work/log" &&
     cmp -s "$work/mlp1d.st" "$work/mlp${n}d.st" && same_checksums "$work/log" $n; then
    ok "mlp --deterministic, $n ranks: bitwise equal to 1 process"
  else
    bad "mlp --deterministic, $n ranks: not bitwise equal ($(tail -3 "$work/log"))"
  fi
done
# --tiles 3 (remainder blocks in every layer): the tiled step sums its data
# gradient in another order, so it equals the untiled one to rounding; its
# gradient blocks always merge in a fixed order, so 2 ranks equal 1 process
# bitwise.
if "$tg" $mlp --ncpus 2 --tiles 3 --save "$work/mlp1t.st" >/dev/null 2>"$work/log" &&
   r=$(compare "$work/mlp1.st" "$work/mlp1t.st" st 1e-6); then
  ok "mlp --tiles 3 vs untiled: $r"
else
  bad "mlp --tiles 3 vs untiled: ${r:-} $(tail -3 "$work/log")"
fi
if mpi 2 $mlp --tiles 3 --deterministic --save "$work/mlp2t.st" >/dev/null 2>"$work/log" &&
   cmp -s "$work/mlp1t.st" "$work/mlp2t.st" && same_checksums "$work/log" 2; then
  ok "mlp --tiles 3, 2 ranks: bitwise equal to 1 process"
else
  bad "mlp --tiles 3, 2 ranks: not bitwise equal ($(tail -3 "$work/log"))"
fi
loss1d=$(grep -o 'train loss [^ ]*' "$work/log1d")
for s in eager dmdas; do
  for w in 1 2; do
    "$tg" $mlp --deterministic --sched $s --ncpus $w --save "$work/d.st" >/dev/null 2>"$work/log"
    loss=$(grep -o 'train loss [^ ]*' "$work/log")
    if cmp -s "$work/mlp1d.st" "$work/d.st" && [ -n "$loss" ] && [ "$loss" = "$loss1d" ]; then
      ok "mlp --deterministic $s $w workers: $loss and parameters bitwise equal"
    else
      bad "mlp --deterministic $s $w workers: '$loss' vs '$loss1d' or parameters differ"
    fi
  done
done

# ---- GPT ------------------------------------------------------------------
"$tg" init gpt --layers 2 --channels 64 --heads 4 --max-seq 32 --vocab 256 \
  --out "$work/m.bin" >/dev/null 2>&1 || bad "init gpt"
"$py" -c "
import struct, random
random.seed(3)
toks = [random.randrange(256) for _ in range(5000)]
open('$work/tok.bin', 'wb').write(struct.pack('<256i', 20240520, 1, len(toks), *([0] * 253)) + struct.pack('<%dH' % len(toks), *toks))
"
gpt="train gpt --init-from $work/m.bin --data $work/tok.bin --batch 8 --seq 32 --micro-batches 4 --steps 5"
"$tg" $gpt --ncpus 2 --save "$work/g1.bin" >/dev/null 2>"$work/log" || bad "gpt single: $(tail -3 "$work/log")"
"$tg" $gpt --ncpus 2 --deterministic --save "$work/g1d.bin" >"$work/loss1d" 2>"$work/log" || bad "gpt single det"
for n in 2 4; do
  if mpi $n $gpt --save "$work/g$n.bin" >/dev/null 2>"$work/log" && same_checksums "$work/log" $n &&
     r=$(compare "$work/g1.bin" "$work/g$n.bin" llmc 1e-6); then
    ok "gpt $n ranks vs 1 process, ranks identical: $r"
  else
    bad "gpt $n ranks: ${r:-} $(tail -3 "$work/log")"
  fi
  if mpi $n $gpt --deterministic --save "$work/g${n}d.bin" >"$work/loss" 2>"$work/log" &&
     cmp -s "$work/g1d.bin" "$work/g${n}d.bin" && same_checksums "$work/log" $n &&
     diff <(awk '{print $1, $2, $3, $4}' "$work/loss1d") <(awk '{print $1, $2, $3, $4}' "$work/loss") >/dev/null; then
    ok "gpt --deterministic, $n ranks: losses and parameters bitwise equal to 1 process"
  else
    bad "gpt --deterministic, $n ranks: differ ($(tail -3 "$work/log"))"
  fi
done
for s in eager dmdas; do
  for w in 1 2; do
    "$tg" $gpt --deterministic --sched $s --ncpus $w --save "$work/d.bin" >"$work/loss" 2>/dev/null
    if cmp -s "$work/g1d.bin" "$work/d.bin" &&
       diff <(awk '{print $1, $2, $3, $4}' "$work/loss1d") <(awk '{print $1, $2, $3, $4}' "$work/loss") >/dev/null; then
      ok "gpt --deterministic $s $w workers: losses ($(awk 'END{print $4}' "$work/loss")) and parameters bitwise equal"
    else
      bad "gpt --deterministic $s $w workers: differ"
    fi
  done
done

# ---- a failing rank --------------------------------------------------------
mkdir -p "$work/bad"
printf 'not an IDX file' >"$work/bad/train-images-idx3-ubyte"
start=$(date +%s)
STARPU_NCPU=1 timeout 120 mpirun -np 2 --bind-to none sh -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then d="$1"; else d=/usr/share/datasets/fashion-mnist; fi
   exec "$0" train mlp --epochs 1 --data-dir "$d"' "$tg" "$work/bad" >"$work/out" 2>"$work/err"
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "taskgrad: error" "$work/err"; then
  ok "a failing rank ends the job: status $rc in ${took} s: $(grep 'taskgrad: error' "$work/err" | head -1)"
else
  bad "a failing rank: status $rc after ${took} s (124 = hung): $(head -c 400 "$work/err")"
fi

finish test_mpi
