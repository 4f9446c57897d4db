/*
 * taskgrad layer 1: helpers shared by the CUDA kernels (device code only;
 * included by the .cu files, never by C code).
 *
 * Design note
 * -----------
 * - Launch shapes.  Element-wise kernels use grid-stride loops over a flat
 *   index; the grid is capped (TG_CUDA_MAX_BLOCKS) so that a launch never
 *   depends on the device's grid limits and enough blocks exist to fill an
 *   H100/H200 (132 SMs x 2048 threads = 270k threads < 8192 x 256).
 * - Row-major matrices with a leading dimension.  tg_map2d() walks the
 *   rows * cols logical elements with a flat index i and splits it into
 *   (r, c) = (i / cols, i % cols): consecutive threads touch consecutive
 *   columns of a row, so loads and stores are coalesced whatever the shape
 *   (a narrow 10-column matrix keeps every lane busy, which a 32-wide 2-D
 *   tile would not).  The division is done in 32 bits whenever the element
 *   count fits, which is the usual case.
 * - Reductions.  Warp reductions use __shfl_xor_sync, so every lane ends with
 *   the result; tg_group_*() extend them to a group of G threads (a warp, or a
 *   whole block when G > 32) through a small shared-memory array.  They are
 *   deterministic: the combining order depends only on the thread layout.
 * - Nothing here allocates or synchronises the host.
 */
#ifndef TASKGRAD_CUDA_COMMON_CUH
#define TASKGRAD_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TG_CUDA_THREADS 256     /* threads per block of element-wise kernels */
#define TG_CUDA_MAX_BLOCKS 8192 /* grid cap of grid-stride kernels */
#define TG_FULL_MASK 0xffffffffu

/* 16 bytes from src to dst (zeros when src is NULL), both 16-byte aligned:
 * one 128-bit load and store on the GPU; memcpy on the CUDA emulator, which
 * compiles this as host code (no vector types there) */
__device__ __forceinline__ void tg_copy16(void *dst, const void *src) {
#ifdef __CUDA_ARCH__
  *(uint4 *)dst = src ? *(const uint4 *)src : make_uint4(0u, 0u, 0u, 0u);
#else
  if (src) memcpy(dst, src, 16);
  else memset(dst, 0, 16);
#endif
}

/* A cuBLAS call's status kept in *out for the caller, mapped to the launch
 * status the launchers return (cudaErrorUnknown on a failure). */
static inline cudaError_t tg_cublas_status(cublasStatus_t s, cublasStatus_t *out) {
  *out = s;
  return s == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

/* Opts a kernel into more than 48 KiB of dynamic shared memory when its
 * launch needs it. */
template <typename Kernel> cudaError_t tg_smem_optin(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  if (bytes > (size_t)INT_MAX) return cudaErrorInvalidValue;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* Blocks for n items at `threads` per block, capped, at least 1. */
static inline unsigned tg_cuda_blocks(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  if (b > TG_CUDA_MAX_BLOCKS) b = TG_CUDA_MAX_BLOCKS;
  if (b < 1) b = 1;
  return (unsigned)b;
}

/* ---- element-wise map over a row-major (rows, cols) index space ---------- */

/* Calls op(r, c) once for every 0 <= r < rows, 0 <= c < cols.  Op is a small
 * functor holding the pointers and leading dimensions. */
template <typename Op>
__global__ void tg_map2d_kernel(int rows, int cols, Op op) {
  const size_t n = (size_t)rows * (size_t)cols;
  const size_t start = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  if (n <= 0xffffffffu) { /* 32-bit index arithmetic (uniform branch) */
    const unsigned un = (unsigned)n, ucols = (unsigned)cols;
    for (unsigned i = (unsigned)start; i < un; i += (unsigned)stride) {
      const unsigned r = i / ucols;
      op((size_t)r, (size_t)(i - r * ucols));
      if (un - i <= (unsigned)stride) break; /* no unsigned wrap-around */
    }
  } else {
    for (size_t i = start; i < n; i += stride) {
      const size_t r = i / (size_t)cols;
      op(r, i - r * (size_t)cols);
    }
  }
}

/* Launches tg_map2d_kernel on stream; rows or cols <= 0 launches nothing. */
template <typename Op>
static inline cudaError_t tg_map2d(int rows, int cols, Op op,
                                   cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const size_t n = (size_t)rows * (size_t)cols;
  tg_map2d_kernel<Op><<<tg_cuda_blocks(n, TG_CUDA_THREADS), TG_CUDA_THREADS, 0,
                        stream>>>(rows, cols, op);
  return cudaGetLastError();
}

/* ---- warp and group reductions -------------------------------------------- */

__device__ __forceinline__ float tg_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(TG_FULL_MASK, v, o);
  return v;
}

__device__ __forceinline__ float tg_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(TG_FULL_MASK, v, o));
  return v;
}

/* (value, index) argmax; a pair wins on a larger value, or an equal value
 * with a smaller index, so the result is the first maximum. */
__device__ __forceinline__ void tg_argmax_merge(float &v, int &i, float ov,
                                                int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__device__ __forceinline__ void tg_warp_argmax(float &v, int &i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(TG_FULL_MASK, v, o);
    const int oi = __shfl_xor_sync(TG_FULL_MASK, i, o);
    tg_argmax_merge(v, i, ov, oi);
  }
}

/* Group reductions over G consecutive threads, G == 32 (a warp: no shared
 * memory, no barrier) or G == blockDim.x (a multiple of 32, <= 1024: every
 * thread of the block must call it; `sh` holds G / 32 slots).  Every thread
 * of the group gets the result.  The leading barrier protects `sh` from the
 * previous reduction's readers. */
template <int G>
__device__ __forceinline__ float tg_group_sum(float v, float *sh) {
  v = tg_warp_sum(v);
  if (G <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < G / 32 ? sh[lane] : 0.0f;
  return tg_warp_sum(v);
}

template <int G>
__device__ __forceinline__ float tg_group_max(float v, float *sh) {
  v = tg_warp_max(v);
  if (G <= 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < G / 32 ? sh[lane] : -INFINITY;
  return tg_warp_max(v);
}

template <int G>
__device__ __forceinline__ void tg_group_argmax(float &v, int &i, float *shv,
                                                int *shi) {
  tg_warp_argmax(v, i);
  if (G <= 32) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    shv[warp] = v;
    shi[warp] = i;
  }
  __syncthreads();
  v = lane < G / 32 ? shv[lane] : -INFINITY;
  i = lane < G / 32 ? shi[lane] : INT32_MAX;
  tg_warp_argmax(v, i);
}

/* Sum of v over the whole block (blockDim.x a multiple of 32, <= 1024); every
 * thread must call it; the result is valid in every thread. */
__device__ __forceinline__ float tg_block_sum(float v, float *sh32) {
  v = tg_warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh32[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? sh32[lane] : 0.0f;
  return tg_warp_sum(v);
}

#endif
