/*
 * taskgrad layer 1: CUDA twins of the mixed-precision kernels of
 * precision.h (same argument order and semantics, device pointers, launched
 * asynchronously on `stream`; bf16 / fp16 arrays are uint16_t bit patterns).
 * Launchers return the launch status and never allocate or synchronise; the
 * overflow flag is read and written on the device only.
 *
 * Only available when taskgrad was built with CUDA (TG_HAVE_CUDA); included
 * by precision.h then.
 */
#ifndef TASKGRAD_KERNELS_CUDA_PRECISION_H
#define TASKGRAD_KERNELS_CUDA_PRECISION_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "taskgrad/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Y = lowp(X) (round to nearest even), Y = f32(X) (exact) */
cudaError_t tg_cuda_to_lowp(tg_dtype lowp, int rows, int cols, const float *X,
                            int ldx, uint16_t *Y, int ldy, cudaStream_t stream);
cudaError_t tg_cuda_from_lowp(tg_dtype lowp, int rows, int cols,
                              const uint16_t *X, int ldx, float *Y, int ldy,
                              cudaStream_t stream);
/* AdamW of n <= TG_ADAMW_MULTI_MAX tensors in one launch (tensor i: numel[i]
 * elements at w[i], grad[i], m[i], v[i]), the arithmetic of
 * tg_cuda_adamw_amp (flag and 16-bit copies w_low[i] when lowp is TG_BF16 or
 * TG_F16; w_low NULL or its NULL entries: no copy) or, with flag NULL and
 * lowp TG_F32, of tg_cuda_adamw */
cudaError_t tg_cuda_adamw_multi(int n, float *const *w, const float *const *grad,
                                float *const *m, float *const *v, uint16_t *const *w_low,
                                const size_t *numel, const float *flag, tg_dtype lowp,
                                float lr, float beta1, float beta2, float eps,
                                float weight_decay, float bc1, float bc2, float grad_scale,
                                cudaStream_t stream);
/* tg_cpu_add_round on the device (the same bits: one float addition and the
 * hardware's round to nearest even); n < 2^31 */
cudaError_t tg_cuda_add_round(tg_dtype comm, size_t n, const float *a, const void *recv,
                              float *out, size_t out_off, size_t out_len, void *send,
                              size_t send_off, size_t send_len, cudaStream_t stream);
/* X = lowp(beta * f32(X)), beta == 0 writing zeros (the k == 0 GEMM) */
cudaError_t tg_cuda_scale_lowp(tg_dtype lowp, int rows, int cols, uint16_t *X,
                               int ldx, float beta, cudaStream_t stream);

/* Row-major low-precision GEMM through cublasGemmEx (CUBLAS_COMPUTE_32F):
 * A, B in lowp, C in c_dtype (TG_F32 or lowp).  The handle must already be
 * bound to the stream. */
cublasStatus_t tg_cuda_gemm_lowp(cublasHandle_t handle, tg_dtype lowp,
                                 int transa, int transb, int m, int n, int k,
                                 float alpha, const uint16_t *A, int lda,
                                 const uint16_t *B, int ldb, float beta,
                                 tg_dtype c_dtype, void *C, int ldc);

/* The same with the inner dimension padded for the tensor cores: when k is
 * not a multiple of 8, A and B are first copied into `work` (device memory,
 * tg_gemm_lowp_pad_elems(m, n, k) 16-bit elements) with k rounded up to a
 * multiple of 8 and the new rows or columns zero, so the products and sums
 * are those of the unpadded problem (zeros add nothing).  Copies are queued
 * on the handle's stream; work may be NULL when k is a multiple of 8. */
cublasStatus_t tg_cuda_gemm_lowp_aligned(cublasHandle_t handle, tg_dtype lowp,
                                         int transa, int transb, int m, int n, int k,
                                         float alpha, const uint16_t *A, int lda,
                                         const uint16_t *B, int ldb, float beta,
                                         tg_dtype c_dtype, void *C, int ldc,
                                         uint16_t *work);

/* The fused linear layer (tg_cuda_linear_fwd / _bwd_data) with 16-bit
 * operands on the tensor cores (linear_lowp.cu): X and W, or dZ and W, are
 * `lowp`; the bias, Z, H, Zprev and dX are f32, or `lowp` where their flag
 * (b16, z16, ...) is set.  work: device memory for an f32 (rows, out)
 * forward or (rows, in) backward result, needed when Z or dX is 16-bit. */
cudaError_t tg_cuda_linear_fwd_lowp(cublasHandle_t handle, tg_dtype lowp, int rows, int in,
                                    int out, const uint16_t *X, int ldx, const uint16_t *W,
                                    int ldw, const void *b, int b16, int act, void *Z, int ldz,
                                    int z16, void *H, int ldh, int h16, float *work,
                                    cudaStream_t stream, cublasStatus_t *cublas_status);
cudaError_t tg_cuda_linear_bwd_data_lowp(cublasHandle_t handle, tg_dtype lowp, int rows,
                                         int in, int out, const uint16_t *dZ, int lddz,
                                         const uint16_t *W, int ldw, int act,
                                         const void *Zprev, int ldzp, int zp16, void *dX,
                                         int lddx, int dx16, float *work, cudaStream_t stream,
                                         cublasStatus_t *cublas_status);

/* *flag = 1 (device memory) when g holds an Inf or NaN, else unchanged */
cudaError_t tg_cuda_nonfinite_check(const float *g, size_t n, float *flag,
                                    cudaStream_t stream);

/* tg_cpu_adamw_amp; flag is a device pointer read by the kernel */
cudaError_t tg_cuda_adamw_amp(size_t n, float *w, const float *grad, float *m,
                              float *v, const float *flag, tg_dtype lowp,
                              uint16_t *w_low, float lr, float beta1,
                              float beta2, float eps, float weight_decay,
                              float bc1, float bc2, float grad_scale,
                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
