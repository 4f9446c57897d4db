/*
 * The scalar widenings of 16-bit floats to f32, header-only so that every
 * layer can use the same bits: the CPU kernels (kernels/cpu/precision.c:
 * tg_bf16_to_f32, tg_f16_to_f32 and their loops' tails) and the base's
 * Hugging Face reader (src/hf_gpt2.c), which sits below the kernels and may
 * not call them.  Exact: every bf16 and f16 value is an f32 value.
 */
#ifndef TASKGRAD_WIDEN16_H
#define TASKGRAD_WIDEN16_H

#include <stdint.h>
#include <string.h>

static inline float tg_widen_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float tg_widen_bf16(uint16_t h) { return tg_widen_bits_f32((uint32_t)h << 16); }

static inline float tg_widen_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) /* Inf; a NaN gets the quiet bit, as cvt does on the GPU */
    return tg_widen_bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) { /* 0, subnormal: m * 2^-24, exact */
    float mag = (float)m * 0x1p-24f;
    uint32_t u;
    memcpy(&u, &mag, sizeof u);
    return tg_widen_bits_f32(sign | u);
  }
  return tg_widen_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#endif
