#!/usr/bin/env bash
# 'taskgrad init gpt' and 'taskgrad prepare kjv': good runs write llm.c files
# with the right headers and sizes; bad flags, invalid models, a missing or
# failing bible program and unwritable output paths exit with status 2 and
# one message.  The King James part is skipped (with a note) when Debian's
# bible-kjv is not installed; scripts/install-deps installs it.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"

# check_model FILE L C NH T V Vp: header and size of a checkpoint, LayerNorm
# weights 1, biases 0, std of wte about 0.02
check_model() {
  "$py" - "$@" <<'EOF'
import math, struct, sys
path, L, C, NH, T, V, Vp = sys.argv[1], *map(int, sys.argv[2:])
data = open(path, "rb").read()
h = struct.unpack("<256i", data[:1024])
want = [20240326, 3, T, V, L, NH, C, Vp]
assert list(h[:8]) == want, f"header {h[:8]} != {want}"
assert not any(h[8:]), "reserved header words not 0"
sizes = [Vp*C, T*C, L*C, L*C, L*3*C*C, L*3*C, L*C*C, L*C, L*C, L*C,
         L*4*C*C, L*4*C, L*4*C*C, L*C, C, C]
n = sum(sizes)
assert len(data) == 1024 + 4*n, f"{len(data)} bytes, expected {1024 + 4*n}"
p = struct.unpack(f"<{n}f", data[1024:])
off = [sum(sizes[:i]) for i in range(17)]
t = lambda i: p[off[i]:off[i+1]]
wte = t(0)[:V*C]
std = math.sqrt(sum(x*x for x in wte) / len(wte))
assert abs(std - 0.02) < 0.002, f"wte std {std}"
assert all(x == 0 for x in t(0)[V*C:]), "padded wte rows not 0"
for i in (2, 8, 14):
    assert all(x == 1 for x in t(i)), f"LayerNorm weight {i} not 1"
for i in (3, 5, 7, 9, 11, 13, 15):
    assert all(x == 0 for x in t(i)), f"bias {i} not 0"
print(n)
EOF
}

# ---- init gpt ---------------------------------------------------------------
"$tg" init gpt --help | grep -q -- "--padded-vocab" && ok "init gpt --help documents flags" \
  || bad "init gpt --help"
"$tg" --help | grep -q "init gpt" && ok "taskgrad --help lists init gpt" || bad "taskgrad --help"

if "$tg" init gpt --layers 2 --channels 32 --heads 4 --max-seq 16 --vocab 256 --seed 5 \
     --out "$work/m.bin" >"$work/out" 2>"$work/err"; then
  if n=$(check_model "$work/m.bin" 2 32 4 16 256 256 2>"$work/pyerr"); then
    ok "init gpt writes a valid checkpoint ($n parameters)"
  else
    bad "init gpt checkpoint: $(tail -1 "$work/pyerr")"
  fi
  grep -q "$n parameters" "$work/out" && [ "$(wc -l <"$work/out")" -eq 1 ] \
    && ok "init gpt summary: $(cat "$work/out")" || bad "init gpt summary: $(cat "$work/out")"
else
  bad "init gpt failed: $(cat "$work/err")"
fi
# default padding: V rounded up to a multiple of 64; same seed, same file
"$tg" init gpt --layers 1 --channels 16 --heads 2 --max-seq 8 --vocab 100 --seed 5 \
  --out "$work/p.bin" >/dev/null 2>&1 && check_model "$work/p.bin" 1 16 2 8 100 128 >/dev/null 2>&1 \
  && ok "--vocab 100 pads to 128" || bad "--vocab 100 padding"
"$tg" init gpt --layers 1 --channels 16 --heads 2 --max-seq 8 --vocab 100 --seed 5 \
  --out "$work/p2.bin" >/dev/null 2>&1 && cmp -s "$work/p.bin" "$work/p2.bin" \
  && ok "same seed, same checkpoint" || bad "same seed gives another checkpoint"
