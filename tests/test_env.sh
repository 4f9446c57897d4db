# Environment values (src/env_check.c): a numeric StarPU or taskgrad variable
# that StarPU 1.3 would abort on (status 134 inside starpu_get_env_number) is
# one "taskgrad: error:" line and exit 2, for every command that starts
# StarPU; an empty value (StarPU reads 0) and good values still run.
. "$(dirname "$0")/cli_testlib.sh"

"$tg" init gpt --layers 1 --channels 16 --heads 2 --max-seq 16 --vocab 64 --seed 1 \
  --out "$work/m.bin" >/dev/null || { bad "init gpt"; finish test_env; exit; }
"$py" -c "import numpy as np; np.random.seed(0); \
h = np.zeros(256, np.int32); h[0] = 20240520; h[1] = 1; h[2] = 4096; \
open('$work/t.bin', 'wb').write(h.tobytes() + np.random.randint(0, 64, 4096).astype(np.uint16).tobytes())"

mlp=(train mlp --steps 1)
gpt=(train gpt --init-from "$work/m.bin" --data "$work/t.bin" --batch 2 --seq 8 --steps 1)
bench=(bench mlp --steps 1)
check() { # VAR=value pattern: refused by each command (VAR restored after:
  # TG_GEMM_LIB=openblas of the test environment must stay)
  local assign=$1 pattern=$2 var=${1%%=*}
  local had=${!var+x} old=${!var-}
  for cmd in mlp gpt bench; do
    local -n args=$cmd
    export "$assign"
    expect_fail "$assign ($cmd)" "$pattern" "${args[@]}"
    if [ -n "$had" ]; then export "$var=$old"; else unset "$var"; fi
  done
}
for assign in STARPU_NCPU=abc STARPU_NCUDA=-1 STARPU_NOPENCL=1x STARPU_CALIBRATE=yes \
              STARPU_PREFETCH=0.5 STARPU_NCPU=99999999999 TG_EMULATED_DEVICES=two; do
  check "$assign" "${assign%%=*}='${assign#*=}' is not a whole number"
done
check TG_GEMM_LIB=fast "TG_GEMM_LIB='fast' is not one of openblas, onednn, libxsmm, auto"
check STARPU_LIMIT_CUDA_MEM=2G "STARPU_LIMIT_CUDA_MEM='2G' is not a number of MiB"
check STARPU_LIMIT_OPENCL_MEM=lots "STARPU_LIMIT_OPENCL_MEM='lots' is not a number of MiB"
check STARPU_SCHED_ALPHA=fast "STARPU_SCHED_ALPHA='fast' is not a number"

# values that StarPU accepts still run: empty (read as 0 by StarPU where it
# means "default", here the prefetch switch) and ordinary numbers
if STARPU_PREFETCH= STARPU_NCPU=1 STARPU_CALIBRATE=0 STARPU_SCHED_ALPHA=1.5 \
     "$tg" "${gpt[@]}" >"$work/out" 2>"$work/err"; then
  ok "valid values run: $(grep -c '^step' "$work/out") step"
else
  bad "valid values refused: $(tail -2 "$work/err")"
fi
finish test_env
