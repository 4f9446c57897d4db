/*
 * taskgrad layer 1, private to kernels/cuda: what the two cuBLAS attention
 * paths share (attention_gemm.cu on f32 buffers, attention_gemm_lowp.cu on
 * bf16 ones): the launchers' checks and the backward's pass from the
 * scores and dP to P and dS.
 */
#ifndef TASKGRAD_ATTENTION_GEMM_CUH
#define TASKGRAD_ATTENTION_GEMM_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda_common.cuh"
#include "lowp.cuh"

namespace tg_attn_gemm {

/* 1 = nothing to do, 0 = go, -1 = invalid (C not a multiple of NH, or a
 * handle bound to another stream) */
static inline int check(cublasHandle_t handle, int b, int T, int C, int NH,
                        cudaStream_t stream) {
  if (b <= 0 || T <= 0 || C <= 0 || NH <= 0) return 1;
  if (C % NH != 0) return -1;
  cudaStream_t hs = NULL;
  if (cublasGetStream(handle, &hs) != CUBLAS_STATUS_SUCCESS || hs != stream) return -1;
  return 0;
}

/* Over one sequence's (NH * T, T) scores A and dP B, element (g, j) of row
 * g = h * T + t: P = exp(A - lse), dS = P (B - D), both 0 above the
 * diagonal (j > t), handed to store(i, P, dS) (i = g T + j), which writes
 * them in the path's types */
template <typename Store> struct SoftmaxBwd {
  const float *A, *B;
  const float *lse, *D; /* (T, NH) of this sequence */
  int NH, T;
  Store store;
  __device__ void operator()(size_t g, size_t j) const {
    const size_t h = g / (size_t)T, t = g % (size_t)T, i = g * (size_t)T + j;
    if (j > t) {
      store(i, 0.0f, 0.0f);
      return;
    }
    const float p = expf(A[i] - lse[t * NH + h]);
    store(i, p, p * (B[i] - D[t * NH + h]));
  }
};

/* One warp per row g = h * T + t of one sequence's scores A (NH * T, T):
 * the softmax over t2 <= t in f32, handed with zeros after it to
 * store(g T + j, value) (which may write A itself: each lane reads an
 * element before it stores it); lse[t * NH + h] = m + log l. */
template <typename Store>
__global__ void __launch_bounds__(256)
    softmax_rows(int NH, int T, const float *A, Store store, float *__restrict__ lse) {
  const int lane = threadIdx.x & 31;
  const size_t rows = (size_t)NH * T, nwarps = (size_t)gridDim.x * (blockDim.x >> 5);
  for (size_t g = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); g < rows;
       g += nwarps) {
    const int h = (int)(g / T), t = (int)(g % T);
    const float *row = A + g * (size_t)T;
    float m = -INFINITY;
    for (int j = lane; j <= t; j += 32) m = fmaxf(m, row[j]);
    m = tg_warp_max(m);
    float l = 0.0f;
    for (int j = lane; j <= t; j += 32) l += expf(row[j] - m);
    l = tg_warp_sum(l);
    const float inv = 1.0f / l;
    for (int j = lane; j < T; j += 32)
      store(g * (size_t)T + j, j <= t ? expf(row[j] - m) * inv : 0.0f);
    if (lane == 0) lse[(size_t)t * NH + h] = m + logf(l);
  }
}

namespace { /* one copy per file that includes it */

/* D[row * NH + h] = dout(row, head h) . out(row, head h) in f32 from bf16
 * values, a warp each */
__global__ void __launch_bounds__(256)
    rowdot_lowp_kernel(size_t rows_heads, int NH, int hs, const uint16_t *__restrict__ out,
                       size_t ldo, const uint16_t *__restrict__ dout, size_t lddo,
                       float *__restrict__ D) {
  const int lane = threadIdx.x & 31;
  const size_t nwarps = (size_t)gridDim.x * (blockDim.x >> 5);
  for (size_t g = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); g < rows_heads;
       g += nwarps) {
    const size_t row = g / NH, h = g % NH;
    const uint16_t *o = out + row * ldo + h * hs, *d = dout + row * lddo + h * hs;
    float s = 0.0f;
    for (int j = lane; j < hs; j += 32)
      s += tg_lowp::from_low<true>(o[j]) * tg_lowp::from_low<true>(d[j]);
    s = tg_warp_sum(s);
    if (lane == 0) D[g] = s;
  }
}

inline cudaError_t rowdot_lowp(size_t rows_heads, int NH, int hs, const uint16_t *out, int ldo,
                               const uint16_t *dout, int lddo, float *D, cudaStream_t stream) {
  if (rows_heads == 0) return cudaSuccess;
  rowdot_lowp_kernel<<<tg_cuda_blocks((rows_heads + 7) / 8, 1), 256, 0, stream>>>(
      rows_heads, NH, hs, out, (size_t)ldo, dout, (size_t)lddo, D);
  return cudaGetLastError();
}

} // namespace

} // namespace tg_attn_gemm

#endif