"$tg" init gpt --layers 1 --channels 16 --heads 2 --max-seq 8 --vocab 100 --seed 6 \
  --out "$work/p3.bin" >/dev/null 2>&1 && ! cmp -s "$work/p.bin" "$work/p3.bin" \
  && ok "another seed, another checkpoint" || bad "seeds 5 and 6 give the same checkpoint"
"$tg" init gpt --layers 1 --channels 16 --heads 2 --max-seq 8 --vocab 100 --padded-vocab 112 \
  --out "$work/p4.bin" >/dev/null 2>&1 && check_model "$work/p4.bin" 1 16 2 8 100 112 >/dev/null 2>&1 \
  && ok "--padded-vocab 112" || bad "--padded-vocab 112"

# bench gpt: the vocabulary padded to a multiple of 64 unless --padded-vocab
# says otherwise, which may not be below --vocab
expect_fail "bench gpt: padded vocab < vocab" "--padded-vocab 200 is below --vocab 256" \
  bench gpt --vocab 256 --padded-vocab 200
if "$tg" bench gpt --layers 1 --channels 16 --heads 2 --max-seq 8 --seq 8 --batch 2 \
     --vocab 250 --steps 1 --warmup 0 --quiet >"$work/b.out" 2>/dev/null &&
   grep -q "V=250 Vp=256" "$work/b.out"; then
  ok "bench gpt --vocab 250: padded to Vp=256"
else
  bad "bench gpt --vocab 250: $(head -1 "$work/b.out")"
fi

# --classifier-blocks: 1 .. 64 (auto when not given)
expect_fail "train gpt: --classifier-blocks 0" "--classifier-blocks: 0 is out of range" \
  train gpt --classifier-blocks 0
expect_fail "bench gpt: --classifier-blocks 65" "--classifier-blocks: 65 is out of range" \
  bench gpt --classifier-blocks 65

# the GPT run options are one table (cli/gpt_run_options.c): train gpt,
# bench gpt and simulate gpt accept, check and document them alike
expect_fail "train gpt: --classifier-chunk 0" "--classifier-chunk: 0 is out of range" \
  train gpt --classifier-chunk 0
expect_fail "bench gpt: --classifier-chunk x" "--classifier-chunk: 'x' is not an integer" \
  bench gpt --classifier-chunk x
expect_fail "simulate gpt: --classifier-chunk 0" "--classifier-chunk: 0 is out of range" \
  simulate gpt --platform h100x1 --classifier-chunk 0
for f in --attention --chunk --attn-splits --classifier-blocks --classifier-chunk; do
  n=$(for c in "train gpt" "bench gpt" simulate; do "$tg" $c --help | grep -- "^  $f "; done |
      sort | uniq -c | awk '{print $1}')
  [ "$n" = 3 ] && ok "$f: one help line, in train gpt, bench gpt and simulate --help" \
    || bad "$f: help lines differ or are missing: $n"
done
if "$tg" bench gpt --layers 1 --channels 16 --heads 2 --max-seq 8 --seq 8 --batch 2 --steps 1 \
     --warmup 0 --quiet --classifier-chunk 3 >"$work/cc.out" 2>/dev/null &&
   grep -q "taskgrad median step ms" "$work/cc.out"; then
  ok "bench gpt --classifier-chunk 3 runs"
else
  bad "bench gpt --classifier-chunk 3: $(head -3 "$work/cc.out")"
fi

# --attention: auto (the default) is chunked without CUDA workers; gemm,
# flash and cudnn run chunked's CPU kernels there, and the header names the
# kind run
for a in auto:chunked gemm:gemm flash:flash cudnn:cudnn chunked:chunked naive:naive; do
  if "$tg" bench gpt --layers 1 --channels 16 --heads 2 --max-seq 8 --seq 8 --batch 2 --steps 1 \
       --warmup 0 --quiet --ncuda 0 --attention "${a%%:*}" >"$work/att.out" 2>/dev/null &&
     grep -q "micro-batches, ${a#*:} attention" "$work/att.out"; then
    ok "bench gpt --attention ${a%%:*}: ${a#*:} attention"
  else
    bad "bench gpt --attention ${a%%:*}: $(grep -m1 '^bench gpt' "$work/att.out")"
  fi
