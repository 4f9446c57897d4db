# bench/hf_transformers_check.py TASKGRAD: Hugging Face GPT-2 both ways against transformers' own
# GPT2LMHeadModel (save_pretrained -> --init-from, fp32 and bf16; init gpt --safetensors ->
# from_pretrained with no hand-written config), the losses side by side.  Not a CI test:
# transformers is not a Debian package (run it from a venv: see bench/results/2026-12-07-hf-gpt2-transformers.md).
import json, os, subprocess, sys, numpy as np, torch
from transformers import GPT2Config, GPT2LMHeadModel
tg = sys.argv[1]; torch.manual_seed(0)
B, T = 2, 32
def tokens_file(path, toks):
    # llm.c token file: 256 int32 header (magic 20240520, version 1, count), then uint16 tokens
    hdr = np.zeros(256, np.int32); hdr[0] = 20240520; hdr[1] = 1; hdr[2] = len(toks)
    with open(path, "wb") as f: f.write(hdr.tobytes()); f.write(np.asarray(toks, np.uint16).tobytes())
def tg_loss(model, tok):
    r = subprocess.run([tg, "train", "gpt", "--init-from", model, "--data", tok, "--val", tok, "--steps", "0",
        "--batch", str(B), "--seq", str(T), "--val-batches", "1", "--ncpus", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return float([l for l in r.stdout.splitlines() if l.startswith("val loss ")][-1].split()[2])
def hf_loss(m, toks):
    x = torch.tensor(np.asarray(toks[:B*T+1], np.int64))
    with torch.no_grad():
        logits = m(x[:-1].view(B, T)).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(B*T, -1), x[1:]).item()
rng = np.random.default_rng(1); toks = rng.integers(0, 50257, B*T+1+64).tolist()
tokens_file("tok.bin", toks)
# (1) Hugging Face -> taskgrad: save_pretrained of a random GPT2LMHeadModel, fp32 and bf16
cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=50257)
m = GPT2LMHeadModel(cfg).eval()
with torch.no_grad():
    for p in m.parameters(): p.mul_(4.0)   # away from ln V
for dt in (torch.float32, torch.bfloat16):
    d = f"hf-{str(dt)[6:]}"; m.to(dt).save_pretrained(d, safe_serialization=True); m.float()
    ref_m = GPT2LMHeadModel.from_pretrained(d).float().eval()
    got, ref = tg_loss(d, "tok.bin"), hf_loss(ref_m, toks)
    print(f"HF {str(dt)[6:]} save_pretrained -> taskgrad --init-from: taskgrad {got:.7f}, transformers {ref:.7f}, rel {abs(got-ref)/ref:.2e}")
# (2) taskgrad -> Hugging Face: init gpt --safetensors, then from_pretrained with no hand-written config
os.makedirs("ours", exist_ok=True)
r = subprocess.run([tg, "init", "gpt", "--layers", "2", "--channels", "64", "--heads", "4", "--max-seq", "64",
    "--vocab", "50257", "--out", "ours.bin", "--safetensors", "ours/model.safetensors"], capture_output=True, text=True)
assert r.returncode == 0, r.stderr
m2 = GPT2LMHeadModel.from_pretrained("ours").eval()
got, ref = tg_loss("ours.bin", "tok.bin"), hf_loss(m2, toks)
print(f"taskgrad init gpt --safetensors -> from_pretrained: taskgrad {got:.7f}, transformers {ref:.7f}, rel {abs(got-ref)/ref:.2e}")
