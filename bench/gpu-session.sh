#!/usr/bin/env bash
# bench/gpu-session.sh: what one short lease of a GPU machine runs, from a
# bundle made here by scripts/gpu-bundle (the machine has no registry to
# install StarPU's or taskgrad's dependencies from, and a lease is minutes).
# scripts/gpu-check is the long form, for a machine that can build.
#
#   bench/gpu-session.sh BUNDLE.tar.xz OUT [SECONDS [PARTS]]
#
# PARTS: a comma-separated subset of ops,bench,torch,tests,compile (default
# all of them), e.g. to measure again after a change without PyTorch; and,
# not in the default: chunks (124M with --classifier-chunk 1024 and 4096, or
# the sizes in TG_CHUNKS);
# ab (before and after a change in one lease: TG_BASE_BUNDLE names a second
# bundle, of the code before; 124M and 350M, 10 steps each, interleaved
# base / new for TG_AB_ROUNDS rounds, default 2, before the other parts;
# TG_AB_SIDES="base new new-p4" adds the new code with STARPU_CUDA_PIPELINE=4,
# and new-flash the new code with TG_FLASH_ARGS, default "--attention flash
# --micro-batches 1", the shape of the one-GPU predictions (base-flash: the
# code before with them), and new-cpus the
# new code with TG_CPUS_ARGS, default "--ncpus 14": CPU workers beside the GPU).
# TG_BENCH_ARGS: flags added to part bench's runs (calibrate, measure, trace).
# TG_OPS_LIMIT: seconds for the op table (default 150).
# In order, each under its own time limit, skipping what the SECONDS budget
# (default 480) no longer allows, and going on after a failure:
#   1. the machine: GPU, driver, CPU, distribution;
#   2. the CUDA op table (test_ops cuda: every op against the CPU kernels);
#   3. GPT-2 124M bf16, T=1024, 8 sequences, 2 micro-batches, 1 GPU and no
#      CPU worker (as scripts/gpu-check and the simulation): calibrate the
#      perfmodels, measure 10 steps, trace 2;
#   4. PyTorch on the same shape (bench/torch_gpt_cuda.py, eager);
#   5. the same for 350M;
#   6. the C tests that use a GPU when there is one;
#   7. PyTorch with torch.compile.
# OUT gets session.log, perfmodels.tar.xz (the calibrated histories, under
# the name of the simulated platform h100x1, for `simulate --perfmodels`)
# and the traces.
set -u
[ $# -ge 2 ] || { echo "usage: bench/gpu-session.sh BUNDLE.tar.xz OUT [SECONDS [PARTS]]" >&2; exit 2; }
bundle=$(realpath "$1") out=$(realpath "$2") budget=${3:-480} parts=,${4:-ops,bench,torch,tests,compile},
want() { [[ $parts == *,$1,* ]]; }
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" || exit 2
exec > >(tee -a "$out/session.log") 2>&1
t0=$SECONDS
left() { echo $((budget - (SECONDS - t0))); }
say() { echo "=== [$((SECONDS - t0)) s] $*"; }

say "1: the machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
grep -m1 'model name' /proc/cpuinfo; nproc; grep PRETTY /etc/os-release; ldd --version | head -1
tb=$(mktemp -d)
tar -C "$tb" -xJf "$bundle" || { echo "cannot unpack $bundle"; exit 2; }
# cuBLAS, cuBLASLt, cuSPARSE and nvJitLink from the machine's CUDA 13
cudadirs=""
for l in libcublasLt.so.13 libcublas.so.13 libcusparse.so.12 libnvJitLink.so.13; do
  f=$(find /usr/local/cuda/ /usr/local/cuda*/ /opt /usr/lib -name "$l" 2> /dev/null | head -1)
  [ -n "$f" ] || { echo "no $l on this machine"; continue; }
  cudadirs="$cudadirs:$(dirname "$f")"
done
export LD_LIBRARY_PATH="$tb/lib$cudadirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
runner=()
if ! "$tb/bin/taskgrad" --version; then
  # an older glibc than the build's: this machine's loader cannot run it
  echo "starting through the bundle's loader"
  runner=("$tb/sys/ld-linux-x86-64.so.2" --library-path "$tb/sys:$LD_LIBRARY_PATH")
  "${runner[@]}" "$tb/bin/taskgrad" --version || { ldd "$tb/bin/taskgrad"; exit 2; }
fi
# limited LIMIT CMD...: run CMD (tg PROGRAM: one of the bundle's) under min(LIMIT,
# what is left), and say how it ended
limited() {
  local lim=$1 l; shift
  l=$(left); [ "$l" -lt "$lim" ] && lim=$l
  [ "$lim" -ge 20 ] || { say "skipped (budget spent): $*"; return 99; }
  [ "$1" = tg ] && { shift; set -- "${runner[@]}" "$tb/bin/$1" "${@:2}"; }
  timeout -k 5 "$lim" "$@"; local rc=$?
  say "exit $rc: $*"
  return $rc
}
export TG_SOURCE_DIR=$src STARPU_SILENT=1 TG_GEMM_LIB=openblas OPENBLAS_NUM_THREADS=1
home=$tb/starpu-home
shape124=(--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 --seq 1024)
shape350=(--layers 24 --channels 1024 --heads 16 --vocab 50257 --max-seq 1024 --seq 1024)
common=(--precision bf16 --batch 8 --micro-batches 2 --ncuda 1)
ncpus=(--ncpus 0)
save_models() { tar -C "$home/.starpu" -cJf "$out/perfmodels.tar.xz" sampling 2> /dev/null; }

want ops && say "2: the CUDA op table"
# one StarPU home for every run: the bus is calibrated once
want ops && STARPU_HOME=$home STARPU_HOSTNAME=h100x1 limited "${TG_OPS_LIMIT:-150}" tg test_ops cuda

bench() { # bench SIZE ARGS...
  local m=$1; shift
  local shape="shape$m[@]"
  STARPU_HOME=$home STARPU_HOSTNAME=h100x1 limited "${LIMIT:-120}" \
    tg taskgrad bench gpt "${!shape}" "${common[@]}" "${ncpus[@]}" ${TG_BENCH_ARGS:-} "$@"
}
if want ab; then
  tbb=$(mktemp -d)
  if [ -z "${TG_BASE_BUNDLE:-}" ] || ! tar -C "$tbb" -xJf "$TG_BASE_BUNDLE"; then
    say "ab: cannot unpack TG_BASE_BUNDLE '${TG_BASE_BUNDLE:-}'"
  else
    for round in $(seq 1 "${TG_AB_ROUNDS:-2}"); do
      for m in 124 350; do
        for side in ${TG_AB_SIDES:-base new}; do
          say "ab: round $round, ${m}M, $side"
          dir=$tb; [[ $side == base* ]] && dir=$tbb
          shape="shape$m[@]" extra=()
          [[ $side == *-flash ]] && read -ra extra <<< "${TG_FLASH_ARGS:---attention flash --micro-batches 1}"
          [ $side = new-cpus ] && read -ra extra <<< "${TG_CPUS_ARGS:---ncpus 14}"
          (export LD_LIBRARY_PATH="$dir/lib:$tb/lib$cudadirs"
           [ $side = new-p4 ] && export STARPU_CUDA_PIPELINE=4
           lim=90; [ $side = new-cpus ] && lim=40 # were tasks to leave the GPU, a step takes seconds
           STARPU_HOME=$home STARPU_HOSTNAME=h100x1 limited $lim "${runner[@]}" "$dir/bin/taskgrad" \
             bench gpt "${!shape}" "${common[@]}" "${ncpus[@]}" "${extra[@]}" --warmup 3 --steps 10 --quiet) |
            grep -E "median step|tokens/s|GFLOP/s|attention|exit"
        done
      done
    done
  fi
fi

for m in 124 350; do
  shape="shape$m[@]"
  want bench || break
  say "3: GPT-2 ${m}M bf16 on 1 GPU: calibrate"
  bench $m --calibrate --warmup 2 --steps 5 --quiet
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 99 ] && [ ${#ncpus[@]} -eq 2 ] && [ "${ncpus[1]}" = 0 ]; then
    say "again with 2 CPU workers beside the GPU"
    ncpus=(--ncpus 2)
    bench $m --calibrate --warmup 2 --steps 5 --quiet
  fi
  save_models
  say "3: GPT-2 ${m}M: measure"
  bench $m --warmup 3 --steps 10 --stats
  say "3: GPT-2 ${m}M: trace"
  LIMIT=60 bench $m --warmup 2 --steps 2 --quiet --trace "$tb/trace-$m.json" &&
    xz -T0 -c "$tb/trace-$m.json" > "$out/trace-$m.json.xz"
  want torch || continue
  say "4: PyTorch ${m}M eager"
  a=(${!shape}); limited 90 python3 "$src/bench/torch_gpt_cuda.py" --layers "${a[1]}" \
    --channels "${a[3]}" --heads "${a[5]}" --batch 8 --seq 1024
done

if want chunks; then
  for ch in ${TG_CHUNKS:-1024 4096}; do
    say "3: GPT-2 124M with --classifier-chunk $ch"
    bench 124 --warmup 3 --steps 10 --quiet --classifier-chunk $ch
  done
fi

want tests && say "6: the C tests that use a GPU when there is one"
want tests && for p in test_gpt_precision test_mlp_precision test_gpt_micro test_mlp_redux test_mlp_schedulers \
  test_mlp_tiled test_sched_policies test_checkpoint; do
  (cd "$tb" && STARPU_HOME=$home STARPU_HOSTNAME=h100x1 limited 40 tg $p > "$tb/$p.log" 2>&1; rc=$?;
   echo "$p: exit $rc"; [ $rc -eq 0 ] || tail -5 "$tb/$p.log")
done

want compile && say "7: PyTorch 124M compiled"
want compile && limited 200 python3 "$src/bench/torch_gpt_cuda.py" --compile --batch 8 --seq 1024
save_models
say "done, $(left) s of the budget left"
