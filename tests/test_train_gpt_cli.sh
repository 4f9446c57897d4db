#!/usr/bin/env bash
# `taskgrad train gpt`: readers refuse bad checkpoints and token files
# (wrong magic or version, truncation, header/size disagreement, tokens >= V)
# and bad flags with exit status 2 and one message; a short run prints
# "step N loss X.XXXXXX" lines, lowers the loss, saves a checkpoint that
# loads again, and samples.
. "$TG_SOURCE_DIR/tests/cli_testlib.sh"

# all the refusals below are of `taskgrad train gpt ...`
gpt_fail() {
  local what=$1 pattern=$2
  shift 2
  expect_fail "$what" "$pattern" train gpt "$@"
}

"$tg" init gpt --layers 2 --channels 32 --heads 4 --max-seq 32 --vocab 64 --seed 3 \
  --out "$work/m.bin" >/dev/null || { echo "FAIL init gpt"; exit 1; }
# tokens: a learnable sequence (i * 7 mod 61), and a variant with a token >= V
"$py" - "$work" <<'PY'
import struct, sys
d = sys.argv[1]
def write(name, toks):
    with open(f"{d}/{name}", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
        f.write(struct.pack(f"<{len(toks)}H", *toks))
toks = [(i * 7) % 61 for i in range(20000)]
write("train.bin", toks)
write("val.bin", toks[:3000])
write("bigtok.bin", toks[:5000] + [64] + toks[:100])
with open(f"{d}/train.bin", "rb") as f:
    data = bytearray(f.read())
bad = bytearray(data); bad[0] ^= 0xFF
open(f"{d}/badmagic.bin", "wb").write(bad)
ver = bytearray(data); ver[4] = 7
open(f"{d}/badversion.bin", "wb").write(ver)
open(f"{d}/truncated.bin", "wb").write(data[:-10])
with open(f"{d}/m.bin", "rb") as f:
    m = bytearray(f.read())
open(f"{d}/m_trunc.bin", "wb").write(m[:-4])
mm = bytearray(m); mm[0] ^= 0x01
open(f"{d}/m_magic.bin", "wb").write(mm)
mv = bytearray(m); mv[4] = 2
open(f"{d}/m_version.bin", "wb").write(mv)
mh = bytearray(m); mh[6 * 4] = 48   # C = 48 disagrees with the file size
open(f"{d}/m_header.bin", "wb").write(mh)
PY
common=(--batch 4 --seq 16 --steps 3)
gpt_fail "checkpoint with a wrong magic" "m_magic.bin.*magic" --init-from "$work/m_magic.bin" --data "$work/train.bin" "${common[@]}"
gpt_fail "checkpoint with a wrong version" "m_version.bin.*version" --init-from "$work/m_version.bin" --data "$work/train.bin" "${common[@]}"
gpt_fail "truncated checkpoint" "m_trunc.bin" --init-from "$work/m_trunc.bin" --data "$work/train.bin" "${common[@]}"
gpt_fail "checkpoint header disagreeing with its size" "m_header.bin" --init-from "$work/m_header.bin" --data "$work/train.bin" "${common[@]}"
gpt_fail "token file with a wrong magic" "badmagic.bin.*magic" --init-from "$work/m.bin" --data "$work/badmagic.bin" "${common[@]}"
gpt_fail "token file with a wrong version" "badversion.bin.*version" --init-from "$work/m.bin" --data "$work/badversion.bin" "${common[@]}"
gpt_fail "truncated token file" "truncated.bin" --init-from "$work/m.bin" --data "$work/truncated.bin" "${common[@]}"
gpt_fail "token >= V" "bigtok.bin.*64" --init-from "$work/m.bin" --data "$work/bigtok.bin" "${common[@]}"
gpt_fail "missing checkpoint" "nowhere.bin" --init-from "$work/nowhere.bin" --data "$work/train.bin" "${common[@]}"
gpt_fail "T beyond maxT" "--seq 64 exceeds" --init-from "$work/m.bin" --data "$work/train.bin" --batch 4 --seq 64
gpt_fail "micro-batches not dividing the batch" "does not divide" --init-from "$work/m.bin" --data "$work/train.bin" --batch 4 --micro-batches 3
gpt_fail "unknown attention" "--attention: 'fast'" --init-from "$work/m.bin" --data "$work/train.bin" --attention fast
gpt_fail "only one of --init-from and --data" "both --init-from and --data" --init-from "$work/m.bin"
gpt_fail "unwritable --save" "--save" --init-from "$work/m.bin" --data "$work/train.bin" --save /nonexistent-dir/x.bin

if "$tg" train gpt --init-from "$work/m.bin" --data "$work/train.bin" --val "$work/val.bin" \
     --batch 4 --seq 16 --steps 40 --lr 3e-3 --micro-batches 2 --save "$work/out.bin" \
     --sample 20 >"$work/out" 2>"$work/err"; then
  nsteps=$(grep -cE '^step [0-9]+ loss [0-9]+\.[0-9]{6} \([0-9.]+ ms, [0-9]+ tokens/s\)$' "$work/out")
  [ "$nsteps" -eq 40 ] && ok "40 step lines of the documented form" || bad "step lines: $nsteps"
  first=$(sed -nE 's/^step 1 loss ([0-9.]+).*/\1/p' "$work/out")
  last=$(sed -nE 's/^step 40 loss ([0-9.]+).*/\1/p' "$work/out")
  awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < 0.8 * a)}' \
    && ok "loss lowered: $first -> $last" || bad "loss not lowered: $first -> $last"
  grep -qE '^val loss [0-9.]+$' "$work/out" && ok "validation loss printed" || bad "no val loss"
  grep -q '^sample:' "$work/out" && ok "sample printed" || bad "no sample"
  if "$tg" train gpt --init-from "$work/m.bin" --data "$work/train.bin" --batch 4 --seq 16 \
       --steps 2 --save "$work/out.safetensors" >/dev/null 2>&1 &&
     "$py" - "$work/out.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
