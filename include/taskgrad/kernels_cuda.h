/*
 * taskgrad layer 1: CUDA kernels.
 *
 * The same operations, argument order and semantics as kernels_cpu.h (read
 * that file for the mathematics), on device pointers, launched
 * asynchronously on `stream`.  Each launcher returns the launch status
 * (cudaGetLastError() after the launch) so that the caller can check it; no
 * launcher allocates memory or synchronises.
 *
 * Only available when taskgrad was built with CUDA (TG_HAVE_CUDA).
 */
#ifndef TASKGRAD_KERNELS_CUDA_H
#define TASKGRAD_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Row-major GEMM through cuBLAS (column-major underneath: we compute
 * C^T = op(B)^T op(A)^T).  The handle must already be bound to the stream. */
cublasStatus_t tg_cuda_gemm(cublasHandle_t handle, int transa, int transb,
                            int m, int n, int k, float alpha, const float *A,
                            int lda, const float *B, int ldb, float beta,
                            float *C, int ldc);

/* batch row-major GEMMs of tg_cuda_gemm, operand i at A + i stride_a, B + i
 * stride_b, C + i stride_c (cublasSgemmStridedBatched); k >= 1 */
cublasStatus_t tg_cuda_gemm_strided(cublasHandle_t handle, int transa, int transb, int m,
                                    int n, int k, float alpha, const float *A, int lda,
                                    long long stride_a, const float *B, int ldb,
                                    long long stride_b, float beta, float *C, int ldc,
                                    long long stride_c, int batch);

cudaError_t tg_cuda_bias_add(int rows, int cols, float *Y, int ldy,
                             const float *b, cudaStream_t stream);
/* work: the codelet's scratch, tg_bias_grad_scratch_floats(rows, cols)
 * floats (kernels/cuda/scratch_sizes.h) for the row-split sums over the
 * whole GPU; NULL or smaller: one block per 32 columns (the same sums but
 * for the order of the double additions) */
cudaError_t tg_cuda_bias_grad(int rows, int cols, const float *dY, int ldy,
                              float beta, float *db, void *work, size_t work_bytes,
                              cudaStream_t stream);
cudaError_t tg_cuda_relu_fwd(int rows, int cols, const float *X, int ldx,
                             float *Y, int ldy, cudaStream_t stream);
cudaError_t tg_cuda_relu_bwd(int rows, int cols, const float *X, int ldx,
                             const float *dY, int lddy, float *dX, int lddx,
                             cudaStream_t stream);
cudaError_t tg_cuda_gelu_fwd(int rows, int cols, const float *X, int ldx,
                             float *Y, int ldy, cudaStream_t stream);
cudaError_t tg_cuda_gelu_bwd(int rows, int cols, const float *X, int ldx,
                             const float *dY, int lddy, float *dX, int lddx,
                             cudaStream_t stream);
/* loss_acc and labels are device pointers */
cudaError_t tg_cuda_softmax_xent(int rows, int cols, const float *logits,
                                 int ldl, const int32_t *labels, float scale,
                                 float *dlogits, int ldd, float *loss_acc,
                                 cudaStream_t stream);
cudaError_t tg_cuda_accuracy_count(int rows, int cols, const float *logits,
                                   int ldl, const int32_t *labels,
                                   float *correct_acc, cudaStream_t stream);
cudaError_t tg_cuda_sgd(size_t n, float *w, const float *grad, float *vel,
                        float lr, float momentum, float weight_decay,
                        float grad_scale, cudaStream_t stream);
cudaError_t tg_cuda_adamw(size_t n, float *w, const float *grad, float *m,
                          float *v, float lr, float beta1, float beta2,
                          float eps, float weight_decay, float bc1, float bc2,
                          float grad_scale, cudaStream_t stream);
/* Fused linear layer forward and backward-data (see kernels_cpu.h); the
 * handle must be bound to `stream`.  Returns the first failing status as a
 * cudaError_t (cuBLAS failures map to cudaErrorUnknown after the message
 * below is set in *cublas_status). */
