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
#include <cublasLt.h>

#include "taskgrad/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tg_cpu_bias_grad_lowp on the device: db = beta * db + column sums of a
 * 16-bit dY (lowp TG_BF16 or TG_F16), the sums of tg_cuda_bias_grad (work
 * and work_bytes as there) */
cudaError_t tg_cuda_bias_grad_lowp(tg_dtype lowp, int rows, int cols, const uint16_t *dY,
                                   int ldy, float beta, float *db, void *work,
                                   size_t work_bytes, cudaStream_t stream);
/* tg_cpu_residual_layernorm_fwd on the device: Y = A + B (rounded to
 * sum_type's values when 16-bit), Z, mean, rstd = LayerNorm(Y) as
 * tg_cuda_layernorm_fwd; Y must not alias A or B */
cudaError_t tg_cuda_residual_layernorm_fwd(tg_dtype sum_type, int n, int C, const float *A,
                                           int lda, const float *B, int ldb, float *Y, int ldy,
                                           const float *w, const float *b, float *Z, int ldz,
                                           float *mean, float *rstd, cudaStream_t stream);
/* tg_cuda_softmax_xent with the dlogits rounded to bf16 (nearest even)
 * into their own (rows, ldd) buffer: the bits of tg_cuda_softmax_xent then
 * tg_cuda_to_lowp(TG_BF16), in one pass */
cudaError_t tg_cuda_softmax_xent_bf16(int rows, int cols, const float *logits, int ldl,
                                      const int32_t *labels, float scale, uint16_t *dlogits,
                                      int ldd, float *loss_acc, cudaStream_t stream);
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

/* tg_cuda_gemm_lowp over `batch` problems at element strides stride_a,
 * stride_b, stride_c (cublasGemmStridedBatchedEx); k >= 1 */
cublasStatus_t tg_cuda_gemm_lowp_strided(cublasHandle_t handle, tg_dtype lowp, int transa,
                                         int transb, int m, int n, int k, float alpha,
                                         const uint16_t *A, int lda, long long stride_a,
                                         const uint16_t *B, int ldb, long long stride_b,
                                         float beta, tg_dtype c_dtype, void *C, int ldc,
                                         long long stride_c, int batch);

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

/* The 16-bit linear layer on cuBLASLt (gemm_lt.c): one GEMM whose
 * epilogue does the rest, every output written once in its type.
 *   fwd:        Z = X W^T + b (act TG_ACT_NONE), or Z = X W^T + b and
 *               H = gelu(Z) of the unrounded Z (TG_ACT_GELU: ldz a multiple
 *               of 8); b may be NULL;
 *   bwd_data:   dX = dZ W, times gelu'(Zprev) with TG_ACT_GELU (ldzp a
 *               multiple of 8);
 *   bwd_weight: dW = beta dW + dZ^T X (dW f32), and db (f32, NULL: none) =
 *               the column sums of dZ, written (beta does not apply).
 * X, W, dZ, b, Z, H, Zprev and dX are `lowp` (TG_BF16 or TG_F16), summed
 * in f32.  work: device memory (the codelet's scratch), at most
 * TG_LT_WORKSPACE_MAX bytes of it used.  CUBLAS_STATUS_NOT_SUPPORTED,
 * with nothing queued, for what cuBLASLt cannot do here (ReLU, k == 0, an
 * aux ld not a multiple of 8, no algorithm): the caller then takes
 * tg_cuda_linear_*_lowp. */
#define TG_LT_WORKSPACE_MAX ((size_t)32 << 20)
cublasStatus_t tg_cuda_linear_fwd_lt(cublasLtHandle_t lt, tg_dtype lowp, int rows, int in,
                                     int out, const uint16_t *X, int ldx, const uint16_t *W,
                                     int ldw, const uint16_t *b, int act, uint16_t *Z, int ldz,
                                     uint16_t *H, int ldh, void *work, size_t work_bytes,
                                     cudaStream_t stream);
cublasStatus_t tg_cuda_linear_bwd_data_lt(cublasLtHandle_t lt, tg_dtype lowp, int rows, int in,
                                          int out, const uint16_t *dZ, int lddz,
                                          const uint16_t *W, int ldw, int act,
                                          const uint16_t *Zprev, int ldzp, uint16_t *dX,
                                          int lddx, void *work, size_t work_bytes,
                                          cudaStream_t stream);
cublasStatus_t tg_cuda_linear_bwd_weight_lt(cublasLtHandle_t lt, tg_dtype lowp, int rows,
                                            int in, int out, const uint16_t *dZ, int lddz,
                                            const uint16_t *X, int ldx, float beta, float *dW,
                                            int lddw, float *db, void *work, size_t work_bytes,
                                            cudaStream_t stream);

