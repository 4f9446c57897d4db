#!/usr/bin/env bash
# bench/sim-h100.sh BUILD_SIM OUTDIR: the simulated H100 results of issue 13
# (bench/results/*-simulate-h100.md quotes them).  Roofline predictions
# (--cost peak, as when they were made: the H100 platforms' shipped
# histories, `simulate`'s default since issue 53, are left out).
#  1. GPT-2 124M and 350M, T=1024, 8 sequences per GPU (weak scaling), fp32
#     and bf16, on 1, 2, 4 and 8 GPUs of h100x8: CSV + chart each;
#  2. schedulers on GPT-2 124M bf16, 4 GPUs, and the 1-8 GPU sweep again
#     under dmda and tg-critpath (the sweeps of 1. use StarPU's default, lws);
#  3. GPT-2 124M fp32 on 1 GPU with 32 sequences, without and with
#     STARPU_LIMIT_CUDA_MEM=16384 (16 GiB).
# Simulated time does not depend on the host's load; the wall time does.
# Host memory: big host tensors are folded mappings in simulation
# (src/tensor.c), so every run here takes well under 1 GB of RAM.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bench/sim-h100.sh BUILD_SIM OUTDIR" >&2; exit 2; }
tg="$1/bin/taskgrad" out="$2"
mkdir -p "$out"
g124=(--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 --seq 1024)
g350=(--layers 24 --channels 1024 --heads 16 --vocab 50257 --max-seq 1024 --seq 1024)
run() { # NAME args...
  local name=$1
  shift
  echo "== $name: taskgrad simulate $*" | tee "$out/$name.txt"
  local t0=$(date +%s)
  "$tg" simulate "$@" --cost peak >> "$out/$name.txt" 2> "$out/$name.err" || echo "(exit status $?)" >> "$out/$name.txt"
  echo "(wall $(( $(date +%s) - t0 )) s)" >> "$out/$name.txt"
}
for p in fp32 bf16; do
  run "gpt124m-$p-sweep" gpt "${g124[@]}" --precision $p --platform h100x8 --gpus 1,2,4,8 \
    --steps 2 --csv "$out/gpt124m-$p-sweep.csv" --chart "$out/gpt124m-$p-sweep.png"
done
for p in fp32 bf16; do
  run "gpt350m-$p-sweep" gpt "${g350[@]}" --precision $p --platform h100x8 --gpus 1,2,4,8 \
    --steps 2 --csv "$out/gpt350m-$p-sweep.csv" --chart "$out/gpt350m-$p-sweep.png"
done
run gpt124m-bf16-sched gpt "${g124[@]}" --precision bf16 --platform h100x4 --gpus 4 --steps 2 \
  --sched lws,eager,prio,ws,dmda,dmdas,heteroprio,tg-critpath,tg-memaware \
  --csv "$out/gpt124m-bf16-sched.csv" --chart "$out/gpt124m-bf16-sched.png"
run gpt124m-bf16-sched-sweep gpt "${g124[@]}" --precision bf16 --platform h100x8 --gpus 1,2,4,8 \
  --steps 2 --sched dmda,tg-critpath --csv "$out/gpt124m-bf16-sched-sweep.csv" \
  --chart "$out/gpt124m-bf16-sched-sweep.png"
run gpt124m-fp32-b32 gpt "${g124[@]}" --platform h100x1 --gpus 1 --batch 32 --micro-batches 4 --steps 2
STARPU_LIMIT_CUDA_MEM=16384 run gpt124m-fp32-b32-16g gpt "${g124[@]}" --platform h100x1 --gpus 1 \
  --batch 32 --micro-batches 4 --steps 2
