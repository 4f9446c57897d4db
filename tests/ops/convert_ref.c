/*
 * The convert row's ref case (was test_precision.c): the bf16 / fp16
 * conversions of precision_kernels.h, no StarPU (the row's other cases, in
 * tests/ops/precision.c, run the codelet under StarPU).
 *
 *  - widening: all 65536 bit patterns of each 16-bit type against an
 *    independent float64 decoding (sign, exponent, mantissa by the
 *    definition), bit for bit; NaN patterns must widen to NaN;
 *  - round trip narrow(widen(h)) == h for every non-NaN pattern, NaN for NaN;
 *  - exact ties: the midpoint between every pair of adjacent finite values
 *    (subnormals included) must round to the even one, and the floats just
 *    above and below it to the nearer one;
 *  - nearest-value property on a million random f32 bit patterns: the
 *    result is at least as close as both neighbours, and even on a tie;
 *  - named cases: +-0, +-Inf, NaNs (a signalling f32 NaN whose payload sits
 *    only in the low bits must not become Inf), fp16 overflow (65519 ->
 *    65504, 65520 -> Inf), fp16 and bf16 subnormals in both directions;
 *  - the 2-D array kernels (tg_cpu_to_lowp, tg_cpu_from_lowp) agree with the
 *    scalar conversions, their vector paths too; so do the contiguous ones
 *    (tg_f32_to_bf16_n and the three others), which the scalar ones define.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops_harness.h"
#include "taskgrad/precision.h"

typedef struct lowtype {
  const char *name;
  tg_dtype dt;
  int mant_bits, bias; /* stored mantissa bits, exponent bias */
  uint16_t (*narrow)(float);
  float (*widen)(uint16_t);
} lowtype;

static const lowtype TYPES[2] = {
    {"bf16", TG_BF16, 7, 127, tg_f32_to_bf16, tg_bf16_to_f32},
    {"f16", TG_F16, 10, 15, tg_f32_to_f16, tg_f16_to_f32},
};

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
static float from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* the value of pattern h by the format's definition; NAN for NaN */
static double decode(const lowtype *t, uint16_t h) {
  int emask = t->name[0] == 'b' ? 0xff : 0x1f;
  int e = (h >> t->mant_bits) & emask, m = h & ((1 << t->mant_bits) - 1);
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == emask) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp(m, 1 - t->bias - t->mant_bits);
  return s * ldexp((double)((1 << t->mant_bits) + m), e - t->bias - t->mant_bits);
}

static int is_nan_pattern(const lowtype *t, uint16_t h) { return isnan(decode(t, h)); }

static void test_exhaustive(const lowtype *t) {
  int bad_widen = 0, bad_trip = 0, nans = 0;
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    double ref = decode(t, h);
    float w = t->widen(h);
    if (isnan(ref)) {
      nans++;
      if (!isnan(w)) bad_widen++;
      if (!is_nan_pattern(t, t->narrow(w))) bad_trip++;
      continue;
    }
    if (!((double)w == ref && !signbit(w) == !signbit(ref))) bad_widen++;
    if (t->narrow(w) != h) bad_trip++;
  }
  CHECK(bad_widen == 0, "%s: %d of 65536 patterns widen wrongly", t->name, bad_widen);
  CHECK(bad_trip == 0, "%s: %d of 65536 patterns do not survive the round trip", t->name,
        bad_trip);
  CHECK(nans == (t->dt == TG_BF16 ? 2 * 127 : 2 * 1023), "%s: %d NaN patterns", t->name,
        nans);
}

