/*
 * taskgrad layer 1: the AdamW update of one element on the device, shared by
 * the fp32 optimizer (optimizer.cu) and the mixed-precision one
 * (precision.cu) so that both do the same arithmetic bit for bit.
 *
 * Design note
 * -----------
 * The arrangement is the CPU kernel's (and PyTorch's):
 *   w = w (1 - lr wd) - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
 * with the per-launch constants computed in each thread from the kernel
 * arguments (cheap, and it keeps the launchers free of host arithmetic that
 * the compiler might contract differently).  IEEE sqrtf and division, no
 * fast math.
 */
#ifndef TASKGRAD_ADAMW_CUH
#define TASKGRAD_ADAMW_CUH

#include <stddef.h>

struct tg_adamw_consts {
  float decay, step, sqrt_bc2, beta1, beta2, a1, a2, eps, grad_scale;
};

__device__ __forceinline__ tg_adamw_consts
tg_adamw_setup(float lr, float beta1, float beta2, float eps,
               float weight_decay, float bc1, float bc2, float grad_scale) {
  tg_adamw_consts k;
  k.decay = 1.0f - lr * weight_decay;
  k.step = lr / bc1;
  k.sqrt_bc2 = sqrtf(bc2);
  k.beta1 = beta1;
  k.beta2 = beta2;
  k.a1 = 1.0f - beta1;
  k.a2 = 1.0f - beta2;
  k.eps = eps;
  k.grad_scale = grad_scale;
  return k;
}

/* Updates m[i], v[i], w[i]; returns the new w[i]. */
__device__ __forceinline__ float tg_adamw_update(const tg_adamw_consts &k,
                                                 size_t i, float *w,
                                                 const float *grad, float *m,
                                                 float *v) {
  const float g = k.grad_scale * grad[i];
  const float mi = k.beta1 * m[i] + k.a1 * g;
  const float vi = k.beta2 * v[i] + k.a2 * g * g;
  m[i] = mi;
  v[i] = vi;
  const float denom = sqrtf(vi) / k.sqrt_bc2 + k.eps;
  const float wi = w[i] * k.decay - k.step * (mi / denom);
  w[i] = wi;
  return wi;
}

#endif
