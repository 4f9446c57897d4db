#!/usr/bin/env bash
# scripts/gpu-check's own command line, without building anything:
#  - --help prints its usage and exits 0;
#  - a bad flag, or a flag without its value, exits 2 with one message;
#  - --dry-run prints the six steps and the commands (the CUDA build, the
#    CUDA op tests, calibration and measurement with STARPU_HOSTNAME of the
#    simulated platform, the simulations with --perfmodels) and runs none.
# Its no-GPU path (builds, test_ops_cuda SKIP, exit 77) runs in .ci/run's
# CUDA block.  Then the short-lease pair (docs/benchmarks.md, "GPU lease"):
# scripts/gpu-bundle refuses a missing or misnamed archive and a build without
# CUDA, and bench/gpu-session.sh its missing or bad arguments, each with exit
# 2; the session's dry run is its plan: the parts in order, the limits summing
# to at most the 480 s of one lease, the before/after sides of the A/B
# (TG_CUBLASLT=0), every GPT run on the simulator's default graph (B 8, T
# 1024, 2 micro-batches), the calibration in its own StarPU home, and every
# command's flags accepted by this build's taskgrad and test_ops and by
# bench/torch_gpt_cuda.py (--parse-only); a program that refuses one makes
# the dry run exit 1.
. "$(dirname "$0")/cli_testlib.sh"
gc="$TG_SOURCE_DIR/scripts/gpu-check"

if "$gc" --help >"$work/out" 2>&1 && grep -q -- '--dry-run' "$work/out"; then
  ok "--help"
else
  bad "--help: $(head -3 "$work/out")"
fi

gc_fail() { expect_fail_of "$gc" 'gpu-check: ' "$@"; }
gc_fail "unknown flag" "^gpu-check: unknown argument '--bogus'" --bogus
gc_fail "--jobs x" "^gpu-check: --jobs needs a positive integer" --jobs x
gc_fail "--steps 0" "^gpu-check: --steps needs a positive integer" --steps 0
gc_fail "--out without a value" "^gpu-check: --out needs a directory" --out
gc_fail "--build-dir without a value" "^gpu-check: --build-dir needs a directory" --build-dir

if "$gc" --dry-run --out "$work/gc" --build-dir "$work/b" >"$work/out" 2>&1; then
  steps=$(grep -c '^gpu-check: step [1-6]/6' "$work/out")
  if [ "$steps" -eq 6 ] &&
     grep -q "^+ cmake -S . -B $work/b -DTG_CUDA=ON" "$work/out" &&
     grep -q "test_ops_cuda" "$work/out" &&
     grep -q "STARPU_HOSTNAME=h100x1 .* --calibrate" "$work/out" &&
     grep -q -- "--perfmodels $work/gc/starpu-home/.starpu/sampling" "$work/out" &&
     grep -q "dry run: nothing run" "$work/out" && [ ! -e "$work/b" ]; then
    ok "--dry-run: the six steps, nothing built"
  else
    bad "--dry-run: $(head -c 600 "$work/out")"
  fi
else
  bad "--dry-run exited $?: $(tail -3 "$work/out")"
fi
gb="$TG_SOURCE_DIR/scripts/gpu-bundle"
gb_fail() { expect_fail_of "$gb" 'gpu-bundle: ' "$@"; }
gb_fail "gpu-bundle without an archive" "^gpu-bundle: name the archive" --build-dir "$work/b"
gb_fail "gpu-bundle, not .tar.xz" "^gpu-bundle: the archive must end in .tar.xz" "$work/x.tgz"
gb_fail "gpu-bundle, unknown flag" "^gpu-bundle: unknown flag '--bogus'" --bogus
mkdir -p "$work/cpu-build" && echo 'TG_CUDA:STRING=OFF' > "$work/cpu-build/CMakeCache.txt"
gb_fail "gpu-bundle, a build without CUDA" "is not a CUDA build" --build-dir "$work/cpu-build" \
  "$work/x.tar.xz"
[ ! -e "$work/x.tar.xz" ] && ok "gpu-bundle: no archive written on refusal" ||
  bad "gpu-bundle wrote an archive on refusal"
gs="$TG_SOURCE_DIR/bench/gpu-session.sh"
expect_fail_of "$gs" 'usage: ' "gpu-session without arguments" \
  "^usage: bench/gpu-session.sh \[--dry-run\] \[--bin DIR\] BUNDLE"
gs_fail() { expect_fail_of "$gs" 'gpu-session: ' "$@"; }
gs_fail "gpu-session, unknown flag" "^gpu-session: unknown flag '--bogus'" --bogus x y
gs_fail "gpu-session, unknown part" "^gpu-session: unknown part 'opz'" --dry-run b o 480 ops,opz
gs_fail "gpu-session, bad budget" "^gpu-session: SECONDS must be a positive integer" --dry-run b o 8m
gs_fail "gpu-session, --bin without taskgrad" "^gpu-session: --bin $work: no taskgrad there" \
  --dry-run --bin "$work"

