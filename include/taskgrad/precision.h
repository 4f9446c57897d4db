/*
 * taskgrad mixed precision (bf16, fp16): conversions, CPU kernels (layer 1)
 * and codelets (layer 2).
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
#ifndef TASKGRAD_PRECISION_H
#define TASKGRAD_PRECISION_H

#include <stddef.h>
#include <stdint.h>

#include "taskgrad/codelets.h"
#include "taskgrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layer 1: scalar and array conversions --------------------------------- */

uint16_t tg_f32_to_bf16(float x);
float tg_bf16_to_f32(uint16_t h);
uint16_t tg_f32_to_f16(float x);
float tg_f16_to_f32(uint16_t h);

/* n contiguous values */
void tg_f32_to_bf16_n(size_t n, const float *src, uint16_t *dst);
void tg_bf16_to_f32_n(size_t n, const uint16_t *src, float *dst);
void tg_f32_to_f16_n(size_t n, const float *src, uint16_t *dst);
void tg_f16_to_f32_n(size_t n, const uint16_t *src, float *dst);

/* ---- layer 1: CPU kernels ------------------------------------------------------ */

/* Y(rows, cols) = lowp(X), rounded to nearest even */
void tg_cpu_to_lowp(tg_dtype lowp, int rows, int cols, const float *X, int ldx,
                    uint16_t *Y, int ldy);
/* Y(rows, cols) = f32(X), exact */
void tg_cpu_from_lowp(tg_dtype lowp, int rows, int cols, const uint16_t *X,
                      int ldx, float *Y, int ldy);

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

/* 16-bit elements of the zero-padded copies of A and B that the CUDA GEMM
 * (tg_cuda_gemm_lowp_aligned) makes when k is not a multiple of 8, the
 * tensor cores' alignment; 0 when it is. */
static inline size_t tg_gemm_lowp_pad_elems(int m, int n, int k) {
  if (k % 8 == 0) return 0;
  size_t k8 = ((size_t)k + 7) / 8 * 8;
  return k8 * ((size_t)m + (size_t)n);
}

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

/* ---- layer 2: codelets ---------------------------------------------------------
 * `lowp` names the 2-byte type (TG_BF16 or TG_F16): StarPU handles only know
 * the element size, which is 2 for both. */

/* dst = src converted: f32 -> lowp or lowp -> f32, decided by the element
 * sizes (4 -> 2 or 2 -> 4); same shape; dst written (W). */
int tg_convert_insert(tg_dtype lowp, starpu_data_handle_t src,
                      starpu_data_handle_t dst, const tg_task_opts *opts);

/* C = alpha op(A) op(B) + beta C (see tg_cpu_gemm_lowp): A, B in lowp,
 * C f32 (4-byte elements) or lowp (2-byte).  accum as tg_gemm_insert;
 * TG_REDUCE only with an f32 C (the reduction codelets add floats). */
int tg_gemm_lowp_insert(tg_dtype lowp, int transa, int transb, float alpha,
                        starpu_data_handle_t A, starpu_data_handle_t B,
                        float beta, starpu_data_handle_t C, tg_accum accum,
                        const tg_task_opts *opts);

/* flag (1, 1) f32 (RW) = 1 when grad (f32, contiguous) holds an Inf or NaN */
int tg_nonfinite_insert(starpu_data_handle_t grad, starpu_data_handle_t flag,
                        const tg_task_opts *opts);

/* tg_cpu_adamw_amp as a task: w, grad, m, v f32 (rows, cols), contiguous
 * (w, m, v RW; grad R); w_low (rows, cols) lowp written, or NULL; flag
 * (1, 1) f32 (R).  h as tg_adamw_insert (grad_scale = 1 / loss scale). */
int tg_adamw_amp_insert(tg_dtype lowp, starpu_data_handle_t w,
                        starpu_data_handle_t grad, starpu_data_handle_t m,
                        starpu_data_handle_t v, starpu_data_handle_t w_low,
                        starpu_data_handle_t flag, const tg_adamw_hyper *h,
                        const tg_task_opts *opts);

extern struct starpu_codelet tg_convert_cl, tg_gemm_lowp_cl, tg_nonfinite_cl,
    tg_adamw_amp_cl;

/* ---- training precision and dynamic loss scaling (src/precision_mode.c) ------ */

typedef enum tg_precision {
  TG_PREC_FP32 = 0, /* everything f32 */
  TG_PREC_TF32 = 1, /* f32 tensors; cuBLAS TF32 tensor-core math for f32 GEMMs */
  TG_PREC_BF16 = 2, /* bf16 GEMM operands and activations, f32 master weights */
  TG_PREC_FP16 = 3, /* fp16 likewise, with dynamic loss scaling by default */
} tg_precision;

/* "fp32", "tf32", "bf16", "fp16" -> *p; -EINVAL with a message otherwise */
int tg_precision_parse(const char *name, tg_precision *p);
const char *tg_precision_name(tg_precision p);
/* the 16-bit storage type of a precision: TG_BF16, TG_F16, or TG_F32 (none) */
tg_dtype tg_precision_lowp(tg_precision p);

/* Sets cuBLAS's math mode on every CUDA worker's handle: TF32 tensor-core
 * math for f32 GEMMs when on, the default mode otherwise.  Nothing to do
 * without CUDA workers.  Call after tg_init.  Worth turning on for bf16 and
 * fp16 training too: the f32 GEMMs that the low-precision adapter runs on
 * widened 16-bit operands lose nothing to TF32's 10-bit mantissa (only
 * their f32 operands, such as the softmax's gradient, get rounded), and
 * `taskgrad --precision bf16|fp16` does so. */
int tg_set_tf32(int on);

/* Dynamic loss scaling.  The loss is multiplied by `scale` before the
 * backward pass (the classifier multiplies its gradients); after every step
 * the host reads the overflow flag of that step (tg_nonfinite_insert):
 * overflow -> the optimizer skipped the step, scale halves, the clean count
 * restarts; otherwise after `window` clean steps in a row the scale doubles.
 * The scale never drops below 2^-24 nor doubles past 2^126 (f32's range). */
typedef struct tg_loss_scaler {
  int enabled;       /* 0: scale stays 1, no checks */
  float scale;       /* current loss scale S */
  int window;        /* clean steps before S doubles */
  int clean;         /* clean steps since the last change */
  long skipped;      /* steps skipped because of an overflow */
} tg_loss_scaler;

#define TG_LOSS_SCALE_DEFAULT 65536.0f /* 2^16, fp16's usual start */
#define TG_LOSS_SCALE_WINDOW 2000

/* -EINVAL when enabled and scale is not positive and finite, or window < 1 */
int tg_loss_scaler_init(tg_loss_scaler *s, int enabled, float scale, int window);
/* after a step: overflow != 0 when the step's flag was set */
void tg_loss_scaler_update(tg_loss_scaler *s, int overflow);
/* After a step's optimizer tasks were submitted: reads the step's overflow
 * flag ((1, 1) f32; waits for the step: the next step's scale depends on
 * it) and updates the scaler.  1 when the step was skipped, 0 when it was
 * applied or the scaler is off, a negative errno when the read failed. */
int tg_loss_scaler_after_step(tg_loss_scaler *s, tg_tensor *flag);

#ifdef __cplusplus
}
#endif

#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

#endif
