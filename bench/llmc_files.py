"""llm.c's file formats for the reference timings (bench/torch_gpt.py,
bench/jax_gpt.py): a version-3 fp32 GPT-2 checkpoint and a token file, read
into numpy arrays in llm.c's layout."""
import argparse

import numpy as np

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def load_model(path):
    """(cfg, {name: float32 array}) of an llm.c v3 checkpoint"""
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240326 and header[1] == 3, "not an llm.c v3 checkpoint"
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C),
              (L, C, C), (L, C), (L, C), (L, C), (L, 4 * C, C), (L, 4 * C),
              (L, C, 4 * C), (L, C), (C,), (C,)]
    flat = np.fromfile(path, dtype=np.float32, offset=256 * 4)
    params, at = {}, 0
    for name, shape in zip(NAMES, shapes):
        n = int(np.prod(shape))
        params[name] = flat[at:at + n].reshape(shape)
        at += n
    assert at == flat.size, "checkpoint size does not match its header"
    return dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp), params


def load_tokens(path, count):
    """the first `count` tokens of an llm.c token file, as int64"""
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520 and header[1] == 1, "not an llm.c token file"
    return np.fromfile(path, dtype=np.uint16, offset=256 * 4)[:count].astype(np.int64)


def step_args():
    """the flags every reference timing takes: the files, the batch, the
    measured and warm-up steps"""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    return ap
