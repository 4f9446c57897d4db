/*
 * taskgrad mixed precision, kernels layer: scalar and array conversions
 * between f32 and the 16-bit types (bf16, fp16), and the CPU kernels of
 * mixed-precision training.  Pure functions on host arrays: no StarPU.
 * The codelets are in precision_codelets.h, the training precision and the
 * loss scaler in precision_mode.h; precision.h includes all three.
 *
 * Design note
 * -----------
 * Low-precision values are stored as uint16_t bit patterns (TG_BF16, TG_F16
 * tensors: StarPU matrices with 2-byte elements), so that C code needs no
 * compiler support for _Float16 or __bf16.  Every rounding is IEEE round to
 * nearest, ties to even, as on the GPU (cvt.rn):
 *  - f32 -> bf16: NaN stays NaN (quietened, sign kept), +-Inf stay +-Inf,
 *    finite values beyond bf16's range round to +-Inf, subnormals round
 *    correctly (bf16 has f32's exponent range, so f32 subnormals become bf16
 *    subnormals or zero);
 *  - f32 -> f16: values at or beyond 65520 (the midpoint between 65504, the
 *    largest f16, and 2^16) round to +-Inf; results below 2^-14 become f16
 *    subnormals (multiples of 2^-24), rounded once, ties to even;
 *  - bf16, f16 -> f32 are exact (every value is an f32 value).
 *
 * Mixed-precision training keeps fp32 master weights and fp32 optimizer
 * state; the forward and backward GEMMs read low-precision copies and
 * accumulate in fp32, exactly like cuBLAS's GemmEx with CUBLAS_COMPUTE_32F:
 * inputs rounded to the low type once, products summed in fp32, the output
 * kept in fp32 or rounded to the low type once at the end.  With fp16, the
 * loss is scaled up so that small gradients do not flush to zero; the
 * optimizer multiplies the gradients by grad_scale (1 / loss scale) and
 * skips the whole step when a non-finite check of the gradients has raised
 * the overflow flag (a (1, 1) f32 tensor, zeroed with tg_fill_insert before
 * the checks, non-zero after them when any gradient held an Inf or NaN).
 * The flag never travels to the host inside a step: the skip decision is
 * taken by the optimizer kernel itself.
 *
 * The kernels take `lowp` = TG_BF16 or TG_F16 (the caller guarantees it; the
 * insert wrappers check).  Matrices are row-major with leading dimensions,
 * as in kernels_cpu.h.
 */
#ifndef TASKGRAD_PRECISION_KERNELS_H
#define TASKGRAD_PRECISION_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "taskgrad/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scalar and array conversions ------------------------------------------ */

uint16_t tg_f32_to_bf16(float x);
float tg_bf16_to_f32(uint16_t h);
uint16_t tg_f32_to_f16(float x);
float tg_f16_to_f32(uint16_t h);

/* n contiguous values */
void tg_f32_to_bf16_n(size_t n, const float *src, uint16_t *dst);
void tg_bf16_to_f32_n(size_t n, const uint16_t *src, float *dst);
void tg_f32_to_f16_n(size_t n, const float *src, uint16_t *dst);
void tg_f16_to_f32_n(size_t n, const uint16_t *src, float *dst);

/* The most tensors of one multi-tensor AdamW task (tg_adamw_multi_insert,
 * tg_cuda_adamw_multi): 5 buffers each and the flag stay within the 65
 * buffers a taskgrad task may have. */
#define TG_ADAMW_MULTI_MAX 12

/* ---- CPU kernels ------------------------------------------------------------- */

/* db = beta * db + column sums of a 16-bit dY (rows, cols), lowp TG_BF16
 * or TG_F16: the bits of tg_cpu_bias_grad on dY widened to f32 */
void tg_cpu_bias_grad_lowp(tg_dtype lowp, int rows, int cols, const uint16_t *dY, int ldy,
                           float beta, float *db);

/* The residual add and the LayerNorm after it, in one pass over the rows:
 * Y = A + B, rounded to sum_type (TG_BF16, TG_F16: the values a 16-bit Y
 * holds, kept in f32; TG_F32: not rounded), then Z, mean, rstd =
 * LayerNorm(Y; w, b), each row as tg_cpu_residual_fwd and
 * tg_cpu_layernorm_fwd compute it, bit for bit.  Y must not alias A or B. */
void tg_cpu_residual_layernorm_fwd(tg_dtype sum_type, int n, int C, const float *A, int lda,
                                   const float *B, int ldb, float *Y, int ldy, const float *w,
                                   const float *b, float *Z, int ldz, float *mean, float *rstd);

/* Y(rows, cols) = lowp(X), rounded to nearest even */
void tg_cpu_to_lowp(tg_dtype lowp, int rows, int cols, const float *X, int ldx,
                    uint16_t *Y, int ldy);
/* Y(rows, cols) = f32(X), exact */
void tg_cpu_from_lowp(tg_dtype lowp, int rows, int cols, const uint16_t *X,
                      int ldx, float *Y, int ldy);
/* One level of a reduce-scatter by recursive halving (parallel/halving.c):
 * v[i] = a[i] + f32(recv[i]) (recv NULL: v[i] = a[i]) for i < n, comm the
 * messages' type (TG_F32, TG_BF16 or TG_F16; f32 widening is exact), then
 * out[i - out_off] = v[i] for out_off <= i < out_off + out_len and
 * send[i - send_off] = comm(v[i]) (rounded to nearest even) for send_off <=
 * i < send_off + send_len.  out or send may be NULL (length 0); both ranges
 * lie in [0, n).  The addition is a + recv, as tg_cpu_accumulate's. */
