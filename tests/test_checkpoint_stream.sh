#!/usr/bin/env bash
# Checkpoints streamed slice by slice (tg_checkpoint_save_from,
# tg_checkpoint_open / _read, tg_gpt_read_slice / _write_slice):
#  - memory: saving a checkpoint and resuming from one never hold a second
#    copy of the model's state.  On a 6.4M-parameter GPT (12 bytes a
#    parameter in a checkpoint: 77 MB), the peak resident memory of a run
#    that saves, and of a run that resumes, stays within half a copy (38 MB)
#    of the same run without a checkpoint.  Before the streaming, both held
#    the parameters and AdamW moments in whole arrays besides the model;
#  - tiles: a run in 2 column tiles, stopped after 3 steps and resumed with
#    2 tiles, ends bitwise equal to 6 steps in one run (deterministic mode);
#    the same checkpoint resumes with 1 and 4 tiles, whose losses agree with
#    the 2-tile run's to 1e-5 (a column block of a GEMM is not always
#    rounded as the whole: docs/gpt.md, tiles);
#  - `--save FILE` (llm.c's format) streams the same way: at learning rate
#    0 it writes back the --init-from file byte for byte; `--save
#    FILE.safetensors` peaks within half the parameters' size of no save;
#  - a record corrupted in its last values (the last tensor's AdamW v, read
#    last of all) is refused with exit status 2 and the CRC message.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
export STARPU_NCUDA=0 STARPU_NOPENCL=0

# peak resident memory (KiB) of one taskgrad command: rss TAG ARGS...
rss() {
  local tag=$1
  shift
  "$py" - "$tg" "$work/$tag.out" "$work/$tag.err" "$@" <<'PY'
import resource, subprocess, sys
tg, out, err, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with open(out, "w") as o, open(err, "w") as e:
    rc = subprocess.call([tg] + args, stdout=o, stderr=e)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if rc == 0 else -rc)
PY
}

"$tg" init gpt --layers 8 --channels 256 --heads 4 --max-seq 64 --vocab 256 --seed 4 \
  --out "$work/big.bin" >/dev/null || { echo "FAIL init gpt"; exit 1; }
token_file "$work/tokens.bin" 4000 3 7 251 || { echo "FAIL token file"; exit 1; }
run=(train gpt --data "$work/tokens.bin" --batch 2 --seq 16 --micro-batches 1 --ncpus 1
     --lr 1e-3)