/* every midpoint between adjacent finite values of the same sign */
static void test_ties(const lowtype *t) {
  int bad = 0, count = 0;
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    double lo = decode(t, h), hi = decode(t, (uint16_t)(h + 1));
    if ((h & 0x7fff) == 0x7fff || isnan(lo) || isnan(hi) || isinf(lo)) continue;
    /* hi may be Inf: the tie with the largest value is at lo + ulp / 2 */
    double mid = isinf(hi) ? lo + (lo - decode(t, (uint16_t)(h - 1))) / 2 : (lo + hi) / 2;
    float tie = (float)mid; /* exact: one more bit than the 16-bit type */
    if ((double)tie != mid) {
      bad++;
      continue;
    }
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
    float toward_hi = nextafterf(tie, mid > 0 ? INFINITY : -INFINITY);
    float toward_lo = nextafterf(tie, 0.0f);
    if (t->narrow(tie) != even) bad++;
    if (t->narrow(toward_hi) != (uint16_t)(h + 1)) bad++;
    if (t->narrow(toward_lo) != h) bad++;
    count++;
  }
  CHECK(bad == 0, "%s: %d wrong roundings around %d ties", t->name, bad, count);
  CHECK(count > 60000, "%s: only %d ties tried", t->name, count);
}

/* the result is a nearest value, and even on a tie */
static void test_random_nearest(const lowtype *t) {
  tg_rng rng = {0x51ED270B4A1CE5ULL + (uint64_t)t->dt};
  int bad = 0;
  for (int i = 0; i < 1000000; i++) {
    /* all f32 bit patterns, and values spread over the f16 range */
    float x = (i & 1) ? from_bits((uint32_t)(tg_rng_next(&rng) >> 32))
                      : ldexpf(tg_rng_uniform(&rng), (int)(tg_rng_next(&rng) % 48) - 30);
    if (!isfinite(x)) continue;
    uint16_t h = t->narrow(x);
    double r = decode(t, h), d = fabs((double)x - r);
    if (isinf(r)) { /* only beyond the largest value + half an ulp */
      uint16_t maxh = (uint16_t)((h & 0x8000) | (t->dt == TG_BF16 ? 0x7f7f : 0x7bff));
      double mx = decode(t, maxh), ulp = mx - decode(t, (uint16_t)(maxh - 1));
      if (fabs((double)x) < fabs(mx) + ulp / 2) bad++;
      continue;
    }
    for (int s = -1; s <= 1; s += 2) {
      uint16_t nb = (uint16_t)(h + s);
      if ((h & 0x7fff) == 0 && s < 0) nb = (uint16_t)((h ^ 0x8000) + 1); /* across 0 */
      double rn = decode(t, nb);
      if (isnan(rn)) continue;
      double dn = fabs((double)x - rn);
      if (dn < d || (dn == d && (h & 1))) bad++;
    }
  }
  CHECK(bad == 0, "%s: %d random values not rounded to the nearest even", t->name, bad);
}

