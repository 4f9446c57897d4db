/*
 * expf over a softmax row, vectorised and still bitwise equal to libm.
 *
 * Why: the classifier's softmax calls expf once per logit (rows x 50257 per
 * GPT-2 chunk).  glibc's expf is a call per element, which the vectoriser
 * cannot touch, and it took about a quarter of the classifier's forward time
 * on the development VM.  A different approximation (fast_exp.h) would change
 * every loss in the last bits, and deterministic runs must stay bitwise equal
 * to earlier builds, so this file evaluates glibc's own algorithm, four
 * lanes at a time, with the same operations in the same order:
 *
 *   z  = x * 32/ln2;  k = round(z) through the 1.5 * 2^52 shift;  r = z - k
 *   2^(k/32) = T[k mod 32] with k/32's integer part added to the exponent
 *   e  = (float)(s * ((C0 r + C1) r^2 + (C2 r + 1)))
 *
 * in double, every multiply-add fused exactly where glibc 2.36's FMA variant
 * (the one picked on AVX2 + FMA CPUs) fuses it: the constants and the fusing
 * were read from its disassembly, and an exhaustive comparison over all 2^32
 * float inputs found no difference.  Inputs with |x| >= 88 (underflow,
 * overflow, inf, NaN: glibc's special cases) go through expf itself, four
 * lanes at once, as do the row's tail and CPUs without AVX2 and FMA.
 *
 * A libm other than the one this was written against could round some
 * inputs differently; so before the vector path is used the first time, it
 * is compared with expf on a sample that exercises every table entry and the
 * whole [-88, 88] range, and any difference turns it off for the process
 * (the scalar loop is always right, only slower).
 *
 * The sum stays a left-to-right double sum (a reordered one would change the
 * loss bits); it is the critical path of the sweep now.
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "expf_row.h"

enum { LANES = 4, TABLE = 32 };

/* glibc's __exp2f_data: 32/ln2 and the degree-3 polynomial for 2^(r/32) */
static const double INV_LN2_32 = 0x1.71547652b82fep+5;
static const double SHIFT = 0x1.8p+52;
static const double C0 = 0x1.c6af84b912394p-20, C1 = 0x1.ebfce50fac4f3p-13,
                    C2 = 0x1.62e42ff0c52d6p-6;
/* beyond this (|x| >= 88 as float bits), glibc takes its special-case path */
static const uint32_t SPECIAL_ABS_BITS = 0x42b00000u;

/* 2^(i/32) as bits, minus i << 47 so that adding k << 47 restores the
 * exponent of 2^(k/32) (glibc's table); filled once by the self-check */
static uint64_t exp2_table[TABLE];

static double scalar_row(int n, const float *x, float shift, float *out, double sum) {
  for (int c = 0; c < n; c++) {
    float e = expf(x[c] - shift);
    out[c] = e;
    sum += (double)e;
  }
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* expf of four floats whose magnitudes are all below 88 */
__attribute__((target("avx2,fma"))) static __m128 expf4(__m128 xf) {
  const __m256d xd = _mm256_cvtps_pd(xf);
  const __m256d inv = _mm256_set1_pd(INV_LN2_32), shift = _mm256_set1_pd(SHIFT);
  __m256d kd = _mm256_fmadd_pd(inv, xd, shift);
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, shift);
  const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
  const __m256i slot = _mm256_and_si256(ki, _mm256_set1_epi64x(TABLE - 1));
  __m256i t = _mm256_i64gather_epi64((const long long *)exp2_table, slot, 8);
  t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 52 - 5));
  const __m256d s = _mm256_castsi256_pd(t);
  const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(C0), _mm256_set1_pd(C1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(C2), _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

__attribute__((target("avx2,fma"))) static double vector_row(int n, const float *x,
                                                              float shift, float *out,
                                                              double sum) {
  const __m128 sh = _mm_set1_ps(shift);
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  const __m128i limit = _mm_set1_epi32((int)(SPECIAL_ABS_BITS - 1));
  int c = 0;
  for (; c + LANES <= n; c += LANES) {
    __m128 xf = _mm_sub_ps(_mm_loadu_ps(x + c), sh);
    __m128i abs_bits = _mm_and_si128(_mm_castps_si128(xf), abs_mask);
    /* signed compare is right: the absolute bits are below 2^31 */
    if (_mm_movemask_epi8(_mm_cmpgt_epi32(abs_bits, limit))) {
      sum = scalar_row(LANES, x + c, shift, out + c, sum);
      continue;
    }
    float e[LANES];
    _mm_storeu_ps(e, expf4(xf));
    for (int j = 0; j < LANES; j++) {
      out[c + j] = e[j];
      sum += (double)e[j];
    }
  }
  return scalar_row(n - c, x + c, shift, out + c, sum);
}

/* 1 when the vector path agrees with expf on every table slot, across
 * [-88, 88] in steps that are not multiples of the slot width; fills the
 * table first */
static int vector_row_agrees(void) {
  for (int i = 0; i < TABLE; i++) {
    double v = exp2((double)i / TABLE);
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    exp2_table[i] = bits - ((uint64_t)i << (52 - 5));
  }
  enum { SAMPLES = 8192 };
  static float in[SAMPLES], got[SAMPLES];
  for (int i = 0; i < SAMPLES; i++) in[i] = -88.0f + 176.0f * (float)i / (float)(SAMPLES - 1);
  in[0] = 0.0f, in[1] = -0.0f, in[2] = 1e-30f, in[3] = -87.99f;
  vector_row(SAMPLES, in, 0.0f, got, 0.0);
  for (int i = 0; i < SAMPLES; i++)
    if (memcmp(&got[i], &(float){expf(in[i])}, sizeof(float)) != 0) return 0;
  return 1;
}

static int use_vector; /* set once, by choose_path */
static pthread_once_t path_chosen = PTHREAD_ONCE_INIT;

static void choose_path(void) {
  __builtin_cpu_init();
  use_vector = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               vector_row_agrees();
}
#endif

double tg_cpu_expf_row(int n, const float *x, float shift, float *out, double sum) {
#if defined(__x86_64__) && defined(__GNUC__)
  /* pthread_once: the workers' first calls may race; should it fail, the
   * scalar loop is always right */
  if (pthread_once(&path_chosen, choose_path) == 0 && use_vector)
    return vector_row(n, x, shift, out, sum);
#endif
  return scalar_row(n, x, shift, out, sum);
}
