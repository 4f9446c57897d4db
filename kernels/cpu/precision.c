/*
 * taskgrad layer 1: bf16 / fp16 conversions, the non-finite check and the
 * mixed-precision AdamW step on the CPU (see precision.h for the contract).
 *
 * Design note
 * -----------
 * Conversions work on bit patterns (memcpy, no type punning through unions
 * of different types), so they behave the same whatever the compiler's
 * floating-point flags (-fno-trapping-math here) and need no _Float16:
 *  - f32 -> bf16 keeps the top 16 bits after adding 0x7fff plus the lowest
 *    kept bit: round to nearest, ties to even.  The carry runs into the
 *    exponent when the mantissa overflows, which also rounds the largest
 *    finite values up to Inf, as IEEE wants.  NaN is handled first (the
 *    addition could turn a NaN with low payload bits into Inf).
 *  - f32 -> f16 rebiases the exponent (127 -> 15) for normal results and
 *    shifts the implicit-bit mantissa right for subnormal ones, rounding the
 *    dropped bits to nearest even in both cases; |x| >= 65520 gives Inf
 *    (65520 is the tie between 65504 and 2^16, and 65504's mantissa is odd),
 *    |x| <= 2^-25 gives zero (2^-25 is the tie between 0 and 2^-24).
 *  - widening is exact: bf16 is the top half of an f32; an f16 subnormal
 *    m * 2^-24 is computed as a float product, which is exact.
 * NaN payloads keep their top bits and get the quiet bit, so a NaN stays a
 * NaN in both directions.
 *
 * The AMP AdamW step runs the plain tg_cpu_adamw on chunks of AMP_CHUNK
 * elements and converts each chunk right after its update, while it is in
 * L1: one pass over memory, and the same arithmetic as the fp32 optimizer
 * bit for bit.
 */
#include <string.h>

#include "simd_clones.h"
#include "taskgrad/widen16.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"

enum { AMP_CHUNK = 1024 }; /* 4 arrays x 4 KiB: stays in a 32 KiB L1 */

static inline uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* NaN: quiet bit, sign and top payload kept; else rounded to nearest even.
 * Without a branch (the NaN case is a select), so that the blocked loops of
 * tg_f32_to_bf16_n vectorise. */
