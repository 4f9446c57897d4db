# `taskgrad simulate` refusals (issue 13), in every build: flags and
# platform files are checked before the simulation starts, so a bad platform
# name or GPU count is one "taskgrad: error:" line and exit 2 even in a build
# without SimGrid.  Also checks that platforms/gen-h100.py reproduces the
# committed H100 platform files (their figures are cited there).
source "$TG_SOURCE_DIR/tests/cli_testlib.sh"

expect_fail "no model" "needs a model" simulate
expect_fail "unknown model" "needs a model" simulate cnn --platform h100x1
expect_fail "no platform" "--platform NAME is required" simulate mlp
expect_fail "unknown platform" "no platform 'h200x4' .*known: .*h100x4" simulate mlp --platform h200x4
expect_fail "platform path" "no platform '\.\./platforms/h100x1'" simulate mlp --platform ../platforms/h100x1
expect_fail "empty platform" "no platform ''" simulate gpt --platform ""
expect_fail "zero GPUs and no CPU" "--gpus 0 with --ncpus 0: no worker" simulate mlp --platform h100x4 --gpus 0
expect_fail "more GPUs than the platform" "--gpus 8: platform h100x4 has 4 GPU" simulate mlp --platform h100x4 --gpus 8
expect_fail "one too many in a list" "--gpus 2: platform h100x1 has 1 GPU" simulate gpt --platform h100x1 --gpus 1,2
expect_fail "GPU count not a number" "--gpus" simulate mlp --platform h100x2 --gpus two
expect_fail "negative CPU workers" "--ncpus" simulate mlp --platform h100x2 --ncpus -1
expect_fail "unknown scheduler" "sched" simulate mlp --platform h100x2 --sched nosuch
expect_fail "trace of a sweep" "--trace records one run" simulate mlp --platform h100x4 --gpus 1,2 --trace "$work/t.json"
expect_fail "perfmodels without codelets/" "--perfmodels .*no codelets/" simulate mlp --platform h100x1 --perfmodels "$work"
expect_fail "gpt flag for mlp" "unknown flag '--layers'" simulate mlp --platform h100x1 --layers 2

# a platform whose roofline file lacks a rate
mkdir -p "$work/plat"
for f in "$TG_SOURCE_DIR"/platforms/h100x1.*; do cp "$f" "$work/plat/"; done
grep -v '^gpu_bf16_flops' "$TG_SOURCE_DIR/platforms/h100x1.roofline" > "$work/plat/h100x1.roofline"
TG_PLATFORM_DIR="$work/plat" expect_fail "roofline without bf16" "a rate is missing" simulate mlp --platform h100x1
echo "gpu_fp32_flops -3" >> "$work/plat/h100x1.roofline"
TG_PLATFORM_DIR="$work/plat" expect_fail "negative rate" "bad line 'gpu_fp32_flops -3'" simulate mlp --platform h100x1

# the expected model's factors: all or none, fractions <= 1
grep -v '^gpu_fp32_flops -3' "$work/plat/h100x1.roofline" | grep -v '^gpu_sms' > "$work/plat/r" &&
  echo "gpu_bf16_flops 9.895e+14" >> "$work/plat/r" && mv "$work/plat/r" "$work/plat/h100x1.roofline"
TG_PLATFORM_DIR="$work/plat" expect_fail "expected model without gpu_sms" \
  "the expected model needs all of" simulate mlp --platform h100x1
echo "gpu_sms 132" >> "$work/plat/h100x1.roofline"
sed -i 's/^expected_memory_fraction .*/expected_memory_fraction 1.5/' "$work/plat/h100x1.roofline"
TG_PLATFORM_DIR="$work/plat" expect_fail "expected fraction above 1" \
  "an expected_\*_fraction above 1" simulate mlp --platform h100x1
sed -i 's/^expected_memory_fraction .*/expected_memory_fraction 0.9/; s/^expected_flash_fraction .*/expected_flash_fraction 1.2/' \
  "$work/plat/h100x1.roofline"
TG_PLATFORM_DIR="$work/plat" expect_fail "flash fraction above 1" \
  "an expected_\*_fraction above 1" simulate mlp --platform h100x1
expect_fail "unknown cost model" "--cost: 'fast' is not calibrated, peak, expected or both" \
  simulate mlp --platform h100x1 --cost fast
expect_fail "expected model on a platform without it" "--cost expected: platforms/cpu2.roofline has no expected model" \
  simulate mlp --platform cpu2 --gpus 0 --ncpus 1 --cost expected
expect_fail "calibrated without histories" "--cost calibrated: platform cpu2 ships no calibrated history" \
  simulate mlp --platform cpu2 --gpus 0 --ncpus 1 --cost calibrated
expect_fail "both models of a sweep" "--cost both runs one configuration twice" \
  simulate mlp --platform h100x4 --gpus 1,2 --cost both

expect_fail "more CPUs than the platform's" "--ncpus 3: platform cpu2 has 2 CPU core" \
  simulate mlp --platform cpu2 --gpus 0 --ncpus 3

# the committed platform files are what the generators write
for gen in gen-h100.py gen-cpu.py; do
  rm -rf "$work/gen" && mkdir -p "$work/gen"
  if "$py" "$TG_SOURCE_DIR/platforms/$gen" "$work/gen"; then
    for f in "$work"/gen/*; do
      if cmp -s "$f" "$TG_SOURCE_DIR/platforms/$(basename "$f")"; then
        ok "platforms/$(basename "$f") matches $gen"
      else
        bad "platforms/$(basename "$f") differs from $gen's output"
      fi
    done
  else
    bad "platforms/$gen failed"
  fi
done
finish test_simulate_cli
