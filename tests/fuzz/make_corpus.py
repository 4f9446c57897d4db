#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets under tests/fuzz/corpus/.

usage: /usr/bin/python3 tests/fuzz/make_corpus.py [OUTDIR]

Small valid files plus a few broken ones (truncated, bad magic, bad version,
trailing data, lying headers) per reader; deterministic, so re-running it
reproduces the committed files byte for byte.  The fuzz_checkpoint seeds
come from the real writer instead: see make_checkpoint_seeds.c.  The
fuzz_mlp_checkpoint seeds are written here from the format documented in
src/mlp_checkpoint.c (the loader accepting mlp_*_ok checks that document).
"""
import gzip, os, struct, sys

def gz(raw):
    # mtime=0: deterministic output
    return gzip.compress(raw, compresslevel=9, mtime=0)

def idx(magic, dims, data):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + data

def idx_files():
    labels = idx(0x801, [6], bytes([0, 1, 2, 9, 3, 4]))
    images = idx(0x803, [2, 3, 4], bytes(range(24)))
    return {
        "labels_ok": labels,
        "images_ok": images,
        "labels_ok.gz": gz(labels),
        "images_ok.gz": gz(images),
        "images_truncated": images[:-5],
        "images_truncated.gz": gz(images[:-5]),
        "gz_stream_cut": gz(images)[:-6],
        "trailing_data": labels + b"\x00\x01",
        "bad_magic": idx(0x1234, [6], bytes(6)),
        "two_dims": idx(0x802, [2, 3], bytes(6)),
        "zero_dim": idx(0x803, [0, 28, 28], b""),
        "huge_dims": idx(0x803, [100000000, 100000000, 1], b"\x00" * 8),
        "header_cut": idx(0x803, [2, 3, 4], b"")[:9],
        "empty": b"",
    }

MODEL_MAGIC, MODEL_VERSION = 20240326, 3
TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1

def header(words):
    h = list(words) + [0] * (256 - len(words))
    return struct.pack("<256i", *h)

def nparams(maxT, V, L, NH, C, Vp):
    return (Vp * C + maxT * C + L * C * 2 + L * 3 * C * C + L * 3 * C +
            L * C * C + L * C * 3 + L * 4 * C * C + L * 4 * C +
            L * C * 4 * C + L * C + 2 * C)

def model(cfg, magic=MODEL_MAGIC, version=MODEL_VERSION, extra=0):
    n = max(nparams(*cfg) + extra, 0)
    body = struct.pack("<%df" % n, *[(i % 7) * 0.25 - 0.5 for i in range(n)])
    return header([magic, version] + list(cfg)) + body

def model_files():
    tiny = (1, 1, 1, 1, 1, 1)
    small = (4, 5, 1, 2, 4, 8)
    return {
        "tiny_ok": model(tiny),
        "small_ok": model(small),
        "truncated": model(small, extra=-3),
        "trailing": model(tiny, extra=2),
        "bad_magic": model(tiny, magic=1234),
        "bad_version": model(tiny, version=2),
        "heads_not_dividing": model((4, 5, 1, 3, 4, 8)),
        "vocab_gt_padded": model((4, 9, 1, 2, 4, 8)),
        "negative_dim": header([MODEL_MAGIC, MODEL_VERSION, -1, 5, 1, 2, 4, 8]),
        "huge_config": header([MODEL_MAGIC, MODEL_VERSION, 1 << 20, 65536,
                               1 << 20, 1, 1 << 20, 65536]),
        "header_only_cut": header([MODEL_MAGIC, MODEL_VERSION])[:100],
    }

def tokens(toks, count=None, magic=TOKENS_MAGIC, version=TOKENS_VERSION):
    n = len(toks) if count is None else count
    return header([magic, version, n]) + struct.pack("<%dH" % len(toks), *toks)

def tokens_files():
    toks = [0, 1, 2, 3, 4, 5, 6, 50256, 6, 5]
    return {
        "ok": tokens(toks),
        "small_vocab_ok": tokens([0, 1, 2, 3, 4, 5, 6]),
        "one_token": tokens([42]),
        "count_too_big": tokens(toks, count=11),
        "count_too_small": tokens(toks, count=9),
        "count_zero": tokens([], count=0),
        "count_negative": tokens([1, 2], count=-2),
        "bad_magic": tokens(toks, magic=7),
        "bad_version": tokens(toks, version=2),
        "odd_size": tokens(toks) + b"\x01",
        "header_cut": tokens(toks)[:1000],
    }

def mlp_checkpoint(widths, optimizer=0, version=1, nrec=None, crc_fix=True):
    import zlib
    L, kinds = len(widths) - 1, 3 if optimizer == 0 else 2
    h = bytearray(256)
    struct.pack_into("<4I", h, 0, 0x434D4754, version, 256,
                     2 * L * kinds if nrec is None else nrec)
    struct.pack_into("<i17i", h, 16, L, *(widths + [0] * (17 - len(widths))))
    # activation, optimizer, precision, tiles, batch, shuffled, samples, bpe
    struct.pack_into("<8i", h, 88, 0, optimizer, 0, 1, 4, 1, 10, 3)
    struct.pack_into("<Q2q", h, 120, 1, 5, 7)           # seed, steps, batches
    struct.pack_into("<ifi", h, 144, 0, 1.0, 0)          # no loss scaling
    struct.pack_into("<ff2i", h, 176, 6.5, 12.0, 1, 4)  # running epoch sums
    struct.pack_into("<I", h, 252, zlib.crc32(bytes(h[:252])) if crc_fix else 0)
    out, k = bytes(h), 0
    for l in range(L):
        for part, count in ((0, widths[l] * widths[l + 1]), (1, widths[l + 1])):
            for kind in range(kinds):
                vals = struct.pack("<%df" % count, *[0.01 * (k + i) for i in range(count)])
                k += count
                out += struct.pack("<IIQII", 2 * l + part, kind, count, zlib.crc32(vals), 0)
                out += vals
    return out

def mlp_checkpoint_files():
    ok = mlp_checkpoint([3, 4, 2])
    flipped = bytearray(ok)
    flipped[len(ok) - 5] ^= 1
    return {
        "mlp_adamw_ok": ok,
        "mlp_sgd_ok": mlp_checkpoint([5, 2], optimizer=1),
        "mlp_flipped": bytes(flipped),
        "mlp_truncated": ok[:-3],
        "mlp_trailing": ok + b"\0",
        "mlp_header_only": ok[:256],
        "mlp_bad_crc": mlp_checkpoint([3, 4, 2], crc_fix=False),
        "mlp_bad_version": mlp_checkpoint([3, 4, 2], version=2),
        "mlp_bad_records": mlp_checkpoint([3, 4, 2], nrec=5),
    }

def safetensors_bytes(entries, patch=None):
    """entries: [(name, dtype, shape, raw bytes)] -> a safetensors file's bytes
    (8-byte little-endian header length, JSON header padded to 8, data);
    patch(header) may break the header first.  test_hf_gpt2.py uses it too."""
    import json
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if patch:
        patch(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data

def safetensors(entries, patch=None):
    """entries: [(name, dtype, shape)], filled with small values."""
    size = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8}
    filled = []
    for name, dtype, shape in entries:
        n = 1
        for d in shape:
            n *= d
        filled.append((name, dtype, shape,
                       bytes((i * 37 + 11) % 63 for i in range(n * size[dtype]))))
    return safetensors_bytes(filled, patch)

def hf_gpt2(L=1, C=2, V=3, T=2, dtype="F32", prefix="transformer.", lm_head=False,
            buffers=False):
    e = [(prefix + "wte.weight", dtype, (V, C)), (prefix + "wpe.weight", dtype, (T, C))]
    for i in range(L):
        h = "%sh.%d." % (prefix, i)
        e += [(h + "ln_1.weight", dtype, (C,)), (h + "ln_1.bias", dtype, (C,)),
              (h + "attn.c_attn.weight", dtype, (C, 3 * C)),
              (h + "attn.c_attn.bias", dtype, (3 * C,)),
              (h + "attn.c_proj.weight", dtype, (C, C)), (h + "attn.c_proj.bias", dtype, (C,)),
              (h + "ln_2.weight", dtype, (C,)), (h + "ln_2.bias", dtype, (C,)),
              (h + "mlp.c_fc.weight", dtype, (C, 4 * C)), (h + "mlp.c_fc.bias", dtype, (4 * C,)),
              (h + "mlp.c_proj.weight", dtype, (4 * C, C)), (h + "mlp.c_proj.bias", dtype, (C,))]
        if buffers:
            e += [(h + "attn.bias", "F32", (1, 1, T, T)), (h + "attn.masked_bias", "F32", ())]
    e += [(prefix + "ln_f.weight", dtype, (C,)), (prefix + "ln_f.bias", dtype, (C,))]
    if lm_head:
        e.append(("lm_head.weight", dtype, (V, C)))
    return e

def hf_gpt2_files():
    ok = safetensors(hf_gpt2())
    def offsets(h):
        h["transformer.ln_f.bias"]["data_offsets"] = [0, 1 << 40]
    return {
        "f32_ok": ok,
        "bf16_two_layers_ok": safetensors(hf_gpt2(L=2, dtype="BF16", prefix="")),
        "f16_buffers_ok": safetensors(hf_gpt2(dtype="F16", buffers=True)),
        "lm_head_ok": safetensors(hf_gpt2(V=5, C=4, lm_head=True)),
        "truncated": ok[:-5],
        "header_cut": ok[:20],
        "length_absurd": struct.pack("<Q", 1 << 62) + ok[8:],
        "offsets_out": safetensors(hf_gpt2(), offsets),
        "missing": safetensors(hf_gpt2()[:-1]),
        "unknown_dtype": safetensors([(n, "I64" if n.endswith("ln_1.bias") else d, s)
                                      for n, d, s in hf_gpt2()]),
    }

def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus")
    sets = {"fuzz_idx": idx_files(), "fuzz_llmc_model": model_files(),
            "fuzz_llmc_tokens": tokens_files(),
            "fuzz_mlp_checkpoint": mlp_checkpoint_files(), "fuzz_hf_gpt2": hf_gpt2_files()}
    for target, files in sets.items():
        d = os.path.join(root, target)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    total = sum(len(v) for files in sets.values() for v in files.values())
    print("make_corpus: %d files, %d bytes under %s" %
          (sum(len(f) for f in sets.values()), total, root))

if __name__ == "__main__":
    main()
