/*
 * taskgrad layer 1: the cuBLAS attention of attention_gemm.cu with bf16 q,
 * k, v, out, dout and dqkv taken as they are, its five products on the bf16
 * tensor cores: the native twin of tg_cuda_attention_gemm_fwd / _bwd for
 * mixed-precision runs.
 *
 * Design note
 * -----------
 * Through the low-precision adapter, attention widened qkv (and out, dout)
 * to f32 and multiplied in TF32 (half the bf16 tensor-core rate), then
 * rounded its outputs back; attention was the largest share of the measured
 * GPT step on an H100 (bench/results/2026-11-26-h100-measured.md).  Here the
 * products take bf16 operands and sum in f32 (cublasGemmStridedBatchedEx,
 * batch NH, head h at column h*hs):
 *   forward:  A = scale Q K^T (f32);  the causal softmax of each row in f32,
 *             lse = m + log l, and P16 = bf16(P) (0 above the diagonal);
 *             out = P16 V, rounded once into the bf16 out.
 *   backward: D = rowsum(dout * out) in f32 from the bf16 values;
 *             A = scale Q K^T, B = dout V^T (f32);  one pass: P = exp(A -
 *             lse), P16 = bf16(P), dS16 = bf16(P (B - D)) (from the f32 P);
 *             dV = P16^T dout, dQ = scale dS16 K, dK = scale dS16^T Q, each
 *             rounded once into the bf16 dqkv.
 * These are the rounding points of FlashAttention-2 on bf16 (P and dS are
 * rounded to the operand type before their products); the f32 kernels keep
 * P and dS in f32.  The op table's cuda-emu rows state the difference they
 * allow.  Scratch: D (b T NH) | A (NH T T) | B (NH T T) floats | P16, dS16
 * (NH T T bf16 each): tg_attn_gemm_lowp_scratch_floats (scratch_sizes.h).  bf16 only;
 * deterministic; never allocates or synchronises.  Errors as attention_gemm.cu's;
 * *status keeps the cuBLAS status of a failed product.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "attention_gemm.cuh"
#include "scratch_sizes.h"
#include "cuda_common.cuh"
#include "lowp.cuh"

namespace {

__device__ __forceinline__ uint16_t bf(float x) { return tg_lowp::to_low<true>(x); }

using tg_attn_gemm::softmax_rows; /* unqualified: the emulator's launch rewrite */

/* P rounded to bf16 beside the scores */
struct StoreP16 {
  uint16_t *P16;
  __device__ void operator()(size_t i, float p) const { P16[i] = bf(p); }
};

/* P and dS rounded to bf16 beside the f32 scores */
struct StoreBf16 {
  uint16_t *P16, *dS16;
  __device__ void operator()(size_t i, float p, float ds) const {
    P16[i] = bf(p);
    dS16[i] = bf(ds);
  }
};

/* tg_attn_gemm::check, the cuBLAS status cleared first */
int check(cublasHandle_t handle, int b, int T, int C, int NH, cudaStream_t stream,
          cublasStatus_t *status) {
  *status = CUBLAS_STATUS_SUCCESS;
  return tg_attn_gemm::check(handle, b, T, C, NH, stream);
}

/* dst (T, T) f32 per head = alpha x(T, hs) y(T, hs)^T, heads at stride hs */
cudaError_t scores(cublasHandle_t handle, int T, int hs, int NH, float alpha, const uint16_t *x,
                   int ldx, const uint16_t *y, int ldy, float *dst, cublasStatus_t *status) {
  return tg_cublas_status(tg_cuda_gemm_lowp_strided(handle, TG_BF16, 0, 1, T, T, hs, alpha, x, ldx, hs, y,
                                        ldy, hs, 0.0f, TG_F32, dst, T, (long long)T * T, NH),
              status);
}

/* dst (T, hs) bf16 per head = alpha op(M) (T, T) y (T, hs) */
cudaError_t weighted(cublasHandle_t handle, int transm, int T, int hs, int NH, float alpha,
                     const uint16_t *M, const uint16_t *y, int ldy, uint16_t *dst, int ldd,
                     cublasStatus_t *status) {
  return tg_cublas_status(tg_cuda_gemm_lowp_strided(handle, TG_BF16, transm, 0, T, hs, T, alpha, M, T,
                                        (long long)T * T, y, ldy, hs, 0.0f, TG_BF16, dst, ldd,
                                        hs, NH),
              status);
}

} // namespace