done
expect_fail "bench gpt: --attention fast" "'fast' is not naive, chunked, gemm, flash, cudnn or auto" \
  bench gpt --attention fast

# --micro-batches: a count or auto (the default: one per worker, within
# what the batch allows, printed)
expect_fail "bench gpt: --micro-batches x" "'x' is neither a count nor 'auto'" \
  bench gpt --micro-batches x
expect_fail "train mlp: --micro-batches auto2" "'auto2' is neither a count nor 'auto'" \
  train mlp --micro-batches auto2
tiny=(bench gpt --layers 1 --channels 16 --heads 2 --max-seq 8 --seq 8 --steps 1 --warmup 0 --quiet)
for w in 1 2; do
  if "$tg" "${tiny[@]}" --batch 6 --ncpus $w >"$work/auto.out" 2>"$work/auto.err" &&
     grep -q -- "--micro-batches auto: $w ($w workers, batch of 6 sequences)" "$work/auto.err" &&
     grep -q "B=6 T=8, $w micro-batches" "$work/auto.out"; then
    ok "bench gpt, $w workers: --micro-batches auto picks $w and says so"
  else
    bad "bench gpt, $w workers: $(grep -h 'auto\|micro-batches' "$work/auto.err" "$work/auto.out" | head -2)"
  fi
done
if "$tg" "${tiny[@]}" --batch 5 --ncpus 2 >"$work/auto.out" 2>"$work/auto.err" &&
   grep -q -- "--micro-batches auto: 1 (2 workers, batch of 5 sequences)" "$work/auto.err"; then
  ok "bench gpt, batch 5 on 2 workers: auto picks 1 (2 does not divide 5)"
else
  bad "bench gpt, batch 5 on 2 workers: $(grep -h auto "$work/auto.err" | head -1)"
fi

# in fp32 on a few CPU workers auto wants micro-batches of 512 rows or more,
# their layers then in tiles (one per worker); 16-bit keeps one per worker;
# fewer micro-batches than workers get tiles (--tiles auto), fused blocks not
wide=(bench gpt --layers 1 --channels 64 --heads 2 --max-seq 8 --seq 8 --steps 1 --warmup 0 --quiet
      --batch 6 --ncpus 2)
if "$tg" "${wide[@]}" >"$work/auto.out" 2>"$work/auto.err" &&
   grep -q -- "--micro-batches auto: f32 activations on CPU workers, 512 rows (64 sequences of 8" \
     "$work/auto.err" &&
   grep -q -- "--micro-batches auto: 1 (2 workers, batch of 6 sequences)" "$work/auto.err" &&
   grep -q "B=6 T=8, 1 micro-batches, .*linear layers in 2 tile(s), classifier in 2 vocab" \
     "$work/auto.out"; then
  ok "bench gpt fp32, C 64 on 2 workers: auto picks 1 micro-batch in 2 tiles"
else
  bad "bench gpt fp32, C 64 on 2 workers: $(grep -h 'auto\|micro-batches' "$work/auto.err" "$work/auto.out" | head -3)"
fi
if "$tg" "${wide[@]}" --precision bf16 >"$work/auto.out" 2>"$work/auto.err" &&
   ! grep -q "512 rows" "$work/auto.err" &&
   grep -q "B=6 T=8, 2 micro-batches, .*linear layers in 1 tile(s)" "$work/auto.out"; then
  ok "bench gpt bf16, C 64 on 2 workers: auto keeps 2 untiled micro-batches"
else
  bad "bench gpt bf16, C 64 on 2 workers: $(grep -h 'auto\|micro-batches' "$work/auto.err" "$work/auto.out" | head -3)"
