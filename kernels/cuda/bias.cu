/*
 * taskgrad layer 1: CUDA bias kernels, the device twins of tg_cpu_bias_add
 * and tg_cpu_bias_grad in kernels_cpu.h.
 *
 * Design note
 * -----------
 * bias_add: Y(r, c) += b(c), a tg_map2d() functor (coalesced flat walk; b is
 *   tiny and stays in L1/L2).
 *
 * bias_grad: db(c) = beta * db(c) + sum_r dY(r, c), column sums of a matrix
 *   that is usually tall (rows = batch, cols = layer width).  It is
 *   deterministic (no atomics; the summation order depends only on the shape)
 *   and needs no workspace, since launchers may not allocate:
 *     - one block of 32 x 32 threads per tile of 32 columns (grid-stride over
 *       tiles when there are more than the grid cap);
 *     - thread (tx, ty) sums rows ty, ty + 32, ty + 64, ... of column
 *       tile*32 + tx, so each warp reads 32 consecutive floats of one row
 *       (a 128-byte coalesced transaction) and 32 warps keep loads in flight;
 *     - the 32 partial sums of a column are combined by a fixed tree in
 *       shared memory (padded), and row 0 of the block writes db.
 *   Sums are accumulated in double, as the CPU kernel does, so both give
 *   (almost always) the correctly rounded float of the column sum; the
 *   kernel is bandwidth-bound, so the FP64 adds cost nothing that shows.
 *   beta == 0 makes db write-only (its old contents, even NaN, are ignored),
 *   as everywhere in taskgrad.  A very tall matrix with few columns uses only
 *   ceil(cols / 32) blocks; splitting the rows over blocks would need either
 *   atomics (non-deterministic) or a workspace, so it is not done.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "cuda_common.cuh"
#include "lowp.cuh"

namespace {

struct BiasAddOp {
  float *Y;       /* (rows, ldy) */
  const float *b; /* (cols) */
  size_t ldy;
  __device__ void operator()(size_t r, size_t c) const { Y[r * ldy + c] += b[c]; }
};

constexpr int kTile = 32; /* columns per block = blockDim.x */
constexpr int kRowThreads = 32; /* blockDim.y */

/* dY's element as f32: a float, or a 16-bit pattern widened exactly (BF:
 * bf16, else fp16) */
__device__ __forceinline__ float load_f32(const float *p) { return *p; }
template <bool BF>
struct Low {
  uint16_t h;
};
template <bool BF>
__device__ __forceinline__ float load_f32(const Low<BF> *p) {
  return tg_lowp::from_low<BF>(p->h);
}

template <typename T>
__global__ void __launch_bounds__(kTile * kRowThreads)
    bias_grad_kernel(int rows, int cols, const T *__restrict__ dY, /* (rows, ldy) */
                     size_t ldy, float beta, float *__restrict__ db /* (cols) */) {
  __shared__ double part[kRowThreads][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int ntiles = (cols + kTile - 1) / kTile;
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const int c = tile * kTile + tx;
    double acc = 0.0;
    if (c < cols) {
      const T *p = dY + c;
#pragma unroll 4
      for (int r = ty; r < rows; r += kRowThreads)
        acc += (double)load_f32(p + (size_t)r * ldy);
    }
    part[ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int s = kRowThreads / 2; s > 0; s >>= 1) {
      if (ty < s) part[ty][tx] += part[ty + s][tx];
      __syncthreads();
    }
    if (ty == 0 && c < cols) {
      const double sum = part[0][tx];
      db[c] = beta == 0.0f ? (float)sum
                           : (float)((double)beta * (double)db[c] + sum);
    }
    __syncthreads(); /* part is reused by the next tile */
  }
}

} // namespace

extern "C" cudaError_t tg_cuda_bias_add(int rows, int cols, float *Y, int ldy,
                                        const float *b, cudaStream_t stream) {
  return tg_map2d(rows, cols, BiasAddOp{Y, b, (size_t)ldy}, stream);
}

template <typename T>
static cudaError_t bias_grad_launch(int rows, int cols, const T *dY, int ldy, float beta,
                                    float *db, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  /* rows == 0: the sums are empty, db = beta * db still has to be applied,
   * so the kernel runs (its row loops are simply empty). */
  if (rows < 0) rows = 0;
  const unsigned ntiles = (unsigned)((cols + kTile - 1) / kTile);
  const unsigned blocks = ntiles < 65535u ? ntiles : 65535u;
  bias_grad_kernel<T><<<blocks, dim3(kTile, kRowThreads), 0, stream>>>(
      rows, cols, dY, (size_t)ldy, beta, db);
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_bias_grad(int rows, int cols, const float *dY,
                                         int ldy, float beta, float *db,
                                         cudaStream_t stream) {
  return bias_grad_launch(rows, cols, dY, ldy, beta, db, stream);
}

/* 16-bit dY read as it is: the sums of tg_cuda_bias_grad on dY widened */
extern "C" cudaError_t tg_cuda_bias_grad_lowp(tg_dtype lowp, int rows, int cols,
                                              const uint16_t *dY, int ldy, float beta,
                                              float *db, cudaStream_t stream) {
  if (lowp == TG_BF16)
    return bias_grad_launch(rows, cols, (const Low<true> *)dY, ldy, beta, db, stream);
  return bias_grad_launch(rows, cols, (const Low<false> *)dY, ldy, beta, db, stream);
}
