/*
 * taskgrad layer 1: CUDA optimizer kernels (SGD with momentum, AdamW), the
 * device twins of tg_cpu_sgd / tg_cpu_adamw in kernels_cpu.h (PyTorch
 * semantics; read that file for the update rules).
 *
 * Design note
 * -----------
 * Parameters and optimizer state are contiguous vectors of n floats: one
 * grid-stride loop with a 64-bit index, each thread updating whole elements
 * (read w, grad, state; write w, state), so the kernels are purely
 * bandwidth-bound.  The arithmetic follows the CPU kernel step by step, in
 * float, with IEEE sqrtf and division (nvcc's defaults, no fast math); FMA
 * contraction may change the last bit, far below the tests' tolerance.
 * The bias corrections bc1 = 1 - beta1^t and bc2 = 1 - beta2^t come from the
 * caller, so the kernel does not depend on the step number.
 */
#include "taskgrad/kernels_cuda.h"
#include "cuda_common.cuh"
#include "adamw.cuh"

namespace {

__global__ void sgd_kernel(size_t n, float *__restrict__ w,      /* (n) */
                           const float *__restrict__ grad,       /* (n) */
                           float *__restrict__ vel,              /* (n) */
                           float lr, float momentum, float weight_decay,
                           float grad_scale) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float wi = w[i];
    const float g = grad_scale * grad[i] + weight_decay * wi;
    const float v = momentum * vel[i] + g;
    vel[i] = v;
    w[i] = wi - lr * v;
  }
}

__global__ void adamw_kernel(size_t n, float *__restrict__ w,    /* (n) */
                             const float *__restrict__ grad,     /* (n) */
                             float *__restrict__ m,              /* (n) */
                             float *__restrict__ v,              /* (n) */
                             float lr, float beta1, float beta2, float eps,
                             float weight_decay, float bc1, float bc2,
                             float grad_scale) {
  /* the update itself is in adamw.cuh, shared with the AMP optimizer */
  const tg_adamw_consts k = tg_adamw_setup(lr, beta1, beta2, eps, weight_decay,
                                           bc1, bc2, grad_scale);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    tg_adamw_update(k, i, w, grad, m, v);
}

} // namespace

extern "C" cudaError_t tg_cuda_sgd(size_t n, float *w, const float *grad,
                                   float *vel, float lr, float momentum,
                                   float weight_decay, float grad_scale,
                                   cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  sgd_kernel<<<tg_cuda_blocks(n, TG_CUDA_THREADS), TG_CUDA_THREADS, 0,
               stream>>>(n, w, grad, vel, lr, momentum, weight_decay,
                         grad_scale);
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_adamw(size_t n, float *w, const float *grad,
                                     float *m, float *v, float lr, float beta1,
                                     float beta2, float eps,
                                     float weight_decay, float bc1, float bc2,
                                     float grad_scale, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  adamw_kernel<<<tg_cuda_blocks(n, TG_CUDA_THREADS), TG_CUDA_THREADS, 0,
                 stream>>>(n, w, grad, m, v, lr, beta1, beta2, eps,
                           weight_decay, bc1, bc2, grad_scale);
  return cudaGetLastError();
}
