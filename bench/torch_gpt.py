"""PyTorch reference timing for `taskgrad bench gpt --torch`.

Loads an llm.c GPT-2 checkpoint (version 3, fp32) and token file, builds the
same model in float32 (GPT-2 as llm.c defines it: tied LM head, loss over the
first V of Vp logits), and times training steps (forward, backward, AdamW)
on the first B*T+1 tokens with torch.set_num_threads(--threads).  Prints the
median step time.  Runs with Debian's /usr/bin/python3 (python3-torch).
"""
import math
import statistics
import time

import torch
import torch.nn.functional as F

import llmc_files


def load_model(path):
    cfg, arrays = llmc_files.load_model(path)
    return cfg, {k: torch.tensor(a, requires_grad=True) for k, a in arrays.items()}


def loss_fn(cfg, p, idx, targets):
    B, T = idx.shape
    C, NH, L, V = cfg["C"], cfg["NH"], cfg["L"], cfg["V"]
    hs = C // NH
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["wte"][idx] + p["wpe"][:T]
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
        qkv = h @ p["qkvw"][l].t() + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].t() + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
        h = F.gelu(h @ p["fcw"][l].t() + p["fcb"][l], approximate="tanh")
        x = x + h @ p["fcprojw"][l].t() + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
    logits = x @ p["wte"][:V].t()
    return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))


def main():
    ap = llmc_files.step_args()
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, p = load_model(a.model)
    tok = torch.from_numpy(llmc_files.load_tokens(a.tokens, a.batch * a.seq + 1))
    idx = tok[:-1].view(a.batch, a.seq)
    targets = tok[1:].view(a.batch, a.seq)
    opt = torch.optim.AdamW(p.values(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(cfg, p, idx, targets)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt * 1e3)
    print(f"torch {torch.__version__}, {a.threads} threads, loss {loss.item():.6f}")
    print(f"torch median step ms: {statistics.median(times):.1f}")


if __name__ == "__main__":
    main()