/* The tied classifier with bf16 lnf and wte (lm_classifier_lowp.cu): the
 * fused form (dlogits NULL: dwte, f32, accumulated when non-NULL) or the
 * split form (dlogits (n, Vd) bf16 written, padding columns zero), f32
 * logits and softmax in `logits` (chunk, V rounded up to 8), dlogits rounded to bf16 once
 * and the dlnf GEMM and dwte increment from those values; dlnf f32 or bf16
 * (dlnf16).  work: tg_cuda_classifier_lowp_scratch_floats(C, V, chunk, fused,
 * dlnf16) floats.  *status: the cuBLAS status of a failed GEMM. */
size_t tg_cuda_classifier_lowp_scratch_floats(int C, int V, int chunk, int fused, int dlnf16);
cudaError_t tg_cuda_classifier_lowp(cublasHandle_t handle, int n, int C, int V, int chunk,
                                    const uint16_t *lnf, int ldl, const uint16_t *wte,
                                    const int32_t *targets, float scale, float grad_scale,
                                    int backward, void *dlnf, int lddl, int dlnf16,
                                    float *dwte, float *loss_acc, float *logits,
                                    uint16_t *dlogits, int Vd, float *work,
                                    cudaStream_t stream, cublasStatus_t *status);

/* Softmax, cross-entropy and dlogits in one kernel, in place over bf16
 * logits (lm_classifier_bf16.cu): dl (rows, ld) bf16, ld a multiple of 8,
 * dl 16-byte aligned; the softmax over the columns [0, V) in f32, the row
 * becoming bf16(scale (softmax - onehot)) with the columns [V, ld) zeroed;
 * the row's loss -log p (f32, unscaled) into losses[row] and scale times it
 * added to *loss_acc, each when not NULL.  A target outside [0, V): a zero
 * row and a NaN loss. */
cudaError_t tg_cuda_fused_classifier_bf16(int rows, int V, uint16_t *dl, int ld,
                                          const int32_t *targets, float scale, float *losses,
                                          float *loss_acc, cudaStream_t stream);
/* The tied classifier on bf16 logits (lm_classifier_bf16.cu): per chunk of
 * rows, the bf16 logits written once by the forward GEMM into dl, then
 * tg_cuda_fused_classifier_bf16 in place, then dlnf = grad_scale dl wte[:V]
 * (f32, or bf16 when dlnf16, through work: chunk * C floats) and, when dwte
 * is not NULL, dwte[:V] += grad_scale dl^T lnf_c (f32).  dl (n or chunk,
 * ldd): whole != 0, all n rows (the split form's dlogits, padding columns
 * zeroed), else one chunk's rows reused.  *status: the cuBLAS status of a
 * failed GEMM. */
cudaError_t tg_cuda_classifier_bf16(cublasHandle_t handle, int n, int C, int V, int chunk,
                                    const uint16_t *lnf, int ldl, const uint16_t *wte,
                                    const int32_t *targets, float scale, float grad_scale,
                                    int backward, void *dlnf, int lddl, int dlnf16,
                                    float *dwte, float *loss_acc, uint16_t *dl, int ldd,
                                    int whole, float *work, cudaStream_t stream,
                                    cublasStatus_t *status);

/* Causal attention on cuBLAS with bf16 qkv, out, dout and dqkv
 * (attention_gemm_lowp.cu): tg_cuda_attention_gemm_fwd / _bwd's contract
 * and layout, the products on the bf16 tensor cores, P and dS rounded to
 * bf16 before their products; scratch: tg_attn_gemm_lowp_scratch_floats
 * (kernels/cuda/scratch_sizes.h).  *status: the cuBLAS status of a failed
 * product. */
cudaError_t tg_cuda_attention_gemm_fwd_lowp(cublasHandle_t handle, int b, int T, int C, int NH,
                                            const uint16_t *qkv, int ldqkv, uint16_t *out,
                                            int ldo, float *lse, float *scratch,
                                            cudaStream_t stream, cublasStatus_t *status);
cudaError_t tg_cuda_attention_gemm_bwd_lowp(cublasHandle_t handle, int b, int T, int C, int NH,
                                            const uint16_t *qkv, int ldqkv,
                                            const uint16_t *out, int ldo, const float *lse,
                                            const uint16_t *dout, int lddo, uint16_t *dqkv,
                                            int lddqkv, float *scratch, cudaStream_t stream,
                                            cublasStatus_t *status);

/* Causal flash attention on the bf16 tensor cores (attention_flash_lowp.cu):
 * the chunked kernels' contract with bf16 qkv, out, dout and dqkv, P and
 * dS rounded to bf16 before their products; head sizes 16, 32, 64 and 128
 * (cudaErrorNotSupported otherwise; tg_cuda_attention_flash_lowp_supported
 * says which).  The backward's scratch: D, (b T, NH) floats. */
