#!/usr/bin/env bash
# No command replaces a file it reads or writes twice (docs/reliability.md,
# "Output paths"): an output that is another output or an input of the same
# command, named directly or through a symbolic link, `./`, `a/../a`, a
# directory that does not exist yet or a hard link, is refused before any
# work with exit status 2 and one message naming both flags, and every file
# stays byte for byte as it was.  And `--checkpoint DIR` that already holds
# a checkpoint is refused unless --resume DIR continues it (train gpt and
# train mlp), while the requeue command line (--resume DIR --checkpoint DIR)
# still runs.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"
export STARPU_NCPU=1 STARPU_NCUDA=0
mkdir "$work/f" && cd "$work/f" || exit 1

"$tg" init gpt --layers 1 --channels 16 --heads 2 --max-seq 16 --vocab 64 --out m.bin \
  >/dev/null || { echo "FAIL init gpt"; exit 1; }
token_file t.bin 2000 7 13 61 || { echo "FAIL token file"; exit 1; }
"$py" "$TG_SOURCE_DIR/tests/make_idx.py" data 64 32 >/dev/null ||
  { echo "FAIL make_idx.py"; exit 1; }
gpt=(train gpt --data t.bin --batch 2 --seq 8 --micro-batches 1)
mlp=(train mlp --data-dir data --batch 16 --hidden 8 --steps 2)
"$tg" "${gpt[@]}" --init-from m.bin --steps 1 --checkpoint ck >/dev/null 2>&1 &&
  "$tg" "${mlp[@]}" --checkpoint mck >/dev/null 2>&1 ||
  { echo "FAIL the first runs"; exit 1; }
cp t.bin val.bin
ln -s t.bin link.bin
ln t.bin hard.bin
ln -s ck cklink
mkdir -p kjv && echo x >kjv/kjv_train.bin && ln kjv/kjv_train.bin kjv/kjv_val.bin

snapshot() { find . -type f -print0 | sort -z | xargs -0 md5sum; }
before=$(snapshot)

# refused "description" "message regex" args...: exit 2, one message, and
# no file created or changed
refused() {
  expect_fail "$@"
  [ "$(snapshot)" = "$before" ] || bad "$1: files changed: $(diff <(echo "$before") <(snapshot))"
}

# train gpt
refused "--save over the --resume checkpoint" \
  "--save 'ck/checkpoint.bin' would replace the input --resume" \
  "${gpt[@]}" --resume ck --steps 3 --save ck/checkpoint.bin
refused "--save over --checkpoint's file, in a directory still missing" \
  "--save '\./ck3/\.\./ck3/checkpoint.bin' and --checkpoint 'ck3/checkpoint.bin' are the same file" \
  "${gpt[@]}" --init-from m.bin --steps 2 --save ./ck3/../ck3/checkpoint.bin --checkpoint ck3
refused "--save through a symbolic link to --data" "--save 'link.bin' would replace the input --data 't.bin'" \
  "${gpt[@]}" --init-from m.bin --steps 1 --save link.bin
refused "--save as a hard link of --data" "--save 'hard.bin' would replace the input --data" \
  "${gpt[@]}" --init-from m.bin --steps 1 --save hard.bin
refused "--save over --init-from via a missing directory" \
  "--save 'nowhere/\.\./m.bin' would replace the input --init-from 'm.bin'" \
  "${gpt[@]}" --init-from m.bin --steps 1 --save nowhere/../m.bin
refused "--save over --val" "--save '\./val.bin' would replace the input --val 'val.bin'" \
  "${gpt[@]}" --init-from m.bin --val val.bin --steps 1 --save ./val.bin
refused "--trace over --save" "--trace 'out.json' and --save 'out.json' are the same file" \
  "${gpt[@]}" --init-from m.bin --steps 1 --save out.json --trace out.json
refused "--checkpoint through a link over --init-from" \
  "--checkpoint 'cklink/checkpoint.bin' would replace the input --init-from 'ck/checkpoint.bin'" \
  "${gpt[@]}" --init-from ck/checkpoint.bin --steps 1 --checkpoint cklink
refused "--checkpoint DIR holding a checkpoint, no --resume" \
  "--checkpoint ck already holds a checkpoint \(ck/checkpoint.bin\).*--resume ck" \
  "${gpt[@]}" --init-from m.bin --steps 2 --checkpoint ck
refused "--checkpoint DIR holding a checkpoint, --resume elsewhere" \
  "--checkpoint cklink already holds a checkpoint" \
  "${gpt[@]}" --resume ck2 --init-from m.bin --steps 2 --checkpoint cklink

# train mlp
refused "mlp --save over the --resume checkpoint" \
  "--save 'mck/mlp-checkpoint.bin' would replace the input --resume" \
  "${mlp[@]}" --resume mck --save mck/mlp-checkpoint.bin
refused "mlp --save over the data set" "--save 'data/\.\./data/train-labels-idx1-ubyte' would replace the input --data-dir" \
  "${mlp[@]}" --save data/../data/train-labels-idx1-ubyte
refused "mlp --checkpoint DIR holding a checkpoint" "--checkpoint mck already holds a checkpoint" \
  "${mlp[@]}" --checkpoint mck

# init gpt, bench gpt, prepare kjv
init=(init gpt --layers 1 --channels 16 --heads 2 --max-seq 16 --vocab 64)
refused "init gpt --out and --safetensors one file" \
  "--out 'm.bin' and --safetensors '\./m.bin' are the same file" \
  "${init[@]}" --out m.bin --safetensors ./m.bin
refused "bench gpt --trace over --init-from" "--trace 'm.bin' would replace the input --init-from" \
  bench gpt --init-from m.bin --seq 8 --batch 2 --steps 1 --trace m.bin
refused "prepare kjv into hard-linked outputs" "--out 'kjv/kjv_train.bin' and --out 'kjv/kjv_val.bin' are the same file" \
  prepare kjv --out kjv --bible /nonexistent

# what stays allowed: the requeue command line, distinct outputs
if "$tg" "${gpt[@]}" --resume ck --init-from m.bin --checkpoint ./ck --steps 2 --save s.bin \
     >/dev/null 2>"$work/err" &&
   "$tg" "${mlp[@]}" --resume mck --checkpoint mck --steps 3 >/dev/null 2>>"$work/err" &&
   "$tg" "${init[@]}" --out a.bin --safetensors a.safetensors >/dev/null 2>>"$work/err"; then
  ok "--resume DIR --checkpoint DIR continues; distinct outputs are written"
else
  bad "an allowed command failed: $(cat "$work/err")"
fi
finish test_output_paths
