#!/usr/bin/env bash
# Scaling on the machine at hand (issue: distributed training):
#  1. one process, 1 vs 2 CPU workers: `bench mlp` and `bench gpt` step
#     times, interleaved rounds (the host's speed drifts);
#  2. data parallelism over MPI ranks: `train mlp` on Fashion-MNIST for a
#     fixed number of steps with 1, 2 and 4 ranks of 1 and 2 workers each
#     (global batch 2048 in 8 micro-batches, the same for every row), as
#     samples/s of the training loop;
#  3. the same for `train gpt` (a random L=4 C=256 NH=4 byte-level model,
#     random tokens; global batch 8 x 256 tokens in 4 micro-batches), as
#     tokens/s from the median step time of steps 3 and later.
# Every rank shares the same cores, so rows with ranks x workers > cores are
# oversubscribed.  Every figure is the median of ROUNDS interleaved rounds;
# the single runs are listed too, so that noise shows.
# Usage: bench/scaling.sh [BUILD_DIR] [ROUNDS] [PARTS]  (prints a Markdown
# report; PARTS: which of the sections 1 2 3 to run, default all, so that a
# section measured while the machine was busy can be measured again)
set -eu
build=${1:-build}
rounds=${2:-3}
parts=${3:-1 2 3}
want() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
tg="$build/bin/taskgrad"
[ -x "$tg" ] || { echo "no $tg: build first" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "no mpirun" >&2; exit 2; }
export STARPU_SILENT=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 STARPU_WORKERS_NOBIND=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STARPU_HOME=${STARPU_HOME:-$work/starpu-home}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
med() { echo $1 | tr ' ' '\n' | grep . | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2fx", a/b}'; }
# runs N WORKERS COMMAND...: one process without mpirun, else N ranks
runs() {
  local n=$1 w=$2
  shift 2
  if [ "$n" = 1 ]; then
    STARPU_NCPU=$w "$@"
  else
    STARPU_NCPU=$w timeout 900 mpirun -np "$n" --bind-to none "$@"
  fi
}

echo "# Scaling: workers and MPI ranks"
echo
echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u +%F)"
echo "- command: bench/scaling.sh $build $rounds${3:+ \"$parts\"}"
echo

declare -A t
# sweep KEY FILTER ARGS...: taskgrad ARGS for 1, 2, 4 ranks of 1 and 2
# workers, $rounds interleaved rounds; FILTER (a function) reads one figure
# from a run's output, appended to t[KEY<ranks>.<workers>]
sweep() {
  local key=$1 filter=$2 out
  shift 2
  for r in $(seq "$rounds"); do
    for n in 1 2 4; do
      for w in 1 2; do
        out=$(runs $n $w "$tg" "$@" 2>&1) || { echo "$out" | tail -5 >&2; exit 1; }
        t[$key$n.$w]+="$(echo "$out" | $filter) "
      done
    done
  done
}
# ---- 1. one process, 1 vs 2 workers ---------------------------------------
if want 1; then
for r in $(seq "$rounds"); do
  for w in 1 2; do
    t[mlp$w]+="$("$tg" bench mlp --ncpus $w --quiet 2>&1 | sed -nE 's/^step time: +([0-9.]+) ms.*/\1/p') "
    t[gpt$w]+="$("$tg" bench gpt --ncpus $w --quiet --steps 5 2>&1 | sed -nE 's/^taskgrad median step ms: ([0-9.]+).*/\1/p') "
  done
done
echo "## One process, 1 vs 2 CPU workers (median of $rounds interleaved rounds)"
echo
echo "| step | 1 worker (ms) | 2 workers (ms) | speed-up | runs, 1 worker | runs, 2 workers |"
echo "|---|---:|---:|---:|---|---|"
for m in mlp gpt; do
  a=$(med "${t[${m}1]}")
  b=$(med "${t[${m}2]}")
  label=$([ $m = mlp ] && echo "MLP 784-512-256-10, batch 2048, 2 micro (bench mlp)" ||
          echo "GPT L=4 C=256 T=256 B=8, 2 micro (bench gpt)")
  echo "| $label | $a | $b | $(ratio "$a" "$b") | ${t[${m}1]}| ${t[${m}2]}|"
done
echo
fi

# ---- 2. MLP over MPI ranks ---------------------------------------------------
if want 2; then
mlp_sps() { sed -nE 's/.*trained 60 steps in .* \(([0-9]+) samples\/s\).*/\1/p'; }
sweep mpimlp mlp_sps train mlp --steps 60 --batch 2048 --micro-batches 8
echo "## MPI ranks x workers: train mlp, 60 steps of 2048 samples (8 micro-batches)"
echo
echo "Samples/s of the training loop (evaluations excluded), median of $rounds rounds."
echo
echo "| ranks | workers per rank | samples/s | vs 1 rank, 1 worker | runs |"
echo "|---:|---:|---:|---:|---|"
base=$(med "${t[mpimlp1.1]}")
for n in 1 2 4; do
  for w in 1 2; do
    v=$(med "${t[mpimlp$n.$w]}")
    echo "| $n | $w | $v | $(ratio "$v" "$base") | ${t[mpimlp$n.$w]}|"
  done
done
echo
fi

# ---- 3. GPT over MPI ranks ---------------------------------------------------
if want 3; then
"$tg" init gpt --layers 4 --channels 256 --heads 4 --max-seq 256 --vocab 256 \
  --out "$work/m.bin" >/dev/null
/usr/bin/python3 -c "
import random, struct
random.seed(5)
toks = [random.randrange(256) for _ in range(40000)]
open('$work/tok.bin', 'wb').write(struct.pack('<256i', 20240520, 1, len(toks), *([0] * 253))
                                  + struct.pack('<%dH' % len(toks), *toks))
"
gsteps=12
# median step time of steps 3 .. gsteps (the first ones warm up)
gpt_ms() { sed -nE 's/^step ([0-9]+) loss [^ ]+ \(([0-9.]+) ms.*/\1 \2/p' | awk '$1 >= 3 {print $2}' | median; }
sweep mpigpt gpt_ms train gpt --init-from "$work/m.bin" --data "$work/tok.bin" --batch 8 \
  --seq 256 --micro-batches 4 --steps $gsteps
echo "## MPI ranks x workers: train gpt, $gsteps steps of 8 x 256 tokens (4 micro-batches)"
echo
echo "Median step time of steps 3-$gsteps of each run, then the median over $rounds rounds;"
echo "tokens/s = 2048 / step time."
echo
echo "| ranks | workers per rank | step ms | tokens/s | vs 1 rank, 1 worker | runs (ms) |"
echo "|---:|---:|---:|---:|---:|---|"
gbase=$(med "${t[mpigpt1.1]}")
for n in 1 2 4; do
  for w in 1 2; do
    v=$(med "${t[mpigpt$n.$w]}")
    echo "| $n | $w | $v | $(awk -v m="$v" 'BEGIN{printf "%.0f", 2048 / m * 1e3}') | $(ratio "$gbase" "$v") | ${t[mpigpt$n.$w]}|"
  done
done
fi
