/*
 * taskgrad layer 1: CUDA activation kernels (ReLU, GELU forward and
 * backward), the device twins of tg_cpu_relu_* / tg_cpu_gelu_* in
 * kernels_cpu.h.
 *
 * Design note
 * -----------
 * Element-wise functors for tg_map2d() (cuda_common.cuh): one coalesced
 * grid-stride pass over row-major (rows, cols) matrices with leading
 * dimensions.  In-place use (Y == X, dX == dY) is safe: every element is read
 * before it is written by the same thread, so no __restrict__ here.
 *
 * ReLU:  y = x < 0 ? 0 : x (NaN passes through, as torch.relu);
 *        dx = x > 0 ? dy : 0.  The backward pass selects rather than
 *        multiplies by the 0/1 mask (like PyTorch's threshold_backward): an
 *        inf/NaN dy of an inactive unit gives 0, not NaN.
 * GELU (tanh approximation, as PyTorch's approximate='tanh'),
 *        u = k0 (x + k1 x^3), k0 = sqrt(2/pi), k1 = 0.044715,
 *        y = 0.5 x (1 + tanh(u)) evaluated, exactly as the CPU kernel does,
 *        through 0.5 (1 + tanh(u)) = s = 1 / (1 + exp(-2u)), which avoids the
 *        cancellation of 1 + tanh(u) for negative x:  y = x / (1 + exp(-2u));
 *        gelu'(x) = s + 2 x s (1 - s) u',  u' = k0 (1 + 3 k1 x^2), with
 *        1 - s = exp(-2u) s while exp(-2u) < 1, and gelu' = 1 / 0 exactly
 *        for x > 20 / x < -20 (the formula would form 0 * inf there).
 *        expf is the accurate libdevice one (no fast math): results agree
 *        with the CPU kernel to a few ulps.
 */
#include "taskgrad/kernels_cuda.h"
#include "activation.cuh"
#include "cuda_common.cuh"

namespace {

using tg_act::gelu;
using tg_act::gelu_deriv;

struct ReluFwdOp {
  const float *X; /* (rows, ldx) */
  float *Y;       /* (rows, ldy) */
  size_t ldx, ldy;
  __device__ void operator()(size_t r, size_t c) const {
    const float x = X[r * ldx + c];
    Y[r * ldy + c] = x < 0.0f ? 0.0f : x;
  }
};

struct ReluBwdOp {
  const float *X;  /* (rows, ldx): forward input */
  const float *dY; /* (rows, lddy) */
  float *dX;       /* (rows, lddx) */
  size_t ldx, lddy, lddx;
  __device__ void operator()(size_t r, size_t c) const {
    const float x = X[r * ldx + c];
    const float dy = dY[r * lddy + c];
    dX[r * lddx + c] = x > 0.0f ? dy : 0.0f;
  }
};

struct GeluFwdOp {
  const float *X; /* (rows, ldx) */
  float *Y;       /* (rows, ldy) */
  size_t ldx, ldy;
  __device__ void operator()(size_t r, size_t c) const {
    Y[r * ldy + c] = gelu(X[r * ldx + c]);
  }
};

struct GeluBwdOp {
  const float *X;  /* (rows, ldx): forward input */
  const float *dY; /* (rows, lddy) */
  float *dX;       /* (rows, lddx) */
  size_t ldx, lddy, lddx;
  __device__ void operator()(size_t r, size_t c) const {
    const float x = X[r * ldx + c];
    dX[r * lddx + c] = dY[r * lddy + c] * gelu_deriv(x);
  }
};

} // namespace

extern "C" cudaError_t tg_cuda_relu_fwd(int rows, int cols, const float *X,
                                        int ldx, float *Y, int ldy,
                                        cudaStream_t stream) {
  return tg_map2d(rows, cols, ReluFwdOp{X, Y, (size_t)ldx, (size_t)ldy},
                  stream);
}

extern "C" cudaError_t tg_cuda_relu_bwd(int rows, int cols, const float *X,
                                        int ldx, const float *dY, int lddy,
                                        float *dX, int lddx,
                                        cudaStream_t stream) {
  return tg_map2d(rows, cols,
                  ReluBwdOp{X, dY, dX, (size_t)ldx, (size_t)lddy, (size_t)lddx},
                  stream);
}

extern "C" cudaError_t tg_cuda_gelu_fwd(int rows, int cols, const float *X,
                                        int ldx, float *Y, int ldy,
                                        cudaStream_t stream) {
  return tg_map2d(rows, cols, GeluFwdOp{X, Y, (size_t)ldx, (size_t)ldy},
                  stream);
}

extern "C" cudaError_t tg_cuda_gelu_bwd(int rows, int cols, const float *X,
                                        int ldx, const float *dY, int lddy,
                                        float *dX, int lddx,
                                        cudaStream_t stream) {
  return tg_map2d(rows, cols,
                  GeluBwdOp{X, dY, dX, (size_t)ldx, (size_t)lddy, (size_t)lddx},
                  stream);
}
