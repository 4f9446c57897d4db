/*
 * The f32 entry of oneDNN's matmul primitive (matmul_onednn.c), private to
 * the CPU kernels: gemm.c runs the oneDNN back end's forward class on it.
 */
#ifndef TASKGRAD_KERNELS_CPU_MATMUL_ONEDNN_H
#define TASKGRAD_KERNELS_CPU_MATMUL_ONEDNN_H

/* C(m, n) = alpha op(A) op(B) + bias + beta C, row-major f32, bias a row of
 * n floats added to every row (NULL: none).  Nonzero, touching nothing,
 * when oneDNN declines the call (the caller takes another kernel); m, n,
 * k > 0 and alpha != 0 (degenerate calls are declined too). */
int tg_cpu_matmul_onednn_f32(int transa, int transb, int m, int n, int k, float alpha,
                             const float *A, int lda, const float *B, int ldb,
                             const float *bias, float beta, float *C, int ldc);

#endif
