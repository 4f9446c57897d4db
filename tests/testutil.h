/*
 * Minimal test harness shared by the C tests: seeded random data, relative
 * errors against float64 references, and CHECK macros that count failures.
 * A test program returns tg_test_finish(): 0 when every check passed, 1
 * otherwise.  Tests that need an absent device return TG_TEST_SKIP (77, which
 * CTest reports as "Skipped").
 */
#ifndef TASKGRAD_TESTUTIL_H
#define TASKGRAD_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TG_TEST_SKIP 77

static int tg_test_failures = 0;
static int tg_test_checks = 0;

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    tg_test_checks++;                                                       \
    if (!(cond)) {                                                          \
      tg_test_failures++;                                                   \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                         \
      fputc('\n', stderr);                                                  \
    }                                                                       \
  } while (0)

/* A relative error no larger than tol (the reference's norm in the
 * denominator, so near-zero entries do not dominate). */
#define CHECK_REL(err, tol, what)                                           \
  CHECK((err) <= (tol), "%s: relative error %.3e > %.1e", (what),           \
        (double)(err), (double)(tol))

static inline int tg_test_finish(const char *name) {
  printf("%s: %d checks, %d failed\n", name, tg_test_checks, tg_test_failures);
  return tg_test_failures ? 1 : 0;
}

/* xorshift64*: reproducible across platforms, unlike rand(). */
typedef struct { uint64_t s; } tg_rng;
static inline uint64_t tg_rng_next(tg_rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545F4914F6CDD1DULL;
}
/* uniform in [-1, 1) */
static inline float tg_rng_uniform(tg_rng *r) {
  return (float)((tg_rng_next(r) >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}
static inline void tg_rng_fill(tg_rng *r, float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = scale * tg_rng_uniform(r);
}

/* ||got - ref|| / max(||ref||, tiny), over n values */
static inline double tg_rel_err_f64(const float *got, const double *ref,
                                    size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den < 1e-300) return sqrt(num);
  return sqrt(num / den);
}
static inline double tg_rel_err_f32(const float *got, const float *ref,
                                    size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  if (den < 1e-300) return sqrt(num);
  return sqrt(num / den);
}

#endif