fi
if "$tg" "${wide[@]}" --batch 128 >"$work/auto.out" 2>"$work/auto.err" &&
   grep -q "B=128 T=8, 2 micro-batches, .*linear layers in 1 tile(s)" "$work/auto.out"; then
  ok "bench gpt fp32, 1024 rows on 2 workers: auto keeps 2 untiled micro-batches of 512 rows"
else
  bad "bench gpt fp32, 1024 rows on 2 workers: $(grep -h 'micro-batches' "$work/auto.out" | head -2)"
fi
if "$tg" "${wide[@]}" --micro-batches 1 --attn-splits 1 --fused-blocks >"$work/auto.out" 2>&1 &&
   grep -q "1 micro-batches, .*linear layers in 1 tile(s)" "$work/auto.out"; then
  ok "bench gpt --micro-batches 1 --fused-blocks on 2 workers: untiled (fused blocks need it)"
else
  bad "bench gpt --micro-batches 1 --fused-blocks: $(grep -h 'error\|micro-batches' "$work/auto.out" | head -2)"
fi

g=(init gpt --layers 2 --channels 32 --heads 4 --max-seq 16 --vocab 256)
expect_fail "init gpt: missing --layers" "needs --layers" init gpt --channels 32 --heads 4 \
  --max-seq 16 --vocab 256 --out "$work/x.bin"
expect_fail "init gpt: missing --out" "needs --out" "${g[@]}"
expect_fail "init gpt: C not divisible by NH" "channels 30 is not divisible by num_heads 4" \
  init gpt --layers 2 --channels 30 --heads 4 --max-seq 16 --vocab 256 --out "$work/x.bin"
expect_fail "init gpt: negative layers" "--layers: -2 is out of range" init gpt --layers -2 \
  --channels 32 --heads 4 --max-seq 16 --vocab 256 --out "$work/x.bin"
expect_fail "init gpt: zero heads" "--heads: 0 is out of range" init gpt --layers 2 \
  --channels 32 --heads 0 --max-seq 16 --vocab 256 --out "$work/x.bin"
expect_fail "init gpt: vocabulary above 65536" "--vocab: 70000 is out of range" init gpt \
  --layers 2 --channels 32 --heads 4 --max-seq 16 --vocab 70000 --out "$work/x.bin"
expect_fail "init gpt: padded vocab < vocab" "vocab_size 256 is larger than padded_vocab_size 200" \
  "${g[@]}" --padded-vocab 200 --out "$work/x.bin"
expect_fail "init gpt: not an integer" "--channels: '3x' is not an integer" init gpt \
  --layers 2 --channels 3x --heads 4 --max-seq 16 --vocab 256 --out "$work/x.bin"
expect_fail "init gpt: unknown flag" "unknown flag '--bogus'" "${g[@]}" --bogus
expect_fail "init gpt: missing value" "--seed needs a value" "${g[@]}" --out "$work/x.bin" --seed
expect_fail "init gpt: negative seed" "--seed: '-1' must not be negative" "${g[@]}" \
  --out "$work/x.bin" --seed -1
expect_fail "init gpt: missing directory" "x.bin.*No such file" "${g[@]}" --out "$work/nodir/x.bin"
[ ! -e "$work/x.bin" ] && ok "no checkpoint written by failed runs" || bad "failed runs wrote x.bin"
expect_fail "unknown model for init" "unknown model 'resnet'" init resnet
expect_fail "init without a model" "needs a model" init

# ---- prepare kjv -------------------------------------------------------------
"$tg" prepare kjv --help | grep -q -- "--bible" && ok "prepare kjv --help documents flags" \
  || bad "prepare kjv --help"
expect_fail "prepare kjv: missing --out" "needs --out" prepare kjv
expect_fail "prepare kjv: unknown flag" "unknown flag '--bogus'" prepare kjv --out "$work/k" --bogus
expect_fail "unknown data set for prepare" "unknown data set 'shakespeare'" prepare shakespeare
: >"$work/file"
expect_fail "prepare kjv: --out under a regular file" "is not a directory" \
  prepare kjv --out "$work/file/sub"
