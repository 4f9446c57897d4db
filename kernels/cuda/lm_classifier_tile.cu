/*
 * taskgrad layer 1: the classifier in vocabulary tiles on CUDA, the device
 * twins of kernels/cpu/lm_classifier_tile.c (the passes and their numerics
 * are described there).
 *
 * Design note
 * -----------
 *   logits_tile   cuBLAS for logits (n, m) = lnf wte[v0 : v0 + m]^T
 *                 (tg_cuda_gemm, FP32), then one 256-thread block per row
 *                 for the tile's max and sum of exp over its real columns
 *                 (block reductions in float: the CPU sums in double, so
 *                 the stats agree to rounding);
 *   combine       one thread per row (n is a micro-batch's rows, a few
 *                 thousand at most), lse as (hi, lo) floats from double
 *                 arithmetic, and the loss through one float atomicAdd per
 *                 block (its last bits depend on block order, as the fused
 *                 classifier's, lm_classifier.cu);
 *   dlogits_tile  a 2D grid-stride map over (n, m), in place, the target
 *                 entry by expm1.
 * The cuBLAS handle must be bound to `stream` (cudaErrorInvalidValue
 * otherwise); a cuBLAS failure is cudaErrorUnknown.  Never allocates or
 * synchronises.
 */
#include "cuda_common.cuh"
#include "taskgrad/kernels_cuda.h"

__global__ void tg_lm_tile_stats_kernel(int real, const float *logits, int ldo, float *stats,
                                        int lds) {
  __shared__ float sh[32];
  const float *x = logits + (size_t)blockIdx.x * ldo;
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < real; c += blockDim.x) mx = fmaxf(mx, x[c]);
  mx = tg_group_max<TG_CUDA_THREADS>(mx, sh);
  float s = 0.0f;
  for (int c = threadIdx.x; c < real; c += blockDim.x) s += expf(x[c] - mx);
  s = tg_group_sum<TG_CUDA_THREADS>(s, sh);
  if (threadIdx.x == 0) {
    stats[(size_t)blockIdx.x * lds] = real > 0 ? mx : -INFINITY;
    stats[(size_t)blockIdx.x * lds + 1] = real > 0 ? s : 0.0f;
  }
}

extern "C" cudaError_t tg_cuda_lm_logits_tile(cublasHandle_t handle, int n, int C, int V,
                                              int v0, int m, const float *lnf, int ldl,
                                              const float *wte, float *logits, int ldo,
                                              float *stats, int lds, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  cudaStream_t hs = NULL;
  if (cublasGetStream(handle, &hs) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
  if (hs != stream) return cudaErrorInvalidValue;
  if (tg_cuda_gemm(handle, 0, 1, n, m, C, 1.0f, lnf, ldl, wte + (size_t)v0 * C, C, 0.0f,
                   logits, ldo) != CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  int real = V - v0 < m ? V - v0 : m;
  if (real < 0) real = 0;
  tg_lm_tile_stats_kernel<<<n, TG_CUDA_THREADS, 0, stream>>>(real, logits, ldo, stats, lds);
  return cudaGetLastError();
}

__global__ void tg_lm_combine_kernel(int n, int V, int ntiles, const float *stats, int lds,
                                     const float *logits, int ldo, const int32_t *targets,
                                     float scale, float *lse, int ldlse, float *loss_acc) {
  __shared__ float sh[32];
  float part = 0.0f;
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < n) {
    const float *st = stats + (size_t)r * lds;
    double M = -INFINITY, S = 0.0;
    for (int v = 0; v < ntiles; v++) M = st[2 * v] > M ? st[2 * v] : M;
    for (int v = 0; v < ntiles; v++)
      if (st[2 * v + 1] > 0.0f) S += (double)st[2 * v + 1] * exp((double)st[2 * v] - M);
    double l = M + log(S);
    float hi = (float)l;
    lse[(size_t)r * ldlse] = hi;
    lse[(size_t)r * ldlse + 1] = (float)(l - (double)hi);
    int32_t t = targets[r];
    part = t < 0 || t >= V ? NAN
                           : (float)(log(S) - ((double)logits[(size_t)r * ldo + t] - M));
  }
  part = tg_block_sum(part, sh);
  if (threadIdx.x == 0) atomicAdd(loss_acc, scale * part);
}

extern "C" cudaError_t tg_cuda_lm_softmax_combine(int n, int V, int ntiles,
                                                  const float *stats, int lds,
                                                  const float *logits, int ldo,
                                                  const int32_t *targets, float scale,
                                                  float *lse, int ldlse, float *loss_acc,
                                                  cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  tg_lm_combine_kernel<<<tg_cuda_blocks((size_t)n, TG_CUDA_THREADS), TG_CUDA_THREADS, 0,
                         stream>>>(n, V, ntiles, stats, lds, logits, ldo, targets, scale, lse,
                                   ldlse, loss_acc);
  return cudaGetLastError();
}

__global__ void tg_lm_dlogits_tile_kernel(int n, int V, int v0, int m, const float *lse,
                                          int ldlse, const int32_t *targets, float alpha,
                                          float *dl, int ldd) {
  for (int r = blockIdx.y; r < n; r += gridDim.y) {
    int32_t t = targets[r];
    double l = (double)lse[(size_t)r * ldlse] + (double)lse[(size_t)r * ldlse + 1];
    float *d = dl + (size_t)r * ldd;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < m; c += gridDim.x * blockDim.x) {
      int v = v0 + c;
      if (t < 0 || t >= V || v >= V) d[c] = 0.0f;
      else if (v == t) d[c] = (float)((double)alpha * expm1((double)d[c] - l));
      else d[c] = alpha * expf((float)((double)d[c] - l));
    }
  }
}

extern "C" cudaError_t tg_cuda_lm_dlogits_tile(int n, int V, int v0, int m, const float *lse,
                                               int ldlse, const int32_t *targets, float alpha,
                                               float *dl, int ldd, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  unsigned bx = tg_cuda_blocks((size_t)m, TG_CUDA_THREADS);
  unsigned by = n < 65535 ? (unsigned)n : 65535u;
  tg_lm_dlogits_tile_kernel<<<dim3(bx, by), TG_CUDA_THREADS, 0, stream>>>(
      n, V, v0, m, lse, ldlse, targets, alpha, dl, ldd);
  return cudaGetLastError();
}
