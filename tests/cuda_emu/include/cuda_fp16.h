/*
 * cuda_emu: stand-in for <cuda_fp16.h> (test_ops_emu only): the
 * binary16 storage type and the conversions the kernels use, done by the
 * compiler's _Float16 (IEEE round to nearest even, subnormals and overflow
 * to Inf included), independently of taskgrad's CPU conversions.  A NaN
 * becomes the canonical NaN 0x7fff, as the device's cvt.rn.f16.f32 returns.
 */
#ifndef TG_CUDA_EMU_FP16_H
#define TG_CUDA_EMU_FP16_H

#include <stdint.h>
#include <string.h>

#ifndef __FLT16_MAX__
#error "cuda_emu needs a compiler with _Float16 (GCC >= 12 or Clang >= 15 on x86-64)"
#endif

struct __half {
  uint16_t x;
};

static inline __half __ushort_as_half(unsigned short h) {
  __half r;
  r.x = h;
  return r;
}
static inline unsigned short __half_as_ushort(__half h) { return h.x; }

static inline __half __float2half_rn(float f) {
  if (f != f) return __ushort_as_half(0x7fff);
  const _Float16 h = (_Float16)f;
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return __ushort_as_half(u);
}

static inline float __half2float(__half h) {
  _Float16 v;
  memcpy(&v, &h.x, sizeof v);
  return (float)v;
}

#endif
