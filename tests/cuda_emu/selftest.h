/*
 * cuda_emu self-test kernels (selftest.cu): misbehaving kernels whose
 * launches must fail with a message naming them, plus one correct kernel.
 * x: 192 floats of (emulated) device memory.
 */
#ifndef TG_CUDA_EMU_SELFTEST_H
#define TG_CUDA_EMU_SELFTEST_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tg_emu_selftest_case {
  TG_EMU_PARTIAL_BARRIER,   /* __syncthreads skipped by half the block */
  TG_EMU_DIVERGENT_BARRIER, /* two __syncthreads call sites at once */
  TG_EMU_PARTIAL_WARP,      /* full mask in a 16-lane warp */
  TG_EMU_EXITED_LANE,       /* full mask after half the lanes returned */
  TG_EMU_DEADLOCK,          /* __syncwarp vs __syncthreads */
  TG_EMU_UNWRITTEN_SHARED,  /* reads poisoned shared memory: NaN */
  TG_EMU_SMEM_NO_OPTIN,     /* 64 KiB dynamic shared memory without opt-in */
  TG_EMU_RACE,              /* shared-memory race (for ThreadSanitizer) */
  TG_EMU_COLLECTIVES,       /* correct: shuffles, ballot, barriers */
} tg_emu_selftest_case;

cudaError_t tg_emu_selftest(tg_emu_selftest_case c, float *x);

#ifdef __cplusplus
}
#endif
#endif
