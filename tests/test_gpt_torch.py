"""taskgrad's GPT-2 training step against PyTorch (float64).

This test writes a random llm.c checkpoint (numpy; header and layout as in
include/taskgrad/llmc.h) and a random llm.c token file, runs tg_gpt_dump
(tests/tools/gpt_dump.c, found in $TG_BIN) on them, and rebuilds GPT-2 as
llm.c defines it in torch float64 from the same checkpoint file: learned wte
and wpe; L pre-LN blocks x + attproj(attn(qkv(ln1(x)))), then
x + fcproj(gelu_tanh(fc(ln2(x)))); final LayerNorm (eps 1e-5); LM head tied
to wte; causal attention with scale 1/sqrt(C/NH), q, k, v = columns [0, C),
[C, 2C), [2C, 3C) of qkv; cross-entropy (mean over the B*T positions) over
the first V of the Vp logits.

Models: (a) L=2, C=64, NH=4, maxT=32, V=Vp=256 and (b) the same with V=250,
Vp=256 (padded rows of wte random and nonzero, so that a padded column that
entered the softmax would show).  Batch B=4 sequences of T=32.  Runs with
naive and chunked attention (chunk 16: two chunks per sequence; chunk 64 > T),
M in {1, 2} micro-batches and 1 or 2 attention tasks per micro-batch.
Initialisation: GPT-2's normal(0, 0.02) for wte, wpe and the linear weights
(attprojw, fcprojw scaled by 1/sqrt(2L)), LayerNorm weights 1 + normal(0,
0.1) and biases normal(0, 0.02) instead of GPT-2's exact 1 and 0, so that the
LayerNorm weights and all biases act on the numbers.

Checks, per run:
  - the dump's header matches the command line and the checkpoint, its
    tokens are the token file's first B*T + 1, its AdamW hyper-parameters
    are the given lr, betas (0.9, 0.999), eps 1e-8 and weight decay 0.01 on
    every one of the 16 tensors (llm.c's AdamW decays them all);
  - the step-1 loss: relative error <= 1e-4;
  - the logits (B*T, Vp) of the initial model, all Vp columns
    (lnf @ wte^T): norm-relative error <= 1e-4;
  - each of the 16 gradient tensors: norm-relative error <= 1e-4; the
    gradient of the padded rows of wte exactly zero; the gradient of the
    key bias (qkvb[:, C:2C], exactly zero in theory) below 1e-6 of qkvb's;
  - 10 steps of torch.optim.AdamW (one parameter group, all 16 tensors): the
    10 losses within 1e-4 relative; the final parameters within 1e-4
    (norm-relative) and, sharper, the total update W_10 - W_0 of each tensor
    within 2e-4 (norm-relative), both without the key bias, whose AdamW
    steps are +-lr of random sign (AdamW normalises its rounding-noise
    gradient), in torch as in taskgrad.
Exit 0 when all pass, 1 on any failure, 77 (SKIP) without torch.
Set TG_GPT_TORCH_PERTURB to one of the names in PERTURBATIONS to break the
reference on purpose (each run it concerns must then fail: "padded" concerns model b only).
"""
import math
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as Fn
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}")
    sys.exit(77)

TOL = 1e-4          # loss, logits, gradients
TRAJ_TOL = 1e-4     # loss sequence, final parameters
UPDATE_TOL = 2e-4   # total update of each tensor over the 10 steps
KEYBIAS_TOL = 1e-6  # |grad of the key bias| / |grad of qkvb| (exactly 0 in theory)
STEPS = 10
LR = 1e-3
B, T = 4, 32
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
MODELS = {
    "a": dict(maxT=32, V=256, L=2, NH=4, C=64, Vp=256, seed=1),
    "b": dict(maxT=32, V=250, L=2, NH=4, C=64, Vp=256, seed=2),
}
# (model, attention, chunk, micro, splits, classifier chunk[, dwte blocks]): with the
# default classifier chunk (256) every micro-batch (<= 128 rows) is one
# chunk; 48 makes 3 and 2 chunks (the split classifier of graphs/gpt.c then
# keeps dlogits chunk after chunk)
RUNS = [
    ("a", "naive", 64, 1, 1, 256),
    ("a", "chunked", 16, 1, 2, 256),
    ("a", "chunked", 16, 2, 1, 256),
    ("a", "chunked", 64, 2, 2, 256),
    ("b", "naive", 64, 2, 2, 256),
    ("b", "chunked", 16, 1, 1, 256),
    ("b", "chunked", 16, 2, 2, 256),
    ("b", "chunked", 64, 1, 2, 256),
    ("b", "chunked", 16, 1, 1, 48),
    ("a", "chunked", 64, 2, 2, 48),
    # dwte's increments in row blocks (gpt.c: by default only from 5
    # workers on), blocks of unequal sizes
    ("a", "chunked", 64, 2, 2, 48, 3),
    ("b", "chunked", 16, 2, 1, 256, 7),
]
# ways to break the reference, to see that the checks can fail
PERTURBATIONS = ("scale", "causal", "padded", "eps", "decay2d")
PERTURB = os.environ.get("TG_GPT_TORCH_PERTURB", "")