half_copy=$((77 * 1000 * 1000 / 2 / 1024)) # KiB
plain=$(rss plain "${run[@]}" --init-from "$work/big.bin" --steps 2)
saving=$(rss saving "${run[@]}" --init-from "$work/big.bin" --steps 2 --checkpoint "$work/ck")
resumed=$(rss resumed "${run[@]}" --resume "$work/ck" --steps 4)
if [ "$plain" -gt 0 ] && [ "$saving" -gt 0 ] && [ "$resumed" -gt 0 ]; then
  for r in saving:$saving resumed:$resumed; do
    extra=$((${r#*:} - plain))
    if [ "$extra" -lt "$half_copy" ]; then
      ok "${r%%:*}: peak RSS ${r#*:} KiB, $extra KiB above the run without a checkpoint ($plain)"
    else
      bad "${r%%:*}: peak RSS ${r#*:} KiB, $extra KiB above $plain: a copy of the model?"
    fi
  done
  grep -q "resuming .* at step 2" "$work/resumed.err" && ok "the run resumed at step 2" ||
    bad "resume message: $(grep taskgrad "$work/resumed.err" | head -2)"
else
  bad "a run failed (exit statuses as negative numbers: $plain $saving $resumed): $(tail -2 "$work"/*.err | tr '\n' ' ')"
fi

# --save FILE.safetensors streams too (tg_safetensors_write_gpt2_from): at
# most half the parameters' 25.6 MB above the run that does not save (its
# largest slice, 1 MB, and a transpose block); the whole copy it made before
# took all 25.6
half_params=$((25600 * 1000 / 2 / 1024)) # KiB
st=$(rss st "${run[@]}" --init-from "$work/big.bin" --steps 2 --save "$work/model.safetensors")
if [ "$plain" -gt 0 ] && [ "$st" -gt 0 ]; then
  extra=$((st - plain))
  if [ "$extra" -lt "$half_params" ]; then
    ok "--save .safetensors: peak RSS $st KiB, $extra KiB above the run that does not save"
  else
    bad "--save .safetensors: peak RSS $st KiB, $extra KiB above $plain: a copy of the model?"
  fi
else
  bad "--save .safetensors run failed: $(tail -2 "$work/st.err" | tr '\n' ' ')"
fi

# tiles
tiled=(train gpt --data "$work/tokens.bin" --batch 4 --seq 16 --micro-batches 2 --ncpus 2
       --deterministic --lr 1e-3)
if "$tg" "${tiled[@]}" --init-from "$work/big.bin" --tiles 2 --steps 6 --save "$work/t-full.bin" >"$work/t-full.out" \
     2>"$work/t-full.err" &&
   "$tg" "${tiled[@]}" --init-from "$work/big.bin" --tiles 2 --steps 3 --checkpoint "$work/tck" >"$work/t-a.out" \
     2>"$work/t-a.err"; then
  for tiles in 2 1 4; do
    rm -rf "$work/tck$tiles"
    cp -r "$work/tck" "$work/tck$tiles"
    if ! "$tg" "${tiled[@]}" --resume "$work/tck$tiles" --tiles "$tiles" --steps 6 \
         --save "$work/t-$tiles.bin" >"$work/t-$tiles.out" 2>"$work/t-$tiles.err"; then
      bad "resume with $tiles tiles: $(grep 'taskgrad: ' "$work/t-$tiles.err" | head -2)"
      continue
    fi
    losses "$work/t-full.out" >"$work/t-full.num"
    losses "$work/t-a.out" "$work/t-$tiles.out" >"$work/t-$tiles.num"
    if [ "$tiles" = 2 ]; then
      if cmp -s "$work/t-full.num" "$work/t-2.num" && cmp -s "$work/t-full.bin" "$work/t-2.bin"; then
        ok "2 tiles: 3 steps + 3 resumed = 6 in one run, losses and parameters bitwise"
      else
        bad "2 tiles: resumed run differs: $(paste "$work/t-full.num" "$work/t-2.num" | tail -3 | tr '\n' ';')"
      fi
    elif worst=$(losses_within "$work/t-full.num" "$work/t-$tiles.num" 6 1e-5); then
      ok "the 2-tile checkpoint resumed with $tiles tiles: losses within $worst of the 2-tile run"
    else
      bad "resumed with $tiles tiles: losses $(paste "$work/t-full.num" "$work/t-$tiles.num" | tr '\n' ';')"
    fi
  done
else
  bad "tiled runs failed: $(tail -2 "$work"/t-*.err | tr '\n' ' ')"
fi

# --save in llm.c's format is streamed too: after a step at learning rate 0
# it writes the file it started from, byte for byte
if "$tg" "${run[@]}" --init-from "$work/big.bin" --steps 1 --lr 0 --save "$work/same.bin" \
     >/dev/null 2>"$work/same.err" && cmp -s "$work/big.bin" "$work/same.bin"; then
  ok "--save, streamed: the model it started from, byte for byte"
else
  bad "--save at learning rate 0 differs from --init-from: $(tail -1 "$work/same.err")"
fi

# corruption found only once the last record is read
cp -r "$work/ck" "$work/corrupt"
flip_bit "$work/corrupt/checkpoint.bin" -3 16
expect_fail "the last record corrupted" "checkpoint.bin: tensor lnfb \\(AdamW v\\): CRC mismatch" \
  "${run[@]}" --resume "$work/corrupt" --steps 4

finish "checkpoint stream"