# the plan of the default session, its flags checked with this build
if "$gs" --dry-run --bin "$TG_BIN" > "$work/plan" 2>&1; then
  order=$(sed -n 's/^plan: \([a-z0-9-]*\) .*/\1/p' "$work/plan" | grep -Ev '^(total|flags)$' | tr '\n' ' ')
  want="machine ops ab124-r1-before ab124-r1-after ab124-r2-after ab124-r2-before torch124-eager \
torch124-compile ab350-r1-before ab350-r1-after torch350-eager tf32-124 fp32-124 calibrate124 \
calibrate350 trace124 "
  sum=$(awk '$1 == "plan:" && $2 != "total" && $3 ~ /^[0-9]+$/ && $4 == "s" {s += $3} END {print s}' "$work/plan")
  total=$(sed -n 's/^plan: total \([0-9]*\) s of limits.* = \([0-9]*\) s, budget 480 s$/\1 \2/p' "$work/plan")
  ncmd=$(grep -c '^plan: .* s  .*\(taskgrad\|test_ops\|torch_gpt_cuda\)' "$work/plan")
  [ "$order" = "$want" ] && ok "gpu-session plan: the parts in order" ||
    bad "gpu-session plan: parts '$order', expected '$want'"
  [ -n "$total" ] && [ "${total% *}" = "$sum" ] && [ "${total#* }" -le 480 ] &&
    ok "gpu-session plan: limits sum to $sum s, ${total#* } s with the reserve, within 480 s" ||
    bad "gpu-session plan: limits sum to $sum, total line '$total' ($(grep '^plan: total' "$work/plan"))"
  gpt=$(grep -c '^plan: .*taskgrad bench gpt' "$work/plan")
  graph=$(grep '^plan: .*taskgrad bench gpt' "$work/plan" |
    grep -c -- '--seq 1024 .*--batch 8 --micro-batches 2 --ncuda 1 --ncpus 0')
  [ "$gpt" -eq 11 ] && [ "$graph" -eq "$gpt" ] &&
    ok "gpu-session plan: the $gpt GPT runs on the default graph (B 8, T 1024, 2 micro-batches)" ||
    bad "gpu-session plan: $graph of $gpt GPT runs on the default graph (11 expected)"
  if [ "$(grep -c '^plan: ab[0-9]*-r[0-9]-before .* TG_CUBLASLT=0 taskgrad' "$work/plan")" -eq 3 ] &&
     ! grep -q '^plan: ab[0-9]*-r[0-9]-after .*TG_CUBLASLT' "$work/plan" &&
     [ "$(grep -c '^plan: calibrate[0-9]* .* --calibrate .*STARPU_HOME home-cal' "$work/plan")" -eq 2 ] &&
     grep -q '^plan: torch124-compile .*torch_gpt_cuda.py .*--compile' "$work/plan"; then
    ok "gpu-session plan: A/B sides, the calibration's own home, torch.compile"
  else
    bad "gpu-session plan: $(head -c 1500 "$work/plan")"
  fi
  [ "$(grep -c '^flags ok: ' "$work/plan")" -eq "$ncmd" ] && [ "$ncmd" -eq 15 ] &&
    grep -q "^plan: flags checked with $TG_BIN: 0 refused" "$work/plan" &&
    ok "gpu-session plan: the $ncmd commands' flags accepted" ||
    bad "gpu-session plan: flags: $(grep -E '^(flags|plan: flags)' "$work/plan" | head -5)"
else
  bad "gpu-session --dry-run exited $?: $(tail -5 "$work/plan")"
fi
# a program that refuses a flag fails the dry run
mkdir -p "$work/refusing"
printf '#!/bin/sh\necho "taskgrad: error: unknown flag" >&2\nexit 2\n' > "$work/refusing/taskgrad"
printf '#!/bin/sh\necho "usage: test_ops ref|cpu|cuda"\nexit 2\n' > "$work/refusing/test_ops"
chmod +x "$work/refusing/taskgrad" "$work/refusing/test_ops"
"$gs" --dry-run --bin "$work/refusing" b o 480 ops,ab124 > "$work/plan2" 2>&1
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '^flags REFUSED: ab124' "$work/plan2")" -eq 4 ] &&
  grep -q '^flags ok: ops' "$work/plan2" && ok "gpu-session plan: a refused flag exits 1" ||
  bad "gpu-session plan with a refusing taskgrad: exit $rc, $(grep flags "$work/plan2" | head -3)"
# after the lease: bench/lease-compare.sh's simulations, their flags parsed
lc="$TG_SOURCE_DIR/bench/lease-compare.sh"
expect_fail_of "$lc" 'lease-compare: ' "lease-compare without a folder" "^lease-compare: name the lease's folder"
expect_fail_of "$lc" 'lease-compare: ' "lease-compare, no summary" "summary.tsv is missing" "$work"
if "$lc" --dry-run --sim "$TG_BIN/taskgrad" "$work" > "$work/lc" 2>&1; then
  n=0 good=0
  while read -r plus cmd; do
    [ "$plus" = + ] || continue
    n=$((n + 1))
    # shellcheck disable=SC2086 # the printed command, word by word
    $cmd --help > /dev/null 2>&1 && good=$((good + 1))
  done < "$work/lc"
  [ $n -eq 6 ] && [ $good -eq 6 ] && [ "$(grep -c -- '--platform h100x8 --gpus 1 ' "$work/lc")" -eq 4 ] &&
    [ "$(grep -c -- '--perfmodels PERFMODELS/sampling' "$work/lc")" -eq 4 ] &&
    ok "lease-compare --dry-run: 6 simulations, flags accepted" ||
    bad "lease-compare --dry-run: $good of $n accepted: $(head -c 600 "$work/lc")"
else
  bad "lease-compare --dry-run exited $?: $(tail -3 "$work/lc")"
fi
finish test_gpu_check
