# Environment values (src/env_check.c): a value StarPU would crash on, ignore
# or misread is one "taskgrad: error:" line naming the variable and exit 2,
# before any work, in every command that starts StarPU (train gpt, train
# mlp, bench gpt, simulate: in a build without SimGrid simulate stops at
# "built without SimGrid", after the environment); a sample of every kind
# of the table, each at abc, -1, empty or huge.  Good values still run, and
# docs/reliability.md lists exactly the table's rows.
. "$(dirname "$0")/cli_testlib.sh"

src=${TG_SOURCE_DIR:-$(dirname "$0")/..}

# the four commands; the environment is checked before their files
gpt=(train gpt --init-from "$work/m.bin" --data "$work/t.bin" --batch 2 --seq 8 --steps 1)
mlp=(train mlp --steps 1)
bgpt=(bench gpt --init-from "$work/m.bin" --batch 2 --seq 8 --steps 1 --warmup 0)
sim=(simulate gpt --platform h100x1 --steps 1)
touch "$work/afile"
check() { # VAR=value pattern: refused by each command (VAR restored after:
  # TG_GEMM_LIB and STARPU_HOME of the test environment must stay)
  local assign=$1 pattern=$2 var=${1%%=*}
  local had=${!var+x} old=${!var-}
  for cmd in gpt mlp bgpt sim; do
    local -n args=$cmd
    export "$assign"
    expect_fail "$assign ($cmd)" "$pattern" "${args[@]}"
    if [ -n "$had" ]; then export "$var=$old"; else unset "$var"; fi
  done
}
# whole numbers, floats
check STARPU_NCPU=abc "STARPU_NCPU='abc' is not a number of CPU workers from 0 to"
check STARPU_CALIBRATE=-1 "STARPU_CALIBRATE='-1' is not a whole number from 0 to 2147483647"
check STARPU_PREFETCH=99999999999999999999 "STARPU_PREFETCH='99999999999999999999' is not a whole"
check STARPU_LIMIT_CUDA_MEM=2G "STARPU_LIMIT_CUDA_MEM='2G' is not a number of MiB"
check STARPU_WATCHDOG_TIMEOUT= "STARPU_WATCHDOG_TIMEOUT is set but empty"
check TG_EMULATED_DEVICES=two "TG_EMULATED_DEVICES='two' is not a number of devices from 0 to 8"
check STARPU_SCHED_ALPHA=fast "STARPU_SCHED_ALPHA='fast' is not a number"
check TG_MEMAWARE_PRESSURE=-1 "TG_MEMAWARE_PRESSURE='-1' is not a fraction from 0 to 1"
# lists (the crashes of issue 54: 134 and 139)
check STARPU_WORKERS_CPUID=abc "STARPU_WORKERS_CPUID='abc' is not a list of CPU numbers"
check STARPU_WORKERS_CPUID=-1 "STARPU_WORKERS_CPUID='-1' is not a list of CPU numbers"
check STARPU_WORKERS_COREID= "STARPU_WORKERS_COREID is set but empty"
check STARPU_WORKERS_OPENCLID=abc "STARPU_WORKERS_OPENCLID='abc' is not a list of device numbers"
check STARPU_WORKERS_CUDAID=99999999999999999999 "STARPU_WORKERS_CUDAID='9+' is not a list"
# names
check STARPU_SCHED=nosuch "STARPU_SCHED='nosuch' is not a scheduling policy; known: tg-critpath"
check STARPU_SCHED=-1 "STARPU_SCHED='-1' is not a scheduling policy"
check TG_GEMM_LIB=fast "TG_GEMM_LIB='fast' is not one of openblas,onednn,libxsmm,auto"
check TG_GEMM_BF16=abc "TG_GEMM_BF16='abc' is not one of native,widen,auto"
check STARPU_DISK_SWAP_BACKEND= "STARPU_DISK_SWAP_BACKEND is set but empty"
check STARPU_HOSTNAME=a/b "STARPU_HOSTNAME='a/b': a host name cannot hold '/'"
# paths
check STARPU_HOME=$work/afile "STARPU_HOME='.*afile': '.*afile' is not a directory"
check STARPU_PERF_MODEL_DIR= "STARPU_PERF_MODEL_DIR is set but empty"
check XDG_CACHE_HOME=$work/afile/cache "XDG_CACHE_HOME='.*': a part of the path is not a directory"
check STARPU_FXT_PREFIX=abc "STARPU_FXT_PREFIX='abc' is not a directory"
check STARPU_IDLE_FILE=$work/no/idle "STARPU_IDLE_FILE='.*': directory '.*no' does not exist"
check STARPU_HWLOC_INPUT=-1 "STARPU_HWLOC_INPUT='-1' is not a readable file"
check TG_PLATFORM_DIR=abc "TG_PLATFORM_DIR='abc' is not a directory"
# a bad value in a command's --help is no error
STARPU_WORKERS_CPUID=abc "$tg" train gpt --help >/dev/null 2>&1 && ok "--help with a bad value" \
  || bad "--help with a bad value exited $?"

