"""JAX reference timing: the GPT-2 training step of bench/torch_gpt.py in
JAX (XLA on the CPU), for the CPU comparison table (bench/cpu-frameworks.sh).

Loads an llm.c checkpoint (version 3, fp32) and token file, builds the same
model in float32 (tied LM head, loss over the first V of Vp logits, GELU's
tanh form, causal attention), and times one jitted step: forward, backward
and AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01, PyTorch's
bias correction), on the first B*T+1 tokens.  The parameters and moments are
donated to the step, so that XLA updates them in place.  The thread count is
XLA's: run it under `taskset -c 0-(N-1)` (the CPU comparison does) with
XLA_FLAGS=--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=N.
Prints the median step time.  Needs jax (PyPI: pip install "jax[cpu]").
"""
import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import llmc_files


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def loss_fn(cfg, p, idx, targets):
    B, T = idx.shape
    C, NH, L, V = cfg["C"], cfg["NH"], cfg["L"], cfg["V"]
    hs = C // NH
    mask = jnp.tril(jnp.ones((T, T), dtype=bool))
    x = p["wte"][idx] + p["wpe"][:T]
    for l in range(L):
        h = layer_norm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q = q.reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
        k = k.reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
        v = v.reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
        att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hs)
        att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layer_norm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu(h @ p["fcw"][l].T + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layer_norm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"][:V].T
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


def make_step(cfg, lr=1e-4, b1=0.9, b2=0.999, eps=1e-8, wd=0.01):
    def step(p, m, v, t, idx, targets):
        loss, g = jax.value_and_grad(lambda q: loss_fn(cfg, q, idx, targets))(p)
        t = t + 1
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        m = jax.tree_util.tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
        v = jax.tree_util.tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
        p = jax.tree_util.tree_map(
            lambda p_, m_, v_: p_ * (1 - lr * wd) - (lr / bc1) * m_ / (jnp.sqrt(v_ / bc2) + eps),
            p, m, v)
        return p, m, v, t, loss
    return jax.jit(step, donate_argnums=(0, 1, 2))


def main():
    ap = llmc_files.step_args()
    a = ap.parse_args()
    cfg, arrays = llmc_files.load_model(a.model)
    p = {k: jnp.asarray(x) for k, x in arrays.items()}
    m = {k: jnp.zeros_like(x) for k, x in p.items()}
    v = {k: jnp.zeros_like(x) for k, x in p.items()}
    tok = llmc_files.load_tokens(a.tokens, a.batch * a.seq + 1).astype(np.int32)
    idx = jnp.asarray(tok[:-1].reshape(a.batch, a.seq))
    targets = jnp.asarray(tok[1:].reshape(a.batch, a.seq))
    step = make_step(cfg)
    t = jnp.zeros((), jnp.float32)
    times = []
    for k in range(a.warmup + a.steps):  # the first warm-up step compiles
        t0 = time.perf_counter()
        p, m, v, t, loss = step(p, m, v, t, idx, targets)
        loss.block_until_ready()
        jax.tree_util.tree_map(lambda x: x.block_until_ready(), p)
        if k >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"jax {jax.__version__}, loss {float(loss):.6f}")
    print(f"jax median step ms: {statistics.median(times):.1f}")


if __name__ == "__main__":
    main()
