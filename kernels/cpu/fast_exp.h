/*
 * A vectorisable exp for the CPU kernels (GELU, attention softmax).
 *
 * libm's expf is a function call per element, which stops GCC's vectoriser
 * at -O2; this is plain arithmetic: x = n ln2 + r with |r| <= ln2/2
 * (Cody-Waite: ln2 split in two so that n ln2 is exact), e^r by Cephes'
 * degree-6 polynomial (relative error about 1e-7), 2^n assembled in the
 * exponent bits.  n is rounded with the 1.5 * 2^23 trick (floorf would be a
 * call without SSE4.1).  The caller clamps x to [-87, 88], where e^x is a
 * normal float; NaN stays NaN.  Always inlined, so that it is compiled for
 * each target_clones variant of its caller.
 */
#ifndef TASKGRAD_FAST_EXP_H
#define TASKGRAD_FAST_EXP_H

#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) float tg_exp_core(float x) {
  const float magic = 12582912.0f; /* 1.5 * 2^23 */
  float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

#endif
