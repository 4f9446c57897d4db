#!/usr/bin/python3
"""Writes cpu64, the simulated many-core CPU node of `taskgrad simulate`
(issue 16: how far a GPT-2 124M step spreads over a 32- or 64-core node).

One shared memory node (RAM) and 64 CPU hosts, CPU0 .. CPU63, as StarPU's
SimGrid mode names them; no GPU, so no bus.  `--ncpus N` uses the first N
(N <= 64).  The task times come from histories calibrated on a real machine
(bench/many-core.sh calibrates them on this one with STARPU_HOSTNAME=cpu64),
so the node is "64 cores like the calibrating machine's, each as fast as one
of its cores".  SimGrid does not model the memory bandwidth that 64 cores
share: a memory-bound task (AdamW, the residuals) takes as long on a busy
node as on a quiet one.

cpu64.roofline only times tasks that have no calibrated history: the same
rough per-core rates as cpu2.roofline.

The output is committed; tests/test_simulate_cli.sh checks that running this
script reproduces it.  Usage: platforms/gen-cpu.py [DIR]
"""
import os
import sys

NCPUS = 64
NAME = "cpu64"
MAX_NODES = 16  # StarPU 1.3's STARPU_MAXNODES: the size of the bus matrices


def platform_xml():
    hosts = "\n".join(f'   <host id="CPU{i}" speed="2000000000f"/>' for i in range(NCPUS))
    return f"""<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM 'http://simgrid.gforge.inria.fr/simgrid/simgrid.dtd'>
<!-- {NAME}: a CPU node of {NCPUS} cores sharing one memory node, no GPU
     (platforms/gen-cpu.py).  Task times come from calibrated histories
     (bench/many-core.sh), not from the host speeds below. -->
 <platform version="4">
 <config id="General">
   <prop id="network/TCP-gamma" value="-1"></prop>
   <prop id="network/latency-factor" value="1"></prop>
   <prop id="network/bandwidth-factor" value="1"></prop>
   <prop id="network/crosstraffic" value="0"></prop>
   <prop id="network/weight-S" value="0.0"></prop>
 </config>
 <AS  id="AS0"  routing="Full">
   <host id="MAIN" speed="1f"/>
{hosts}

   <host id="RAM" speed="1f"/>

   <link id="Host" bandwidth="0.000000Bps" latency="0.000000s"/>


 </AS>
 </platform>
"""


def matrix():
    """One memory node: 0 from RAM to RAM, nan elsewhere (StarPU's format)."""
    head = "# " + "".join(f"to {j}\t\t" for j in range(MAX_NODES)) + "\n"
    rows = []
    for i in range(MAX_NODES):
        cells = ["0.000000e+00" if (i == 0 and j == 0) else "nan" for j in range(MAX_NODES)]
        rows.append("\t".join(cells) + "\n")
    return head + "".join(rows)


ROOFLINE = """# Fallback rates for tasks without a calibrated history on cpu64: the
# rough per-core figures of cpu2.roofline (the development machine's cores).
# No GPU: the gpu_* lines only keep the file complete.
gpu_fp32_flops 1e12
gpu_tf32_flops 1e12
gpu_bf16_flops 1e12
gpu_mem_bytes_per_s 1e11
cpu_core_flops 2e10
cpu_core_bytes_per_s 5e9
launch_us 1
"""


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    files = {
        f"{NAME}.platform.v4.xml": platform_xml(),
        f"{NAME}.latency": matrix(),
        f"{NAME}.bandwidth": matrix(),
        f"{NAME}.roofline": ROOFLINE,
    }
    for name, text in files.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