failures = 0


def check(ok, msg):
    global failures
    print(("ok   " if ok else "FAIL ") + msg, flush=True)
    if not ok:
        failures += 1


def rel_err(got, ref):
    """||got - ref|| / ||ref|| in float64 (absolute when ref is all zero)."""
    got = torch.as_tensor(got, dtype=torch.float64)
    ref = torch.as_tensor(ref, dtype=torch.float64)
    den = torch.linalg.norm(ref).item()
    num = torch.linalg.norm(got - ref).item()
    return num / den if den > 1e-300 else num


def shapes(m):
    L, C, V, Vp, maxT = m["L"], m["C"], m["V"], m["Vp"], m["maxT"]
    return [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C),
            (L, C, C), (L, C), (L, C), (L, C), (L, 4 * C, C), (L, 4 * C),
            (L, C, 4 * C), (L, C), (C,), (C,)]


def write_checkpoint(path, m):
    rng = np.random.default_rng(m["seed"])
    L = m["L"]
    proj = 0.02 / math.sqrt(2 * L)
    tensors = []
    for name, shp in zip(NAMES, shapes(m)):
        if name in ("wte", "wpe", "qkvw", "fcw"):
            t = rng.normal(0.0, 0.02, shp)
        elif name in ("attprojw", "fcprojw"):
            t = rng.normal(0.0, proj, shp)
        elif name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + rng.normal(0.0, 0.1, shp)
        else:  # biases
            t = rng.normal(0.0, 0.02, shp)
        tensors.append(t.astype("<f4"))
    hdr = np.zeros(256, dtype="<i4")
    hdr[:8] = [20240326, 3, m["maxT"], m["V"], L, m["NH"], m["C"], m["Vp"]]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        for t in tensors:
            f.write(t.tobytes())


def read_checkpoint(path):
    """The model's 16 tensors as written (independent of write_checkpoint)."""
    with open(path, "rb") as f:
        data = f.read()
    hdr = np.frombuffer(data, dtype="<i4", count=256)
    assert hdr[0] == 20240326 and hdr[1] == 3, "bad checkpoint header"
    m = dict(maxT=int(hdr[2]), V=int(hdr[3]), L=int(hdr[4]), NH=int(hdr[5]),
             C=int(hdr[6]), Vp=int(hdr[7]))
    out, pos = [], 1024
    for shp in shapes(m):
        n = int(np.prod(shp))
        out.append(np.frombuffer(data, dtype="<f4", count=n, offset=pos).reshape(shp).copy())
        pos += 4 * n
    assert pos == len(data), "checkpoint size"
    return m, out


def write_tokens(path, ntokens, V, seed):
    rng = np.random.default_rng(1000 + seed)
    toks = rng.integers(0, V, ntokens).astype("<u2")
    hdr = np.zeros(256, dtype="<i4")
    hdr[:3] = [20240520, 1, ntokens]
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(toks.tobytes())
    return toks


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt, n=1):
        size = np.dtype(fmt).itemsize * n
        if self.pos + size > len(self.data):
            raise ValueError(f"dump truncated at byte {self.pos} (need {size} more)")
        out = np.frombuffer(self.data, dtype=np.dtype(fmt), count=n, offset=self.pos)
        self.pos += size
        return out.copy()