static void test_named(void) {
  /* bf16 */
  CHECK(tg_f32_to_bf16(0.0f) == 0x0000 && tg_f32_to_bf16(-0.0f) == 0x8000, "bf16 zeros");
  CHECK(tg_f32_to_bf16(INFINITY) == 0x7f80 && tg_f32_to_bf16(-INFINITY) == 0xff80,
        "bf16 Inf");
  CHECK(tg_f32_to_bf16(FLT_MAX) == 0x7f80, "bf16: FLT_MAX rounds to Inf");
  uint16_t snan = tg_f32_to_bf16(from_bits(0x7f800001u)); /* payload only in low bits */
  CHECK((snan & 0x7f80) == 0x7f80 && (snan & 0x0040), "bf16: signalling NaN -> 0x%04x",
        snan);
  CHECK(tg_f32_to_bf16(from_bits(0xffc00000u)) == 0xffc0, "bf16: -qNaN keeps its sign");
  CHECK(tg_f32_to_bf16(from_bits(0x00000001u)) == 0x0000, "bf16: tiny f32 subnormal -> 0");
  CHECK(tg_f32_to_bf16(from_bits(0x00008000u)) == 0x0000, "bf16: subnormal tie -> even 0");
  CHECK(tg_f32_to_bf16(from_bits(0x00008001u)) == 0x0001, "bf16: above the tie -> 0x0001");
  CHECK(tg_f32_to_bf16(from_bits(0x00018000u)) == 0x0002, "bf16: tie 1.5 -> even 2");
  CHECK(tg_bf16_to_f32(0x0001) == ldexpf(1.0f, -133), "bf16 0x0001 = 2^-133");
  CHECK(tg_bf16_to_f32(0x807f) == -ldexpf(127.0f, -133), "bf16 0x807f = -127 * 2^-133");
  CHECK(tg_f32_to_bf16(1.00390625f) == 0x3f80, "bf16: 1 + 2^-8 ties to even 1");
  CHECK(tg_f32_to_bf16(1.01171875f) == 0x3f82, "bf16: 1 + 3 * 2^-8 ties to even");
  /* f16 */
  CHECK(tg_f32_to_f16(65504.0f) == 0x7bff, "f16 65504");
  CHECK(tg_f32_to_f16(65519.0f) == 0x7bff, "f16: 65519 -> 65504");
  CHECK(tg_f32_to_f16(65520.0f) == 0x7c00, "f16: 65520 -> Inf");
  CHECK(tg_f32_to_f16(-65520.0f) == 0xfc00, "f16: -65520 -> -Inf");
  CHECK(tg_f32_to_f16(1e10f) == 0x7c00 && tg_f32_to_f16(FLT_MAX) == 0x7c00, "f16 overflow");
  CHECK(tg_f32_to_f16(INFINITY) == 0x7c00 && tg_f32_to_f16(-INFINITY) == 0xfc00, "f16 Inf");
  uint16_t hnan = tg_f32_to_f16(from_bits(0x7f800001u));
  CHECK((hnan & 0x7c00) == 0x7c00 && (hnan & 0x0200), "f16: signalling NaN -> 0x%04x", hnan);
  CHECK(tg_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001, "f16: 2^-24 is the smallest subnormal");
  CHECK(tg_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000, "f16: 2^-25 ties to even 0");
  CHECK(tg_f32_to_f16(-ldexpf(1.0f, -25)) == 0x8000, "f16: -2^-25 ties to -0");
  CHECK(tg_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001, "f16: above 2^-25");
  CHECK(tg_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002, "f16: 1.5 * 2^-24 ties to 2");
  CHECK(tg_f32_to_f16(ldexpf(5.0f, -25)) == 0x0002, "f16: 2.5 * 2^-24 ties to 2");
  CHECK(tg_f32_to_f16(ldexpf(2047.0f, -25)) == 0x0400,
        "f16: 1023.5 * 2^-24 rounds up to the smallest normal");
  CHECK(tg_f32_to_f16(ldexpf(2045.0f, -25)) == 0x03fe, "f16: 1022.5 * 2^-24 ties to 1022");
  CHECK(tg_f32_to_f16(1e-40f) == 0x0000 && tg_f32_to_f16(-1e-40f) == 0x8000,
        "f16: f32 subnormals flush to signed zero");
  CHECK(tg_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "f16 0x0001 = 2^-24");
  CHECK(tg_f16_to_f32(0x83ff) == -ldexpf(1023.0f, -24), "f16 0x83ff = -1023 * 2^-24");
  CHECK(tg_f16_to_f32(0x0400) == ldexpf(1.0f, -14), "f16 0x0400 = 2^-14");
  CHECK(isnan(tg_f16_to_f32(0x7c01)) && isnan(tg_f16_to_f32(0xfe00)), "f16 NaNs widen to NaN");
  CHECK(tg_f32_to_f16(1.00048828125f) == 0x3c00, "f16: 1 + 2^-11 ties to even 1");
}

