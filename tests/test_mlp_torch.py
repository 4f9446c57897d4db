"""taskgrad's MLP training step against PyTorch (float64).

For several configurations (relu and gelu; AdamW and SGD with momentum;
M = 1 and 3 micro-batches; odd sizes) tg_mlp_dump (tests/tools/mlp_dump.c,
found in $TG_BIN) runs K = 5 training steps on one seeded batch and dumps the
initial weights, the batch, the step-1 loss and gradients, the loss of every
step and the final weights.  This test rebuilds the model in torch float64
from the dumped weights (y = linear(x, W, b), act on every layer but the last,
gelu with approximate='tanh', cross_entropy with mean reduction) and checks:
  - step-1 loss and every gradient tensor: norm-relative error <= 1e-5;
  - after K steps of torch.optim.AdamW (lr, betas, eps, weight decay from the
    dump: tg_optimizer_default's 1e-3, (0.9, 0.999), 1e-8, 0.01) or
    torch.optim.SGD (lr 0.05, momentum 0.9, weight decay 0), the K losses
    within 1e-4 relative and every final weight tensor within 1e-4
    (norm-relative), and, sharper, the total update W_K - W_0 of every tensor
    within 1e-4 (norm-relative).
Exit 0 when all pass, 1 on any failure, 77 (SKIP) without torch.
"""
import os
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

GRAD_TOL = 1e-5
TRAJ_TOL = 1e-4
UPDATE_TOL = 1e-4
STEPS = 5

# (widths, act, batch, micro, seed, optimizer)
CONFIGS = [
    ([20, 31, 7], "relu", 37, 1, 11, "adamw"),
    ([20, 31, 7], "gelu", 37, 3, 12, "adamw"),
    ([20, 31, 7], "relu", 37, 3, 13, "sgd"),
    ([20, 31, 7], "gelu", 37, 1, 14, "sgd"),
    ([13, 17, 11, 5], "gelu", 29, 3, 15, "adamw"),
    ([13, 17, 11, 5], "relu", 29, 3, 16, "sgd"),
    ([9, 4], "gelu", 10, 3, 17, "adamw"),  # one layer: no activation at all
]

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

    def params(self, widths):
        out = []
        for l in range(len(widths) - 1):
            fin, fout = widths[l], widths[l + 1]
            w = self.take("<f4", fout * fin).reshape(fout, fin)
            b = self.take("<f4", fout)
            out.append((w, b))
        return out


def read_dump(path):
    with open(path, "rb") as f:
        r = Reader(f.read())
    magic = bytes(r.take("u1", 8))
    if magic != b"TGMLPDU1":
        raise ValueError(f"bad magic {magic!r}")
    nl, act, batch, micro, steps, opt = (int(v) for v in r.take("<i4", 6))
    widths = [int(v) for v in r.take("<i4", nl + 1)]
    lr, momentum, beta1, beta2, eps, wd = (float(v) for v in r.take("<f4", 6))
    seed = int(r.take("<u8")[0])
    d = dict(nl=nl, act=act, batch=batch, micro=micro, steps=steps, opt=opt,
             widths=widths, lr=lr, momentum=momentum, beta1=beta1, beta2=beta2,
             eps=eps, wd=wd, seed=seed)
    d["init"] = r.params(widths)
    d["x"] = r.take("<f4", batch * widths[0]).reshape(batch, widths[0])
    d["y"] = r.take("<i4", batch)
    d["loss1"] = float(r.take("<f8")[0])
    d["grads"] = r.params(widths)
    d["losses"] = [float(v) for v in r.take("<f8", steps)]
    d["final"] = r.params(widths)
    if r.pos != len(r.data):
        raise ValueError(f"{len(r.data) - r.pos} bytes left over after the dump")
    return d


def forward_loss(params, x, y, act):
    h = x
    for l, (w, b) in enumerate(params):
        h = Fn.linear(h, w, b)
        if l + 1 < len(params):
            h = Fn.relu(h) if act == 0 else Fn.gelu(h, approximate="tanh")
    return Fn.cross_entropy(h, y, reduction="mean")


