/*
 * taskgrad layer 1: CUDA LayerNorm forward and backward (GPT-2, llm.c
 * definitions: eps 1e-5, biased variance), the device twins of
 * tg_cpu_layernorm_fwd / _bwd in kernels_cpu.h.
 *
 * Design note
 * -----------
 * Shapes: X, Y, dY, dX (n, C) row-major with their leading dimensions;
 * w, b, dw, db (C); mean, rstd (n).
 *
 * forward: one warp per row (8 rows per 256-thread block, grid-stride over
 *   rows).  Two passes over the row (it stays in L1): mean = sum x / C, then
 *   var = sum (x - mean)^2 / C (two-pass, no E[x^2] - mean^2 cancellation),
 *   rstd = 1 / sqrtf(var + 1e-5f) (IEEE sqrt and division), and a third pass
 *   y = ((x - mean) * rstd) * w + b.  Lane sums in float over C / 32
 *   elements, then a butterfly: relative error ~1e-7, far below the 1e-5 the
 *   CPU comparison allows.  Y may alias X (each element is read before the
 *   same thread writes it).  mean / rstd may be NULL (not stored).
 *
 * backward (accumulating into dX, dw, db, as llm.c): with
 *   norm = (x - mean) * rstd, g = w * dy,
 *   dX += (g - mean_c(g) - norm * mean_c(g * norm)) * rstd,
 *   dw += sum_rows dy * norm,  db += sum_rows dy.
 *   Kernel 1 (dX): one warp per row, like the forward (two row means by
 *     butterfly, then the update).
 *   dw / db are column sums over n rows, made deterministic without atomics
 *   by a two-pass reduction through the caller's scratch:
 *   Kernel 2 (partials): the rows are cut into R = tg_ln_row_blocks(n) <= 64 (scratch_sizes.h)
 *     contiguous blocks of ceil(n / R) rows; block (tile, r) of 32 x 8
 *     threads sums, for the 32 columns of its tile, its row block's dy * norm
 *     and dy (thread (tx, ty) takes rows ty, ty + 8, ... so each warp reads
 *     one coalesced 128-byte segment per row), in double, combines the 8
 *     partial sums by a fixed tree in shared memory, and stores them as
 *     floats in scratch: dw partials (R, C), then db partials (R, C).
 *   Kernel 3 (finish): one thread per column adds its R partials in
 *     increasing r (double) and does dw(c) += sum, db(c) += sum.
 *   The summation order depends only on (n, C), so results are reproducible
 *   bit for bit.  Scratch: tg_cuda_layernorm_bwd_scratch_floats(n, C) =
 *   2 * R * C floats (0 when n or C is 0).  The second read of dY and X
 *   (kernel 2) costs half the traffic again; a fused single-pass version
 *   (per-block partials kept in shared memory) is a later optimisation.
 * Zero sizes launch nothing.  Launchers never allocate or synchronise.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "cuda_common.cuh"
#include "lowp.cuh"
#include "scratch_sizes.h"

namespace {

constexpr int kRowBlock = 256;   /* threads of the row (warp-per-row) kernels */
constexpr int kRowsPerBlock = kRowBlock / 32;
constexpr int kColTile = 32;      /* columns per partial-sum block */
constexpr int kColRows = 8;       /* blockDim.y of the partial-sum kernel */
constexpr float kEps = 1e-5f;

unsigned warp_row_blocks(int n) {
  return tg_cuda_blocks(((size_t)n + kRowsPerBlock - 1) / kRowsPerBlock, 1);
}

__global__ void __launch_bounds__(kRowBlock)
    layernorm_fwd_kernel(int n, int C, const float *X, /* (n, ldx) */
                         size_t ldx, const float *__restrict__ w, /* (C) */
                         const float *__restrict__ b,             /* (C) */
                         float *Y, /* (n, ldy); may be X */
                         size_t ldy, float *__restrict__ mean, /* (n) or NULL */
                         float *__restrict__ rstd /* (n) or NULL */) {
  const int lane = threadIdx.x & 31;
  const float invC = 1.0f / (float)C;
  for (int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5); row < n;
       row += gridDim.x * kRowsPerBlock) { /* uniform over the warp */
    const float *x = X + (size_t)row * ldx;
    float *y = Y + (size_t)row * ldy;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    const float m = tg_warp_sum(s) * invC;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float d = x[c] - m;
      v += d * d;
    }
    const float var = tg_warp_sum(v) * invC;
    const float r = 1.0f / sqrtf(var + kEps);
    for (int c = lane; c < C; c += 32) {
      const float nrm = (x[c] - m) * r;
      y[c] = nrm * w[c] + b[c];
    }
    if (lane == 0) {
      if (mean) mean[row] = m;
      if (rstd) rstd[row] = r;
    }
  }
}

