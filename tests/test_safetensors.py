"""taskgrad's safetensors export of GPT-2 (tg_safetensors_write_gpt2).

tg_safetensors_dump (tests/tools/safetensors_dump.c, in $TG_BIN) writes one
random model (tg_gpt_init_params) both as an llm.c checkpoint and as a
safetensors file.  This test parses both itself (the safetensors package is
not needed: struct + json + numpy) and checks:
  - the safetensors framing: 8-byte little-endian header length N, N a
    multiple of 8, JSON padded with spaces, "__metadata__" {"format": "pt"},
    the data section covered exactly by the tensors' data_offsets, in order,
    without holes, and the file ending with the last tensor;
  - every Hugging Face GPT-2 name (GPT2LMHeadModel's state dict, lm_head
    tied and omitted), no other name, dtype F32 and the shape;
  - each tensor equals its llm.c tensor bitwise: wte's first V rows, the
    Conv1D weights (c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) transposed;
  - a GPT-2 forward in torch (float64) built from the safetensors tensors
    with Hugging Face's conventions (Conv1D: x @ W + b; logits h @ wte^T over
    V) and one built from the llm.c tensors with llm.c's (x @ W^T + b; the
    first V of the Vp logits) give the same logits (max abs diff <= 1e-5);
  - config.json beside the file: GPT2Config's fields for the model
    (model_type gpt2, architectures GPT2LMHeadModel, n_layer, n_head,
    n_embd, n_positions = n_ctx = maxT, vocab_size V (not Vp), gelu_new,
    layer_norm_epsilon 1e-5, tie_word_embeddings, saved_by taskgrad), so
    that GPT2LMHeadModel.from_pretrained(folder) needs nothing else;
  - `taskgrad init gpt --safetensors` writes the same bytes as the tool;
  - errors: an unwritable path and a directory as target fail with exit 1
    and a message naming the file, leaving no temporary file behind; a
    config.json beside the target that taskgrad did not write is neither
    replaced nor is the safetensors file written.
Models: (a) L=2, C=64, NH=4, maxT=32, V=250, Vp=256, LayerNorm weights and
all biases perturbed (so the forward uses every tensor); (b) L=1, C=32,
NH=2, maxT=16, V=Vp=64, GPT-2's initialisation as is.
Exit 0 when all pass, 1 on any failure, 77 (SKIP) without numpy/torch.
"""
import json
import math
import os
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

BIN = os.environ.get("TG_BIN", "")
DUMP = os.path.join(BIN, "tg_safetensors_dump")
TG = os.path.join(BIN, "taskgrad")
LLMC = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)
    return cond


def read_llmc(path):
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    assert h[0] == 20240326 and h[1] == 3, h[:2]
    maxT, V, L, NH, C, Vp = h[2:8]
    shapes = {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
              "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C),
              "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
              "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C),
              "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,)}
    data = np.frombuffer(raw, dtype="<f4", offset=1024)
    p, off = {}, 0
    for name in LLMC:
        n = int(np.prod(shapes[name]))
        p[name] = data[off:off + n].reshape(shapes[name])
        off += n
    assert off == data.size, (off, data.size)
    return dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp), p