extern "C" cudaError_t tg_cuda_attention_gemm_fwd_lowp(
    cublasHandle_t handle, int b, int T, int C, int NH, const uint16_t *qkv, int ldqkv,
    uint16_t *out, int ldo, float *lse, float *scratch, cudaStream_t stream,
    cublasStatus_t *status) {
  const int chk = check(handle, b, T, C, NH, stream, status);
  if (chk) return chk > 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t tt = (size_t)NH * T * T;
  float *A = scratch + (size_t)b * T * NH;   /* (NH, T, T) */
  uint16_t *P16 = (uint16_t *)(A + 2 * tt); /* (NH, T, T) bf16 */
  for (int s = 0; s < b; s++) {
    const uint16_t *q = qkv + (size_t)s * T * ldqkv; /* (T, ldqkv): q | k | v */
    cudaError_t e = scores(handle, T, hs, NH, scale, q, ldqkv, q + C, ldqkv, A, status);
    if (e != cudaSuccess) return e;
    const unsigned grid = tg_cuda_blocks(((size_t)NH * T + 7) / 8, 1);
    softmax_rows<StoreP16><<<grid, 256, 0, stream>>>(NH, T, A, StoreP16{P16},
                                                     lse + (size_t)s * T * NH);
    e = cudaGetLastError();
    if (e == cudaSuccess)
      e = weighted(handle, 0, T, hs, NH, 1.0f, P16, q + 2 * C, ldqkv,
                   out + (size_t)s * T * ldo, ldo, status);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

extern "C" cudaError_t tg_cuda_attention_gemm_bwd_lowp(
    cublasHandle_t handle, int b, int T, int C, int NH, const uint16_t *qkv, int ldqkv,
    const uint16_t *out, int ldo, const float *lse, const uint16_t *dout, int lddo,
    uint16_t *dqkv, int lddqkv, float *scratch, cudaStream_t stream, cublasStatus_t *status) {
  const int chk = check(handle, b, T, C, NH, stream, status);
  if (chk) return chk > 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t tt = (size_t)NH * T * T, rows_heads = (size_t)b * T * NH;
  float *D = scratch;                       /* (b T, NH) */
  float *A = D + rows_heads;                /* (NH, T, T): scores */
  float *B = A + tt;                        /* (NH, T, T): dP */
  uint16_t *P16 = (uint16_t *)(B + tt);     /* (NH, T, T) bf16 */
  uint16_t *dS16 = P16 + tt;                /* (NH, T, T) bf16 */
  cudaError_t e = tg_attn_gemm::rowdot_lowp(rows_heads, NH, hs, out, ldo, dout, lddo, D, stream);
  if (e != cudaSuccess) return e;
  for (int s = 0; s < b; s++) {
    const uint16_t *q = qkv + (size_t)s * T * ldqkv, *k = q + C, *v = q + 2 * C;
    const uint16_t *dO = dout + (size_t)s * T * lddo;
    uint16_t *dq = dqkv + (size_t)s * T * lddqkv, *dk = dq + C, *dv = dq + 2 * C;
    e = scores(handle, T, hs, NH, scale, q, ldqkv, k, ldqkv, A, status);
    if (e == cudaSuccess) e = scores(handle, T, hs, NH, 1.0f, dO, lddo, v, ldqkv, B, status);
    if (e == cudaSuccess)
      e = tg_map2d(NH * T, T,
                   tg_attn_gemm::SoftmaxBwd<StoreBf16>{A, B, lse + (size_t)s * T * NH,
                                                       D + (size_t)s * T * NH, NH, T,
                                                       StoreBf16{P16, dS16}},
                   stream);
    if (e == cudaSuccess) e = weighted(handle, 1, T, hs, NH, 1.0f, P16, dO, lddo, dv, lddqkv, status);
    if (e == cudaSuccess) e = weighted(handle, 0, T, hs, NH, scale, dS16, k, ldqkv, dq, lddqkv, status);
    if (e == cudaSuccess) e = weighted(handle, 1, T, hs, NH, scale, dS16, q, ldqkv, dk, lddqkv, status);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
