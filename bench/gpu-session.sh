#!/usr/bin/env bash
# bench/gpu-session.sh: what one lease of a GPU machine runs (at most 8
# minutes), from a bundle made here by scripts/gpu-bundle: the machine has no
# registry to install StarPU's or taskgrad's dependencies from.
# scripts/gpu-check is the long form, for a machine that can build.
# docs/benchmarks.md ("GPU lease") has the whole procedure.
#
#   bench/gpu-session.sh [--dry-run] [--bin DIR] BUNDLE.tar.xz OUT [SECONDS [PARTS]]
#     --dry-run  print the plan (each part, its time limit, its command) and
#                the sum of the limits against the budget; run nothing.
#                BUNDLE and OUT may be left out then.  With --bin DIR (a
#                build's bin/, e.g. build/bin) also check that every command
#                names flags its program accepts (taskgrad: the command with
#                --help appended, which exits 0 only when every flag before
#                it parsed; test_ops: its backend is in the usage; the PyTorch
#                script: --parse-only), and exit 1 if one does not
#     SECONDS    the budget (default 480): each part runs under its own limit,
#                cut to what is left less a 10 s reserve for the archives,
#                and is skipped when less than half its limit is left
#     PARTS      a comma-separated subset of the parts below (default: all
#                but those marked optional)
#
# Parts, in this order (limits in seconds, budgeted from the 2026-11-26/27
# leases' logs, bench/results/2026-11-2*-h100*/: a 124M bench run took 6-7 s
# of wall time, a 350M one 17-19 s, the op table 6-10 s, PyTorch eager 12 s
# and torch.compile 34 s, its warm-up included):
#   machine  15  GPU, driver, CPU, distribution, the bundle's BUILDINFO, the
#                CUDA libraries the bundle leaves out found on this machine
#                (PyTorch's nvidia wheels first, then the CUDA toolkit) and
#                their versions (OUT/libs.txt)
#   ops      40  test_ops cuda: every op-table row against the CPU kernels
#                (the cuBLASLt rows, and a cuDNN attention row where there
#                is one, included)
#   ab124    4x20  GPT-2 124M bf16, T=1024, B=8, 2 micro-batches, 1 GPU, no
#                CPU worker (the simulator's default graph): before / after
#                interleaved in one bundle, 2 rounds of 10 steps (ABBA);
#                before = TG_CUBLASLT=0 (+ --attention gemm when the binary
#                knows a cudnn attention), after = the defaults
#   torch124 30+70  PyTorch eager, then torch.compile (its warm-up counts),
#                on the same shape (bench/torch_gpt_cuda.py)
#   ab350    2x30  GPT-2 350M bf16, the same, one round
#   torch350 30  PyTorch eager on 350M
#   fp32     20+25  GPT-2 124M in tf32, then fp32, once each (the defaults)
#   calibrate 20+30  the perfmodels on the default graph (124M, 350M;
#                --calibrate --stats, 10 steps: every per-step codelet gets
#                StarPU's 10 samples), in their own StarPU home
#   trace    20  124M, 2 steps, Chrome trace
#   tests    8x25  optional: the C tests that use a GPU when there is one
# OUT gets session.log, summary.tsv (part, limit, seconds, exit, median step
# ms), buildinfo.txt, libs.txt, perfmodels.tar.xz (the calibrated histories
# under the hosts h100x1 and h100x8, for `simulate --platform h100x1|h100x8
# --perfmodels DIR/sampling` and platforms/gen-history.py) and
# trace-124.json.xz: 6 files.
# Without a GPU (no nvidia-smi, or it lists none) it does what it can: the
# machine part, unpacking, the libraries, the bundle's taskgrad starting, and
# the flag check of every planned command with the bundle's programs; then
# exits 77.  Bad arguments: exit 2.
set -u
usage() {
  echo "usage: bench/gpu-session.sh [--dry-run] [--bin DIR] BUNDLE.tar.xz OUT [SECONDS [PARTS]]" >&2
  exit 2
}
die() { echo "gpu-session: $*" >&2; exit 2; }
dry=0 bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --bin) [ -n "${2:-}" ] || die "--bin needs a directory"; bin=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown flag '$1' (see --help)" ;;
    *) break ;;
  esac