assert h["transformer.h.1.attn.c_attn.weight"]["shape"] == [32, 96], h
assert "transformer.ln_f.bias" in h
PY
  then ok "--save FILE.safetensors writes Hugging Face names"; else bad "--save .safetensors"; fi
  # the streamed safetensors writer against the llm.c one, value by value
  # (the Conv1D weights transposed), two deterministic runs of the same steps
  det=(train gpt --init-from "$work/m.bin" --data "$work/train.bin" --batch 4 --seq 16 --steps 2
       --deterministic)
  if "$tg" "${det[@]}" --save "$work/det.bin" >/dev/null 2>&1 &&
     "$tg" "${det[@]}" --save "$work/det.safetensors" >/dev/null 2>&1 &&
     "$py" - "$work/det.bin" "$work/det.safetensors" <<'PY'
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
T, V, L, NH, C, Vp = struct.unpack("<6i", raw[8:32])
flat = np.frombuffer(raw, dtype="<f4", offset=256 * 4)
sizes = [Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
         L * C, L * C, L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C]
p, at = [], 0
for n in sizes:
    p.append(flat[at:at + n]); at += n
assert at == flat.size, (at, flat.size)
st = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", st[:8])[0]
h = json.loads(st[8:8 + n])
def get(name):
    e = h[name]; a, b = e["data_offsets"]
    return np.frombuffer(st[8 + n + a:8 + n + b], dtype="<f4").reshape(e["shape"])
def same(name, want):
    got = get(name)
    assert got.shape == want.shape and np.array_equal(got, want), name
same("transformer.wte.weight", p[0].reshape(Vp, C)[:V])
same("transformer.wpe.weight", p[1].reshape(T, C))
per = [("ln_1.weight", 2, (C,), 0), ("ln_1.bias", 3, (C,), 0),
       ("attn.c_attn.weight", 4, (3 * C, C), 1), ("attn.c_attn.bias", 5, (3 * C,), 0),
       ("attn.c_proj.weight", 6, (C, C), 1), ("attn.c_proj.bias", 7, (C,), 0),
       ("ln_2.weight", 8, (C,), 0), ("ln_2.bias", 9, (C,), 0),
       ("mlp.c_fc.weight", 10, (4 * C, C), 1), ("mlp.c_fc.bias", 11, (4 * C,), 0),
       ("mlp.c_proj.weight", 12, (C, 4 * C), 1), ("mlp.c_proj.bias", 13, (C,), 0)]
for l in range(L):
    for name, k, shape, tr in per:
        m = int(np.prod(shape))
        w = p[k][l * m:(l + 1) * m].reshape(shape)
        same("transformer.h.%d.%s" % (l, name), w.T if tr else w)