void tg_cpu_add_round(tg_dtype comm, size_t n, const float *a, const void *recv, float *out,
                      size_t out_off, size_t out_len, void *send, size_t send_off,
                      size_t send_len);

/* Floats of workspace tg_cpu_gemm_lowp needs for an (m, n, k) problem
 * (bounded: at most three 256 x 256 tiles, whatever the sizes). */
size_t tg_cpu_gemm_lowp_work_floats(int m, int n, int k);

/* C(m, n) = alpha op(A) op(B) + beta C with A and B in `lowp` (shapes and
 * transposes as tg_cpu_gemm) and C in c_dtype: TG_F32 (C is float *) or
 * lowp itself (C is uint16_t *, read as f32 when beta != 0, rounded once at
 * the end).  Tiles of A and B are widened to f32 in `work`
 * (tg_cpu_gemm_lowp_work_floats(m, n, k) floats) and multiplied with
 * cblas_sgemm, so products and sums are fp32.  beta == 0: C is write-only. */
void tg_cpu_gemm_lowp(tg_dtype lowp, int transa, int transb, int m, int n,
                      int k, float alpha, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, float beta, tg_dtype c_dtype,
                      void *C, int ldc, float *work);

/* Native bf16 GEMM (kernels/cpu/matmul_onednn.c): C = alpha op(A) op(B) +
 * beta C with A, B in bf16, fp32 products and sums, C f32 (c_bf16 == 0) or
 * bf16 (rounded once).  Only while the native path is on (set_native) and
 * the CPU has AVX512-BF16; returns nonzero, touching nothing, for a call it
 * does not run (the caller widens: tg_cpu_gemm_lowp does).  m, n, k > 0 and
 * alpha != 0 (the degenerate cases are the caller's). */
int tg_cpu_gemm_bf16(int transa, int transb, int m, int n, int k, float alpha,
                     const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                     int c_bf16, void *C, int ldc);
/* 1 when this CPU and oneDNN can run bf16 GEMMs natively */
int tg_cpu_gemm_bf16_supported(void);
/* turns the native path on (where supported) or off; the codelets layer's
 * choice (gemm_choice.h) calls it at start-up */
void tg_cpu_gemm_bf16_set_native(int on);
int tg_cpu_gemm_bf16_native(void);

/* tg_cpu_linear_fwd and tg_cpu_linear_bwd_data (kernels_cpu.h) with X (dZ)
 * and W in `lowp`: the GEMM is tg_cpu_gemm_lowp's (native bf16 where the CPU
 * has it, else widened in work: tg_cpu_gemm_lowp_work_floats of the GEMM's
 * m, n, k), the bias, activation and Zprev, Z, H, dX are f32. */
void tg_cpu_linear_fwd_lowp(tg_dtype lowp, int rows, int in, int out, const uint16_t *X,
                            int ldx, const uint16_t *W, int ldw, const float *b, int act,
                            float *Z, int ldz, float *H, int ldh, float *work);
void tg_cpu_linear_bwd_data_lowp(tg_dtype lowp, int rows, int in, int out,
                                 const uint16_t *dZ, int lddz, const uint16_t *W, int ldw,
                                 int act, const float *Zprev, int ldzp, float *dX, int lddx,
                                 float *work);

/* tg_cpu_classifier_dlogits (kernels_cpu.h) with lnf, wte and dlogits in
 * bf16 (kernels/cpu/lm_classifier.c): logits and softmax in f32, dlogits
 * rounded to bf16, and dlnf computed from the rounded dlogits; scratch:
 * tg_cpu_classifier_lowp_scratch_floats(C, V, chunk) floats. */
void tg_cpu_classifier_dlogits_lowp(int n, int C, int V, int chunk, const uint16_t *lnf,
                                    int ldl, const uint16_t *wte, const int32_t *targets,
                                    float scale, float grad_scale, float *dlnf, int lddl,
                                    float *loss_acc, uint16_t *dlogits, int Vd,
                                    float *scratch);
size_t tg_cpu_classifier_lowp_scratch_floats(int C, int V, int chunk);

/* *flag = 1 when any of the n values of g is +-Inf or NaN; otherwise *flag
 * is left as it is, so several tensors can be checked into one flag (and a
 * StarPU reduction that sums per-worker flags starting at zero also works). */
void tg_cpu_nonfinite_check(const float *g, size_t n, float *flag);

/* AdamW of tg_cpu_adamw (same arguments, same arithmetic) on fp32 master
 * weights, skipped entirely when *flag != 0 (w, m, v unchanged bit for bit);
 * then, when w_low is not NULL, w_low = lowp(w) for the next forward pass,
 * whether the step was skipped or not (the copy is an output in both cases).
 * grad_scale unscales the gradients (1 / loss scale). */
void tg_cpu_adamw_amp(size_t n, float *w, const float *grad, float *m,
                      float *v, const float *flag, tg_dtype lowp,
                      uint16_t *w_low, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float bc1, float bc2,
                      float grad_scale);

#ifdef __cplusplus
}
#endif
#endif
