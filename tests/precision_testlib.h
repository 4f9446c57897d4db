/*
 * Helpers of the op table's mixed-precision cases (tests/ops): 16-bit
 * tensors filled from f32 data, reading any tensor back as f32, the
 * rounded comparison and the refusal check.  (A case runs once per CPU
 * worker count with ops_run_worker_counts, tests/ops/ops_harness.h.)  All
 * static inline, so a file that uses only some of them compiles without
 * warnings.
 */
#ifndef TASKGRAD_PRECISION_TESTLIB_H
#define TASKGRAD_PRECISION_TESTLIB_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "taskgrad/precision.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "testutil.h"

static const tg_dtype LOWP[2] = {TG_BF16, TG_F16};

static inline int mant_bits(tg_dtype t) { return t == TG_BF16 ? 7 : 10; }

static inline float round16(tg_dtype t, float x) {
  return t == TG_BF16 ? tg_bf16_to_f32(tg_f32_to_bf16(x)) : tg_f16_to_f32(tg_f32_to_f16(x));
}

static inline void fatal_error(const char *what) {
  fprintf(stderr, "FATAL: %s: %s\n", what, tg_last_error());
  exit(1);
}

/* (rows, cols) f32 host tensor holding data (zeros when NULL) */
static inline void new_f32(tg_tensor *t, int rows, int cols, const float *data) {
  if (tg_tensor_alloc(t, rows, cols, TG_F32) != 0) fatal_error("tg_tensor_alloc");
  if (data && tg_tensor_write(t, data) != 0) fatal_error("tg_tensor_write");
}

/* (rows, cols) 16-bit host tensor holding data rounded to the type */
static inline void new_low(tg_tensor *t, tg_dtype dt, int rows, int cols, const float *data) {
  size_t n = (size_t)rows * cols;
  uint16_t *h = tg_test_malloc(sizeof(uint16_t) * n);
  tg_cpu_to_lowp(dt, 1, (int)n, data, (int)n, h, (int)n);
  if (tg_tensor_alloc(t, rows, cols, dt) != 0) fatal_error("tg_tensor_alloc");
  if (tg_tensor_write(t, h) != 0) fatal_error("tg_tensor_write");
  free(h);
}

/* the tensor's values as f32 (dt: its type, TG_F32 or 16-bit); caller frees */
static inline float *read_as_f32(const tg_tensor *t, tg_dtype dt) {
  size_t n = tg_tensor_numel(t);
  float *f = tg_test_malloc(sizeof(float) * n);
  if (dt == TG_F32) {
    if (tg_tensor_read(t, f) != 0) fatal_error("tg_tensor_read");
    return f;
  }
  uint16_t *h = tg_test_malloc(sizeof(uint16_t) * n);
  if (tg_tensor_read(t, h) != 0) fatal_error("tg_tensor_read");
  tg_cpu_from_lowp(dt, 1, (int)n, h, (int)n, f, (int)n);
  free(h);
  return f;
}

/* (rows, cols) uniform values in [-scale, scale), rounded to the type */
static inline float *rounded_rand(tg_rng *rng, tg_dtype t, int rows, int cols, float scale) {
  float *a = tg_rand_mat(rng, rows, cols, cols, scale, 0.0f);
  for (size_t i = 0; i < (size_t)rows * cols; i++) a[i] = round16(t, a[i]);
  return a;
}

/* adapted (16-bit) result == round16(f32 result), bit for bit */
static inline void expect_rounded(tg_dtype t, const tg_tensor *low, const tg_tensor *f32,
                                  const char *what) {
  float *a = read_as_f32(low, t), *b = read_as_f32(f32, TG_F32);
  size_t n = tg_tensor_numel(low), bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (a[i] != round16(t, b[i]) && !(isnan(a[i]) && isnan(b[i]))) {
      if (!bad) first = i;
      bad++;
    }
  CHECK(bad == 0, "%s %s: %zu of %zu values differ (first [%zu]: %g vs round(%g) = %g)",
        tg_dtype_name(t), what, bad, n, first, a[first], b[first], round16(t, b[first]));
  printf("ok   %s %s: %zu values equal the rounded f32 results\n", tg_dtype_name(t), what, n);
  free(a);
  free(b);
}

/* An insert that must be refused: -EINVAL and a message naming `op`. */
#define CHECK_REFUSED(call, op, why)                                              \
  do {                                                                            \
    int rc_ = (call);                                                             \
    CHECK(rc_ == -EINVAL && strstr(tg_last_error(), op) != NULL,                  \
          "%s: expected -EINVAL from %s, got %d (%s)", why, op, rc_, tg_last_error()); \
  } while (0)

#endif