/* dX += (g - mean(g) - norm * mean(g * norm)) * rstd, g = w * dy */
__global__ void __launch_bounds__(kRowBlock)
    layernorm_bwd_dx_kernel(int n, int C, const float *dY, /* (n, lddy) */
                            size_t lddy, const float *X, /* (n, ldx) */
                            size_t ldx, const float *__restrict__ w, /* (C) */
                            const float *__restrict__ mean,          /* (n) */
                            const float *__restrict__ rstd,          /* (n) */
                            float *dX, /* (n, lddx) */
                            size_t lddx) {
  const int lane = threadIdx.x & 31;
  const float invC = 1.0f / (float)C;
  for (int row = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5); row < n;
       row += gridDim.x * kRowsPerBlock) {
    const float *dy = dY + (size_t)row * lddy;
    const float *x = X + (size_t)row * ldx;
    float *dx = dX + (size_t)row * lddx;
    const float m = mean[row], r = rstd[row];
    float sg = 0.0f, sgn = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float nrm = (x[c] - m) * r;
      const float g = w[c] * dy[c];
      sg += g;
      sgn += g * nrm;
    }
    const float mg = tg_warp_sum(sg) * invC;   /* mean_c(g) */
    const float mgn = tg_warp_sum(sgn) * invC; /* mean_c(g * norm) */
    for (int c = lane; c < C; c += 32) {
      const float nrm = (x[c] - m) * r;
      const float g = w[c] * dy[c];
      dx[c] += (g - mg - nrm * mgn) * r;
    }
  }
}

/* Partial column sums over row block blockIdx.y: part_dw(r, c) =
 * sum dy * norm, part_db(r, c) = sum dy. */
__global__ void __launch_bounds__(kColTile * kColRows)
    layernorm_bwd_partial_kernel(int n, int C, int rows_per_part,
                                 const float *__restrict__ dY, /* (n, lddy) */
                                 size_t lddy,
                                 const float *__restrict__ X, /* (n, ldx) */
                                 size_t ldx,
                                 const float *__restrict__ mean, /* (n) */
                                 const float *__restrict__ rstd, /* (n) */
                                 float *__restrict__ part_dw, /* (R, C) */
                                 float *__restrict__ part_db /* (R, C) */) {
  __shared__ double sdw[kColRows][kColTile + 1];
  __shared__ double sdb[kColRows][kColTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int part = blockIdx.y;
  const int r0 = part * rows_per_part;
  const int r1 = min(n, r0 + rows_per_part);
  const int ntiles = (C + kColTile - 1) / kColTile;
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const int c = tile * kColTile + tx;
    double adw = 0.0, adb = 0.0;
    if (c < C) {
      for (int r = r0 + ty; r < r1; r += kColRows) {
        const float dy = dY[(size_t)r * lddy + c];
        const float nrm = (X[(size_t)r * ldx + c] - mean[r]) * rstd[r];
        adw += (double)dy * (double)nrm;
        adb += (double)dy;
      }
    }
    sdw[ty][tx] = adw;
    sdb[ty][tx] = adb;
    __syncthreads();
#pragma unroll
    for (int s = kColRows / 2; s > 0; s >>= 1) {
      if (ty < s) {
        sdw[ty][tx] += sdw[ty + s][tx];
        sdb[ty][tx] += sdb[ty + s][tx];
      }
      __syncthreads();
    }
    if (ty == 0 && c < C) {
      part_dw[(size_t)part * C + c] = (float)sdw[0][tx];
      part_db[(size_t)part * C + c] = (float)sdb[0][tx];
    }
    __syncthreads(); /* sdw / sdb are reused by the next tile */
  }
}

__global__ void layernorm_bwd_finish_kernel(int C, int R,
                                            const float *__restrict__ part_dw,
                                            const float *__restrict__ part_db,
                                            float *__restrict__ dw, /* (C) */
                                            float *__restrict__ db, /* (C) */
                                            int accumulate) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C;
       c += gridDim.x * blockDim.x) {
    double sw = 0.0, sb = 0.0;
    for (int r = 0; r < R; ++r) {
      sw += (double)part_dw[(size_t)r * C + c];
      sb += (double)part_db[(size_t)r * C + c];
    }
    /* overwriting, 0.0 + s: the bits of a zero fill and an accumulation */
    dw[c] = (float)((accumulate ? (double)dw[c] : 0.0) + sw);
    db[c] = (float)((accumulate ? (double)db[c] : 0.0) + sb);
  }
}

