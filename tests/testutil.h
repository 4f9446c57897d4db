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
#include <string.h>

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

/* ---- padded matrices and finite differences (the kernel tests) ---------- */

static inline void *tg_test_malloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* (rows, ld) float matrix: entries offset + uniform in [-scale, scale),
 * `pad` in the ld - cols padding floats of every row. */
static inline float *tg_pad_mat(tg_rng *rng, int rows, int cols, int ld, float scale,
                                float offset, float pad) {
  float *m = tg_test_malloc(sizeof(float) * (size_t)rows * ld);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < ld; c++)
      m[(size_t)r * ld + c] = c < cols ? offset + scale * tg_rng_uniform(rng) : pad;
  return m;
}
static inline float *tg_rand_mat(tg_rng *rng, int rows, int cols, int ld, float scale,
                                 float pad) {
  return tg_pad_mat(rng, rows, cols, ld, scale, 0.0f, pad);
}

static inline float *tg_const_mat(int rows, int cols, int ld, float value, float pad) {
  float *m = tg_test_malloc(sizeof(float) * (size_t)rows * ld);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < ld; c++) m[(size_t)r * ld + c] = c < cols ? value : pad;
  return m;
}

static inline float *tg_copy_f(const float *m, size_t n) {
  float *c = tg_test_malloc(sizeof(float) * n);
  memcpy(c, m, sizeof(float) * n);
  return c;
}

/* compact double copy (rows * cols) of a padded float matrix */
static inline double *tg_compact_f64(const float *m, int rows, int cols, int ld) {
  double *c = tg_test_malloc(sizeof(double) * ((size_t)rows * cols + 1));
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) c[(size_t)r * cols + j] = m[(size_t)r * ld + j];
  return c;
}

/* Central finite differences of a scalar function f(x, ctx) in double. */
typedef double (*tg_scalar_fn)(const double *x, const void *ctx);
static inline double *tg_fd_grad(tg_scalar_fn f, const void *ctx, double *x, size_t n,
                                 double h) {
  double *g = tg_test_malloc(sizeof(double) * (n + 1));
  for (size_t i = 0; i < n; i++) {
    double x0 = x[i];
    x[i] = x0 + h;
    double fp = f(x, ctx);
    x[i] = x0 - h;
    double fm = f(x, ctx);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

#endif
