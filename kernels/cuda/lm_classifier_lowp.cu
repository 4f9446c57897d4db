/*
 * taskgrad layer 1: the tied classifier with bf16 lnf and wte on the
 * tensor cores, the native twin of tg_cuda_classifier (fused form) and
 * tg_cuda_classifier_dlogits (split form, bf16 dlogits), for mixed-precision
 * runs.
 *
 * Design note
 * -----------
 * Through the low-precision adapter the classifier widened lnf and the whole
 * (Vp, C) wte to f32 in every task, then ran f32 GEMMs in TF32 math: on an
 * H100 it was the second largest codelet of the GPT-2 124M step
 * (bench/results/2026-11-26-h100-measured.md).  Here, per chunk of rows
 * [r0, r0 + rows):
 *   1. logits (rows, V) f32 = lnf_c wte[:V]^T: cublasGemmEx on the bf16
 *      operands as they are, f32 sums (tg_cuda_gemm_lowp);
 *   2. the softmax and cross-entropy in f32 (tg_cuda_softmax_xent_bf16):
 *      dl16 = bf16(scale (softmax - onehot)), rounded once as it is
 *      stored, the loss added to *loss_acc (forward only: in place in f32,
 *      tg_cuda_softmax_xent, for the loss alone);
 *   3. backward: from those rounded values,
 *      dlnf_c = grad_scale dl16 wte[:V] (f32 sums; rounded once
 *      when dlnf is 16-bit) and, fused form, dwte[:V] += grad_scale
 *      dl16^T lnf_c (f32).
 * The rounding points are those of tg_cpu_classifier_dlogits_lowp
 * (kernels/cpu/lm_classifier.c): the dlnf GEMM and the dwte increment see
 * one bf16 dlogits, as a bf16 autocast (and llm.c) would; the f32 classifier
 * keeps f32 dlogits.  dl16 is the caller's (n, Vd) dlogits in the split form
 * (its padding columns V..Vd-1 zeroed) and a (chunk, ldv) block of `work` in
 * the fused one, ldv = V rounded up to 8 so that every row of the GEMM
 * operand starts 16-byte aligned.
 *
 * Shapes: lnf (n, ldl) bf16; wte (Vp, C) bf16 contiguous, rows [0, V) used;
 * targets (n); logits (chunk, ldv) f32 device memory, ldv = V rounded up to 8
 * (rows 16-byte aligned: with an odd V, cuBLAS's output rows were not, and
 * the tensor-core kernels slower); dlnf (n, lddl), f32 or
 * bf16 (dlnf16); dwte (Vp, C) f32 or NULL (the split form); loss_acc (1);
 * work: tg_cuda_classifier_lowp_scratch_floats(C, V, chunk, fused, dlnf16)
 * floats (NULL when that is 0).  Errors as tg_cuda_classifier's; *status
 * keeps the cuBLAS status of a failed GEMM.  Never allocates or
 * synchronises.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "cuda_common.cuh"

namespace {

/* the split form's padding columns: dl[r * ld + c] = 0 */
struct ZeroCols {
  uint16_t *dl;
  size_t ld;
  __device__ void operator()(size_t r, size_t c) const { dl[r * ld + c] = 0; }
};

int round8(int v) { return (v + 7) / 8 * 8; }

} // namespace

extern "C" size_t tg_cuda_classifier_lowp_scratch_floats(int C, int V, int chunk, int fused,
                                                      int dlnf16) {
  if (chunk <= 0 || C <= 0 || V <= 0) return 0;
  size_t dl = fused ? ((size_t)chunk * round8(V) + 1) / 2 : 0; /* bf16 pairs */
  dl = (dl + 15) / 16 * 16; /* the f32 part after it 64-byte aligned */
  return dl + (dlnf16 ? (size_t)chunk * C : 0);
}