int tg_cuda_attention_flash_lowp_supported(int C, int NH);
cudaError_t tg_cuda_attention_flash_fwd_lowp(int b, int T, int C, int NH, const uint16_t *qkv,
                                             int ldqkv, uint16_t *out, int ldo, float *lse,
                                             cudaStream_t stream);
cudaError_t tg_cuda_attention_flash_bwd_lowp(int b, int T, int C, int NH, const uint16_t *qkv,
                                             int ldqkv, const uint16_t *out, int ldo,
                                             const float *lse, const uint16_t *dout, int lddo,
                                             uint16_t *dqkv, int lddqkv, float *scratch,
                                             cudaStream_t stream);

/* Causal attention on cuDNN's fused SDPA (attention_cudnn.cpp, through
 * the cuDNN frontend's graph API; cuDNN loaded with dlopen at first use):
 * the chunked kernels' contract with 16-bit (lowp: TG_BF16 or TG_F16) qkv,
 * out, dout and dqkv, f32 lse, scale 1/sqrt(hs).  scratch holds
 * scratch_floats floats: the statistics in cuDNN's (b, NH, T) order, then
 * the plan's workspace (tg_attn_cudnn_scratch_floats, scratch_sizes.h).
 * cudaErrorNotSupported, with nothing queued and the reason in why (a
 * buffer of whylen bytes), when cuDNN is missing (a build without the
 * frontend: a stub), cannot be loaded or refuses the shape, or its plan
 * needs more workspace than the scratch holds; any other error is a
 * failure after work was queued.  Graphs are cached per shape and thread;
 * tg_cuda_attention_cudnn_release frees them and the threads' handles. */
cudaError_t tg_cuda_attention_cudnn_fwd(tg_dtype lowp, int b, int T, int C, int NH,
                                        const uint16_t *qkv, int ldqkv, uint16_t *out, int ldo,
                                        float *lse, float *scratch, size_t scratch_floats,
                                        cudaStream_t stream, char *why, size_t whylen);
cudaError_t tg_cuda_attention_cudnn_bwd(tg_dtype lowp, int b, int T, int C, int NH,
                                        const uint16_t *qkv, int ldqkv, const uint16_t *out,
                                        int ldo, const float *lse, const uint16_t *dout,
                                        int lddo, uint16_t *dqkv, int lddqkv, float *scratch,
                                        size_t scratch_floats, cudaStream_t stream, char *why,
                                        size_t whylen);
void tg_cuda_attention_cudnn_release(void);
/* lse (b T, NH) to cuDNN's statistics (b, NH, T) and back
 * (attention_cudnn_stats.cu): to_bhs 1 reads lse and writes bhs, 0 the
 * reverse */
cudaError_t tg_cuda_attention_lse_permute(int b, int T, int NH, float *lse, float *bhs,
                                          int to_bhs, cudaStream_t stream);
/* The cudnn kind on a CUDA worker (attention_sdpa.c): cuDNN first; where it
 * refuses (cudaErrorNotSupported, nothing queued) the gemm kind's bf16
 * kernels: attention_gemm_lowp.cu when scratch_floats holds
 * tg_attn_gemm_lowp_scratch_floats, else the flash kernels for their head
 * sizes.  *path: TG_SDPA_CUDNN, TG_SDPA_GEMM or TG_SDPA_FLASH, the one that
 * ran; cudaErrorNotSupported with *path 0 and nothing queued when none can
 * (fp16 without cuDNN: the caller runs the f32 gemm kernels); why: cuDNN's
 * reason when it did not run. */
enum { TG_SDPA_CUDNN = 1, TG_SDPA_GEMM = 2, TG_SDPA_FLASH = 3 };
cudaError_t tg_cuda_attention_sdpa_fwd(cublasHandle_t handle, tg_dtype lowp, int b, int T, int C,
                                       int NH, const uint16_t *qkv, int ldqkv, uint16_t *out,
                                       int ldo, float *lse, float *scratch,
                                       size_t scratch_floats, cudaStream_t stream, int *path,
                                       cublasStatus_t *status, char *why, size_t whylen);
cudaError_t tg_cuda_attention_sdpa_bwd(cublasHandle_t handle, tg_dtype lowp, int b, int T, int C,
                                       int NH, const uint16_t *qkv, int ldqkv,
                                       const uint16_t *out, int ldo, const float *lse,
                                       const uint16_t *dout, int lddo, uint16_t *dqkv,
                                       int lddqkv, float *scratch, size_t scratch_floats,
                                       cudaStream_t stream, int *path, cublasStatus_t *status,
                                       char *why, size_t whylen);

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
