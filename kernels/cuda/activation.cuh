/*
 * taskgrad layer 1: the GELU (tanh approximation) and its derivative as
 * device functions, shared by the activation kernels (activation.cu, whose
 * design note gives the formulas) and the fused 16-bit linear epilogues
 * (linear_lowp.cu), so that both compute the same bits.
 */
#ifndef TASKGRAD_ACTIVATION_CUH
#define TASKGRAD_ACTIVATION_CUH

#include <math.h>

namespace tg_act {

constexpr float kGeluK0 = 0.7978845608028654f; /* sqrt(2 / pi) */
constexpr float kGeluK1 = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float u = kGeluK0 * x * (1.0f + kGeluK1 * x * x);
  return x / (1.0f + expf(-2.0f * u));
}

__device__ __forceinline__ float gelu_deriv(float x) {
  if (x > 20.0f) return 1.0f;
  if (x < -20.0f) return 0.0f;
  const float x2 = x * x;
  const float u = kGeluK0 * x * (1.0f + kGeluK1 * x2);
  const float du = kGeluK0 * (1.0f + 3.0f * kGeluK1 * x2);
  const float e = expf(-2.0f * u);
  const float s = 1.0f / (1.0f + e);
  const float oms = e < 1.0f ? e * s : 1.0f - s; /* 1 - s, no cancellation */
  return s + 2.0f * x * s * oms * du;
}

} // namespace tg_act

#endif