# the other start-up items of issue 54: a group's --help lists its models
# (exit 0), --ncpus above StarPU's ceiling is refused in every command
for group in train bench init prepare; do
  if "$tg" $group --help >"$work/out" 2>&1 && grep -q "^usage: taskgrad $group " "$work/out"; then
    ok "$group --help"
  else
    bad "$group --help: $(head -2 "$work/out")"
  fi
done
for cmd in gpt mlp bgpt; do
  declare -n args=$cmd
  expect_fail "--ncpus 1000 ($cmd)" \
    "--ncpus 1000: this StarPU runs at most [0-9]+ CPU workers \(STARPU_MAXCPUS.*this machine has [0-9]+ cores" \
    "${args[@]}" --ncpus 1000
done

"$tg" init gpt --layers 1 --channels 16 --heads 2 --max-seq 16 --vocab 64 --seed 1 \
  --out "$work/m.bin" >/dev/null || { bad "init gpt"; finish test_env; exit; }
token_file "$work/t.bin" 4096 7 3 64
# device numbers against the emulated devices (StarPU 1.3 asserts otherwise)
export STARPU_WORKERS_OPENCLID=1
expect_fail "STARPU_WORKERS_OPENCLID=1 with 1 emulated device" \
  "STARPU_WORKERS_OPENCLID='1': with 1 emulated device the device numbers go from 0 to 0" \
  "${gpt[@]}" --emulated-devices 1
unset STARPU_WORKERS_OPENCLID

# values that StarPU accepts still run: empty where it means 0 or the
# default, lists with ranges and commas, a host name, ordinary numbers
if STARPU_PREFETCH= STARPU_SCHED= TG_GEMM_BF16= STARPU_NCPU=1 STARPU_CALIBRATE=0 \
     STARPU_SCHED_ALPHA=1.5 STARPU_WORKERS_CPUID="1-,0" STARPU_HOSTNAME=tg-env-test \
     "$tg" "${gpt[@]}" >"$work/out" 2>"$work/err"; then
  ok "valid values run: $(grep -c '^step' "$work/out") step"
else
  bad "valid values refused: $(tail -2 "$work/err")"
fi

# docs/reliability.md lists the table's rows, no more, no fewer
grep -oE '\b(I|MIB|CPUS|F|FS|ROW)\("[A-Z_0-9]+"' "$src/src/env_check.c" \
  | sed -E 's/.*"(.*)"/\1/' | sort >"$work/table"
sed -n '/<!-- env-table/,/<!-- \/env-table/p' "$src/docs/reliability.md" \
  | grep -oE '`[A-Z][A-Z_0-9]+`' | tr -d '`' | grep -v '^STARPU_MAXCPUS$' | sort -u >"$work/doc"
if [ "$(wc -l <"$work/table")" -gt 100 ] && diff "$work/table" "$work/doc" >"$work/diff"; then
  ok "docs/reliability.md lists the $(wc -l <"$work/table") rows of the table"
else
  bad "docs/reliability.md and src/env_check.c differ (< table, > doc): $(cat "$work/diff")"
fi
finish test_env