cudaError_t tg_cuda_linear_fwd(cublasHandle_t handle, int rows, int in, int out,
                               const float *X, int ldx, const float *W, int ldw,
                               const float *b, int act, float *Z, int ldz,
                               float *H, int ldh, cudaStream_t stream,
                               cublasStatus_t *cublas_status);
cudaError_t tg_cuda_linear_bwd_data(cublasHandle_t handle, int rows, int in,
                                    int out, const float *dZ, int lddz,
                                    const float *W, int ldw, int act,
                                    const float *Zprev, int ldzp, float *dX,
                                    int lddx, cudaStream_t stream,
                                    cublasStatus_t *cublas_status);
cudaError_t tg_cuda_fill(int rows, int cols, float *X, int ldx, float value,
                         cudaStream_t stream);
cudaError_t tg_cuda_accumulate(int rows, int cols, float *dst, int ldd,
                               const float *src, int lds, cudaStream_t stream);
cudaError_t tg_cuda_scale(int rows, int cols, float *X, int ldx, float alpha,
                          cudaStream_t stream);
/* The exchange kernels (see tg_cpu_sum_tree, tg_cpu_gather_rows): in,
 * ld_in and rows_in are host arrays (of device pointers); the sum is one
 * kernel whose inputs travel in its parameters, so n <= TG_CUDA_SUM_TREE_MAX
 * (cudaErrorInvalidValue beyond), with the CPU kernel's bits; the gather
 * is one cudaMemcpy2DAsync per block on `stream`. */
#define TG_CUDA_SUM_TREE_MAX 64
cudaError_t tg_cuda_sum_tree(int rows, int cols, int n, const float *const *in,
                             const int *ld_in, float *out, int ldo, cudaStream_t stream);
cudaError_t tg_cuda_gather_rows(int cols, size_t elemsize, int n, const void *const *in,
                                const int *rows_in, const int *ld_in, void *out, int ldo,
                                cudaStream_t stream);


/* ---- transformer (see kernels_cpu.h for the definitions) -------------------
 * The embedding backward must be deterministic (no float atomics). */
cudaError_t tg_cuda_embedding_fwd(int n, int T, int C, const int32_t *tokens,
                                  const float *wte, const float *wpe, float *X,
                                  int ldx, cudaStream_t stream);
cudaError_t tg_cuda_embedding_bwd(int n, int T, int C, const int32_t *tokens,
                                  const float *dX, int lddx, float *dwte,
                                  float *dwpe, cudaStream_t stream);
cudaError_t tg_cuda_layernorm_fwd(int n, int C, const float *X, int ldx,
                                  const float *w, const float *b, float *Y,
                                  int ldy, float *mean, float *rstd,
                                  cudaStream_t stream);
/* dX accumulates; dw, db accumulate when `accumulate`, else are written;
 * scratch: tg_cuda_layernorm_bwd_scratch_floats(n, C) floats of device
 * memory for a deterministic two-pass reduction */
size_t tg_cuda_layernorm_bwd_scratch_floats(int n, int C);
cudaError_t tg_cuda_layernorm_bwd(int n, int C, const float *dY, int lddy,
                                  const float *X, int ldx, const float *w,
                                  const float *mean, const float *rstd,
                                  float *dX, int lddx, float *dw, float *db,
                                  int accumulate, float *scratch, cudaStream_t stream);
cudaError_t tg_cuda_residual_fwd(int n, int C, const float *A, int lda,
                                 const float *B, int ldb, float *Y, int ldy,
                                 cudaStream_t stream);
cudaError_t tg_cuda_attention_naive_fwd(int b, int T, int C, int NH,
                                        const float *qkv, int ldqkv,
                                        float *att, float *out, int ldo,
                                        cudaStream_t stream);
