"""Writes small synthetic Fashion-MNIST-like IDX files for the CLI tests.

usage: make_idx.py DIR N_TRAIN N_TEST [--variant good|truncated|bad-magic|count-mismatch|bad-label]

The data is learnable: the label of an image is the index of its brightest
row band, so a short training run must lower the loss.
"""
import gzip, os, random, struct, sys

def images_labels(n, rng):
    imgs, labels = bytearray(), bytearray()
    for _ in range(n):
        label = rng.randrange(10)
        img = bytearray(rng.randrange(40) for _ in range(28 * 28))
        for r in range(label * 2, label * 2 + 3):
            for c in range(28):
                img[r * 28 + c] = 200 + rng.randrange(56)
        imgs += img
        labels.append(label)
    return bytes(imgs), bytes(labels)

def write(path, magic, dims, data, truncate=0):
    raw = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + data
    if truncate:
        raw = raw[:-truncate]
    with gzip.open(path, "wb") as f:
        f.write(raw)

def main():
    d, ntrain, ntest = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    variant = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--variant" else "good"
    os.makedirs(d, exist_ok=True)
    rng = random.Random(7)
    for prefix, n in (("train", ntrain), ("t10k", ntest)):
        imgs, labels = images_labels(n, rng)
        img_magic, trunc, nlabels = 0x803, 0, n
        if prefix == "train" and variant == "bad-magic":
            img_magic = 0x1234
        if prefix == "train" and variant == "truncated":
            trunc = 100
        if prefix == "train" and variant == "count-mismatch":
            nlabels = n - 1
            labels = labels[:-1]
        if prefix == "train" and variant == "bad-label":
            labels = labels[:-1] + bytes([12])
        write(os.path.join(d, prefix + "-images-idx3-ubyte.gz"), img_magic, (n, 28, 28), imgs, trunc)
        write(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"), 0x801, (nlabels,), labels)

main()