/* array versions agree with the scalar ones */
static void test_arrays(void) {
  enum { N = 1001 };
  float x[N], back[N];
  uint16_t h[N];
  tg_rng rng = {12345};
  tg_rng_fill(&rng, x, N, 70000.0f); /* beyond the f16 range too */
  for (int t = 0; t < 2; t++) {
    int bad = 0;
    tg_cpu_to_lowp(TYPES[t].dt, 1, N, x, N, h, N);
    tg_cpu_from_lowp(TYPES[t].dt, 1, N, h, N, back, N);
    for (int i = 0; i < N; i++)
      if (h[i] != TYPES[t].narrow(x[i]) || bits(back[i]) != bits(TYPES[t].widen(h[i]))) bad++;
    CHECK(bad == 0, "%s: %d array conversions differ from the scalar ones", TYPES[t].name, bad);
  }
  /* the vector paths (F16C on x86-64) against the scalar ones: every 16-bit
   * pattern widened, and a million random f32 bit patterns (NaNs, Infs,
   * subnormals among them) narrowed, in rows of 1000 (remainders of 8) */
  enum { M = 1 << 20, ROW = 1000 };
  uint16_t *all = tg_test_malloc(sizeof(uint16_t) * 65536), *n16 = tg_test_malloc(2 * (size_t)M);
  float *wide = tg_test_malloc(sizeof(float) * 65536), *r = tg_test_malloc(sizeof(float) * M);
  for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
  for (uint32_t i = 0; i < M; i++) {
    uint32_t u = (uint32_t)(tg_rng_next(&rng) >> 32);
    memcpy(&r[i], &u, sizeof u);
  }
  for (int t = 0; t < 2; t++) {
    int bad = 0;
    tg_cpu_from_lowp(TYPES[t].dt, 65536 / 64, 64, all, 64, wide, 64);
    for (uint32_t i = 0; i < 65536; i++) bad += bits(wide[i]) != bits(TYPES[t].widen(all[i]));
    tg_cpu_to_lowp(TYPES[t].dt, M / ROW, ROW, r, ROW, n16, ROW);
    for (uint32_t i = 0; i < M / ROW * ROW; i++) bad += n16[i] != TYPES[t].narrow(r[i]);
    CHECK(bad == 0, "%s: %d vector-path conversions differ from the scalar ones", TYPES[t].name,
          bad);
  }
  free(all);
  free(n16);
  free(wide);
  free(r);
}

/* the contiguous conversions (tg_*_n) against the scalar ones, on every
 * 16-bit pattern (widening) and on random f32 bit patterns (narrowing), at
 * lengths around the vector widths */
static void test_contiguous(void) {
  enum { M = 70001 };
  uint16_t *all = tg_test_malloc(sizeof(uint16_t) * 65536), *h = tg_test_malloc(2 * (size_t)M);
  float *wide = tg_test_malloc(sizeof(float) * 65536), *r = tg_test_malloc(sizeof(float) * M);
  tg_rng rng = {777};
  for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
  for (uint32_t i = 0; i < M; i++) r[i] = from_bits((uint32_t)(tg_rng_next(&rng) >> 32));
  void (*const narrow_n[2])(size_t, const float *, uint16_t *) = {tg_f32_to_bf16_n,
                                                                  tg_f32_to_f16_n};
  void (*const widen_n[2])(size_t, const uint16_t *, float *) = {tg_bf16_to_f32_n,
                                                                 tg_f16_to_f32_n};
  static const size_t lens[] = {1, 7, 8, 9, 33, 65536};
  for (int t = 0; t < 2; t++) {
    int bad = 0;
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      memset(wide, 0x7f, sizeof(float) * 65536);
      widen_n[t](lens[l], all, wide);
      for (size_t i = 0; i < lens[l]; i++) bad += bits(wide[i]) != bits(TYPES[t].widen(all[i]));
      bad += lens[l] < 65536 && bits(wide[lens[l]]) != 0x7f7f7f7fu; /* nothing past n */
    }
    narrow_n[t](M, r, h);
    for (uint32_t i = 0; i < M; i++) bad += h[i] != TYPES[t].narrow(r[i]);
    CHECK(bad == 0, "%s: %d contiguous conversions differ from the scalar ones", TYPES[t].name,
          bad);
  }
  free(all);
  free(h);
  free(wide);
  free(r);
}

void convert_ref(void) {
  for (int t = 0; t < 2; t++) {
    test_exhaustive(&TYPES[t]);
    test_ties(&TYPES[t]);
    test_random_nearest(&TYPES[t]);
  }
  test_named();
  test_arrays();
  test_contiguous();
}