TG_ROW_INLINE uint16_t to_bf16(float x) {
  uint32_t u = f32_bits(x);
  uint32_t nan = (u >> 16) | 0x0040u;
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

static inline float from_bf16(uint16_t h) { return tg_widen_bf16(h); }

/* rounds v >> shift to nearest, ties to even (shift >= 1) */
static inline uint32_t shift_rne(uint32_t v, unsigned shift) {
  uint32_t q = v >> shift, rem = v & ((1u << shift) - 1u), half = 1u << (shift - 1);
  return q + (rem > half || (rem == half && (q & 1u)));
}

static inline uint16_t to_f16(float x) {
  uint32_t u = f32_bits(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN: quiet bit, keep the top payload bits */
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520, Inf */
  if (a >= 0x38800000u) /* >= 2^-14: normal; a carry out of the mantissa
                           correctly bumps the exponent */
    return (uint16_t)(sign | shift_rne(a - 0x38000000u, 13));
  if (a <= 0x33000000u) return sign; /* <= 2^-25: zero (2^-25 ties to even 0) */
  /* subnormal result: value = mant * 2^(e - 150) = (mant >> (126 - e)) * 2^-24,
   * with 14 <= 126 - e <= 24; a carry to 0x400 is the smallest normal */
  uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
  return (uint16_t)(sign | shift_rne(mant, 126u - e));
}

static inline float from_f16(uint16_t h) { return tg_widen_f16(h); }

uint16_t tg_f32_to_bf16(float x) { return to_bf16(x); }
float tg_bf16_to_f32(uint16_t h) { return from_bf16(h); }
uint16_t tg_f32_to_f16(float x) { return to_f16(x); }
float tg_f16_to_f32(uint16_t h) { return from_f16(h); }

/* The two bf16 sweeps run under every 16-bit adapter task (each widened
 * input, each rounded output): blocks of one AVX-512 vector with a constant
 * trip count (GCC 12 -O2 vectorises only those), cloned for AVX-512 and
 * AVX2 (simd_clones.h).  Integer operations only: every variant gives the
 * scalar loop's bits (compared over all 2^32 inputs on an AVX-512 CPU when
 * written; the op table compares samples, tests/ops/precision.c). */
enum { CVT_BLOCK = 16 };

TG_SIMD_CLONES
void tg_f32_to_bf16_n(size_t n, const float *restrict src, uint16_t *restrict dst) {
  size_t i = 0;
  for (; i + CVT_BLOCK <= n; i += CVT_BLOCK)
    for (size_t j = 0; j < CVT_BLOCK; j++) dst[i + j] = to_bf16(src[i + j]);
  for (; i < n; i++) dst[i] = to_bf16(src[i]);
}
TG_SIMD_CLONES
void tg_bf16_to_f32_n(size_t n, const uint16_t *restrict src, float *restrict dst) {
  size_t i = 0;
  for (; i + CVT_BLOCK <= n; i += CVT_BLOCK)
    for (size_t j = 0; j < CVT_BLOCK; j++) {
      uint32_t u = (uint32_t)src[i + j] << 16;
      memcpy(dst + i + j, &u, sizeof u);
    }
  for (; i < n; i++) dst[i] = from_bf16(src[i]);
}
/* x86-64 CPUs with F16C (all since 2012) narrow 8 floats per instruction,
 * rounding to nearest even with IEEE results for every input (overflow to
 * Inf, subnormal results, NaNs quietened with their top payload bits): the
 * same bits as to_f16, checked over all 2^32 inputs when this was written
 * and on samples by the op table (tests/ops/precision.c, ref); widening likewise (all 2^16).  Chosen at run time, so the
 * library still runs on a CPU without it. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TG_HAVE_F16C_PATH 1
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(size_t n,
                                                                const float *restrict src,
                                                                uint16_t *restrict dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) dst[i] = to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(size_t n,
                                                                const uint16_t *restrict src,
                                                                float *restrict dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++) dst[i] = from_f16(src[i]);
}

static int tg_f16c(void) {
  static int f16c = -1;
  if (f16c < 0) f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return f16c;
}
#endif

void tg_f32_to_f16_n(size_t n, const float *restrict src, uint16_t *restrict dst) {
#ifdef TG_HAVE_F16C_PATH
  if (tg_f16c()) {
    f32_to_f16_f16c(n, src, dst);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = to_f16(src[i]);
}
void tg_f16_to_f32_n(size_t n, const uint16_t *restrict src, float *restrict dst) {
#ifdef TG_HAVE_F16C_PATH
  if (tg_f16c()) {
    f16_to_f32_f16c(n, src, dst);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = from_f16(src[i]);
}

void tg_cpu_to_lowp(tg_dtype lowp, int rows, int cols,
                    const float *X, int ldx, // (rows, ldx)
                    uint16_t *Y, int ldy)    // (rows, ldy)
{
  for (int r = 0; r < rows; r++) {
    const float *x = X + (size_t)r * ldx;
    uint16_t *y = Y + (size_t)r * ldy;
    if (lowp == TG_BF16)
      tg_f32_to_bf16_n((size_t)cols, x, y);
    else
      tg_f32_to_f16_n((size_t)cols, x, y);
  }
}

void tg_cpu_from_lowp(tg_dtype lowp, int rows, int cols,
                      const uint16_t *X, int ldx, // (rows, ldx)
                      float *Y, int ldy)          // (rows, ldy)
{
  for (int r = 0; r < rows; r++) {
    const uint16_t *x = X + (size_t)r * ldx;
    float *y = Y + (size_t)r * ldy;
    if (lowp == TG_BF16)
      tg_bf16_to_f32_n((size_t)cols, x, y);
    else
      tg_f16_to_f32_n((size_t)cols, x, y);
  }
}

void tg_cpu_nonfinite_check(const float *g, // (n)
                            size_t n, float *flag) {
  /* an all-ones exponent is Inf or NaN; OR-ing the tests keeps the loop
   * branch-free (it vectorises) and reads every element once */
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++) bad |= (f32_bits(g[i]) & 0x7f800000u) == 0x7f800000u;
  if (bad) *flag = 1.0f;
}

void tg_cpu_adamw_amp(size_t n,
                      float *w,          // (n) fp32 master weights
                      const float *grad, // (n) scaled gradients
                      float *m,          // (n) first moment
                      float *v,          // (n) second moment
                      const float *flag, // (1) overflow flag: != 0 skips
                      tg_dtype lowp,
                      uint16_t *w_low,   // (n) or NULL: lowp copy of w
                      float lr, float beta1, float beta2, float eps,
                      float weight_decay, float bc1, float bc2,
                      float grad_scale) {
  const int skip = *flag != 0.0f; /* NaN compares unequal: it skips too */
  for (size_t i = 0; i < n; i += AMP_CHUNK) {
    size_t c = n - i < AMP_CHUNK ? n - i : AMP_CHUNK;
    if (!skip)
      tg_cpu_adamw(c, w + i, grad + i, m + i, v + i, lr, beta1, beta2, eps,
                   weight_decay, bc1, bc2, grad_scale);
    if (w_low) tg_cpu_to_lowp(lowp, 1, (int)c, w + i, (int)c, w_low + i, (int)c);
  }
}