cudaError_t tg_cuda_attention_naive_bwd(int b, int T, int C, int NH,
                                        const float *qkv, int ldqkv,
                                        const float *att, const float *dout,
                                        int lddo, float *dqkv, int lddqkv,
                                        float *scratch, cudaStream_t stream);
/* Causal attention with its products on cuBLAS (attention_gemm.cu): the
 * chunked kernels' contract (lse as below), scores and probabilities
 * materialised per sequence in the scratch, which must hold
 * tg_attn_gemm_scratch_floats(b, T, NH) floats (kernels/cuda/scratch_sizes.h,
 * private; the codelet takes this path while tg_attn_gemm_fits). */
cudaError_t tg_cuda_attention_gemm_fwd(cublasHandle_t handle, int b, int T, int C, int NH,
                                       const float *qkv, int ldqkv, float *out, int ldo,
                                       float *lse, float *scratch, cudaStream_t stream);
cudaError_t tg_cuda_attention_gemm_bwd(cublasHandle_t handle, int b, int T, int C, int NH,
                                       const float *qkv, int ldqkv, const float *out, int ldo,
                                       const float *lse, const float *dout, int lddo,
                                       float *dqkv, int lddqkv, float *scratch,
                                       cudaStream_t stream);
/* device scratch floats for the CUDA chunked kernels (O(T * chunk) per
 * (sequence, head) in flight, never O(T^2)) */
size_t tg_cuda_attention_chunked_scratch_floats(int b, int T, int C, int NH,
                                                int chunk);
cudaError_t tg_cuda_attention_chunked_fwd(int b, int T, int C, int NH,
                                          int chunk, const float *qkv,
                                          int ldqkv, float *out, int ldo,
                                          float *lse, float *scratch,
                                          cudaStream_t stream);
cudaError_t tg_cuda_attention_chunked_bwd(int b, int T, int C, int NH,
                                          int chunk, const float *qkv,
                                          int ldqkv, const float *out, int ldo,
                                          const float *lse, const float *dout,
                                          int lddo, float *dqkv, int lddqkv,
                                          float *scratch, cudaStream_t stream);
/* scratch: chunk * V floats of device memory; uses cuBLAS on `handle` */
cudaError_t tg_cuda_classifier(cublasHandle_t handle, int n, int C, int V,
                               int chunk, const float *lnf, int ldl,
                               const float *wte, const int32_t *targets,
                               float scale, float grad_scale, int backward, float *dlnf,
                               int lddl, float *dwte, float *loss_acc,
                               float *scratch, cudaStream_t stream);
/* the split form: see tg_cpu_classifier_dlogits; Vd < V is
 * cudaErrorInvalidValue */
cudaError_t tg_cuda_classifier_dlogits(cublasHandle_t handle, int n, int C, int V, int chunk,
                                       const float *lnf, int ldl, const float *wte,
                                       const int32_t *targets, float scale, float grad_scale,
                                       float *dlnf, int lddl, float *loss_acc, float *dlogits,
                                       int Vd, cudaStream_t stream);

/* The classifier in vocabulary tiles: see tg_cpu_lm_logits_tile and its
 * siblings (kernels_cpu.h); cuBLAS on `handle`, bound to `stream`. */
cudaError_t tg_cuda_lm_logits_tile(cublasHandle_t handle, int n, int C, int V, int v0, int m,
                                   const float *lnf, int ldl, const float *wte, float *logits,
                                   int ldo, float *stats, int lds, cudaStream_t stream);
cudaError_t tg_cuda_lm_softmax_combine(int n, int V, int ntiles, const float *stats, int lds,
                                       const float *logits, int ldo, const int32_t *targets,
                                       float scale, float *lse, int ldlse, float *loss_acc,
                                       cudaStream_t stream);
cudaError_t tg_cuda_lm_dlogits_tile(int n, int V, int v0, int m, const float *lse, int ldlse,
                                    const int32_t *targets, float alpha, float *dl, int ldd,
                                    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
