#!/usr/bin/python3
"""Writes the simulated H100 machines of `taskgrad simulate` (issue 13).

For N in 1, 2, 4, 8: h100xN.platform.v4.xml (SimGrid hosts and links, read
by StarPU's SimGrid mode), h100xN.latency and h100xN.bandwidth (the matrices
StarPU's schedulers use to predict transfers, indexed by memory node: 0 =
RAM, i = CUDA(i-1)) and h100xN.roofline (the peak rates of codelets/sim_cost.c,
and the fractions of them of its expected model).
StarPU names these files after the host (STARPU_HOSTNAME = h100xN).

Every figure is cited below.  The output is committed; tests/test_simulate.sh
checks that running this script reproduces it.  Usage: platforms/gen-h100.py [DIR]
"""
import os
import sys

# ---- figures ----------------------------------------------------------------
# [DS] NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column
#      (https://www.nvidia.com/en-us/data-center/h100/, datasheet PDF, 2023):
#      FP32 67 TFLOPS; TF32 Tensor Core 989 TFLOPS and BF16 Tensor Core
#      1,979 TFLOPS "with sparsity" (dense: half); GPU memory 80 GB HBM3 at
#      3.35 TB/s; NVLink 900 GB/s; PCIe Gen5 128 GB/s.
# [NVL] NVIDIA Hopper architecture whitepaper (2022): fourth-generation
#      NVLink, 18 links per GPU, 900 GB/s total = 450 GB/s per direction;
#      in DGX/HGX H100 every GPU reaches every other through NVSwitch at that
#      rate.
# [PCIE] PCI-SIG, PCIe 5.0 base specification: 32 GT/s per lane, 128b/130b
#      encoding, so x16 carries 63 GB/s per direction ([DS]: 128 GB/s both
#      directions together).
# [DGX] NVIDIA DGX H100 user guide, hardware overview: 8 H100 SXM, 2 Intel
#      Xeon Platinum 8480C (56 cores each), 2 TB DDR5 system memory.
# [XEON] Intel Xeon Platinum 8480+ product brief: 8 channels DDR5-4800 per
#      socket = 8 * 38.4 GB/s = 307 GB/s per socket.
# [MAMF] S. Bekman, "Machine Learning Engineering", compute/accelerator/
#      README.md, "Maximum Achievable Matmul FLOPS comparison table"
#      (https://github.com/stas00/ml-engineering): NVIDIA H100 SXM, BF16
#      matmul, 792.1 of 989 TFLOPS measured (80.1%), best shape
#      6144x17920x2816, CUDA 12.1.
# [HOP] NVIDIA H100 Tensor Core GPU architecture whitepaper (2022): H100 SXM5
#      has 132 SMs.
# [H100-4] measured by us on one H100 SXM (bench/results/
#      2026-11-27-h100-measured-2.md): GPT-2 124M bf16, T=1024, 8 sequences,
#      `bench gpt --attention flash --stats`: the flash kernels ran 12 forward
#      and 12 backward tasks a step in 24.3 + 39.2 ms, 0.54 TFLOP (their
#      causal flops): 8.5 TFLOP/s.  The kernels of commit 4c46fb0; their
#      bank-conflict fixes since are not measured yet.
# [ASSUME] not from a source: our assumptions, stated as such wherever the
#      results are shown.
GPU_MEM_BYTES = 80 * 10**9            # [DS] 80 GB
GPU_MEM_BW = 3.35e12                  # [DS] bytes/s
GPU_FP32 = 67e12                      # [DS] FLOP/s
GPU_TF32 = 989e12 / 2                 # [DS] dense = half the sparse figure
GPU_BF16 = 1979e12 / 2                # [DS] dense
NVLINK_BW = 450e9                     # [NVL] bytes/s per direction per GPU
PCIE_BW = 32e9 * 16 * 128 / 130 / 8   # [PCIE] bytes/s per direction (63.0 GB/s)
HOST_MEM_BW = 2 * 8 * 38.4e9          # [DGX] 2 sockets x [XEON] 8 channels
HOST_CORES = 2 * 56                   # [DGX]
HOST_MEM_BYTES = 2 * 10**12           # [DGX] 2 TB of system memory
CPU_CORE_FLOPS = 2.0e9 * 32           # [ASSUME] 2.0 GHz x AVX-512 FP32 FMA: 2 units x 16 lanes x 2
CPU_CORE_BW = HOST_MEM_BW / HOST_CORES  # [ASSUME] an even share per core
PCIE_LAT_US = 10.0                    # [ASSUME] cudaMemcpy latency; StarPU's own
                                      # calibrations of PCIe machines (its sampling/bus
                                      # files) measure about 10 us