def read_dump(path):
    with open(path, "rb") as f:
        r = Reader(f.read())
    magic = bytes(r.take("u1", 8))
    if magic != b"TGGPTDU1":
        raise ValueError(f"bad magic {magic!r}")
    keys = ["maxT", "V", "L", "NH", "C", "Vp", "B", "T", "M", "attention", "chunk",
            "splits", "steps", "classifier_chunk", "nparams"]
    d = dict(zip(keys, (int(v) for v in r.take("<i4", len(keys)))))
    d["lr"], d["beta1"], d["beta2"], d["eps"] = (float(v) for v in r.take("<f4", 4))
    d["wd"] = [float(v) for v in r.take("<f4", 16)]
    n = d["B"] * d["T"]
    d["tokens"] = r.take("<i4", n + 1)
    d["loss1"] = float(r.take("<f8")[0])
    d["logits"] = r.take("<f4", n * d["Vp"]).reshape(n, d["Vp"])
    d["grads"] = r.take("<f4", d["nparams"])
    d["losses"] = [float(v) for v in r.take("<f8", d["steps"])]
    d["final"] = r.take("<f4", d["nparams"])
    if r.pos != len(r.data):
        raise ValueError(f"{len(r.data) - r.pos} bytes left over after the dump")
    return d


def split_flat(flat, m):
    out, pos = [], 0
    for shp in shapes(m):
        k = int(np.prod(shp))
        out.append(flat[pos:pos + k].reshape(shp))
        pos += k
    assert pos == len(flat)
    return out


def forward(P, m, idx, targets):
    """(loss over the first V logits, all Vp logits) of GPT-2 in float64."""
    (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb,
     fcprojw, fcprojb, lnfw, lnfb) = P
    Bq, Tq = idx.shape
    C, NH, V = m["C"], m["NH"], m["V"]
    hs = C // NH
    eps = 1e-6 if PERTURB == "eps" else 1e-5
    scale = 1.0 / math.sqrt(C if PERTURB == "scale" else hs)
    # "causal" perturbation: each position also sees the next one
    mask = torch.ones(Tq, Tq, dtype=torch.bool).tril(1 if PERTURB == "causal" else 0)
    x = wte[idx] + wpe[:Tq]
    for l in range(m["L"]):
        h = Fn.layer_norm(x, (C,), ln1w[l], ln1b[l], eps)
        qkv = h @ qkvw[l].T + qkvb[l]
        q, k, v = (t.reshape(Bq, Tq, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) * scale
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bq, Tq, C)
        x = x + y @ attprojw[l].T + attprojb[l]
        h = Fn.layer_norm(x, (C,), ln2w[l], ln2b[l], eps)
        h = Fn.gelu(h @ fcw[l].T + fcb[l], approximate="tanh")
        x = x + h @ fcprojw[l].T + fcprojb[l]
    x = Fn.layer_norm(x, (C,), lnfw, lnfb, eps)
    logits_all = x @ wte.T
    Vl = m["Vp"] if PERTURB == "padded" else V
    logits = x @ wte[:Vl].T
    loss = Fn.cross_entropy(logits.reshape(-1, Vl), targets.reshape(-1), reduction="mean")
    return loss, logits_all