same("transformer.ln_f.weight", p[14]); same("transformer.ln_f.bias", p[15])
PY
  then ok "--save .safetensors holds the llm.c file's values (streamed, transposed)"
  else bad "--save .safetensors values differ from --save .bin"; fi
  "$tg" train gpt --init-from "$work/out.bin" --data "$work/train.bin" --batch 4 --seq 16 \
    --steps 1 >"$work/out2" 2>&1 && ok "saved checkpoint loads again" || bad "saved checkpoint: $(tail -2 "$work/out2")"
else
  bad "training run failed: $(tail -3 "$work/err")"
fi
STARPU_LIMIT_CPU_MEM=lots gpt_fail "STARPU_LIMIT_CPU_MEM not a number" \
  "STARPU_LIMIT_CPU_MEM='lots' is not a number of MiB" \
  --init-from "$work/m.bin" --data "$work/train.bin" --batch 4 --seq 16 --steps 1

# Memory limit: below what StarPU must manage, StarPU 1.3 would wait
# forever; the CLI refuses up front, and at the figure it names training runs.
if STARPU_LIMIT_CPU_MEM=1 "$tg" train gpt --init-from "$work/m.bin" --data "$work/train.bin" \
     --batch 32 --seq 32 --steps 2 >"$work/out" 2>"$work/err"; then
  bad "STARPU_LIMIT_CPU_MEM=1: accepted"
else
  need=$(sed -nE 's/.*below the ([0-9]+) MiB.*/\1/p' "$work/err")
  if [ -n "$need" ] && [ "$(grep -c 'taskgrad: error: STARPU_LIMIT_CPU_MEM' "$work/err")" -eq 1 ]; then
    ok "STARPU_LIMIT_CPU_MEM=1 refused: needs $need MiB"
    STARPU_LIMIT_CPU_MEM=$need timeout 120 "$tg" train gpt --init-from "$work/m.bin" \
      --data "$work/train.bin" --batch 32 --seq 32 --steps 2 >"$work/out" 2>"$work/err" \
      && ok "STARPU_LIMIT_CPU_MEM=$need: trains" \
      || bad "STARPU_LIMIT_CPU_MEM=$need: status $? $(tail -2 "$work/err")"
  else
    bad "STARPU_LIMIT_CPU_MEM=1: $(cat "$work/err")"
  fi
fi

# mixed precision flags
gpt_fail "unknown precision" "--precision: 'fp8'" --init-from "$work/m.bin" --data "$work/train.bin" --precision fp8
gpt_fail "loss scale with fp32" "--loss-scale and --loss-scale-window are for" --init-from "$work/m.bin" --data "$work/train.bin" --loss-scale 1024
gpt_fail "loss scale 0" "--loss-scale" --init-from "$work/m.bin" --data "$work/train.bin" --precision fp16 --loss-scale 0
gpt_fail "loss-scale window 0" "--loss-scale-window" --init-from "$work/m.bin" --data "$work/train.bin" --precision bf16 --loss-scale-window 0
# an injected overflow: the first steps are skipped, the scale halves each
# time, the progress lines and the summary show it
if "$tg" train gpt --init-from "$work/m.bin" --data "$work/train.bin" "${common[@]}" --steps 12 \
     --precision fp16 --loss-scale 1e30 >"$work/fp16.out" 2>"$work/fp16.err"; then
  k=$(grep -o 'skipped steps: [0-9]*' "$work/fp16.err" | awk '{print $3}')
  if grep -q '^step 1 loss .* scale 5e+29 skipped 1$' "$work/fp16.out" && [ -n "$k" ] && [ "$k" -ge 1 ]; then
    ok "fp16 --loss-scale 1e30: step 1 skipped, scale halved; summary: skipped steps: $k"
  else
    bad "fp16 --loss-scale 1e30: $(head -2 "$work/fp16.out") / $(tail -1 "$work/fp16.err")"
  fi
else
  bad "fp16 run failed: $(tail -2 "$work/fp16.err")"
fi
for p in bf16 tf32; do
  if "$tg" train gpt --init-from "$work/m.bin" --data "$work/train.bin" "${common[@]}" \
       --precision $p >"$work/p.out" 2>"$work/p.err" && grep -q "^step 3 loss" "$work/p.out" &&
     grep -q ", $p" "$work/p.err"; then
    ok "--precision $p: trains ($(grep '^step 3' "$work/p.out"))"
  else
    bad "--precision $p: $(tail -2 "$work/p.err")"
  fi
done

finish test_train_gpt_cli
