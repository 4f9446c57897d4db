#!/usr/bin/env bash
# scripts/gpu-check's own command line, without building anything:
#  - --help prints its usage and exits 0;
#  - a bad flag, or a flag without its value, exits 2 with one message;
#  - --dry-run prints the six steps and the commands (the CUDA build, the
#    CUDA op tests, calibration and measurement with STARPU_HOSTNAME of the
#    simulated platform, the simulations with --perfmodels) and runs none.
# Its no-GPU path (builds, test_ops_cuda SKIP, exit 77) runs in .ci/run's
# CUDA block.  Then the short-lease pair (docs/building.md): scripts/gpu-bundle
# refuses a missing or misnamed archive and a build without CUDA, and
# bench/gpu-session.sh its missing arguments, each with exit 2.
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
expect_fail_of "$TG_SOURCE_DIR/bench/gpu-session.sh" 'usage: ' "gpu-session without arguments" \
  "^usage: bench/gpu-session.sh BUNDLE"
finish test_gpu_check