def run_one(tool, tmp, model, attention, chunk, micro, splits, cchunk, files, cblocks=0):
    m = MODELS[model]
    name = f"model {model} (V={m['V']} Vp={m['Vp']}) {attention}"
    if attention == "chunked":
        name += f" chunk={chunk}"
    name += f" M={micro} S={splits} classifier chunk {cchunk}"
    if cblocks:
        name += f", dwte in {cblocks} blocks"
    ckpt, tokf = files[model]
    out = os.path.join(tmp, "dump.bin")
    cmd = [tool, "--model", ckpt, "--tokens", tokf, "--batch", str(B), "--seq", str(T),
           "--micro", str(micro), "--attention", attention, "--chunk", str(chunk),
           "--splits", str(splits), "--classifier-chunk", str(cchunk), "--steps", str(STEPS),
           "--lr", repr(LR), "--out", out]
    if cblocks:
        cmd += ["--classifier-blocks", str(cblocks)]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    t_tool = time.time() - t0
    check(p.returncode == 0, f"[{name}] tg_gpt_dump exit status {p.returncode} "
          f"({t_tool:.1f} s)" + (f": {p.stdout.strip()}" if p.returncode else ""))
    if p.returncode != 0:
        return None
    try:
        d = read_dump(out)
    except (OSError, ValueError) as e:
        check(False, f"[{name}] reading the dump: {e}")
        return None
    cm, init = read_checkpoint(ckpt)
    check(all(d[k] == cm[k] for k in cm) and d["B"] == B and d["T"] == T
          and d["M"] == micro and d["attention"] == (0 if attention == "naive" else 1)
          and d["chunk"] == chunk and d["splits"] == splits and d["steps"] == STEPS
          and d["classifier_chunk"] == cchunk
          and d["nparams"] == sum(int(np.prod(s)) for s in shapes(cm)),
          f"[{name}] dump header matches the command line and the checkpoint")
    with open(tokf, "rb") as f:
        toks = np.frombuffer(f.read(), dtype="<u2", offset=1024)
    check(np.array_equal(d["tokens"], toks[:B * T + 1].astype(np.int32)),
          f"[{name}] the batch is the token file's first B*T+1 = {B * T + 1} tokens")
    expect = dict(lr=LR, beta1=0.9, beta2=0.999, eps=1e-8)
    ok = all(abs(d[k] - v) <= 1e-6 * abs(v) for k, v in expect.items())
    ok = ok and all(abs(w - 0.01) <= 1e-9 for w in d["wd"])
    check(ok, f"[{name}] AdamW lr={d['lr']:.6g} betas=({d['beta1']:.6g}, {d['beta2']:.6g}) "
          f"eps={d['eps']:.3g}, weight decay on all 16 tensors: "
          + ("0.01" if len(set(d["wd"])) == 1 else str(d["wd"])))

    idx = torch.from_numpy(d["tokens"][:-1].astype(np.int64)).reshape(B, T)
    tgt = torch.from_numpy(d["tokens"][1:].astype(np.int64)).reshape(B, T)
    P = [torch.tensor(t, dtype=torch.float64, requires_grad=True) for t in init]
    loss, logits = forward(P, cm, idx, tgt)
    loss.backward()
    worst = 0.0
    e = abs(d["loss1"] - loss.item()) / abs(loss.item())
    worst = max(worst, e)
    check(e <= TOL, f"[{name}] step-1 loss {d['loss1']:.7f} vs torch {loss.item():.7f}: "
          f"rel err {e:.2e} (tol {TOL:.0e})")
    e = rel_err(d["logits"], logits.detach().reshape(B * T, -1))
    worst = max(worst, e)
    check(e <= TOL, f"[{name}] logits ({B * T}, {cm['Vp']}) rel err {e:.2e} (tol {TOL:.0e})")
    grads = split_flat(d["grads"], cm)
    for nm, g, p_ in zip(NAMES, grads, P):
        e = rel_err(g, p_.grad)
        worst = max(worst, e)
        check(e <= TOL, f"[{name}] gradient {nm} {tuple(g.shape)}: rel err {e:.2e} "
              f"(tol {TOL:.0e})")
    gq = grads[NAMES.index("qkvb")]
    e = np.linalg.norm(gq[:, cm["C"]:2 * cm["C"]]) / np.linalg.norm(gq)
    check(e <= KEYBIAS_TOL, f"[{name}] gradient of the key bias (qkvb[:, C:2C]) negligible: "
          f"norm {e:.1e} of qkvb's (tol {KEYBIAS_TOL:.0e})")
    if cm["Vp"] > cm["V"]:
        pad = grads[0][cm["V"]:]
        check(not np.any(pad), f"[{name}] gradient of the {cm['Vp'] - cm['V']} padded wte "
              f"rows exactly zero (max |g| {np.abs(pad).max():.2e})")

    # 10 AdamW steps from the same initial parameters
    P = [torch.tensor(t, dtype=torch.float64, requires_grad=True) for t in init]
    if PERTURB == "decay2d":  # GPT-2-style: no decay on biases and LayerNorm
        groups = [{"params": [p_ for nm, p_ in zip(NAMES, P) if nm.endswith("w")
                              and not nm.startswith("ln")]},
                  {"params": [p_ for nm, p_ in zip(NAMES, P) if not nm.endswith("w")
                              or nm.startswith("ln")], "weight_decay": 0.0}]
    else:
        groups = P
    opt = torch.optim.AdamW(groups, lr=d["lr"], betas=(d["beta1"], d["beta2"]),
                            eps=d["eps"], weight_decay=d["wd"][0])
    ref_losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss, _ = forward(P, cm, idx, tgt)
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    e = max(abs(a - b) / abs(b) for a, b in zip(d["losses"], ref_losses))
    check(e <= TRAJ_TOL, f"[{name}] loss sequence over {STEPS} steps: worst rel err {e:.2e} "
          f"(tol {TRAJ_TOL:.0e}); taskgrad " + " ".join(f"{v:.5f}" for v in d["losses"])
          + "; torch " + " ".join(f"{v:.5f}" for v in ref_losses))
    # the key bias (qkvb columns [C, 2C)) has an exactly zero gradient (adding
    # a constant to every key score of a query leaves the softmax unchanged),
    # so AdamW turns rounding noise into +-lr steps of random sign, in torch
    # as in taskgrad: leave it out of the comparisons of the parameters
    C = cm["C"]
    keep = [np.s_[...]] * 16
    keep[NAMES.index("qkvb")] = np.s_[:, np.r_[0:C, 2 * C:3 * C]]
    final = split_flat(d["final"], cm)
    with torch.no_grad():
        Pn = [p_.numpy() for p_ in P]
        fe = max((rel_err(f[k], p_[k]), nm) for f, p_, k, nm in zip(final, Pn, keep, NAMES))
        ue = max((rel_err(f[k].astype(np.float64) - i[k], p_[k] - i[k]), nm)
                 for f, i, p_, k, nm in zip(final, init, Pn, keep, NAMES))
        moved = max(rel_err(f, i) for f, i in zip(final, init))
    check(fe[0] <= TRAJ_TOL and moved > 10 * TRAJ_TOL,
          f"[{name}] final parameters: max rel err {fe[0]:.2e} ({fe[1]}) (tol "
          f"{TRAJ_TOL:.0e}); max rel change from the initial ones {moved:.2e}")
    check(ue[0] <= UPDATE_TOL, f"[{name}] total update W_{STEPS} - W_0: max rel err "
          f"{ue[0]:.2e} ({ue[1]}) (tol {UPDATE_TOL:.0e})")
    return worst, ue[0], t_tool


