/*
 * taskgrad layer 1: CUDA mixed-precision kernels: bf16 / fp16 conversions,
 * the non-finite check and the AMP AdamW step, device twins of
 * kernels/cpu/precision.c (contract in precision.h).
 *
 * Design note
 * -----------
 * - Conversions use the hardware's round-to-nearest-even conversions
 *   (__float2bfloat16_rn, __float2half_rn: cvt.rn), which agree with the CPU
 *   bit for bit on every non-NaN value, subnormals and overflow to Inf
 *   included.  A NaN stays a NaN, though not necessarily with the CPU's
 *   payload (the device returns a canonical NaN).  The element type is a
 *   template parameter, so each kernel has one conversion inlined.
 * - The non-finite check is a grid-stride scan whose blocks vote with
 *   __syncthreads_or; a block that saw an Inf or NaN stores 1.0f into the
 *   flag.  Several blocks may store concurrently, but they store the same
 *   value, so no atomics are needed, and the flag never leaves the device.
 * - The AMP AdamW reads the flag in every thread (one cached word); when it
 *   is set, the update is skipped and w, m, v are not written at all, but the
 *   low-precision copy is still written from w, since the task declares it an
 *   output.  The update is adamw.cuh's, shared with the fp32 optimizer.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "taskgrad/kernels_cuda_precision.h"
#include "taskgrad/precision_kernels.h"
#include "adamw.cuh"
#include "lowp.cuh"
#include "cuda_common.cuh"

namespace {

using tg_lowp::from_low;
using tg_lowp::to_low;

template <bool BF> struct ToLow {
  const float *X; // (rows, ldx)
  int ldx;
  uint16_t *Y;    // (rows, ldy)
  int ldy;
  __device__ void operator()(size_t r, size_t c) const {
    Y[r * ldy + c] = to_low<BF>(X[r * ldx + c]);
  }
};

template <bool BF> struct FromLow {
  const uint16_t *X; // (rows, ldx)
  int ldx;
  float *Y;          // (rows, ldy)
  int ldy;
  __device__ void operator()(size_t r, size_t c) const {
    Y[r * ldy + c] = from_low<BF>(X[r * ldx + c]);
  }
};

template <bool BF> struct ScaleLow {
  uint16_t *X; // (rows, ldx)
  int ldx;
  float beta;
  __device__ void operator()(size_t r, size_t c) const {
    uint16_t *x = X + r * ldx + c;
    *x = beta == 0.0f ? to_low<BF>(0.0f) : to_low<BF>(beta * from_low<BF>(*x));
  }
};

__global__ void nonfinite_kernel(const float *__restrict__ g, /* (n) */
                                 size_t n, float *flag) {
  int bad = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    bad |= (__float_as_uint(g[i]) & 0x7f800000u) == 0x7f800000u;
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1.0f;
}

template <bool BF>
__global__ void adamw_amp_kernel(size_t n, float *__restrict__ w,  /* (n) */
                                 const float *__restrict__ grad,   /* (n) */
                                 float *__restrict__ m,            /* (n) */
                                 float *__restrict__ v,            /* (n) */
                                 const float *__restrict__ flag,   /* (1) */
                                 uint16_t *__restrict__ w_low,     /* (n) or NULL */
                                 float lr, float beta1, float beta2,
                                 float eps, float weight_decay, float bc1,
                                 float bc2, float grad_scale) {
  const bool skip = *flag != 0.0f; /* NaN compares unequal: it skips too */
  const tg_adamw_consts k = tg_adamw_setup(lr, beta1, beta2, eps, weight_decay,
                                           bc1, bc2, grad_scale);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float wi = skip ? w[i] : tg_adamw_update(k, i, w, grad, m, v);
    if (w_low) w_low[i] = to_low<BF>(wi);
  }
}

/* tg_cpu_add_round (precision_kernels.h): kind 0 f32 messages, 1 bf16, 2
 * fp16; one thread per element of [0, n) */
template <int KIND> struct AddRound {
  const float *a;          // (n)
  const void *recv;        // (n) in the message type, or NULL
  float *out;              // (out_len)
  size_t out_off, out_len;
  void *send;              // (send_len) in the message type
  size_t send_off, send_len;
  __device__ float widen(size_t i) const {
    if (KIND == 0) return ((const float *)recv)[i];
    return from_low<KIND == 1>(((const uint16_t *)recv)[i]);
  }
  __device__ void operator()(size_t i, size_t) const {
    const float v = recv ? a[i] + widen(i) : a[i]; /* a + recv, as tg_cpu_accumulate */
    if (out && i - out_off < out_len) out[i - out_off] = v;
    if (send && i - send_off < send_len) {
      if (KIND == 0) ((float *)send)[i - send_off] = v;
      else ((uint16_t *)send)[i - send_off] = to_low<KIND == 1>(v);
    }
  }
};

/* tg_cuda_adamw_multi: the tensors' pointers and first flat indices in the
 * kernel's parameters (about 600 bytes for 12); KIND 0 no copies, 1 bf16,
 * 2 fp16 */
constexpr int kMulti = TG_ADAMW_MULTI_MAX;
struct MultiAdamW {
  float *w[kMulti];
  const float *g[kMulti];
  float *m[kMulti], *v[kMulti];
  uint16_t *low[kMulti];
  size_t start[kMulti + 1]; /* tensor j holds flat indices start[j] .. start[j+1]-1 */
  int n;
};