extern "C" cudaError_t tg_cuda_classifier_lowp(
    cublasHandle_t handle, int n, int C, int V, int chunk,
    const uint16_t *lnf, int ldl,   /* (n, ldl) bf16 */
    const uint16_t *wte,            /* (Vp, C) bf16, rows [0, V) used */
    const int32_t *targets,         /* (n) */
    float scale, float grad_scale, int backward,
    void *dlnf, int lddl, int dlnf16, /* (n, lddl), written when backward */
    float *dwte,                    /* (Vp, C) f32 accumulated, or NULL */
    float *loss_acc,                /* (1) */
    float *logits,                  /* (chunk, V rounded up to 8) f32 */
    uint16_t *dlogits, int Vd,      /* split form: (n, Vd) bf16 written; else NULL */
    float *work, cudaStream_t stream, cublasStatus_t *status) {
  *status = CUBLAS_STATUS_SUCCESS;
  if (n <= 0) return cudaSuccess;
  const int fused = dlogits == NULL;
  if (chunk <= 0 || C < 0 || V <= 0 || (!fused && Vd < V) || !logits ||
      (backward && !dlnf) ||
      (tg_cuda_classifier_lowp_scratch_floats(C, V, chunk, fused, backward && dlnf16) && !work))
    return cudaErrorInvalidValue;
  cudaStream_t hs = NULL;
  if (tg_cublas_status(cublasGetStream(handle, &hs), status) != cudaSuccess) return cudaErrorUnknown;
  if (hs != stream) return cudaErrorInvalidValue;
  const int ldv = fused ? round8(V) : Vd, ldg = round8(V); /* dl16's, logits' */
  float *G = work + tg_cuda_classifier_lowp_scratch_floats(C, V, chunk, fused, 0); /* (chunk, C) */

  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int rows = n - r0 < chunk ? n - r0 : chunk;
    const uint16_t *lnf_c = lnf + (size_t)r0 * (size_t)ldl; /* (rows, ldl) */
    cudaError_t e = tg_cublas_status(tg_cuda_gemm_lowp(handle, TG_BF16, 0, 1, rows, V, C, 1.0f, lnf_c, ldl,
                                           wte, C, 0.0f, TG_F32, logits, ldg),
                         status);
    if (e != cudaSuccess) return e;
    if (!backward) { /* the loss only */
      e = tg_cuda_softmax_xent(rows, V, logits, ldg, targets + r0, scale, logits, ldg, loss_acc,
                               stream);
      if (e != cudaSuccess) return e;
      continue;
    }
    uint16_t *dl = fused ? (uint16_t *)work : dlogits + (size_t)r0 * (size_t)Vd; /* (rows, ldv) */
    e = tg_cuda_softmax_xent_bf16(rows, V, logits, ldg, targets + r0, scale, dl, ldv, loss_acc,
                                  stream);
    if (e != cudaSuccess) return e;
    /* dlnf_c (rows, C) = grad_scale dl wte[:V], into dlnf or, 16-bit, G */
    void *d = dlnf16 ? (void *)G
                     : (void *)((float *)dlnf + (size_t)r0 * (size_t)lddl);
    e = tg_cublas_status(tg_cuda_gemm_lowp(handle, TG_BF16, 0, 0, rows, C, V, grad_scale, dl, ldv, wte, C,
                               0.0f, TG_F32, d, dlnf16 ? C : lddl),
             status);
    if (e == cudaSuccess && dlnf16)
      e = tg_cuda_to_lowp(TG_BF16, rows, C, G, C,
                          (uint16_t *)dlnf + (size_t)r0 * (size_t)lddl, lddl, stream);
    /* dwte[:V] (V, C) += grad_scale dl^T lnf_c */
    if (e == cudaSuccess && dwte)
      e = tg_cublas_status(tg_cuda_gemm_lowp(handle, TG_BF16, 1, 0, V, C, rows, grad_scale, dl, ldv, lnf_c,
                                 ldl, 1.0f, TG_F32, dwte, C),
               status);
    if (e != cudaSuccess) return e;
  }
  if (!fused && backward && Vd > V)
    return tg_map2d(n, Vd - V, ZeroCols{dlogits + V, (size_t)Vd}, stream);
  return cudaGetLastError();
}
