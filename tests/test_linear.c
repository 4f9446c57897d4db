/*
 * Fused linear kernels and codelets against float64 references:
 *   forward  Z = X W^T + b, H = act(Z)   for ReLU, GELU and no activation;
 *   backward dX = (dZ W) * act'(Zprev)
 * The references are float64 compositions of the definitions (the
 * activation derivatives themselves are checked against finite differences
 * in test_kernels_cpu).
 * Odd sizes (1, 7, 33, 257) and leading dimensions larger than the rows; the
 * codelet path is checked on a StarPU CPU worker, including shape errors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "taskgrad/taskgrad.h"
#include "testutil.h"

static double gelu64(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(u));
}
static double gelu64_grad(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  double du = 0.7978845608028654 * (1.0 + 3 * 0.044715 * x * x);
  double t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}
static double act64(int act, double z) {
  return act == 0 ? (z > 0 ? z : 0) : act == 1 ? gelu64(z) : z;
}
static double act64_grad(int act, double z) {
  return act == 0 ? (z > 0 ? 1 : 0) : act == 1 ? gelu64_grad(z) : 1;
}

static void check_kernels(tg_rng *rng, int rows, int in, int out, int act) {
  int ldx = in + 3, ldw = in + 1, ldz = out + 2, ldh = out + 5, ldd = in + 4;
  float *X = malloc(sizeof(float) * rows * ldx), *W = malloc(sizeof(float) * out * ldw);
  float *b = malloc(sizeof(float) * out), *Z = malloc(sizeof(float) * rows * ldz);
  float *H = malloc(sizeof(float) * rows * ldh), *dZ = malloc(sizeof(float) * rows * ldz);
  float *Zp = malloc(sizeof(float) * rows * ldd), *dX = malloc(sizeof(float) * rows * ldd);
  double *zr = malloc(sizeof(double) * rows * out), *hr = malloc(sizeof(double) * rows * out);
  double *dxr = malloc(sizeof(double) * rows * in);
  float *zg = malloc(sizeof(float) * rows * out), *hg = malloc(sizeof(float) * rows * out);
  float *dxg = malloc(sizeof(float) * rows * in);
  tg_rng_fill(rng, X, (size_t)rows * ldx, 1.0f);
  tg_rng_fill(rng, W, (size_t)out * ldw, 0.5f);
  tg_rng_fill(rng, b, out, 0.5f);
  tg_rng_fill(rng, dZ, (size_t)rows * ldz, 1.0f);
  tg_rng_fill(rng, Zp, (size_t)rows * ldd, 2.0f);
  for (size_t i = 0; i < (size_t)rows * ldz; i++) Z[i] = NAN; /* write-only */
  for (size_t i = 0; i < (size_t)rows * ldd; i++) dX[i] = NAN;
  tg_cpu_linear_fwd(rows, in, out, X, ldx, W, ldw, b, act, Z, ldz, H, ldh);
  tg_cpu_linear_bwd_data(rows, in, out, dZ, ldz, W, ldw, act, Zp, ldd, dX, ldd);
  for (int r = 0; r < rows; r++) {
    for (int o = 0; o < out; o++) {
      double z = b[o];
      for (int i = 0; i < in; i++) z += (double)X[r * ldx + i] * W[o * ldw + i];
      zr[r * out + o] = z;
      hr[r * out + o] = act64(act, z);
      zg[r * out + o] = Z[r * ldz + o];
      hg[r * out + o] = H[r * ldh + o];
    }
    for (int i = 0; i < in; i++) {
      double g = 0;
      for (int o = 0; o < out; o++) g += (double)dZ[r * ldz + o] * W[o * ldw + i];
      dxr[r * in + i] = g * act64_grad(act, Zp[r * ldd + i]);
      dxg[r * in + i] = dX[r * ldd + i];
    }
  }
  char what[96];
  snprintf(what, sizeof what, "linear_fwd Z act=%d (%d,%d,%d)", act, rows, in, out);
  CHECK_REL(tg_rel_err_f64(zg, zr, (size_t)rows * out), 1e-5, what);
  if (act != 2) {
    snprintf(what, sizeof what, "linear_fwd H act=%d (%d,%d,%d)", act, rows, in, out);
    CHECK_REL(tg_rel_err_f64(hg, hr, (size_t)rows * out), 1e-5, what);
  }
  snprintf(what, sizeof what, "linear_bwd_data act=%d (%d,%d,%d)", act, rows, in, out);
  CHECK_REL(tg_rel_err_f64(dxg, dxr, (size_t)rows * in), 1e-5, what);
  free(X); free(W); free(b); free(Z); free(H); free(dZ); free(Zp); free(dX);
  free(zr); free(hr); free(dxr); free(zg); free(hg); free(dxg);
}

/* The codelets on a CPU worker equal the kernels; shape errors are refused. */
static void check_codelets(tg_rng *rng) {
  const int rows = 33, in = 7, out = 257;
  tg_tensor X, W, B, Z, H, dX;
  if (tg_tensor_alloc(&X, rows, in, TG_F32) || tg_tensor_alloc(&W, out, in, TG_F32) ||
      tg_tensor_alloc(&B, 1, out, TG_F32) || tg_tensor_alloc(&Z, rows, out, TG_F32) ||
      tg_tensor_alloc(&H, rows, out, TG_F32) || tg_tensor_alloc(&dX, rows, in, TG_F32)) {
    CHECK(0, "allocation: %s", tg_last_error());
    return;
  }
  tg_rng_fill(rng, X.host, tg_tensor_numel(&X), 1.0f);
  tg_rng_fill(rng, W.host, tg_tensor_numel(&W), 0.5f);
  tg_rng_fill(rng, B.host, tg_tensor_numel(&B), 0.5f);
  float *zk = malloc(sizeof(float) * rows * out), *hk = malloc(sizeof(float) * rows * out);
  float *dk = malloc(sizeof(float) * rows * in);
  tg_cpu_linear_fwd(rows, in, out, X.host, in, W.host, in, B.host, TG_ACT_GELU, zk, out, hk, out);
  /* backward through gelu with dZ := H (any values do) */
  tg_cpu_linear_bwd_data(rows, in, out, hk, out, W.host, in, TG_ACT_GELU, X.host, in, dk, in);
  CHECK(tg_linear_fwd_insert(X.handle, W.handle, B.handle, TG_ACT_GELU, Z.handle, H.handle,
                             NULL) == 0, "linear_fwd insert: %s", tg_last_error());
  CHECK(tg_linear_bwd_data_insert(H.handle, W.handle, TG_ACT_GELU, X.handle, dX.handle,
                                  NULL) == 0, "linear_bwd insert: %s", tg_last_error());
  float *zc = malloc(sizeof(float) * rows * out), *hc = malloc(sizeof(float) * rows * out);
  float *dc = malloc(sizeof(float) * rows * in);
  tg_tensor_read(&Z, zc);
  tg_tensor_read(&H, hc);
  tg_tensor_read(&dX, dc);
  CHECK(memcmp(zc, zk, sizeof(float) * rows * out) == 0, "codelet Z differs from kernel");
  CHECK(memcmp(hc, hk, sizeof(float) * rows * out) == 0, "codelet H differs from kernel");
  CHECK(memcmp(dc, dk, sizeof(float) * rows * in) == 0, "codelet dX differs from kernel");
  /* shape errors: W with the wrong inner dimension, b of the wrong width */
  CHECK(tg_linear_fwd_insert(X.handle, dX.handle, B.handle, TG_ACT_RELU, Z.handle, H.handle,
                             NULL) == -EINVAL, "mismatched W accepted");
  CHECK(strstr(tg_last_error(), "tg_linear_fwd") != NULL, "message: %s", tg_last_error());
  CHECK(tg_linear_fwd_insert(X.handle, W.handle, X.handle, TG_ACT_RELU, Z.handle, H.handle,
                             NULL) == -EINVAL, "mismatched b accepted");
  CHECK(tg_linear_bwd_data_insert(H.handle, W.handle, TG_ACT_RELU, Z.handle, dX.handle,
                                  NULL) == -EINVAL, "mismatched Zprev accepted");
  CHECK(tg_linear_fwd_insert(X.handle, W.handle, B.handle, (tg_activation)7, Z.handle,
                             H.handle, NULL) == -EINVAL, "unknown activation accepted");
  free(zk); free(hk); free(dk); free(zc); free(hc); free(dc);
  tg_tensor *all[] = {&X, &W, &B, &Z, &H, &dX};
  for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
}

int main(void) {
  tg_rng rng = {12345};
  static const int sizes[] = {1, 7, 33, 257};
  for (int act = 0; act < 3; act++)
    for (int a = 0; a < 4; a++)
      for (int c = 0; c < 4; c++)
        check_kernels(&rng, sizes[a], sizes[c], sizes[(a + c + act) % 4], act);
  tg_runtime_config rc = tg_runtime_config_default();
  rc.ncuda = 0;
  if (tg_init(&rc) != 0) {
    fprintf(stderr, "tg_init: %s\n", tg_last_error());
    return 1;
  }
  check_codelets(&rng);
  tg_shutdown();
  return tg_test_finish("test_linear");
}