expect_fail "prepare kjv: missing bible program" "install Debian's bible-kjv" \
  prepare kjv --out "$work/k0" --bible "$work/no-such-bible"
expect_fail "prepare kjv: failing bible program" "exited with status 1" \
  prepare kjv --out "$work/k0" --bible false
[ ! -e "$work/k0/kjv_train.bin" ] && ok "nothing written when bible fails" \
  || bad "files written although bible failed"

# check_tokens FILE: prints the token count after checking magic, version,
# size and that every token is a byte
check_tokens() {
  "$py" - "$1" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", data[:1024])
assert h[0] == 20240520 and h[1] == 1, f"header {h[:3]}"
n = h[2]
assert len(data) == 1024 + 2 * n, f"{len(data)} bytes for {n} tokens"
t = struct.unpack(f"<{n}H", data[1024:])
assert max(t) < 256, f"token {max(t)} >= 256"
sys.stdout.write(str(n))
EOF
}

# a fake bible program: the pipeline without Debian's package
fake="$work/fake-bible"
printf '#!/bin/sh\n[ "$1" = -f ] && [ "$2" = "Gen1:1-Rev22:21" ] || exit 3\nprintf "Ge1:1 In the beginning God created the heaven and the earth.\\n"\n' >"$fake"
chmod +x "$fake"
if "$tg" prepare kjv --out "$work/fk" --bible "$fake" >"$work/out" 2>"$work/err"; then
  tr=$(check_tokens "$work/fk/kjv_train.bin" 2>&1) && va=$(check_tokens "$work/fk/kjv_val.bin" 2>&1) \
    && [ "$tr" = 55 ] && [ "$va" = 6 ] && ok "fake bible: 61 bytes -> 55 + 6 tokens" \
    || bad "fake bible: train '$tr' val '$va'"
else
  bad "prepare kjv with a fake bible failed: $(cat "$work/err")"
fi

if ! command -v bible >/dev/null; then
  echo "SKIP prepare kjv on the real text: 'bible' is not installed (apt-get install bible-kjv)"
else
  out="$work/kjv/a/b"
  if "$tg" prepare kjv --out "$out" >"$work/out" 2>"$work/err"; then
    if tr=$(check_tokens "$out/kjv_train.bin" 2>"$work/pyerr") \
         && va=$(check_tokens "$out/kjv_val.bin" 2>>"$work/pyerr"); then
      total=$((tr + va))
      bytes=$(bible -f 'Gen1:1-Rev22:21' | wc -c)
      [ "$total" -eq "$bytes" ] && ok "kjv: $tr + $va tokens = the $bytes bytes bible prints" \
        || bad "kjv: $tr + $va tokens, bible prints $bytes bytes"
      [ "$va" -eq $((total / 10)) ] && ok "kjv: validation is the last 10% ($va tokens)" \
        || bad "kjv: validation has $va of $total tokens"
      [ "$total" -gt 4000000 ] && ok "kjv: the whole Bible ($total bytes)" \
        || bad "kjv: only $total bytes"
      # the files hold exactly the text, in order
      "$py" - "$out" <<'EOF' >"$work/text" && bible -f 'Gen1:1-Rev22:21' | cmp -s - "$work/text" \
        && ok "kjv: tokens decode to bible's output" || bad "kjv: tokens do not decode to the text"
import struct, sys
for name in ("kjv_train.bin", "kjv_val.bin"):
    d = open(f"{sys.argv[1]}/{name}", "rb").read()[1024:]
    sys.stdout.buffer.write(bytes(struct.unpack(f"<{len(d)//2}H", d)))
EOF
      grep -q "$tr tokens" "$work/out" && grep -q "$va tokens" "$work/out" \
        && ok "prepare kjv prints the counts: $(cat "$work/out")" || bad "prepare kjv output: $(cat "$work/out")"
    else
      bad "kjv token files: $(cat "$work/pyerr")"
    fi
  else
    bad "prepare kjv failed: $(cat "$work/err")"
  fi
fi

finish test_gpt_cli
