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
 *   deterministic (no atomics; the summation order depends only on the
 *   shape, never on the GPU or the timing):
 *     - a 2-D grid of blocks of 32 x 32 threads: blockIdx.x a tile of 32
 *       columns (grid-stride over tiles beyond the grid cap), blockIdx.y one
 *       of R slices of consecutive rows, R = tg_bias_grad_row_blocks(rows,
 *       cols) (scratch_sizes.h): enough blocks to fill a large GPU (an
 *       8192 x 768 dY: 24 tiles x 11 slices = 264 blocks, where one block
 *       per tile gave 24), each slice at least 256 rows;
 *     - thread (tx, ty) sums rows ty, ty + 32, ... of its slice in column
 *       tile*32 + tx, so each warp reads 32 consecutive elements of one row
 *       (coalesced) and 32 warps keep loads in flight;
 *     - the 32 partial sums of a column are combined by a fixed tree in
 *       shared memory (padded); with R == 1 row 0 of the block writes db
 *       (the single-pass kernel of old, bit for bit), else it writes the
 *       slice's sum into partials (R, cols) of doubles in the codelet's
 *       scratch, and a second kernel, one thread per column (coalesced over
 *       the columns), adds the R partials in slice order and writes db.
 *   Sums are accumulated in double, as the CPU kernel does, partials
 *   included, so both give (almost always) the correctly rounded float of
 *   the column sum: the split changes the order of the double additions
 *   only, which moves the float result by at most one ulp in the rare case
 *   where the double sum lies within a double rounding of a float tie.
 *   The kernel is bandwidth-bound, so the FP64 adds cost nothing that shows.
 *   beta == 0 makes db write-only (its old contents, even NaN, are ignored),
 *   as everywhere in taskgrad.  Launchers may not allocate: without a
 *   scratch of tg_bias_grad_scratch_floats(rows, cols) floats (work NULL or
 *   smaller) the launcher falls back on R = 1.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "cuda_common.cuh"
#include "lowp.cuh"
#include "scratch_sizes.h"

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
                     size_t ldy, int slice, float beta, float *__restrict__ db, /* (cols) */
                     double *__restrict__ partials /* (gridDim.y, cols), or NULL */) {
  __shared__ double part[kRowThreads][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int ntiles = (cols + kTile - 1) / kTile;
  /* this block's rows: [r0, r1) */
  const long long r0l = (long long)blockIdx.y * slice;
  const int r0 = r0l < rows ? (int)r0l : rows;
  const int r1 = rows - r0 < slice ? rows : r0 + slice;
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const int c = tile * kTile + tx;
    double acc = 0.0;
    if (c < cols) {
      const T *p = dY + c;
#pragma unroll 4
      for (int r = r0 + ty; r < r1; r += kRowThreads)
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
      if (partials)
        partials[(size_t)blockIdx.y * cols + c] = sum;
      else
        db[c] = beta == 0.0f ? (float)sum : (float)((double)beta * (double)db[c] + sum);
    }
    __syncthreads(); /* part is reused by the next tile */
  }
}

constexpr int kReduceThreads = 256;

/* db(c) = beta db(c) + the R slice sums of column c, added in slice order */
__global__ void __launch_bounds__(kReduceThreads)
    bias_grad_reduce_kernel(int cols, int nslices, const double *__restrict__ partials,
                            float beta, float *__restrict__ db) {
  for (int c = blockIdx.x * kReduceThreads + threadIdx.x; c < cols;
       c += gridDim.x * kReduceThreads) {
    double sum = 0.0;
    for (int j = 0; j < nslices; j++) sum += partials[(size_t)j * cols + c];
    db[c] = beta == 0.0f ? (float)sum : (float)((double)beta * (double)db[c] + sum);
  }
}

} // namespace

extern "C" cudaError_t tg_cuda_bias_add(int rows, int cols, float *Y, int ldy,
                                        const float *b, cudaStream_t stream) {
  return tg_map2d(rows, cols, BiasAddOp{Y, b, (size_t)ldy}, stream);
}

template <typename T>
static cudaError_t bias_grad_launch(int rows, int cols, const T *dY, int ldy, float beta,
                                    float *db, void *work, size_t work_bytes,
                                    cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  /* rows == 0: the sums are empty, db = beta * db still has to be applied,
   * so the kernel runs (its row loops are simply empty). */
  if (rows < 0) rows = 0;
  int nslices = tg_bias_grad_row_blocks(rows, cols);
  if (!work || work_bytes < sizeof(float) * tg_bias_grad_scratch_floats(rows, cols))
    nslices = 1;
  const int slice = nslices > 1 ? (rows + nslices - 1) / nslices : (rows > 0 ? rows : 1);
  double *partials = nslices > 1 ? (double *)work : nullptr;
  const unsigned ntiles = (unsigned)((cols + kTile - 1) / kTile);
  const dim3 grid(ntiles < 65535u ? ntiles : 65535u, (unsigned)nslices);
  bias_grad_kernel<T><<<grid, dim3(kTile, kRowThreads), 0, stream>>>(
      rows, cols, dY, (size_t)ldy, slice, beta, db, partials);
  if (!partials) return cudaGetLastError();
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const unsigned rblocks = (unsigned)((cols + kReduceThreads - 1) / kReduceThreads);
  bias_grad_reduce_kernel<<<rblocks < 65535u ? rblocks : 65535u, kReduceThreads, 0, stream>>>(
      cols, nslices, partials, beta, db);
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_bias_grad(int rows, int cols, const float *dY, int ldy,
                                         float beta, float *db, void *work, size_t work_bytes,
                                         cudaStream_t stream) {
  return bias_grad_launch(rows, cols, dY, ldy, beta, db, work, work_bytes, stream);
}

/* 16-bit dY read as it is: the sums of tg_cuda_bias_grad on dY widened */
extern "C" cudaError_t tg_cuda_bias_grad_lowp(tg_dtype lowp, int rows, int cols,
                                              const uint16_t *dY, int ldy, float beta,
                                              float *db, void *work, size_t work_bytes,
                                              cudaStream_t stream) {
  if (lowp == TG_BF16)
    return bias_grad_launch(rows, cols, (const Low<true> *)dY, ldy, beta, db, work, work_bytes,
                            stream);
  return bias_grad_launch(rows, cols, (const Low<false> *)dY, ldy, beta, db, work, work_bytes,
                          stream);
}