def run_config(tool, tmp, widths, act, batch, micro, seed, optname):
    name = (f"{'-'.join(map(str, widths))} {act} B={batch} M={micro} "
            f"{optname} seed={seed}")
    out = os.path.join(tmp, f"dump_{seed}.bin")
    cmd = [tool, "--widths", ",".join(map(str, widths)), "--act", act,
           "--batch", str(batch), "--micro", str(micro), "--seed", str(seed),
           "--steps", str(STEPS), "--optimizer", optname, "--out", out]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300)
    check(p.returncode == 0, f"[{name}] tg_mlp_dump exit status {p.returncode}"
          + (f": {p.stdout.strip()}" if p.returncode else ""))
    if p.returncode != 0:
        return
    try:
        d = read_dump(out)
    except (OSError, ValueError) as e:
        check(False, f"[{name}] reading the dump: {e}")
        return
    check(d["widths"] == widths and d["batch"] == batch and d["micro"] == micro
          and d["steps"] == STEPS and d["act"] == (0 if act == "relu" else 1)
          and d["opt"] == (0 if optname == "adamw" else 1),
          f"[{name}] dump header matches the command line")
    # the hyper-parameters must be tg_optimizer_default()'s (as documented)
    if optname == "adamw":
        expect = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01)
    else:
        expect = dict(lr=0.05, momentum=0.9, wd=0.0)
    check(all(abs(d[k] - v) <= 1e-6 * max(abs(v), 1e-30) for k, v in expect.items()),
          f"[{name}] optimizer hyper-parameters "
          + ", ".join(f"{k}={d[k]:.6g}" for k in expect))

    x = torch.from_numpy(d["x"]).to(torch.float64)
    y = torch.from_numpy(d["y"]).to(torch.int64)
    params = []
    for w, b in d["init"]:
        params += [torch.tensor(w, dtype=torch.float64, requires_grad=True),
                   torch.tensor(b, dtype=torch.float64, requires_grad=True)]
    pairs = list(zip(params[0::2], params[1::2]))

    # step 1: loss and gradients
    loss = forward_loss(pairs, x, y, d["act"])
    loss.backward()
    e = abs(d["loss1"] - loss.item()) / abs(loss.item())
    check(e <= GRAD_TOL, f"[{name}] step-1 loss {d['loss1']:.9f} vs torch "
          f"{loss.item():.9f}: rel err {e:.2e} (tol {GRAD_TOL:.0e})")
    for l, (gw, gb) in enumerate(d["grads"]):
        ew = rel_err(gw, pairs[l][0].grad)
        eb = rel_err(gb, pairs[l][1].grad)
        check(ew <= GRAD_TOL, f"[{name}] dW[{l}] {tuple(gw.shape)} rel err {ew:.2e} "
              f"(tol {GRAD_TOL:.0e})")
        check(eb <= GRAD_TOL, f"[{name}] db[{l}] {tuple(gb.shape)} rel err {eb:.2e} "
              f"(tol {GRAD_TOL:.0e})")

    # K optimizer steps from the same initial weights
    for p_ in params:
        p_.grad = None
    if optname == "adamw":
        opt = torch.optim.AdamW(params, lr=d["lr"], betas=(d["beta1"], d["beta2"]),
                                eps=d["eps"], weight_decay=d["wd"])
    else:
        opt = torch.optim.SGD(params, lr=d["lr"], momentum=d["momentum"],
                              weight_decay=d["wd"])
    ref_losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = forward_loss(pairs, x, y, d["act"])
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    worst = max(abs(a - b) / abs(b) for a, b in zip(d["losses"], ref_losses))
    check(worst <= TRAJ_TOL, f"[{name}] loss sequence over {STEPS} steps: worst rel err "
          f"{worst:.2e} (tol {TRAJ_TOL:.0e}); taskgrad "
          + " ".join(f"{v:.6f}" for v in d["losses"]) + "; torch "
          + " ".join(f"{v:.6f}" for v in ref_losses))
    # the weights must have moved, or the comparison below proves little
    moved = max(rel_err(w1, w0) for (w0, _), (w1, _) in zip(d["init"], d["final"]))
    check(moved > 10 * TRAJ_TOL, f"[{name}] weights moved over {STEPS} steps "
          f"(max rel change {moved:.2e})")
    with torch.no_grad():
        for l, (fw, fb) in enumerate(d["final"]):
            ew = rel_err(fw, pairs[l][0])
            eb = rel_err(fb, pairs[l][1])
            check(ew <= TRAJ_TOL, f"[{name}] final W[{l}] rel err {ew:.2e} "
                  f"(tol {TRAJ_TOL:.0e})")
            check(eb <= TRAJ_TOL, f"[{name}] final b[{l}] rel err {eb:.2e} "
                  f"(tol {TRAJ_TOL:.0e})")
            # the final weights are mostly the initial ones: also compare the
            # total updates W_K - W_0 themselves, a much sharper check
            w0, b0 = d["init"][l]
            uw = rel_err(fw.astype(np.float64) - w0, pairs[l][0] - torch.from_numpy(w0))
            ub = rel_err(fb.astype(np.float64) - b0, pairs[l][1] - torch.from_numpy(b0))
            check(uw <= UPDATE_TOL and ub <= UPDATE_TOL,
                  f"[{name}] total update of W[{l}] rel err {uw:.2e}, of b[{l}] rel err "
                  f"{ub:.2e} (tol {UPDATE_TOL:.0e})")


def main():
    torch.set_num_threads(1)
    tool = os.path.join(os.environ.get("TG_BIN", ""), "tg_mlp_dump")
    if not os.access(tool, os.X_OK):
        print(f"FAIL tg_mlp_dump not found at {tool!r} (set TG_BIN to the build's bin dir)")
        return 1
    with tempfile.TemporaryDirectory(prefix="tg_mlp_torch_") as tmp:
        for cfg in CONFIGS:
            run_config(tool, tmp, *cfg)
    print(f"test_mlp_torch: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