def read_safetensors(path):
    """(metadata, {name: array}, ordered names); raises on bad framing."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    check(n % 8 == 0, f"{path}: header length {n} not a multiple of 8")
    hb = raw[8:8 + n]
    check(hb[:1] == b"{", f"{path}: header does not start with '{{'")
    text = hb.decode("utf-8")
    check(text.rstrip(" ") == text.rstrip(), f"{path}: header padding not spaces")
    header = json.loads(text)
    meta = header.pop("__metadata__", None)
    data = raw[8 + n:]
    tensors, order, end = {}, [], 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, f = e["data_offsets"]
        check(b == end, f"{name}: data starts at {b}, previous tensor ended at {end}")
        check(e["dtype"] == "F32", f"{name}: dtype {e['dtype']}")
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        check(f - b == 4 * count, f"{name}: {f - b} bytes for shape {e['shape']}")
        tensors[name] = np.frombuffer(data[b:f], dtype="<f4").reshape(e["shape"])
        order.append(name)
        end = f
    check(end == len(data), f"{path}: data section {len(data)} bytes, tensors end at {end}")
    return meta, tensors, order


def hf_names(L):
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(L):
        h = f"transformer.h.{i}."
        names += [h + "ln_1.weight", h + "ln_1.bias",
                  h + "attn.c_attn.weight", h + "attn.c_attn.bias",
                  h + "attn.c_proj.weight", h + "attn.c_proj.bias",
                  h + "ln_2.weight", h + "ln_2.bias",
                  h + "mlp.c_fc.weight", h + "mlp.c_fc.bias",
                  h + "mlp.c_proj.weight", h + "mlp.c_proj.bias"]
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def expected(cfg, p):
    """{HF name: (array from llm.c, transposed?)}"""
    e = {"transformer.wte.weight": (p["wte"][:cfg["V"]], False),
         "transformer.wpe.weight": (p["wpe"], False),
         "transformer.ln_f.weight": (p["lnfw"], False),
         "transformer.ln_f.bias": (p["lnfb"], False)}
    for i in range(cfg["L"]):
        h = f"transformer.h.{i}."
        e[h + "ln_1.weight"] = (p["ln1w"][i], False)
        e[h + "ln_1.bias"] = (p["ln1b"][i], False)
        e[h + "attn.c_attn.weight"] = (p["qkvw"][i].T, True)
        e[h + "attn.c_attn.bias"] = (p["qkvb"][i], False)
        e[h + "attn.c_proj.weight"] = (p["attprojw"][i].T, True)
        e[h + "attn.c_proj.bias"] = (p["attprojb"][i], False)
        e[h + "ln_2.weight"] = (p["ln2w"][i], False)
        e[h + "ln_2.bias"] = (p["ln2b"][i], False)
        e[h + "mlp.c_fc.weight"] = (p["fcw"][i].T, True)
        e[h + "mlp.c_fc.bias"] = (p["fcb"][i], False)
        e[h + "mlp.c_proj.weight"] = (p["fcprojw"][i].T, True)
        e[h + "mlp.c_proj.bias"] = (p["fcprojb"][i], False)
    return e


def t64(a):
    return torch.from_numpy(np.array(a, dtype=np.float64))


def attention(qkv, NH):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (z.view(B, T, NH, C // NH).transpose(1, 2) for z in (q, k, v))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C)


def ln(x, w, b):
    return Fn.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def gelu(x):
    return Fn.gelu(x, approximate="tanh")


def forward_hf(sd, cfg, tokens):
    """Hugging Face GPT2LMHeadModel semantics: Conv1D is x @ W + b."""
    W = {k: t64(v) for k, v in sd.items()}
    T = tokens.shape[1]
    x = W["transformer.wte.weight"][tokens] + W["transformer.wpe.weight"][:T]
    for i in range(cfg["L"]):
        h = f"transformer.h.{i}."
        a = ln(x, W[h + "ln_1.weight"], W[h + "ln_1.bias"])
        qkv = a @ W[h + "attn.c_attn.weight"] + W[h + "attn.c_attn.bias"]
        x = x + attention(qkv, cfg["NH"]) @ W[h + "attn.c_proj.weight"] \
            + W[h + "attn.c_proj.bias"]
        m = ln(x, W[h + "ln_2.weight"], W[h + "ln_2.bias"])
        m = gelu(m @ W[h + "mlp.c_fc.weight"] + W[h + "mlp.c_fc.bias"])
        x = x + m @ W[h + "mlp.c_proj.weight"] + W[h + "mlp.c_proj.bias"]
    x = ln(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"])
    return x @ W["transformer.wte.weight"].T  # lm_head tied to wte


def forward_llmc(p, cfg, tokens):
    """llm.c semantics: weights (out, in), x @ W^T + b; Vp logits."""
    W = {k: t64(v) for k, v in p.items()}
    T = tokens.shape[1]
    x = W["wte"][tokens] + W["wpe"][:T]
    for i in range(cfg["L"]):
        a = ln(x, W["ln1w"][i], W["ln1b"][i])
        qkv = a @ W["qkvw"][i].T + W["qkvb"][i]
        x = x + attention(qkv, cfg["NH"]) @ W["attprojw"][i].T + W["attprojb"][i]
        m = ln(x, W["ln2w"][i], W["ln2b"][i])
        m = gelu(m @ W["fcw"][i].T + W["fcb"][i])
        x = x + m @ W["fcprojw"][i].T + W["fcprojb"][i]
    x = ln(x, W["lnfw"], W["lnfb"])
    return (x @ W["wte"].T)[..., :cfg["V"]]


def check_config(tag, path, cfg):
    """config.json beside the file: GPT2Config of the model."""
    if not check(os.path.exists(path), f"{tag}: no config.json beside the file"):
        return
    c = json.load(open(path))
    want = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_layer=cfg["L"],
                n_head=cfg["NH"], n_embd=cfg["C"], n_positions=cfg["maxT"],
                n_ctx=cfg["maxT"], vocab_size=cfg["V"], activation_function="gelu_new",
                layer_norm_epsilon=1e-5, tie_word_embeddings=True, n_inner=None,
                saved_by="taskgrad")
    wrong = {k: c.get(k, "missing") for k, v in want.items() if c.get(k, "missing") != v}
    if check(not wrong, f"{tag}: config.json fields {wrong}"):
        print(f"ok   {tag}: config.json has GPT2Config's fields")


def run_model(tmp, tag, L, C, NH, maxT, V, Vp, seed, perturb):
    llmc = os.path.join(tmp, f"{tag}.bin")
    st = os.path.join(tmp, f"{tag}.safetensors")
    args = [DUMP] + [str(a) for a in (L, C, NH, maxT, V, Vp, seed)] + [llmc, st]
    if perturb:
        args.append("perturb")
    r = subprocess.run(args, capture_output=True, text=True)
    if not check(r.returncode == 0, f"{tag}: tg_safetensors_dump failed: {r.stderr}"):
        return None
    cfg, p = read_llmc(llmc)
    check_config(tag, os.path.join(tmp, "config.json"), cfg)
    meta, sd, order = read_safetensors(st)
    check(meta == {"format": "pt"}, f"{tag}: __metadata__ {meta}")
    names = hf_names(L)
    check(order == names, f"{tag}: names/order {order[:4]}... != {names[:4]}...")
    check(set(sd) == set(names), f"{tag}: extra {sorted(set(sd) - set(names))}, "
          f"missing {sorted(set(names) - set(sd))}")
    exp = expected(cfg, p)
    for name in names:
        if name not in sd:
            continue
        want, transposed = exp[name]
        got = sd[name]
        if not check(list(got.shape) == list(want.shape),
                     f"{tag}: {name} shape {got.shape} != {want.shape}"):
            continue
        check(np.array_equal(np.ascontiguousarray(want).view(np.uint32),
                             got.view(np.uint32)),
              f"{tag}: {name} differs from llm.c's"
              + (" (transposed)" if transposed else ""))

    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (3, maxT), generator=g)
    lh = forward_hf(sd, cfg, tokens)
    ll = forward_llmc(p, cfg, tokens)
    diff = (lh - ll).abs().max().item()
    scale = ll.abs().max().item()
    check(lh.shape == (3, maxT, V), f"{tag}: logits shape {tuple(lh.shape)}")
    check(diff <= 1e-5 and scale > 0,
          f"{tag}: HF-convention logits differ from llm.c's by {diff:.3g}")
    # the comparison is not vacuous: c_proj (C, C) keeps its shape when
    # transposed, and the wrong convention must change the logits
    sq = dict(sd)
    sq["transformer.h.0.attn.c_proj.weight"] = sd["transformer.h.0.attn.c_proj.weight"].T
    d2 = (forward_hf(sq, cfg, tokens) - ll).abs().max().item()
    check(d2 > 1e-4 * scale, f"{tag}: transposing c_proj changes nothing ({d2:.3g})")
    print(f"ok   {tag}: {len(names)} tensors named, shaped and bitwise equal; "
          f"logits max |diff| {diff:.2e} (max |logit| {scale:.3g})")
    return llmc, st


def check_cli(tmp, st_ref):
    """`taskgrad init gpt --safetensors` writes the same bytes as the tool."""
    out = os.path.join(tmp, "cli.bin")
    st = os.path.join(tmp, "cli.safetensors")
    r = subprocess.run([TG, "init", "gpt", "--layers", "1", "--channels", "32",
                        "--heads", "2", "--max-seq", "16", "--vocab", "64",
                        "--seed", "5", "--out", out, "--safetensors", st],
                       capture_output=True, text=True)
    if check(r.returncode == 0, f"init gpt --safetensors: {r.returncode} {r.stderr}"):
        check(open(st, "rb").read() == open(st_ref, "rb").read(),
              "init gpt --safetensors differs from tg_safetensors_dump's file")
        check(st in r.stdout, f"init gpt does not report {st}: {r.stdout}")
        print("ok   init gpt --safetensors: same bytes as the library call")


def check_errors(tmp):
    llmc = os.path.join(tmp, "e.bin")
    for target, pattern in [(os.path.join(tmp, "no-such-dir", "m.safetensors"),
                             "cannot create the temporary file"),
                            (tmp, "not a regular file")]:
        r = subprocess.run([DUMP, "1", "32", "2", "16", "64", "64", "1", llmc,
                            target], capture_output=True, text=True)
        check(r.returncode == 1 and target in r.stderr and pattern in r.stderr,
              f"write to {target}: status {r.returncode}, message {r.stderr!r}")
    foreign = os.path.join(tmp, "foreign")
    os.mkdir(foreign)
    with open(os.path.join(foreign, "config.json"), "w") as f:
        f.write('{"n_layer": 12}')
    target = os.path.join(foreign, "m.safetensors")
    r = subprocess.run([DUMP, "1", "32", "2", "16", "64", "64", "1", llmc, target],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "not written by taskgrad" in r.stderr
          and not os.path.exists(target)
          and open(os.path.join(foreign, "config.json")).read() == '{"n_layer": 12}',
          f"write beside a foreign config.json: status {r.returncode}, {r.stderr!r}")
    left = [f for f in os.listdir(tmp) if ".tmp." in f]
    check(not left, f"temporary files left behind: {left}")
    print("ok   errors: exit 1, message names the file, no temporary file left, a "
          "foreign config.json kept")


def main():
    if not os.path.exists(DUMP):
        print(f"FAIL: {DUMP} not found (set TG_BIN)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        run_model(tmp, "a", 2, 64, 4, 32, 250, 256, 11, True)
        b = run_model(tmp, "b", 1, 32, 2, 16, 64, 64, 5, False)
        if b and os.path.exists(TG):
            check_cli(tmp, b[1])
        check_errors(tmp)
    print(f"test_safetensors: {'FAILED: ' + str(len(failures)) if failures else 'all passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
