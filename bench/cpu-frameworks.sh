#!/usr/bin/env bash
# The CPU comparison of issue 25's table: one GPT training step (forward,
# backward, AdamW, fp32) of the same model and batch in taskgrad, PyTorch,
# JAX and llm.c's CPU trainer, 2 threads each, interleaved round by round:
#   bench/cpu-frameworks.sh [-r ROUNDS] [-s SIZES] BUILD
# SIZES: d4 (L4 C256 NH4 V256, B8 T256) and/or 124m (GPT-2 small, B4 T64);
# default both.  Each round runs, per size: the sgemm ceiling (BUILD's
# gemm_libs --ceiling, best 2-thread 2048^3 of any library), taskgrad as the
# environment configures it (bench gpt --init-from, its own GEMM choice),
# PyTorch (bench/torch_gpt.py, /usr/bin/python3), JAX (bench/jax_gpt.py,
# with $JAX_PYTHON, default ~/.cache/taskgrad/jax-venv/bin/python; skipped
# when that has no jax) and llm.c (bench/llmc_step.c built against
# $LLMC_DIR/train_gpt2.c with llm.c's flags; skipped without LLMC_DIR).
# Every framework gets the same llm.c checkpoint (taskgrad init gpt) and
# token file; the ones that take a thread count get 2, JAX is pinned to 2
# cores.  Prints one line per run: size, framework, median step ms.
set -euo pipefail
rounds=2
sizes="d4 124m"
while getopts "r:s:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    s) sizes=$OPTARG ;;
    *) echo "usage: $0 [-r ROUNDS] [-s 'd4 124m'] BUILD" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: $0 [-r ROUNDS] [-s 'd4 124m'] BUILD" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$0: error: -r wants a positive integer" >&2; exit 2; }
build=$(cd "$1" && pwd)
tg=$build/bin/taskgrad
[ -x "$tg" ] || { echo "$0: error: no $tg" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
jax_python=${JAX_PYTHON:-$HOME/.cache/taskgrad/jax-venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# size -> init gpt flags and the batch
shape() {
  case $1 in
    d4) echo "--layers 4 --channels 256 --heads 4 --vocab 256 --max-seq 256" ;;
    124m) echo "--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024" ;;
    *) echo "$0: error: unknown size '$1' (d4, 124m)" >&2; exit 2 ;;
  esac
}
batch() { case $1 in d4) echo "8 256" ;; 124m) echo "4 64" ;; esac; }

for s in $sizes; do
  # shellcheck disable=SC2046
  "$tg" init gpt $(shape "$s") --out "$work/$s.bin" >/dev/null
  read -r B T < <(batch "$s")
  vocab=$(shape "$s" | sed 's/.*--vocab \([0-9]*\).*/\1/')
  /usr/bin/python3 - "$work/$s.tok" $((B * T + 1)) "$vocab" <<'PY'
import sys
import numpy as np
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240520, 1, n)
tokens = np.random.default_rng(7).integers(0, vocab, n).astype(np.uint16)
with open(path, "wb") as f:
    f.write(header.tobytes())
    f.write(tokens.tobytes())
PY
done

have_jax=0
"$jax_python" -c "import jax" 2>/dev/null && have_jax=1
[ $have_jax = 1 ] || echo "# JAX: skipped ($jax_python has no jax; python3 -m venv" \
  "~/.cache/taskgrad/jax-venv && ~/.cache/taskgrad/jax-venv/bin/pip install 'jax[cpu]')"
have_llmc=0
if [ -n "${LLMC_DIR:-}" ]; then
  gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$LLMC_DIR" \
    "$here/llmc_step.c" -o "$work/llmc_step" -lm && have_llmc=1
else
  echo "# llm.c: skipped (set LLMC_DIR to an llm.c checkout)"
fi

# the number after "KEY median step ms:" (taskgrad adds its minimum and maximum)
median() {
  awk -v key="$1" 'index($0, key " median step ms:") == 1 {
      for (i = 1; i < NF; i++) if ($i == "ms:") print $(i + 1) }'
}
for r in $(seq 1 "$rounds"); do
  ceiling=$("$build/bin/gemm_libs" --ceiling | awk '$1 == "ceiling" && $2 ~ /^(openblas|onednn|libxsmm)$/ {if ($5 > c) c = $5} END {print c}')
  echo "round $r ceiling $ceiling GFLOP/s (best 2-thread 2048^3 sgemm)"
  for s in $sizes; do
    read -r B T < <(batch "$s")
    m=$("$tg" bench gpt --init-from "$work/$s.bin" --batch "$B" --seq "$T" --quiet 2>&1 | median taskgrad)
    echo "round $r $s taskgrad $m"
    m=$(/usr/bin/python3 "$here/torch_gpt.py" --model "$work/$s.bin" --tokens "$work/$s.tok" \
          --batch "$B" --seq "$T" --threads 2 | median torch)
    echo "round $r $s pytorch $m"
    if [ $have_jax = 1 ]; then
      m=$(XLA_FLAGS="--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2" \
          taskset -c 0-1 "$jax_python" "$here/jax_gpt.py" --model "$work/$s.bin" \
          --tokens "$work/$s.tok" --batch "$B" --seq "$T" | median jax)
      echo "round $r $s jax $m"
    fi
    if [ $have_llmc = 1 ]; then
      m=$(OMP_NUM_THREADS=2 "$work/llmc_step" "$work/$s.bin" "$B" "$T" 10 2 | median llm.c)
      echo "round $r $s llm.c $m"
    fi
  done
done