def main():
    torch.set_num_threads(1)
    if PERTURB and PERTURB not in PERTURBATIONS:
        print(f"FAIL TG_GPT_TORCH_PERTURB={PERTURB!r}: one of {', '.join(PERTURBATIONS)}")
        return 1
    tool = os.path.join(os.environ.get("TG_BIN", ""), "tg_gpt_dump")
    if not os.access(tool, os.X_OK):
        print(f"FAIL tg_gpt_dump not found at {tool!r} (set TG_BIN to the build's bin dir)")
        return 1
    t0 = time.time()
    worst = [0.0, 0.0, 0.0]
    with tempfile.TemporaryDirectory(prefix="tg_gpt_torch_") as tmp:
        files = {}
        for key, m in MODELS.items():
            ckpt = os.path.join(tmp, f"model_{key}.bin")
            tokf = os.path.join(tmp, f"tokens_{key}.bin")
            write_checkpoint(ckpt, m)
            write_tokens(tokf, B * T + 1 + 100, m["V"], m["seed"])
            files[key] = (ckpt, tokf)
        for run in RUNS:
            r = run_one(tool, tmp, *run[:6], files, *run[6:])
            if r:
                worst = [max(a, b) for a, b in zip(worst, r)]
    print(f"test_gpt_torch: worst rel err of loss/logits/gradients {worst[0]:.2e}, "
          f"of the total updates {worst[1]:.2e}; slowest tg_gpt_dump {worst[2]:.1f} s; "
          f"total {time.time() - t0:.1f} s")
    print(f"test_gpt_torch: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