NVLINK_LAT_US = 5.0                   # [ASSUME] peer cudaMemcpy latency over NVLink
LAUNCH_US = 4.0                       # [ASSUME] per-task cost: kernel launch and
                                      # StarPU's CUDA driver, about 2-5 us
CPU_HOSTS = HOST_CORES                # simulated CPU workers available (--ncpus):
                                      # every core of the host, for the offloaded
                                      # optimizer
# The expected model (`simulate --cost expected`, codelets/sim_cost.c):
EXPECTED_GEMM = 792.1 / 989           # [MAMF] best-shape GEMM rate over the peak; for
                                      # TF32 and FP32 GEMMs too [ASSUME]
EXPECTED_MEMORY = 0.90                # [ASSUME] a streaming kernel's share of the HBM
                                      # datasheet rate
EXPECTED_CORE = 0.50                  # [ASSUME] compute-bound CUDA-core kernels (our
                                      # f32 attention, softmax) against the FP32 peak
EXPECTED_FLASH = 8.5e12 / GPU_BF16    # [H100-4] our flash attention kernels
                                      # (attention_flash_lowp.cu, WMMA) forward and
                                      # backward together, against the bf16 peak
EXPECTED_CUDNN = 200e12 / GPU_BF16    # [ASSUME] cuDNN's fused attention (the cudnn
                                      # kind), forward and backward together, head
                                      # size 64: FlashAttention-2's published 190-230
                                      # TFLOP/s on an H100 (cuDNN's forward alone is
                                      # quoted near 290); until a lease measures ours
GEMM_TILE = 128                       # [ASSUME] output tile edge of cuBLAS's Hopper
                                      # bf16 kernels; tiles run in waves of SMS
SMS = 132                             # [HOP]


def platform_xml(n):
    out = ["<?xml version='1.0'?>",
           '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
           '<!-- Generated by platforms/gen-h100.py: %d x H100 SXM 80 GB (HBM3 3.35 TB/s),' % n,
           '     NVLink 4 through NVSwitch at 450 GB/s per direction per GPU, PCIe Gen5 x16',
           '     (63 GB/s per direction) to a 2-socket host with 614 GB/s of DDR5.',
           '     Sources: NVIDIA H100 datasheet, Hopper whitepaper, PCIe 5.0 spec,',
           '     DGX H100 user guide, Xeon 8480+ brief; see gen-h100.py for each figure. -->',
           '<platform version="4.1">',
           ' <config id="General">',
           '   <prop id="network/TCP-gamma" value="-1"></prop>',
           '   <prop id="network/latency-factor" value="1"></prop>',
           '   <prop id="network/bandwidth-factor" value="1"></prop>',
           '   <prop id="network/weight-S" value="0.0"></prop>',
           '   <prop id="network/crosstraffic" value="0"></prop>',
           ' </config>',
           ' <AS id="AS0" routing="Full">',
           '   <host id="MAIN" speed="1f"/>']
    out += ['   <host id="CPU%d" speed="2000000000f"/>' % i for i in range(CPU_HOSTS)]
    for i in range(n):
        out += ['   <host id="CUDA%d" speed="2000000000f">' % i,
                '     <prop id="memsize" value="%d"/>' % GPU_MEM_BYTES,
                '     <prop id="memcpy_peer" value="1"/>',
                '   </host>']
    out += ['   <host id="RAM" speed="1f"/>',
            '   <!-- host memory, shared by every host-device transfer -->',
            '   <link id="Host" bandwidth="%.0fBps" latency="0.000000s"/>' % HOST_MEM_BW]
    for i in range(n):
        for a, b in (("RAM", "CUDA%d" % i), ("CUDA%d" % i, "RAM")):
            out.append('   <link id="%s-%s" bandwidth="%.0fBps" latency="%.6fs"/>'
                       % (a, b, PCIE_BW, PCIE_LAT_US * 1e-6))
        # each GPU's NVLink ports to the NVSwitch fabric, one per direction
        out.append('   <link id="CUDA%d-nvl-out" bandwidth="%.0fBps" latency="%.6fs"/>'
                   % (i, NVLINK_BW, NVLINK_LAT_US * 1e-6))
        out.append('   <link id="CUDA%d-nvl-in" bandwidth="%.0fBps" latency="0.000000s"/>'
                   % (i, NVLINK_BW))
    for i in range(n):
        out.append('   <route src="RAM" dst="CUDA%d" symmetrical="NO"><link_ctn id="RAM-CUDA%d"/>'
                   '<link_ctn id="Host"/></route>' % (i, i))
        out.append('   <route src="CUDA%d" dst="RAM" symmetrical="NO"><link_ctn id="CUDA%d-RAM"/>'
                   '<link_ctn id="Host"/></route>' % (i, i))
    for i in range(n):
        for j in range(n):
            if i != j:
                out.append('   <route src="CUDA%d" dst="CUDA%d" symmetrical="NO">'
                           '<link_ctn id="CUDA%d-nvl-out"/><link_ctn id="CUDA%d-nvl-in"/></route>'
                           % (i, j, i, j))
    out += [' </AS>', '</platform>']
    return "\n".join(out) + "\n"


