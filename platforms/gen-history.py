#!/usr/bin/env python3
"""Writes platforms/h100.history: the manifest of the calibrated histories the
H100 platforms ship (issue 53).  `taskgrad simulate` on a platform whose
.roofline names it (`history h100.history`, written by gen-h100.py) times
each task from these histories (--cost calibrated, its default there),
the expected model timing the tasks they miss.

The histories themselves stay where the GPU sessions committed them, as
tarballs of StarPU sampling directories in bench/results/ (a few KB each);
`simulate` unpacks them into its private perfmodel directory per run.

A history is a measurement of one version of a kernel, so each codelet's
line carries the files it was measured with and a hash of their content at
the commit the lease ran: `simulate` recomputes the hash in its source tree
and refuses the codelet's history when it differs (a changed kernel, launcher
or codelet), with a note; its tasks then take the expected model.  The files
are the codelet's source (codelets/X.c, the file that declares it), every
kernels/cuda file whose name starts with X's stem (X.cu, X_lowp.cu, ...) or
with the op's name (softmax_xent.cu), those of EXTRA below, and for
GEMM-class codelets the GEMM libraries' launchers (kernels/cuda/gemm_*.c).
The hash is FNV-1a 64 of each file's path and bytes, each followed by a 0
byte (cli/simulate.c, hash_sources).  A new file that a kernel starts to use
is not noticed: regenerate after such a change.

Sources, newest first (the first accepted history of a codelet wins):
  lease 4 of 2026-11-27 (bench/results/2026-11-27-h100-2/, results page
  2026-11-27-h100-measured-2.md): main at 4c46fb0, calibrated with
  `bench gpt` GPT-2 124M and 350M bf16, --attention flash --micro-batches 1.

Usage: platforms/gen-history.py [OUT]  (default platforms/h100.history;
needs the git history of the commits below)
"""
import os
import re
import subprocess
import sys
import tarfile

SOURCES = [
    # id, tarball, host the histories were filed under, commit, label
    ("4", "bench/results/2026-11-27-h100-2/perfmodels-4.tar.xz", "h100x1", "4c46fb0",
     "H100 lease 4 of 2026-11-27, GPT-2 124M and 350M bf16, flash attention, 1 micro-batch"),
]

# codelets whose CUDA version calls a GEMM library (codelets/sim_cost.c's
# tg_gemm_class, and the fused linear backward)
GEMM_CLASS = {"gemm", "gemm_lowp", "linear_fwd", "linear_bwd_weight", "linear_bwd",
              "linear_bwd_data", "lm_classifier", "linear_fwd_tile", "linear_bwd_data_tile",
              "lm_logits_tile"}

# kernels a stem does not find: the file that holds the CUDA launcher the
# codelet calls, when it is named for neither the codelet's file nor its op
EXTRA = {"adamw_multi": ["kernels/cuda/precision.cu", "kernels/cuda/adamw.cuh"],
         "accuracy": ["kernels/cuda/softmax_xent.cu"]}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_cache = {}


def git(*args):
    if args not in _cache:
        _cache[args] = subprocess.run(["git", "-C", ROOT] + list(args), check=True,
                                      capture_output=True).stdout
    return _cache[args]


def fnv(files, commit):
    h = 1469598103934665603
    for path in files:
        for b in path.encode() + b"\0" + git("show", "%s:%s" % (commit, path)) + b"\0":
            h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def sources_of(op, commit):
    """The files a codelet's history was measured with, at commit."""
    listing = git("ls-tree", "-r", "--name-only", commit, "--", "codelets", "kernels/cuda")
    names = listing.decode().split()
    decl = re.compile(r"\b(TG_CODELET\w*|TG_PERFMODEL|TG_CUDA_ENTRY\w*)\(\s*%s\s*," % op)
    files = []
    for name in names:
        if name.startswith("codelets/") and name.endswith(".c") and \
                decl.search(git("show", "%s:%s" % (commit, name)).decode(errors="replace")):
            files.append(name)
    if not files:
        return None
    for cfile in list(files):
        stem = os.path.basename(cfile)[:-2]
        files += [n for n in names if n.startswith("kernels/cuda/" + stem)]
    files += [n for n in names if n.startswith("kernels/cuda/" + op)]
    files += EXTRA.get(op, [])
    if op in GEMM_CLASS:
        files += [n for n in names if n.startswith("kernels/cuda/gemm_") and n.endswith(".c")]
    return sorted(set(files))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "platforms", "h100.history")
    lines = ["# Calibrated histories of the H100 platforms (platforms/gen-history.py",
             "# writes this file and says what it means; cli/simulate.c reads it).",
             "# source ID TARBALL HOST COMMIT LABEL...",
             "# codelet SYMBOL SOURCE-ID HASH FILE...  (FNV-1a 64 of the files at COMMIT)"]
    for sid, tarball, host, commit, label in SOURCES:
        lines.append("source %s %s %s %s %s" % (sid, tarball, host, commit, label))
    for sid, tarball, host, commit, label in SOURCES:
        with tarfile.open(os.path.join(ROOT, tarball)) as t:
            symbols = sorted(os.path.basename(m.name)[:-len(host) - 1] for m in t.getmembers()
                             if re.search(r"/codelets/45/taskgrad_\w+\.%s$" % host, m.name))
        for sym in symbols:
            files = sources_of(sym[len("taskgrad_"):], commit)
            if files is None:
                print("gen-history: %s: no codelet declares it at %s, left out" % (sym, commit),
                      file=sys.stderr)
                continue
            lines.append("codelet %s %s %s %s" % (sym, sid, fnv(files, commit), " ".join(files)))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
