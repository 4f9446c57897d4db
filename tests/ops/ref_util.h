/*
 * Helpers of the ref backend (CPU kernels against float64 references and
 * finite differences; no StarPU), shared by the rows' ref cases.
 * Moved from test_kernels_cpu.c, test_kernels_gpt.c and test_attention.c,
 * where each had its copy.
 *
 * Conventions of the ref cases: padding of inputs is NaN (or 1e30: reading
 * it poisons the result), padding of outputs the sentinel OUT_PAD, which
 * must survive bit for bit.  Forward results within TOL_FWD (norm-relative,
 * tg_rel_err_f64) of a naive double reference; backward results within
 * TOL_FD of central finite differences (step FD_H, in double) of a scalar
 * function of the double forward: the FD error is ~1e-9..1e-8 here, the
 * float kernels ~1e-7, while a sign or transposition error gives O(1) and a
 * single wrong element of an n-vector at least ~1/sqrt(n) >= 1e-2.
 */
#ifndef TASKGRAD_OPS_REF_UTIL_H
#define TASKGRAD_OPS_REF_UTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops_harness.h"
#include "taskgrad/kernels_cpu.h"

#define TOL_FWD 1e-5
#define TOL_FD 1e-4
#define FD_H 1e-4

/* sentinel in output padding */
static const float OUT_PAD __attribute__((unused)) = -12345.5f;
/* sentinel in rows never written */
static const float UNTOUCHED __attribute__((unused)) = 7.25f;

/* the MLP kernels' sizes: odd, and one above a power of two */
#define NSIZES 4
static const int SIZES[NSIZES] __attribute__((unused)) = {1, 7, 33, 257};
/* the GPT kernels' rows and channels */
#define NN 4
static const int NS[NN] __attribute__((unused)) = {1, 7, 33, 100};
#define NC 4
static const int CS[NC] __attribute__((unused)) = {1, 7, 33, 64};

static inline float *copy_mat(const float *m, int rows, int ld) {
  float *c = tg_test_malloc(sizeof(float) * (size_t)rows * ld);
  memcpy(c, m, sizeof(float) * (size_t)rows * ld);
  return c;
}

/* compact float copy (rows * cols) of a padded matrix */
static inline float *compact_f32(const float *m, int rows, int cols, int ld) {
  float *c = tg_test_malloc(sizeof(float) * ((size_t)rows * cols + 1));
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) c[(size_t)r * cols + j] = m[(size_t)r * ld + j];
  return c;
}

/* norm-relative error of the (rows, cols) part of a padded float matrix
 * against a compact double reference; NaN anywhere gives infinity */
static inline double mat_err(const float *got, int rows, int cols, int ld, const double *ref) {
  double num = 0, den = 0;
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) {
      double g = got[(size_t)r * ld + j], e = ref[(size_t)r * cols + j];
      num += (g - e) * (g - e);
      den += e * e;
    }
  if (!(num == num)) return INFINITY; /* NaN */
  return den < 1e-300 ? sqrt(num) : sqrt(num / den);
}

/* the same for the increment got - before of an accumulated output */
static inline double delta_err(const float *got, const float *before, int rows, int cols,
                               int ld, const double *ref) {
  double num = 0, den = 0;
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) {
      size_t k = (size_t)r * ld + j;
      double g = (double)got[k] - (double)before[k];
      double e = ref[(size_t)r * cols + j];
      num += (g - e) * (g - e);
      den += e * e;
    }
  if (!(num == num)) return INFINITY;
  return den < 1e-300 ? sqrt(num) : sqrt(num / den);
}

/* the padding floats of every row still equal `pad`, bit for bit */
static inline int pad_intact(const float *m, int rows, int cols, int ld, float pad) {
  for (int r = 0; r < rows; r++)
    for (int c = cols; c < ld; c++)
      if (memcmp(&m[(size_t)r * ld + c], &pad, sizeof pad) != 0) return 0;
  return 1;
}

static inline int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, sizeof(float) * n) == 0;
}

static inline double rel_err_scalar(double got, double ref) {
  if (got != got) return INFINITY;
  return fabs(got - ref) / fmax(fabs(ref), 1e-300);
}

/* ||a - b|| / ||b|| over two double vectors */
static inline double rel_err_dd(const double *a, const double *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den < 1e-300 ? sqrt(num) : sqrt(num / den);
}

/* n tokens in [0, V), never `skip` (when V > 1) */
static inline int32_t *rand_tokens(tg_rng *rng, int n, int V, int skip) {
  int32_t *t = tg_test_malloc(sizeof(int32_t) * (n + 1));
  for (int i = 0; i < n; i++) {
    int32_t v;
    do v = (int32_t)(tg_rng_next(rng) % (uint64_t)V);
    while (v == skip && V > 1);
    t[i] = v;
  }
  return t;
}

#endif
