/*
 * taskgrad layer 1: CUDA residual add, the device twin of
 * tg_cpu_residual_fwd in kernels_cpu.h.
 *
 * Design note
 * -----------
 * Y = A + B on row-major (n, C) matrices with leading dimensions: a
 * tg_map2d() functor (one coalesced grid-stride pass).  Y may alias A or B:
 * each element is read and written by the same thread, so no __restrict__.
 * (The residual's backward is two accumulations, tg_cuda_accumulate.)
 * Zero sizes launch nothing; the launcher never allocates or synchronises.
 */
#include "taskgrad/kernels_cuda.h"
#include "cuda_common.cuh"

namespace {

struct ResidualOp {
  const float *A; /* (n, lda) */
  const float *B; /* (n, ldb) */
  float *Y;       /* (n, ldy); may be A or B */
  size_t lda, ldb, ldy;
  __device__ void operator()(size_t r, size_t c) const {
    Y[r * ldy + c] = A[r * lda + c] + B[r * ldb + c];
  }
};

} // namespace

extern "C" cudaError_t tg_cuda_residual_fwd(int n, int C, const float *A,
                                            int lda, const float *B, int ldb,
                                            float *Y, int ldy,
                                            cudaStream_t stream) {
  return tg_map2d(n, C,
                  ResidualOp{A, B, Y, (size_t)lda, (size_t)ldb, (size_t)ldy},
                  stream);
}
