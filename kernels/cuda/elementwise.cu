/*
 * taskgrad layer 1: CUDA element-wise matrix kernels (fill, accumulate,
 * scale), the device twins of tg_cpu_fill / tg_cpu_accumulate /
 * tg_cpu_scale in kernels_cpu.h.
 *
 * Design note
 * -----------
 * Memory-bound one-liners on row-major (rows, cols) matrices with leading
 * dimensions, written as functors for tg_map2d() (cuda_common.cuh): one
 * grid-stride pass over the flat logical index, coalesced along rows.
 * fill is write-only (the old contents, even NaN, are never read), which is
 * what the StarPU REDUX init (tg_fill_zero_cl) and beta == 0 paths rely on.
 * scale multiplies (0 * NaN stays NaN, as on the CPU).  The launchers never
 * allocate or synchronise; zero-sized matrices launch nothing.
 */
#include "taskgrad/kernels_cuda.h"
#include "cuda_common.cuh"

namespace {

struct FillOp {
  float *X; /* (rows, ldx) */
  size_t ldx;
  float value;
  __device__ void operator()(size_t r, size_t c) const {
    X[r * ldx + c] = value;
  }
};

struct AccumulateOp {
  float *dst;       /* (rows, ldd) */
  const float *src; /* (rows, lds) */
  size_t ldd, lds;
  __device__ void operator()(size_t r, size_t c) const {
    dst[r * ldd + c] += src[r * lds + c];
  }
};

struct ScaleOp {
  float *X; /* (rows, ldx) */
  size_t ldx;
  float alpha;
  __device__ void operator()(size_t r, size_t c) const {
    X[r * ldx + c] *= alpha;
  }
};

} // namespace

extern "C" cudaError_t tg_cuda_fill(int rows, int cols, float *X, int ldx,
                                    float value, cudaStream_t stream) {
  return tg_map2d(rows, cols, FillOp{X, (size_t)ldx, value}, stream);
}

extern "C" cudaError_t tg_cuda_accumulate(int rows, int cols, float *dst,
                                          int ldd, const float *src, int lds,
                                          cudaStream_t stream) {
  return tg_map2d(rows, cols, AccumulateOp{dst, src, (size_t)ldd, (size_t)lds},
                  stream);
}

extern "C" cudaError_t tg_cuda_scale(int rows, int cols, float *X, int ldx,
                                     float alpha, cudaStream_t stream) {
  return tg_map2d(rows, cols, ScaleOp{X, (size_t)ldx, alpha}, stream);
}
