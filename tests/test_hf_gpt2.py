"""Hugging Face GPT-2 into taskgrad (--init-from) and out again, against PyTorch.

The test writes Hugging Face GPT-2 files with its own safetensors writer
(struct + json + numpy/torch: 8-byte little-endian header length, JSON
header, raw data; transformers is not needed), as GPT2LMHeadModel's state
dict does: Conv1D weights (in, out), GPT-2's vocabulary V = 50257 (not a
multiple of 64 or 128), tiny L, C, maxT so that it stays fast.  Variants:
  f32   a folder (model.safetensors + config.json), "transformer." names, the
        tied lm_head.weight present;
  bf16  a file model.bf16.safetensors with config.json beside it, GPT2Model
        names (no prefix), no lm_head, the old attention-mask buffers
        h.N.attn.bias and h.N.attn.masked_bias present (skipped);
  f16   a folder, "transformer." names, no lm_head.
LayerNorm weights and all biases are perturbed so that every tensor acts,
and the weights are larger than GPT-2's initialisation (wte, wpe std 0.3,
the linear layers 0.1) so that the loss is far from ln V and a wrong tensor
moves it.

Checks:
  - `init gpt --init-from MODEL --out x.bin` writes the llm.c checkpoint of
    the same model: each llm.c tensor equals the file's (widened to f32)
    bitwise, the Conv1D weights transposed, wte padded to Vp = 50304 with
    zero rows, NH from config.json;
  - the loss that `train gpt --init-from MODEL --steps 0 --val TOKENS`
    computes on B x T tokens equals a float64 GPT-2 forward in torch with
    Hugging Face's conventions (Conv1D: x @ W + b; logits h @ wte^T over
    the V tokens) on the weights as stored (bf16/f16: rounded, computed in
    f64): relative error <= 1e-5;
  - f32: `--save out/model.safetensors` of that run (no step: the model as
    read) writes the original tensors back bitwise, and config.json beside it
    with GPT2Config's fields (model_type gpt2, GPT2LMHeadModel, n_layer,
    n_head, n_embd, n_positions, n_ctx, vocab_size V, gelu_new, 1e-5, tied);
    reading that folder back gives the same checkpoint;
  - bad files and folders: exit status 2 and one "taskgrad: error:" line
    naming the problem, never a crash (truncated, bad header JSON, absurd
    header length, header beyond the file, offsets out of range, unknown
    dtype, wrong shape (llm.c's untransposed layout), missing tensor,
    unknown tensor, both name prefixes, lm_head different from wte, no
    config.json, no n_head, a config that disagrees, an activation other
    than gelu_new, a folder without model.safetensors); `--save` and
    `init gpt --safetensors` beside a config.json that taskgrad did not
    write: exit 2 before any work, that config.json untouched.
Exit 0 when all pass, 1 on any failure, 77 (SKIP) without numpy/torch.
Set TG_HF_PERTURB=transpose (the reference reads c_proj untransposed) or
=pad (the reference pads wte with ones) to see the checks fail.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as Fn
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "fuzz")]
# the reference forward, names and readers of test_safetensors, the
# safetensors writer of the fuzz corpus (its failures list is ours too)
from test_safetensors import (check, failures, forward_hf, hf_names,  # noqa: E402
                              read_llmc, read_safetensors)
from make_corpus import safetensors_bytes  # noqa: E402

BIN = os.environ.get("TG_BIN", "")
TG = os.path.join(BIN, "taskgrad")
PERTURB = os.environ.get("TG_HF_PERTURB", "")
L, C, NH, MAXT, V = 2, 32, 4, 16, 50257
VP = 50304
B, T = 2, 16
TOL = 1e-5


def conv1d(name):
    return name.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                          "mlp.c_proj.weight"))


def make_model(seed):
    """{HF name with 'transformer.': float32 array}, Hugging Face layout."""
    g = np.random.default_rng(seed)
    sd = {}
    for name in hf_names(L):
        short = name[len("transformer."):]
        if short == "wte.weight":
            shape = (V, C)
        elif short == "wpe.weight":
            shape = (MAXT, C)
        elif name.endswith("c_attn.weight"):
            shape = (C, 3 * C)
        elif name.endswith("c_attn.bias"):
            shape = (3 * C,)
        elif name.endswith("c_fc.weight"):
            shape = (C, 4 * C)
        elif name.endswith("c_fc.bias"):
            shape = (4 * C,)
        elif name.endswith("mlp.c_proj.weight"):
            shape = (4 * C, C)
        elif name.endswith("attn.c_proj.weight"):
            shape = (C, C)
        else:
            shape = (C,)
        if short in ("wte.weight", "wpe.weight"):  # far from uniform logits
            a = g.normal(0, 0.3, shape)
        elif name.endswith("weight") and len(shape) == 2:
            a = g.normal(0, 0.1, shape)
        elif name.endswith("weight"):  # LayerNorm
            a = 1 + g.normal(0, 0.1, shape)
        else:
            a = g.normal(0, 0.02, shape)
        sd[name] = a.astype(np.float32)
    return sd


def rounded(sd, dtype):
    """The weights as the file stores them, as float32."""
    if dtype == "F32":
        return sd
    if dtype == "F16":
        return {k: v.astype(np.float16).astype(np.float32) for k, v in sd.items()}
    return {k: torch.from_numpy(v).to(torch.bfloat16).to(torch.float32).numpy()
            for k, v in sd.items()}


def raw_bytes(a, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(a, dtype="<f2").tobytes()
    return torch.from_numpy(np.ascontiguousarray(a)).to(torch.bfloat16).view(torch.int16) \
        .numpy().tobytes()


def hf_entries(sd, dtype, prefix=True, lm_head=False, buffers=False):
    out = []
    for name, a in sd.items():
        n = name if prefix else name[len("transformer."):]
        out.append((n, dtype, a.shape, raw_bytes(a, dtype)))
    if buffers:
        for i in range(L):
            mask = np.tril(np.ones((MAXT, MAXT), np.float32)).reshape(1, 1, MAXT, MAXT)
            p = ("transformer." if prefix else "") + f"h.{i}."
            out.append((p + "attn.bias", "F32", mask.shape, mask.tobytes()))
            out.append((p + "attn.masked_bias", "F32", (), struct.pack("<f", -1e4)))
    if lm_head:
        w = sd["transformer.wte.weight"]
        out.append(("lm_head.weight", dtype, w.shape, raw_bytes(w, dtype)))
    return out


def config(**over):
    c = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
         "activation_function": "gelu_new", "n_ctx": MAXT, "n_positions": MAXT,
         "n_embd": C, "n_head": NH, "n_layer": L, "n_inner": None, "vocab_size": V,
         "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1, "attn_pdrop": 0.1,
         "embd_pdrop": 0.1, "bos_token_id": 50256, "eos_token_id": 50256}
    c.update(over)
    return {k: v for k, v in c.items() if v is not ...}


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data if isinstance(data, bytes) else json.dumps(data))


def write_tokens(path, tokens):
    h = [20240520, 1, len(tokens)] + [0] * 253
    write(path, struct.pack("<256i", *h) + np.asarray(tokens, "<u2").tobytes())


def run(args, **kw):
    return subprocess.run([TG] + args, capture_output=True, text=True, **kw)


def llmc_expected(sd):
    """The llm.c tensors of a Hugging Face state dict (rounded as stored)."""
    g = lambda n: sd["transformer." + n]  # noqa: E731
    wte = np.zeros((VP, C), np.float32)
    wte[:V] = g("wte.weight")
    if PERTURB == "pad":
        wte[V:] = 1
    e = {"wte": wte, "wpe": g("wpe.weight"), "lnfw": g("ln_f.weight"), "lnfb": g("ln_f.bias")}
    per = [("ln1w", "ln_1.weight"), ("ln1b", "ln_1.bias"), ("qkvw", "attn.c_attn.weight"),
           ("qkvb", "attn.c_attn.bias"), ("attprojw", "attn.c_proj.weight"),
           ("attprojb", "attn.c_proj.bias"), ("ln2w", "ln_2.weight"), ("ln2b", "ln_2.bias"),
           ("fcw", "mlp.c_fc.weight"), ("fcb", "mlp.c_fc.bias"),
           ("fcprojw", "mlp.c_proj.weight"), ("fcprojb", "mlp.c_proj.bias")]
    for ll, hf in per:
        e[ll] = np.stack([g(f"h.{i}.{hf}").T if conv1d(hf) else g(f"h.{i}.{hf}")
                          for i in range(L)])
    return e


def check_conversion(tmp, tag, model, sd):
    out = os.path.join(tmp, f"{tag}.bin")
    r = run(["init", "gpt", "--init-from", model, "--out", out])
    if not check(r.returncode == 0, f"{tag}: init gpt --init-from: {r.returncode} {r.stderr}"):
        return
    cfg, p = read_llmc(out)
    check(cfg == dict(maxT=MAXT, V=V, L=L, NH=NH, C=C, Vp=VP), f"{tag}: header {cfg}")
    bad = [k for k, v in llmc_expected(sd).items()
           if p[k].shape != v.shape or not np.array_equal(p[k].view(np.uint32),
                                                          np.ascontiguousarray(v).view(np.uint32))]
    check(not bad, f"{tag}: llm.c tensors differ from the file's: {bad}")
    if not bad:
        print(f"ok   {tag}: init gpt --init-from: 16 llm.c tensors bitwise (Conv1D transposed, "
              f"wte padded to {VP} with zeros)")


def reference_loss(sd, tokens):
    W = dict(sd)
    if PERTURB == "transpose":
        k = "transformer.h.0.attn.c_proj.weight"
        W[k] = np.ascontiguousarray(W[k].T)
    x = torch.tensor(np.asarray(tokens[:B * T + 1], np.int64))
    logits = forward_hf(W, dict(L=L, NH=NH), x[:-1].view(B, T))
    return Fn.cross_entropy(logits.reshape(B * T, V), x[1:]).item()


def taskgrad_loss(tag, model, tok, extra=()):
    r = run(["train", "gpt", "--init-from", model, "--data", tok, "--val", tok, "--steps", "0",
             "--batch", str(B), "--seq", str(T), "--val-batches", "1", "--ncpus", "1"]
            + list(extra))
    lines = [l for l in r.stdout.splitlines() if l.startswith("val loss ")]
    if not check(r.returncode == 0 and lines, f"{tag}: train gpt: {r.returncode} {r.stderr}"):
        return None
    return float(lines[-1].split()[2])


def check_loss(tmp, tag, model, sd, tok, tokens, extra=()):
    got = taskgrad_loss(tag, model, tok, extra)
    if got is None:
        return
    ref = reference_loss(sd, tokens)
    e = abs(got - ref) / abs(ref)
    if check(e <= TOL, f"{tag}: loss {got:.6f}, torch float64 {ref:.8f} (rel {e:.2e})"):
        print(f"ok   {tag}: loss {got:.6f}, torch float64 {ref:.8f}, rel err {e:.2e}")


def check_saved(tmp, sd, saved):
    meta, got, _ = read_safetensors(os.path.join(saved, "model.safetensors"))
    same = set(got) == set(sd) and all(
        np.array_equal(got[k].view(np.uint32), sd[k].view(np.uint32)) for k in sd)
    check(same, "f32: --save's safetensors differ from the Hugging Face file read")
    c = json.load(open(os.path.join(saved, "config.json")))
    want = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_layer=L, n_head=NH,
                n_embd=C, n_positions=MAXT, n_ctx=MAXT, vocab_size=V,
                activation_function="gelu_new", layer_norm_epsilon=1e-5,
                tie_word_embeddings=True, bos_token_id=50256, eos_token_id=50256)
    wrong = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
    check(not wrong, f"f32: config.json beside --save: wrong fields {wrong}")
    if same and not wrong:
        print("ok   f32: --save x.safetensors writes the tensors read bitwise and config.json "
              "(GPT2Config)")
    # taskgrad's own folder reads back as the same model
    a, b = os.path.join(tmp, "back.bin"), os.path.join(tmp, "f32.bin")
    r = run(["init", "gpt", "--init-from", saved, "--out", a])
    check(r.returncode == 0 and open(a, "rb").read() == open(b, "rb").read(),
          f"f32: the saved folder reads back differently: {r.stderr}")


def refuse(tmp, what, args, pattern, files=None):
    """args fail with exit 2 and one 'taskgrad: error:' line matching pattern."""
    r = run(args)
    lines = r.stderr.strip().splitlines()
    ok = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith("taskgrad: error:")
          and pattern in lines[0])
    check(ok, f"refusal '{what}': status {r.returncode}, stderr {r.stderr!r}")
    return ok


def check_refusals(tmp, sd):
    good = hf_entries(sd, "F32", lm_head=True)
    cfg = os.path.join(tmp, "bad", "config.json")
    os.makedirs(os.path.dirname(cfg))
    full = safetensors_bytes(good)
    hlen = struct.unpack("<Q", full[:8])[0]
    wrong_shape = [(n, d, s[::-1] if n.endswith("h.1.attn.c_attn.weight") else s, raw)
                   for n, d, s, raw in good]

    def patched(fn):
        return safetensors_bytes(good, fn)

    def set_in(name, key, value):
        return lambda h: h[name].__setitem__(key, value)

    cases = [
        ("truncated", full[:-100], "truncated"),
        ("bad JSON", full[:8] + b"x" + full[9:], "bad safetensors header"),
        ("header length 2^63", struct.pack("<Q", 1 << 63) + full[8:], "header length"),
        ("header beyond the file", struct.pack("<Q", len(full)) + full[8:], "header length"),
        ("offsets out of range", patched(set_in("transformer.ln_f.bias", "data_offsets",
                                                [0, 1 << 40])), "data_offsets"),
        ("unknown dtype", patched(set_in("transformer.h.0.ln_1.bias", "dtype", "I64")), "dtype"),
        ("dtype size mismatch", patched(set_in("transformer.h.0.ln_1.bias", "dtype", "F16")),
         "data_offsets span"),
        ("llm.c layout (3C, C)", safetensors_bytes(wrong_shape), "has shape [96, 32]"),
        ("missing tensor", safetensors_bytes([e for e in good
                                              if e[0] != "transformer.h.1.mlp.c_fc.bias"]),
         "h.1.mlp.c_fc.bias"),
        ("unknown tensor", safetensors_bytes(good + [("score.weight", "F32", (2, C),
                                                      bytes(8 * C))]), "score.weight"),
        ("both prefixes", safetensors_bytes(good + [("ln_f.bias", "F32", (C,), bytes(4 * C))]),
         "twice"),
        ("lm_head untied", safetensors_bytes(good[:-1] + [(
            "lm_head.weight", "F32", (V, C), raw_bytes(sd["transformer.wte.weight"] * 2, "F32"))]),
         "lm_head.weight differs"),
    ]
    model = os.path.join(tmp, "bad", "model.safetensors")
    n = 0
    write(cfg, config())
    for what, data, pattern in cases:
        write(model, data)
        n += refuse(tmp, what, ["init", "gpt", "--init-from", model, "--out",
                                os.path.join(tmp, "x.bin")], pattern)
    write(model, full)
    for what, c, pattern in [
        ("no n_head", config(n_head=...), "n_head"),
        ("n_layer disagrees", config(n_layer=3), "n_layer"),
        ("activation relu", config(activation_function="relu"), "gelu_new"),
        ("untied config", config(tie_word_embeddings=False), "ok"),
    ]:
        write(cfg, c)
        if what == "untied config":  # lm_head equal to wte: tied in fact, read
            r = run(["init", "gpt", "--init-from", model, "--out", os.path.join(tmp, "x.bin")])
            n += check(r.returncode == 0, f"untied config with an equal lm_head: {r.stderr}")
            continue
        n += refuse(tmp, what, ["init", "gpt", "--init-from", os.path.dirname(model), "--out",
                                os.path.join(tmp, "x.bin")], pattern)
    os.unlink(cfg)
    n += refuse(tmp, "no config.json", ["init", "gpt", "--init-from", model, "--out",
                                        os.path.join(tmp, "x.bin")], "n_head")
    n += refuse(tmp, "folder without model.safetensors",
                ["train", "gpt", "--init-from", tmp, "--data", os.path.join(tmp, "tok.bin")],
                "model.safetensors")
    # outputs beside a config.json that taskgrad did not write
    foreign = os.path.join(tmp, "bad", "config.json")
    write(foreign, config())
    before = open(foreign).read()
    n += refuse(tmp, "--save beside a foreign config.json",
                ["train", "gpt", "--init-from", os.path.join(tmp, "f32"), "--data",
                 os.path.join(tmp, "tok.bin"), "--steps", "0", "--batch", str(B), "--seq", str(T),
                 "--save", model], "not written by taskgrad")
    out = os.path.join(tmp, "y.bin")
    n += refuse(tmp, "init gpt --safetensors beside a foreign config.json",
                ["init", "gpt", "--init-from", os.path.join(tmp, "f32"), "--out", out,
                 "--safetensors", model], "not written by taskgrad")
    check(open(foreign).read() == before and not os.path.exists(out),
          "a refused save changed config.json or wrote --out")
    print(f"ok   {n} refusals: exit 2, one message" if n == len(cases) + 8 else
          f"FAIL {len(cases) + 8 - n} refusals")


def main():
    if not os.path.exists(TG):
        print(f"FAIL: {TG} not found (set TG_BIN)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        sd = make_model(3)
        g = np.random.default_rng(4)
        tokens = g.integers(0, V, B * T + 1)
        tokens[:4] = [V - 1, 50256, 0, 1]  # the highest token ids too
        tok = os.path.join(tmp, "tok.bin")
        write_tokens(tok, tokens)
        # f32: a folder, transformer. names, lm_head present
        f32 = os.path.join(tmp, "f32")
        os.mkdir(f32)
        write(os.path.join(f32, "model.safetensors"),
              safetensors_bytes(hf_entries(sd, "F32", lm_head=True)))
        write(os.path.join(f32, "config.json"), config())
        # bf16: a file with config.json beside it, GPT2Model names, buffers
        bdir = os.path.join(tmp, "bf16")
        os.mkdir(bdir)
        bf = os.path.join(bdir, "model.bf16.safetensors")
        write(bf, safetensors_bytes(hf_entries(sd, "BF16", prefix=False, buffers=True)))
        write(os.path.join(bdir, "config.json"), config(n_positions=..., n_inner=4 * C))
        # f16: a folder, no lm_head
        f16 = os.path.join(tmp, "f16")
        os.mkdir(f16)
        write(os.path.join(f16, "model.safetensors"), safetensors_bytes(hf_entries(sd, "F16")))
        write(os.path.join(f16, "config.json"), config(activation_function="gelu_pytorch_tanh"))

        variants = [("f32", f32, rounded(sd, "F32")), ("bf16", bf, rounded(sd, "BF16")),
                    ("f16", f16, rounded(sd, "F16"))]
        for tag, model, w in variants:
            check_conversion(tmp, tag, model, w)
        saved = os.path.join(tmp, "saved")
        os.mkdir(saved)
        for tag, model, w in variants:
            extra = ["--save", os.path.join(saved, "model.safetensors")] if tag == "f32" else []
            check_loss(tmp, tag, model, w, tok, tokens, extra)
        check_saved(tmp, sd, saved)
        check_refusals(tmp, sd)
    print(f"test_hf_gpt2: {'FAILED: ' + str(len(failures)) if failures else 'all passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
