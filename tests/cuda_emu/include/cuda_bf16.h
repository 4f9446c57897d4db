/*
 * cuda_emu: stand-in for <cuda_bf16.h> (test_ops_emu only): the
 * bfloat16 storage type and the conversions the kernels use.
 *
 * Written from the IEEE / bfloat16 definitions, not from taskgrad's CPU
 * conversions, so that comparing the two checks something: float -> bf16
 * keeps the top 16 bits after rounding to nearest even; a NaN becomes the
 * canonical NaN 0x7fff, as the device's cvt.rn.bf16.f32 returns.
 */
#ifndef TG_CUDA_EMU_BF16_H
#define TG_CUDA_EMU_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
  uint16_t x;
};

static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short h) {
  __nv_bfloat16 b;
  b.x = h;
  return b;
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16(0x7fff);
  u += 0x7fffu + ((u >> 16) & 1u); /* ties go to the even upper half */
  return __ushort_as_bfloat16((unsigned short)(u >> 16));
}

static inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = (uint32_t)b.x << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif
