/*
 * test_precision_adapter: the low-precision adapter (codelets/lowp_adapter.c)
 * that lets every f32 codelet take bf16 / fp16 buffers, with 1 and 2 CPU
 * workers.  For each 16-bit type, the same task runs twice on values that
 * are exactly representable in the type: once with 16-bit buffers (adapted),
 * once with f32 buffers holding the same values (plain f32 codelet).  The
 * adapted outputs must equal the f32 outputs rounded once to the type, bit
 * for bit, since the adapter widens inputs exactly, runs the same f32
 * kernel, and rounds each output once:
 *  - fused linear forward with GELU (X, W, Z, H 16-bit; b f32), 37 rows,
 *    29 -> 23 features (no tile is whole);
 *  - LayerNorm backward (9 buffers: dY, X, dX 16-bit, dX read-modify-write;
 *    statistics and weight gradients f32);
 *  - a GEMM with a 16-bit C accumulated (RW: C is read, then rounded again).
 * Refusals: a 2-byte buffer with no opts.lowp, and a 2-byte REDUX target.
 */
#include <math.h>

#include "precision_testlib.h"

static float *rounded_rand(tg_rng *rng, tg_dtype t, int rows, int cols, float scale) {
  float *a = tg_rand_mat(rng, rows, cols, cols, scale, 0.0f);
  for (size_t i = 0; i < (size_t)rows * cols; i++) a[i] = round16(t, a[i]);
  return a;
}

/* adapted (16-bit) result == round16(f32 result), bit for bit */
static void expect_rounded(tg_dtype t, const tg_tensor *low, const tg_tensor *f32,
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

static void linear_case(tg_rng *rng, tg_dtype t) {
  int rows = 37, in = 29, out = 23;
  float *x = rounded_rand(rng, t, rows, in, 1.0f), *w = rounded_rand(rng, t, out, in, 0.3f);
  float *b = tg_rand_mat(rng, 1, out, out, 0.1f, 0.0f);
  tg_tensor X, Wt, Z, H, X32, W32, B32, Z32, H32;
  new_low(&X, t, rows, in, x);
  new_low(&Wt, t, out, in, w);
  new_f32(&B32, 1, out, b);
  CHECK(tg_tensor_alloc(&Z, rows, out, t) == 0, "alloc");
  CHECK(tg_tensor_alloc(&H, rows, out, t) == 0, "alloc");
  new_f32(&X32, rows, in, x);
  new_f32(&W32, out, in, w);
  new_f32(&Z32, rows, out, NULL);
  new_f32(&H32, rows, out, NULL);
  tg_task_opts o = {0, -1, NULL, t};
  CHECK(tg_linear_fwd_insert(X.handle, Wt.handle, B32.handle, TG_ACT_GELU, Z.handle, H.handle,
                             &o) == 0, "linear 16-bit: %s", tg_last_error());
  CHECK(tg_linear_fwd_insert(X32.handle, W32.handle, B32.handle, TG_ACT_GELU, Z32.handle,
                             H32.handle, NULL) == 0, "linear f32: %s", tg_last_error());
  expect_rounded(t, &Z, &Z32, "linear forward Z");
  expect_rounded(t, &H, &H32, "linear forward GELU(Z)");

  /* a 16-bit C accumulated: C = X W^T + C */
  float *c0 = rounded_rand(rng, t, rows, out, 1.0f);
  tg_tensor C, C32;
  new_low(&C, t, rows, out, c0);
  new_f32(&C32, rows, out, c0);
  CHECK(tg_gemm_insert(0, 1, 1.0f, X.handle, Wt.handle, 1.0f, C.handle, TG_ACCUMULATE, &o) == 0,
        "gemm 16-bit C: %s", tg_last_error());
  CHECK(tg_gemm_insert(0, 1, 1.0f, X32.handle, W32.handle, 1.0f, C32.handle, TG_ACCUMULATE,
                       NULL) == 0, "gemm f32: %s", tg_last_error());
  expect_rounded(t, &C, &C32, "GEMM with an accumulated 16-bit C");

  /* refusals */
  CHECK_REFUSED(tg_gemm_insert(0, 1, 1.0f, X.handle, Wt.handle, 1.0f, C.handle, TG_ACCUMULATE,
                               NULL), "tg_gemm", "a 2-byte buffer without opts.lowp");
  tg_tensor_enable_reduction(&C);
  CHECK_REFUSED(tg_gemm_insert(0, 1, 1.0f, X.handle, Wt.handle, 1.0f, C.handle, TG_REDUCE, &o),
                "tg_gemm", "a 2-byte REDUX target");
  tg_tensor *all[] = {&X, &Wt, &Z, &H, &X32, &W32, &B32, &Z32, &H32, &C, &C32};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(x);
  free(w);
  free(b);
  free(c0);
}

static void layernorm_case(tg_rng *rng, tg_dtype t) {
  int rows = 19, C = 45;
  float *x = rounded_rand(rng, t, rows, C, 1.0f), *dy = rounded_rand(rng, t, rows, C, 1.0f);
  float *dx0 = rounded_rand(rng, t, rows, C, 0.5f);
  float *w = tg_rand_mat(rng, 1, C, C, 1.0f, 0.0f), *bb = tg_rand_mat(rng, 1, C, C, 0.1f, 0.0f);
  tg_tensor X, DY, DX, X32, DY32, DX32, Wt, Bt, Y32, mean, rstd, dw, db, dw32, db32;
  new_low(&X, t, rows, C, x);
  new_low(&DY, t, rows, C, dy);
  new_low(&DX, t, rows, C, dx0);
  new_f32(&X32, rows, C, x);
  new_f32(&DY32, rows, C, dy);
  new_f32(&DX32, rows, C, dx0);
  new_f32(&Wt, 1, C, w);
  new_f32(&Bt, 1, C, bb);
  new_f32(&Y32, rows, C, NULL);
  new_f32(&mean, rows, 1, NULL);
  new_f32(&rstd, rows, 1, NULL);
  new_f32(&dw, 1, C, NULL);
  new_f32(&db, 1, C, NULL);
  new_f32(&dw32, 1, C, NULL);
  new_f32(&db32, 1, C, NULL);
  /* statistics once, from the (exactly representable) f32 input */
  CHECK(tg_layernorm_fwd_insert(X32.handle, Wt.handle, Bt.handle, Y32.handle, mean.handle,
                                rstd.handle, NULL) == 0, "ln fwd: %s", tg_last_error());
  tg_task_opts o = {0, -1, NULL, t};
  CHECK(tg_layernorm_bwd_insert(DY.handle, X.handle, Wt.handle, mean.handle, rstd.handle,
                                DX.handle, dw.handle, db.handle, TG_ACCUMULATE, &o) == 0,
        "ln bwd 16-bit: %s", tg_last_error());
  CHECK(tg_layernorm_bwd_insert(DY32.handle, X32.handle, Wt.handle, mean.handle, rstd.handle,
                                DX32.handle, dw32.handle, db32.handle, TG_ACCUMULATE, NULL) == 0,
        "ln bwd f32: %s", tg_last_error());
  expect_rounded(t, &DX, &DX32, "LayerNorm backward dX (read-modify-write)");
  float *a = read_as_f32(&dw, TG_F32), *b = read_as_f32(&dw32, TG_F32);
  CHECK(memcmp(a, b, sizeof(float) * C) == 0, "%s LayerNorm dw differs from f32",
        tg_dtype_name(t));
  free(a);
  free(b);
  tg_tensor *all[] = {&X, &DY, &DX, &X32, &DY32, &DX32, &Wt, &Bt, &Y32, &mean, &rstd,
                      &dw, &db, &dw32, &db32};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(x);
  free(dy);
  free(dx0);
  free(w);
  free(bb);
}

static void body(void) {
  tg_rng rng = {2024};
  for (int k = 0; k < 2; k++) {
    linear_case(&rng, LOWP[k]);
    layernorm_case(&rng, LOWP[k]);
  }
}

int main(int argc, char **argv) {
  return precision_run_configs(argc, argv, "test_precision_adapter", body);
}
