/*
 * Optimizer steps on n contiguous parameters, PyTorch semantics (see
 * kernels_cpu.h): SGD with momentum and L2 weight decay (dampening 0, no
 * Nesterov), and AdamW with decoupled weight decay and bias correction.
 * grad_scale multiplies the raw gradient first (e.g. 1 / number of
 * accumulated micro-batches, or a loss-scale inverse).
 *
 * Each element is updated once, in the same order of operations as
 * torch.optim: for AdamW, w *= 1 - lr wd; m, v updated; then
 * w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), which is the header's
 * formula with PyTorch's grouping (step size and sqrt(bc2) hoisted out of the
 * loop).  w, grad and the state vectors are distinct buffers (restrict).
 *
 * Both loops are blocked (constant inner trip count) so that GCC 12 -O2
 * vectorises them; AdamW's sqrtf and divisions then become sqrtps and divps
 * (this file is built with -fno-math-errno), which round exactly as the
 * scalar instructions do, so the results are bitwise those of the scalar
 * loop.  Scalar, the sqrt and two divisions per element had made the 124M
 * update (124M parameters per step) compute-bound, not memory-bound.  In
 * SSE2 (the library's baseline) it still was: four lanes per sqrt and
 * division.  So both loops are cloned for AVX-512 and AVX2 (simd_clones.h,
 * this file built without contraction, so every variant gives the same
 * bits), with blocks of one AVX-512 vector; the 124M update then runs at
 * memory speed (bench/results/2026-11-27-cpu-step.md).
 */
#include <math.h>

#include "simd_clones.h"
#include "taskgrad/kernels_cpu.h"

enum { VB = 16 }; /* one AVX-512 vector */

TG_ROW_INLINE void sgd_elem(float *restrict w, const float *restrict grad,
                            float *restrict vel, size_t i, float lr,
                            float momentum, float weight_decay,
                            float grad_scale) {
  float g = grad_scale * grad[i] + weight_decay * w[i];
  float v = momentum * vel[i] + g;
  vel[i] = v;
  w[i] -= lr * v;
}

TG_SIMD_CLONES
void tg_cpu_sgd(size_t n,
                float *restrict w,          // (n)
                const float *restrict grad, // (n)
                float *restrict vel,        // (n) momentum buffer
                float lr, float momentum, float weight_decay,
                float grad_scale) {
  size_t i = 0;
  for (; i + VB <= n; i += VB)
    for (size_t j = 0; j < VB; j++)
      sgd_elem(w, grad, vel, i + j, lr, momentum, weight_decay, grad_scale);
  for (; i < n; i++)
    sgd_elem(w, grad, vel, i, lr, momentum, weight_decay, grad_scale);
}

/* one AdamW element; the constants are hoisted by tg_cpu_adamw */
TG_ROW_INLINE void adamw_elem(float *restrict w, const float *restrict grad,
                              float *restrict m, float *restrict v, size_t i,
                              float beta1, float beta2, float a1, float a2, float eps,
                              float decay, float step, float sqrt_bc2, float grad_scale) {
  float g = grad_scale * grad[i];
  float mi = beta1 * m[i] + a1 * g;
  float vi = beta2 * v[i] + a2 * g * g;
  m[i] = mi;
  v[i] = vi;
  float denom = sqrtf(vi) / sqrt_bc2 + eps;
  w[i] = w[i] * decay - step * (mi / denom);
}

TG_SIMD_CLONES
void tg_cpu_adamw(size_t n,
                  float *restrict w,          // (n)
                  const float *restrict grad, // (n)
                  float *restrict m,          // (n) first moment
                  float *restrict v,          // (n) second moment
                  float lr, float beta1, float beta2, float eps,
                  float weight_decay, float bc1, float bc2,
                  float grad_scale) {
  const float decay = 1.0f - lr * weight_decay;
  const float step = lr / bc1;
  const float sqrt_bc2 = sqrtf(bc2);
  const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
  size_t i = 0;
  for (; i + VB <= n; i += VB)
    for (size_t j = 0; j < VB; j++)
      adamw_elem(w, grad, m, v, i + j, beta1, beta2, a1, a2, eps, decay, step, sqrt_bc2,
                 grad_scale);
  for (; i < n; i++)
    adamw_elem(w, grad, m, v, i, beta1, beta2, a1, a2, eps, decay, step, sqrt_bc2,
               grad_scale);
}