def matrix(n, ram_gpu, gpu_gpu):
    """(n+1) rows of tab-separated values; no trailing blank line (StarPU
    1.3 aborts start-up on one: "Expected a number")."""
    rows = ["# to 0" + "".join("\t\tto %d" % j for j in range(1, n + 1))]
    for i in range(n + 1):
        vals = [0.0 if i == j else ram_gpu if 0 in (i, j) else gpu_gpu for j in range(n + 1)]
        rows.append("\t".join("%e" % v for v in vals))
    return "\n".join(rows) + "\n"


def roofline():
    return "\n".join([
        "# Peak rates of one simulated H100 SXM and of one host core, read by",
        "# 'taskgrad simulate' (codelets/sim_cost.c).  Generated by gen-h100.py,",
        "# which cites each figure.  Predictions, not measurements.",
        "gpu_fp32_flops %.6g" % GPU_FP32,
        "gpu_tf32_flops %.6g" % GPU_TF32,
        "gpu_bf16_flops %.6g" % GPU_BF16,
        "gpu_mem_bytes_per_s %.6g" % GPU_MEM_BW,
        "cpu_core_flops %.6g" % CPU_CORE_FLOPS,
        "cpu_core_bytes_per_s %.6g" % CPU_CORE_BW,
        "launch_us %.6g" % LAUNCH_US,
        "# The host's memory (a DGX H100's), against which 'simulate' checks",
        "# the host-backed model state; --host-memory overrides it.",
        "host_mem_bytes %.6g" % HOST_MEM_BYTES,
        "# The expected model (--cost expected): each GPU task class at a",
        "# fraction of its peak above; GEMMs also lose a partly filled last wave",
        "# of gemm_tile x gemm_tile output tiles over gpu_sms SMs.",
        "expected_gemm_fraction %.6g" % EXPECTED_GEMM,
        "expected_memory_fraction %.6g" % EXPECTED_MEMORY,
        "expected_core_fraction %.6g" % EXPECTED_CORE,
        "expected_flash_fraction %.6g" % EXPECTED_FLASH,
        "expected_cudnn_fraction %.6g" % EXPECTED_CUDNN,
        "gemm_tile %d" % GEMM_TILE,
        "gpu_sms %d" % SMS,
        "# Histories calibrated on a real H100 (gen-history.py writes the",
        "# manifest): 'simulate' times tasks from them by default (--cost",
        "# calibrated), each codelet's only while its sources are unchanged.",
        "history h100.history",
    ]) + "\n"


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for n in (1, 2, 4, 8):
        name = os.path.join(out_dir, "h100x%d" % n)
        files = {
            ".platform.v4.xml": platform_xml(n),
            ".latency": matrix(n, PCIE_LAT_US, NVLINK_LAT_US),          # us
            ".bandwidth": matrix(n, PCIE_BW / 1e6, NVLINK_BW / 1e6),   # MB/s
            ".roofline": roofline(),
        }
        for ext, text in files.items():
            with open(name + ext, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
