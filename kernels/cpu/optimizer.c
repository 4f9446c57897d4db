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
 * SGD is blocked (constant inner trip count) so that GCC 12 -O2 vectorises
 * it.  AdamW stays scalar: sqrtf keeps its errno path without -fno-math-errno,
 * which blocks vectorisation; the update is memory-bound anyway.
 */
#include <math.h>

#include "taskgrad/kernels_cpu.h"

enum { VB = 8 };

static inline void sgd_elem(float *restrict w, const float *restrict grad,
                            float *restrict vel, size_t i, float lr,
                            float momentum, float weight_decay,
                            float grad_scale) {
  float g = grad_scale * grad[i] + weight_decay * w[i];
  float v = momentum * vel[i] + g;
  vel[i] = v;
  w[i] -= lr * v;
}

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
  for (size_t i = 0; i < n; i++) {
    float g = grad_scale * grad[i];
    float mi = beta1 * m[i] + a1 * g;
    float vi = beta2 * v[i] + a2 * g * g;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / sqrt_bc2 + eps;
    w[i] = w[i] * decay - step * (mi / denom);
  }
}
