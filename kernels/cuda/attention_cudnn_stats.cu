/*
 * taskgrad layer 1: the softmax statistics between taskgrad's order and
 * cuDNN's, for the cudnn attention kind (attention_cudnn.cpp).
 *
 * Design note
 * -----------
 * The attention state of the chunked, gemm, flash and cudnn kinds is one
 * log-sum-exp per (row, head), lse = m + log l of the scaled scores, in a
 * (b T, NH) matrix: any worker's backward reads any worker's forward, so
 * a forward on cuDNN and a backward on a CPU worker must agree on it.
 * cuDNN's SDPA "Stats" is the same number (natural log, scaled scores) in
 * (b, NH, T) order.  cuDNN accepts strides on Stats in its API, but which
 * engines honour a non-packed Stats is not documented, so the launcher
 * keeps Stats packed in its scratch and this kernel moves the b NH T
 * floats across (a few microseconds against the attention's
 * milliseconds).  One thread per element, grid-stride.
 */
#include "taskgrad/kernels_cuda_precision.h"
#include "cuda_common.cuh"

namespace {

__global__ void lse_permute(int b, int T, int NH, float *lse, float *bhs, int to_bhs) {
  const size_t n = (size_t)b * T * NH;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    /* i indexes lse (row r = s T + t, head h); j the same in (s, h, t) */
    const size_t r = i / NH, h = i % NH, s = r / T, t = r % T;
    const size_t j = (s * NH + h) * T + t;
    if (to_bhs)
      bhs[j] = lse[i];
    else
      lse[i] = bhs[j];
  }
}

} // namespace

extern "C" cudaError_t tg_cuda_attention_lse_permute(int b, int T, int NH, float *lse,
                                                     float *bhs, int to_bhs,
                                                     cudaStream_t stream) {
  if (b < 0 || T < 0 || NH < 0 || ((!lse || !bhs) && b && T && NH)) return cudaErrorInvalidValue;
  const size_t n = (size_t)b * T * NH;
  if (n == 0) return cudaSuccess;
  lse_permute<<<tg_cuda_blocks(n, TG_CUDA_THREADS), TG_CUDA_THREADS, 0, stream>>>(b, T, NH, lse,
                                                                                  bhs, to_bhs);
  return cudaGetLastError();
}
