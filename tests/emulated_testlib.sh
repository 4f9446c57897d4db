# Shared by the emulated-device shell tests (sourced after cli_testlib.sh):
#  - emulated_probe: exit 77 (SKIP) when no PoCL device can be started,
#    exit 1 when the probe run fails otherwise;
#  - gpt_fixture: $work/g.bin (2 layers, 32 channels, vocabulary 64) and
#    $work/tokens.bin (4000 tokens) for short GPT runs.
emulated_probe() {
  if "$tg" bench mlp --batch 8 --hidden 8 --steps 1 --warmup 0 --emulated-devices 1 \
       >"$work/probe.out" 2>"$work/probe.err"; then
    return 0
  fi
  grep -q "pocl-opencl-icd" "$work/probe.err" && { echo "SKIP: $(cat "$work/probe.err")"; exit 77; }
  echo "FAIL: probe run: $(cat "$work/probe.err")"
  exit 1
}

gpt_fixture() {
  "$tg" init gpt --layers 2 --channels 32 --heads 4 --max-seq 32 --vocab 64 --seed 3 \
    --out "$work/g.bin" >/dev/null || { echo "FAIL init gpt"; exit 1; }
  token_file "$work/tokens.bin" 4000 5 11 59 || { echo "FAIL token file"; exit 1; }
}