template <int KIND>
__global__ void adamw_multi_kernel(MultiAdamW t, const float *__restrict__ flag, float lr,
                                   float beta1, float beta2, float eps, float weight_decay,
                                   float bc1, float bc2, float grad_scale) {
  const bool skip = flag && *flag != 0.0f; /* NaN compares unequal: it skips too */
  const tg_adamw_consts k = tg_adamw_setup(lr, beta1, beta2, eps, weight_decay, bc1, bc2,
                                           grad_scale);
  const size_t total = t.start[t.n], stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int j = 0;
    while (i >= t.start[j + 1]) j++;
    const size_t e = i - t.start[j];
    const float wi = skip ? t.w[j][e] : tg_adamw_update(k, e, t.w[j], t.g[j], t.m[j], t.v[j]);
    if (KIND && t.low[j]) t.low[j][e] = to_low<KIND == 1>(wi);
  }
}

} // namespace

extern "C" cudaError_t tg_cuda_to_lowp(tg_dtype lowp, int rows, int cols,
                                       const float *X, int ldx, uint16_t *Y,
                                       int ldy, cudaStream_t stream) {
  if (lowp == TG_BF16) return tg_map2d(rows, cols, ToLow<true>{X, ldx, Y, ldy}, stream);
  return tg_map2d(rows, cols, ToLow<false>{X, ldx, Y, ldy}, stream);
}

extern "C" cudaError_t tg_cuda_from_lowp(tg_dtype lowp, int rows, int cols,
                                         const uint16_t *X, int ldx, float *Y,
                                         int ldy, cudaStream_t stream) {
  if (lowp == TG_BF16) return tg_map2d(rows, cols, FromLow<true>{X, ldx, Y, ldy}, stream);
  return tg_map2d(rows, cols, FromLow<false>{X, ldx, Y, ldy}, stream);
}

extern "C" cudaError_t tg_cuda_scale_lowp(tg_dtype lowp, int rows, int cols,
                                          uint16_t *X, int ldx, float beta,
                                          cudaStream_t stream) {
  if (lowp == TG_BF16) return tg_map2d(rows, cols, ScaleLow<true>{X, ldx, beta}, stream);
  return tg_map2d(rows, cols, ScaleLow<false>{X, ldx, beta}, stream);
}

extern "C" cudaError_t tg_cuda_nonfinite_check(const float *g, size_t n,
                                               float *flag,
                                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  nonfinite_kernel<<<tg_cuda_blocks(n, TG_CUDA_THREADS), TG_CUDA_THREADS, 0,
                     stream>>>(g, n, flag);
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_adamw_amp(size_t n, float *w, const float *grad,
                                         float *m, float *v, const float *flag,
                                         tg_dtype lowp, uint16_t *w_low,
                                         float lr, float beta1, float beta2,
                                         float eps, float weight_decay,
                                         float bc1, float bc2, float grad_scale,
                                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = tg_cuda_blocks(n, TG_CUDA_THREADS);
  if (lowp == TG_BF16)
    adamw_amp_kernel<true><<<blocks, TG_CUDA_THREADS, 0, stream>>>(
        n, w, grad, m, v, flag, w_low, lr, beta1, beta2, eps, weight_decay, bc1,
        bc2, grad_scale);
  else
    adamw_amp_kernel<false><<<blocks, TG_CUDA_THREADS, 0, stream>>>(
        n, w, grad, m, v, flag, w_low, lr, beta1, beta2, eps, weight_decay, bc1,
        bc2, grad_scale);
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_add_round(tg_dtype comm, size_t n, const float *a,
                                         const void *recv, float *out, size_t out_off,
                                         size_t out_len, void *send, size_t send_off,
                                         size_t send_len, cudaStream_t stream) {
  if (n > 0x7fffffffu) return cudaErrorInvalidValue;
  if (comm == TG_F32)
    return tg_map2d((int)n, 1, AddRound<0>{a, recv, out, out_off, out_len, send, send_off, send_len}, stream);
  if (comm == TG_BF16)
    return tg_map2d((int)n, 1, AddRound<1>{a, recv, out, out_off, out_len, send, send_off, send_len}, stream);
  if (comm == TG_F16)
    return tg_map2d((int)n, 1, AddRound<2>{a, recv, out, out_off, out_len, send, send_off, send_len}, stream);
  return cudaErrorInvalidValue;
}

extern "C" cudaError_t tg_cuda_adamw_multi(int n, float *const *w, const float *const *grad,
                                           float *const *m, float *const *v,
                                           uint16_t *const *w_low, const size_t *numel,
                                           const float *flag, tg_dtype lowp, float lr,
                                           float beta1, float beta2, float eps,
                                           float weight_decay, float bc1, float bc2,
                                           float grad_scale, cudaStream_t stream) {
  if (n < 1 || n > kMulti || (lowp != TG_F32 && !flag)) return cudaErrorInvalidValue;
  MultiAdamW t = {};
  t.n = n;
  for (int j = 0; j < n; j++) {
    t.w[j] = w[j];
    t.g[j] = grad[j];
    t.m[j] = m[j];
    t.v[j] = v[j];
    t.low[j] = w_low && lowp != TG_F32 ? w_low[j] : nullptr;
    t.start[j + 1] = t.start[j] + numel[j];
  }
  const size_t total = t.start[n];
  if (total == 0) return cudaSuccess;
  const unsigned blocks = tg_cuda_blocks(total, TG_CUDA_THREADS);
  if (lowp == TG_BF16)
    adamw_multi_kernel<1><<<blocks, TG_CUDA_THREADS, 0, stream>>>(
        t, flag, lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);
  else if (lowp == TG_F16)
    adamw_multi_kernel<2><<<blocks, TG_CUDA_THREADS, 0, stream>>>(
        t, flag, lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);
  else
    adamw_multi_kernel<0><<<blocks, TG_CUDA_THREADS, 0, stream>>>(
        t, flag, lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);
  return cudaGetLastError();
}