/* Y = A + B, rounded to the 16-bit type when BF / F16 (ROUND) */
template <bool ROUND, bool BF>
struct ResidualRoundOp {
  const float *A; /* (n, lda) */
  const float *B; /* (n, ldb) */
  float *Y;       /* (n, ldy) */
  size_t lda, ldb, ldy;
  __device__ void operator()(size_t r, size_t c) const {
    float y = A[r * lda + c] + B[r * ldb + c];
    if (ROUND) y = tg_lowp::from_low<BF>(tg_lowp::to_low<BF>(y));
    Y[r * ldy + c] = y;
  }
};

} // namespace

extern "C" cudaError_t tg_cuda_layernorm_fwd(int n, int C, const float *X,
                                             int ldx, const float *w,
                                             const float *b, float *Y, int ldy,
                                             float *mean, float *rstd,
                                             cudaStream_t stream) {
  if (n <= 0 || C <= 0) return cudaSuccess;
  layernorm_fwd_kernel<<<warp_row_blocks(n), kRowBlock, 0, stream>>>(
      n, C, X, (size_t)ldx, w, b, Y, (size_t)ldy, mean, rstd);
  return cudaGetLastError();
}

extern "C" size_t tg_cuda_layernorm_bwd_scratch_floats(int n, int C) {
  return tg_ln_bwd_scratch_floats(n, C);
}

extern "C" cudaError_t tg_cuda_layernorm_bwd(int n, int C, const float *dY,
                                             int lddy, const float *X, int ldx,
                                             const float *w, const float *mean,
                                             const float *rstd, float *dX,
                                             int lddx, float *dw, float *db,
                                             int accumulate, float *scratch,
                                             cudaStream_t stream) {
  if (n <= 0 || C <= 0) return cudaSuccess;
  layernorm_bwd_dx_kernel<<<warp_row_blocks(n), kRowBlock, 0, stream>>>(
      n, C, dY, (size_t)lddy, X, (size_t)ldx, w, mean, rstd, dX, (size_t)lddx);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;

  const int R = tg_ln_row_blocks(n);
  const int rows_per_part = (n + R - 1) / R;
  float *part_dw = scratch;                        /* (R, C) */
  float *part_db = scratch + (size_t)R * (size_t)C; /* (R, C) */
  const unsigned ntiles = (unsigned)((C + kColTile - 1) / kColTile);
  const dim3 grid(ntiles < 65535u ? ntiles : 65535u, (unsigned)R);
  layernorm_bwd_partial_kernel<<<grid, dim3(kColTile, kColRows), 0, stream>>>(
      n, C, rows_per_part, dY, (size_t)lddy, X, (size_t)ldx, mean, rstd,
      part_dw, part_db);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;

  layernorm_bwd_finish_kernel<<<tg_cuda_blocks((size_t)C, TG_CUDA_THREADS),
                                TG_CUDA_THREADS, 0, stream>>>(
      C, R, part_dw, part_db, dw, db, accumulate);
  return cudaGetLastError();
}

/* The residual add fused with the next LayerNorm: Y = A + B (rounded to
 * sum_type's values when 16-bit), then the forward above on Y.  Two
 * kernels, one task. */
extern "C" cudaError_t tg_cuda_residual_layernorm_fwd(
    tg_dtype sum_type, int n, int C, const float *A, int lda, const float *B, int ldb,
    float *Y, int ldy, const float *w, const float *b, float *Z, int ldz, float *mean,
    float *rstd, cudaStream_t stream) {
  if (n <= 0 || C <= 0) return cudaSuccess;
  const size_t la = (size_t)lda, lb = (size_t)ldb, ly = (size_t)ldy;
  cudaError_t e;
  if (sum_type == TG_BF16)
    e = tg_map2d(n, C, ResidualRoundOp<true, true>{A, B, Y, la, lb, ly}, stream);
  else if (sum_type == TG_F16)
    e = tg_map2d(n, C, ResidualRoundOp<true, false>{A, B, Y, la, lb, ly}, stream);
  else
    e = tg_map2d(n, C, ResidualRoundOp<false, true>{A, B, Y, la, lb, ly}, stream);
  if (e != cudaSuccess) return e;
  return tg_cuda_layernorm_fwd(n, C, Y, ldy, w, b, Z, ldz, mean, rstd, stream);
}
