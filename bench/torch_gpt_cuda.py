"""PyTorch on a GPU: the reference for `taskgrad bench gpt` on one GPU.

GPT-2 as llm.c defines it (tied LM head, vocabulary padded to Vp, GELU tanh),
randomly initialised, trained on one random batch: bf16 autocast over fp32
master weights, fused scaled-dot-product (flash) attention, fused AdamW.
This is how PyTorch users train GPT-2 on an H100 (nanoGPT, llm.c's
train_gpt2.py); --compile adds torch.compile.  Prints the median step time
and tokens/s, the figures `bench gpt` prints.

  python3 bench/torch_gpt_cuda.py --layers 12 --channels 768 --heads 12 \
      --batch 8 --seq 1024 [--compile]

Also prints the first step's time (with --compile: torch.compile's warm-up,
about 20-30 s of the 34 s the compiled part took in the 2026-11-26 lease)
and the wall time from start.  --parse-only checks the flags and exits 0
before importing torch (bench/gpu-session.sh --dry-run, tests/test_gpu_check.sh).
"""
import argparse
import statistics
import time

T_START = time.perf_counter()


def define_model():
    """The model's classes, once torch is imported (after the flags are read)."""
    global torch, nn, F, GPT
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    GPT = make_classes(nn, F)


def attention(q, k, v):  # q, k, v: (B, NH, T, hs)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[2]  # torch before 2.0, to try the script on a CPU
    att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return att.softmax(-1) @ v


def make_classes(nn, F):
    class Block(nn.Module):
        def __init__(self, C, NH):
            super().__init__()
            self.NH = NH
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):  # x: (B, T, C)
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
            y = attention(q, k, v)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self, L, C, NH, Vp, maxT):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
            self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            for p in self.parameters():  # GPT-2's initialisation, as the random taskgrad model
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets, V):  # idx, targets: (B, T)
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = F.linear(self.lnf(x), self.wte.weight)[..., :V]  # tied head, first V
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    return GPT


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("layers", 12), ("channels", 768), ("heads", 12), ("vocab", 50257),
                          ("batch", 8), ("seq", 1024), ("steps", 10), ("warmup", 3)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda", help="cpu only to try the script")
    ap.add_argument("--parse-only", action="store_true",
                    help="check the flags and exit, without importing torch")
    a = ap.parse_args()
    if a.parse_only:
        print(f"torch_gpt_cuda: flags ok: {vars(a)}")
        return
    define_model()
    torch.manual_seed(0)
    dev = a.device
    Vp = (a.vocab + 127) // 128 * 128
    model = GPT(a.layers, a.channels, a.heads, Vp, a.seq).to(dev)
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if dev == "cuda" else {}))
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    times = []
    for i in range(a.warmup + a.steps):
        sync(dev)
        t0 = time.perf_counter()
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = step_model(idx, tgt, a.vocab)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(dev)
        if i == 0:
            first = (time.perf_counter() - t0) * 1e3
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    n = sum(p.numel() for p in model.parameters())
    print(f"torch {'compiled' if a.compile else 'eager'}: {torch.__version__}, "
          f"{torch.cuda.get_device_name() if dev == 'cuda' else dev}, {n} parameters, loss {loss.item():.4f}")
    print(f"torch median step ms: {ms:.2f} (min {min(times):.2f}, max {max(times):.2f})")
    print(f"torch tokens/s: {a.batch * a.seq / ms * 1e3:.0f}")
    print(f"torch first step ms: {first:.0f} ({'torch.compile warm-up included' if a.compile else 'eager warm-up'}); "
          f"wall from start {time.perf_counter() - T_START:.1f} s")


if __name__ == "__main__":
    main()
