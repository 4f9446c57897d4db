/*
 * The zero padding of the CUDA 16-bit GEMM (kernels/cuda/gemm_lowp.c):
 * private to taskgrad (the codelet sizes the GEMM's scratch with it, the
 * emulated-CUDA test checks it), not part of the installed headers.
 * Kernel layer, plain C: the codelets include it in every build, with or
 * without CUDA (kernels/cuda is on their include path).
 */
#ifndef TASKGRAD_GEMM_LOWP_PAD_H
#define TASKGRAD_GEMM_LOWP_PAD_H

#include <stddef.h>

/* 16-bit elements of the zero-padded copies of A and B that the CUDA GEMM
 * (tg_cuda_gemm_lowp_aligned) makes when k is not a multiple of 8, the
 * tensor cores' alignment; 0 when it is. */
static inline size_t tg_gemm_lowp_pad_elems(int m, int n, int k) {
  if (k % 8 == 0) return 0;
  size_t k8 = ((size_t)k + 7) / 8 * 8;
  return k8 * ((size_t)m + (size_t)n);
}

#endif