done
[ $dry -eq 1 ] || [ $# -ge 2 ] || usage
[ $# -le 4 ] || usage
bundle=${1:-BUNDLE.tar.xz} out=${2:-OUT} budget=${3:-480}
all_parts=ops,ab124,torch124,ab350,torch350,fp32,calibrate,trace
optional_parts=tests
parts=,${4:-$all_parts},
[[ $budget =~ ^[1-9][0-9]*$ ]] || die "SECONDS must be a positive integer: '$budget'"
for p in ${parts//,/ }; do
  [[ ,$all_parts,$optional_parts, == *,$p,* ]] || die "unknown part '$p' (parts: $all_parts,$optional_parts)"
done
[ -z "$bin" ] || [ -x "$bin/taskgrad" ] || die "--bin $bin: no taskgrad there"
want() { [[ $parts == *,$1,* ]]; }
src=$(cd "$(dirname "$0")/.." && pwd)
reserve=10
t0=$SECONDS
left() { echo $((budget - reserve - (SECONDS - t0))); }
say() { echo "=== [$((SECONDS - t0)) s] $*"; }

if [ $dry -eq 0 ]; then
  bundle=$(realpath "$bundle") || die "no bundle '$1'"
  mkdir -p "$out" || exit 2
  out=$(realpath "$out")
  exec > >(tee -a "$out/session.log") 2>&1
  printf 'part\tlimit_s\tseconds\texit\tmedian_ms\n' > "$out/summary.tsv"
fi

# ---- 1. the machine, the bundle, the libraries it leaves out ----------------
gpus=0
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
tb="" runner=() tg_ok=1 needed="" torch_env=()
# find_libs SONAME...: "SONAME DIR" for each, from PyTorch's nvidia wheels
# (python3's, the one that holds torch) first, then the CUDA toolkit's
# folders; "SONAME -" when neither has it.  cuBLAS and cuBLASLt come from one
# folder (libcublas needs its own cuBLASLt).  Also the versions (libs.txt).
find_libs() {
  timeout 10 python3 - "$@" <<'PY' 2> /dev/null
import glob, os, sys
from importlib import metadata
dirs = []
try:
    import nvidia
    for p in list(nvidia.__path__):
        dirs += sorted(glob.glob(os.path.join(p, "*", "lib")))
except Exception as e:
    print("note no nvidia packages in python3 (%s)" % e)
try:
    import nvidia.cudnn as c
    d = os.path.join(list(c.__path__)[0], "lib")
    print("note nvidia.cudnn at", d)
    dirs.insert(0, d)
except Exception:
    pass
for name in sys.argv[1:]:
    for d in dirs:
        if os.path.exists(os.path.join(d, name)):
            print("lib", name, d)
            break
for pkg in ("torch", "nvidia-cublas", "nvidia-cublas-cu12", "nvidia-cudnn-cu13",
            "nvidia-cudnn-cu12", "nvidia-cusparse", "nvidia-nvjitlink", "nvidia-cuda-runtime",
            "nvidia-nccl-cu13", "cuda-toolkit"):
    try:
        print("version", pkg, metadata.version(pkg))
    except Exception:
        pass
PY
}
resolve_libs() { # resolve_libs SONAME...: sets libdirs, writes $1's findings to stdout
  local py toolkit d f name found
  py=$(find_libs "$@")
  echo "$py" | grep -E '^(note|version) ' | sed 's/^/  /'
  toolkit=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64
    /usr/local/cuda-*/targets/x86_64-linux/lib /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu)
  libdirs="" lt_dir=""
  # libcublasLt first, so that libcublas can be taken from its folder
  for name in $(printf '%s\n' "$@" | grep '^libcublasLt'; printf '%s\n' "$@" | grep -v '^libcublasLt'); do
    found=$(echo "$py" | awk -v n="$name" '$1 == "lib" && $2 == n {print $3; exit}')
    # libcublas from libcublasLt's folder when that has it
    if [ "$name" = "${name#libcublasLt}" ] && [ "$name" != "${name#libcublas.}" ] &&
       [ -n "${lt_dir:-}" ] && [ -e "$lt_dir/$name" ]; then
      found=$lt_dir
    fi
    if [ -z "$found" ]; then
      for d in "${toolkit[@]}"; do
        [ -e "$d/$name" ] && { found=$d; break; }
      done
    fi
    [ "$name" != "${name#libcublasLt}" ] && lt_dir=$found
    if [ -n "$found" ]; then
      f=$(readlink -f "$found/$name")
      echo "  $name: $found (${f##*/})"
      [[ :$libdirs: == *:$found:* ]] || libdirs="$libdirs:$found"
    else
      if [[ " $needed " == *" $name "* ]]; then
        echo "  $name: MISSING on this machine (none of this major version: the build needs it)"
      else
        echo "  $name: not on this machine (not linked by this build: a note)"
      fi
    fi
  done
}

if [ $dry -eq 0 ]; then
  say "machine: $gpus GPU(s)"
  if [ "$gpus" -gt 0 ]; then
    timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    timeout 10 nvidia-smi | grep -m1 -o 'CUDA Version: *[0-9.]*'
  fi
  grep -m1 'model name' /proc/cpuinfo; nproc; grep PRETTY /etc/os-release; ldd --version | head -1
  tb=$(mktemp -d)
  tar -C "$tb" -xJf "$bundle" || die "cannot unpack $bundle"
  cp "$tb/BUILDINFO" "$out/buildinfo.txt" 2> /dev/null && sed 's/^/  bundle: /' "$tb/BUILDINFO"
  externals=$(sed -n 's/^external //p' "$tb/BUILDINFO" 2> /dev/null)
  # bundles before BUILDINFO; cuDNN always (a library may dlopen it)
  [ -n "$externals" ] || externals="libcublasLt.so.13 libcublas.so.13 libcusparse.so.12 libnvJitLink.so.13"
  needed=$externals
  [[ " $externals " == *" libcudnn.so.9 "* ]] || externals="$externals libcudnn.so.9"
  echo "  the libraries the bundle leaves out:"
  # shellcheck disable=SC2086
  resolve_libs $externals > "$out/libs.txt"
  cat "$out/libs.txt"
  # PyTorch's parts run with the machine's own (torch's libraries must not
  # meet the bundle's libcudart, libgomp, libz ahead of theirs)
  torch_env=(-u LD_LIBRARY_PATH)
  [ -n "${LD_LIBRARY_PATH+set}" ] && torch_env=("LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
  export LD_LIBRARY_PATH="$tb/lib$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >> "$out/libs.txt"
  # a library of the wrong version shows here, before any part runs
  ldd -r "$tb/lib/libtaskgrad.so.0" 2>&1 | grep -E 'not found|undefined symbol' | grep -v libcuda.so |
    sed 's/^/  unresolved: /' | tee -a "$out/libs.txt"
  if ! "$tb/bin/taskgrad" --version; then
    # an older glibc than the build's: this machine's loader cannot run it
    echo "starting through the bundle's loader"
    runner=("$tb/sys/ld-linux-x86-64.so.2" --library-path "$tb/sys:$LD_LIBRARY_PATH")
    if ! "${runner[@]}" "$tb/bin/taskgrad" --version; then
      echo "gpu-session: the bundle's taskgrad does not start here: only PyTorch's parts run"
      ldd "$tb/bin/taskgrad" | grep -i 'not found'
      tg_ok=0
    fi
  fi
  printf 'machine\t15\t%s\t0\t\n' $((SECONDS - t0)) >> "$out/summary.tsv"
fi

# ---- the plan -------------------------------------------------------------------
export TG_SOURCE_DIR=$src STARPU_SILENT=1 TG_GEMM_LIB=openblas OPENBLAS_NUM_THREADS=1
# StarPU homes: runs (the op table calibrates the bus there; the A/B runs,
# whose "before" side must not write into the histories we keep) and cal
# (the calibration and the trace: what perfmodels.tar.xz holds), its bus
# copied from runs; StarPU files histories under STARPU_HOSTNAME
home_runs=${tb:-TMP}/home-runs home_cal=${tb:-TMP}/home-cal
export STARPU_HOSTNAME=h100x1
shape124=(--layers 12 --channels 768 --heads 12 --vocab 50257 --max-seq 1024 --seq 1024)
shape350=(--layers 24 --channels 1024 --heads 16 --vocab 50257 --max-seq 1024 --seq 1024)
common=(--batch 8 --micro-batches 2 --ncuda 1 --ncpus 0)
bf16=(--precision bf16 "${common[@]}")
# "before": the cuBLAS path, and the gemm attention once a cuDNN one exists
probe=${bin:+$bin/taskgrad}
[ $dry -eq 0 ] && [ $tg_ok -eq 1 ] && probe=$tb/bin/taskgrad
before=(TG_CUBLASLT=0) before_flags=()
if [ -n "$probe" ] && "${runner[@]}" "$probe" bench gpt --help 2> /dev/null | grep -q cudnn; then
  before_flags=(--attention gemm)
fi

total=0 refused=0 nparts=0
# part NAME LIMIT [VAR=VALUE...] CMD...: CMD is `tg PROGRAM ARGS` (one of the
# bundle's programs), `torch ARGS` (bench/torch_gpt_cuda.py) or a function
part() {
  local name=$1 lim=$2 envs=() cmd=() shown l rc t1
  shift 2
  while [[ ${1:-} =~ ^[A-Z_][A-Z0-9_]*= ]]; do envs+=("$1"); shift; done
  total=$((total + lim)) nparts=$((nparts + 1))
  case "$1" in
    tg) shown="${*:2}  [STARPU_HOME ${STARPU_HOME##*/}]" ;;
    torch) shown="python3 bench/torch_gpt_cuda.py ${*:2}" ;;
    *) shown=$* ;;
  esac
  shown="${envs[*]:+${envs[*]} }$shown"
  if [ $dry -eq 1 ] || [ "$gpus" -eq 0 ]; then
    [ $dry -eq 1 ] && printf 'plan: %-18s %4d s  %s\n' "$name" "$lim" "$shown"
    check_flags "$name" "$@"
    return 0
  fi
  l=$(left)
  if [ "$l" -lt $(((lim + 1) / 2)) ]; then
    say "skipped (budget spent: $l s left, the limit is $lim s): $name"
    printf '%s\t%s\t0\tskipped\t\n' "$name" "$lim" >> "$out/summary.tsv"
    return 99
  fi
  [ "$l" -lt "$lim" ] && lim=$l
  case "$1" in
    tg)
      if [ $tg_ok -eq 0 ]; then say "skipped (taskgrad does not start): $name"; return 99; fi
      cmd=("${runner[@]}" "$tb/bin/$2" "${@:3}") ;;
    torch) cmd=(env "${torch_env[@]}" python3 "$src/bench/torch_gpt_cuda.py" "${@:2}") ;;
    *) cmd=("$@") ;;
  esac
  say "$name (limit $lim s): $shown"
  t1=$SECONDS
  env "${envs[@]}" timeout -k 5 "$lim" "${cmd[@]}" > "$tb/part.log" 2>&1
  rc=$?
  cat "$tb/part.log"
  local ms
  ms=$(sed -n 's/^\(taskgrad\|torch\) median step ms: \([0-9.]*\).*/\2/p' "$tb/part.log" | tail -1)
  say "exit $rc after $((SECONDS - t1)) s: $name${ms:+, median step $ms ms}"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$lim" $((SECONDS - t1)) $rc "$ms" >> "$out/summary.tsv"
  return $rc
}
# check_flags NAME CMD...: the flag check of one planned command (dry run
# with --bin, or the no-GPU path with the bundle's programs)
check_flags() {
  local name=$1 dir=${bin}
  shift
  [ $dry -eq 0 ] && dir=$tb/bin
  [ -n "$dir" ] || return 0
  case "$1" in
    tg)
      case "$2" in
        taskgrad) "${runner[@]}" "$dir/taskgrad" "${@:3}" --help > /dev/null 2> "${tb:-/tmp}/flags.err" ;;
        test_ops) "${runner[@]}" "$dir/test_ops" --help 2>&1 | head -1 | tr ' |' '\n\n' | grep -qx "$3" ;;
        *) [ -x "$dir/$2" ] ;;
      esac ;;
    torch) python3 "$src/bench/torch_gpt_cuda.py" "${@:2}" --parse-only > /dev/null 2> "${tb:-/tmp}/flags.err" ;;
    *) declare -F "$1" > /dev/null ;;
  esac
  if [ $? -eq 0 ]; then
    echo "flags ok: $name"
  else
    echo "flags REFUSED: $name: $* ($(head -1 "${tb:-/tmp}/flags.err" 2> /dev/null))"
    refused=$((refused + 1))
  fi
}
seed_home() { # the bus calibration of the op table's run, for another home
  [ -d "$home_runs/.starpu/sampling/bus" ] || return 0
  mkdir -p "$1/.starpu/sampling" && cp -a "$home_runs/.starpu/sampling/bus" "$1/.starpu/sampling/"
}
save_models() { # the calibrated histories, under h100x1 and h100x8
  local s=$tb/models
  compgen -G "$home_cal/.starpu/sampling/codelets/*/*" > /dev/null || return 0
  rm -rf "$s" && mkdir -p "$s" && cp -a "$home_cal/.starpu/sampling" "$s/" || return 0
  for f in "$s"/sampling/codelets/*/*.h100x1; do
    [ -e "$f" ] && cp "$f" "${f%.h100x1}.h100x8"
  done
  tar -C "$s" -cJf "$out/perfmodels.tar.xz" sampling
}
bench124() { echo tg taskgrad bench gpt "${shape124[@]}"; }

[ $dry -eq 1 ] && echo "gpu-session: dry run: budget $budget s (a $reserve s reserve), parts ${parts:1:-1}, bundle $bundle, out $out"
[ $dry -eq 1 ] && printf 'plan: %-18s %4d s  %s\n' machine 15 "nvidia-smi, /proc/cpuinfo, BUILDINFO, the libraries (find_libs)"
total=15
[ $dry -eq 0 ] && [ "$gpus" -eq 0 ] && say "no GPU here: checking the plan's flags with the bundle's programs"

export STARPU_HOME=$home_runs
want ops && part ops "${TG_OPS_LIMIT:-40}" tg test_ops cuda

if want ab124; then
  for round in 1 2; do
    sides="before after"; [ $round = 2 ] && sides="after before"
    for side in $sides; do
      if [ "$side" = before ]; then
        part "ab124-r$round-before" 20 "${before[@]}" tg taskgrad bench gpt "${shape124[@]}" "${bf16[@]}" \
          "${before_flags[@]}" --warmup 3 --steps 10 --quiet
      else
        part "ab124-r$round-after" 20 tg taskgrad bench gpt "${shape124[@]}" "${bf16[@]}" --warmup 3 --steps 10 --quiet
      fi
    done
  done
fi
if want torch124; then
  part torch124-eager 30 torch --layers 12 --channels 768 --heads 12 --batch 8 --seq 1024
  part torch124-compile 70 torch --layers 12 --channels 768 --heads 12 --batch 8 --seq 1024 --compile
fi
if want ab350; then
  part ab350-r1-before 30 "${before[@]}" tg taskgrad bench gpt "${shape350[@]}" "${bf16[@]}" \
    "${before_flags[@]}" --warmup 3 --steps 10 --quiet
  part ab350-r1-after 30 tg taskgrad bench gpt "${shape350[@]}" "${bf16[@]}" --warmup 3 --steps 10 --quiet
fi
want torch350 && part torch350-eager 30 torch --layers 24 --channels 1024 --heads 16 --batch 8 --seq 1024
if want fp32; then
  part tf32-124 20 tg taskgrad bench gpt "${shape124[@]}" --precision tf32 "${common[@]}" --warmup 3 --steps 10 --quiet
  part fp32-124 25 tg taskgrad bench gpt "${shape124[@]}" --precision fp32 "${common[@]}" --warmup 3 --steps 10 --quiet
fi
[ $dry -eq 0 ] && [ "$gpus" -gt 0 ] && seed_home "$home_cal"
export STARPU_HOME=$home_cal
if want calibrate; then
  part calibrate124 20 tg taskgrad bench gpt "${shape124[@]}" "${bf16[@]}" --calibrate --warmup 2 --steps 8 --stats
  part calibrate350 30 tg taskgrad bench gpt "${shape350[@]}" "${bf16[@]}" --calibrate --warmup 2 --steps 8 --stats
  [ $dry -eq 0 ] && [ "$gpus" -gt 0 ] && save_models
fi
if want trace; then
  part trace124 20 tg taskgrad bench gpt "${shape124[@]}" "${bf16[@]}" --warmup 2 --steps 2 --quiet \
    --trace "${tb:-TMP}/trace-124.json" && [ $dry -eq 0 ] && [ "$gpus" -gt 0 ] &&
    xz -T0 -c "$tb/trace-124.json" > "$out/trace-124.json.xz"
fi
export STARPU_HOME=$home_runs
if want tests; then
  for p in test_gpt_precision test_mlp_precision test_gpt_micro test_mlp_redux test_mlp_schedulers \
    test_mlp_tiled test_sched_policies test_checkpoint; do
    part "$p" 25 tg "$p"
  done
fi

if [ $dry -eq 1 ]; then
  echo "plan: total $total s of limits in $((nparts + 1)) parts, + $reserve s reserve = $((total + reserve)) s, budget $budget s$([ $((total + reserve)) -le "$budget" ] || echo ': over, the last parts would be skipped')"
  [ -n "$bin" ] && echo "plan: flags checked with $bin: $refused refused"
  echo "gpu-session: dry run: nothing run"
  [ $refused -eq 0 ] || exit 1
  exit 0
fi
if [ "$gpus" -eq 0 ]; then
  say "no GPU: $refused of $nparts planned commands refused their flags; nothing measured (exit 77)"
  [ $refused -eq 0 ] || exit 1
  exit 77
fi
save_models
say "done, $(left) s of the budget left (and the $reserve s reserve)"
