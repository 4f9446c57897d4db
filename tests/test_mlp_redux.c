/*
 * MLP gradients do not depend on how the batch is split into micro-batches.
 *
 * An MLP 13-17-11-5 (relu, then gelu) on one batch of B = 29 rows (so every
 * split but M = 1 is uneven), the same weights every run (same seed in
 * tg_mlp_create):
 *  - for M in {1, 2, 3, 7}, tg_mlp_forward_backward accumulates dW and db
 *    over the micro-batches with STARPU_REDUX; every gradient tensor must
 *    match the M = 1 run to a norm-relative error <= 1e-5 and the loss to
 *    1e-6 relative;
 *  - the M = 1 gradients and loss are also checked against a float64
 *    reference computed here with naive loops (PyTorch semantics: batch-mean
 *    cross-entropy, y = x W^T + b, gelu with the tanh approximation) from the
 *    weights read back from the model, to 1e-5, so that a graph error that
 *    is the same for every M still fails.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "taskgrad/mlp.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "testutil.h"

enum { B = 29, NL = 3, NSPLITS = 4 };
static const int WIDTHS[NL + 1] = {13, 17, 11, 5};
static const int SPLITS[NSPLITS] = {1, 2, 3, 7};
static const uint64_t SEED = 20240611;

#define GRAD_TOL 1e-5
#define LOSS_TOL 1e-6
#define REF_TOL 1e-5

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

/* ---- one batch, split into m row blocks -------------------------------- */

typedef struct test_batch {
  tg_tensor x, y;
  starpu_data_handle_t xs[B], ys[B];
  tg_batch batch;
} test_batch;

static int batch_make(test_batch *tb, const float *x, const int32_t *y, int f,
                      int m) {
  memset(tb, 0, sizeof *tb);
  if (tg_tensor_alloc(&tb->x, B, f, TG_F32) < 0 ||
      tg_tensor_alloc(&tb->y, B, 1, TG_I32) < 0)
    return -1;
  /* no task has touched these buffers yet */
  memcpy(tb->x.host, x, sizeof(float) * B * f);
  memcpy(tb->y.host, y, sizeof(int32_t) * B);
  struct starpu_data_filter filt = {
      .filter_func = starpu_matrix_filter_vertical_block, .nchildren = (unsigned)m};
  starpu_data_partition(tb->x.handle, &filt);
  starpu_data_partition(tb->y.handle, &filt);
  for (int i = 0; i < m; i++) {
    tb->xs[i] = starpu_data_get_sub_data(tb->x.handle, 1, i);
    tb->ys[i] = starpu_data_get_sub_data(tb->y.handle, 1, i);
  }
  tb->batch = (tg_batch){.rows = B, .nmicro = m, .x = tb->xs, .y = tb->ys};
  return 0;
}

static void batch_free(test_batch *tb) {
  if (tb->batch.nmicro > 0) {
    starpu_data_unpartition(tb->x.handle, STARPU_MAIN_RAM);
    starpu_data_unpartition(tb->y.handle, STARPU_MAIN_RAM);
  }
  tg_tensor_free(&tb->x);
  tg_tensor_free(&tb->y);
}

/* ---- results of one run ------------------------------------------------ */

typedef struct result {
  float *w[NL], *b[NL], *dw[NL], *db[NL];
  double loss;
} result;

static void result_free(result *r) {
  for (int l = 0; l < NL; l++) {
    free(r->w[l]);
    free(r->b[l]);
    free(r->dw[l]);
    free(r->db[l]);
  }
  memset(r, 0, sizeof *r);
}

static int run_split(const tg_mlp_config *cfg, const float *x, const int32_t *y,
                     int m, result *out) {
  memset(out, 0, sizeof *out);
  tg_mlp model;
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  if (tg_mlp_create(&model, cfg, &opt, SEED) < 0) {
    fprintf(stderr, "tg_mlp_create: %s\n", tg_last_error());
    return -1;
  }
  test_batch tb;
  int rc = batch_make(&tb, x, y, WIDTHS[0], m);
  if (rc == 0 && tg_mlp_forward_backward(&model, &tb.batch) < 0) {
    fprintf(stderr, "tg_mlp_forward_backward (M = %d): %s\n", m, tg_last_error());
    rc = -1;
  }
  if (rc == 0) {
    for (int l = 0; l < NL && rc == 0; l++) {
      size_t nw = tg_tensor_numel(&model.w[l]), nb = tg_tensor_numel(&model.b[l]);
      out->w[l] = xmalloc(sizeof(float) * nw);
      out->b[l] = xmalloc(sizeof(float) * nb);
      out->dw[l] = xmalloc(sizeof(float) * nw);
      out->db[l] = xmalloc(sizeof(float) * nb);
      if (tg_tensor_read(&model.w[l], out->w[l]) < 0 ||
          tg_tensor_read(&model.b[l], out->b[l]) < 0 ||
          tg_tensor_read(&model.dw[l], out->dw[l]) < 0 ||
          tg_tensor_read(&model.db[l], out->db[l]) < 0) {
        fprintf(stderr, "tg_tensor_read: %s\n", tg_last_error());
        rc = -1;
      }
    }
    if (rc == 0 && tg_mlp_metrics(&model, &out->loss, NULL, 0) < 0) {
      fprintf(stderr, "tg_mlp_metrics: %s\n", tg_last_error());
      rc = -1;
    }
  }
  starpu_task_wait_for_all();
  batch_free(&tb);
  tg_mlp_destroy(&model);
  if (rc < 0) result_free(out);
  return rc;
}

/* ---- float64 reference ------------------------------------------------- */

static double act_f(tg_activation act, double z) {
  if (act == TG_ACT_RELU) return z > 0 ? z : 0;
  const double k = sqrt(2.0 / M_PI);
  return 0.5 * z * (1.0 + tanh(k * (z + 0.044715 * z * z * z)));
}

static double act_df(tg_activation act, double z) {
  if (act == TG_ACT_RELU) return z > 0 ? 1 : 0;
  const double k = sqrt(2.0 / M_PI);
  double t = tanh(k * (z + 0.044715 * z * z * z));
  return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * z * z);
}

/* Gradients of the batch-mean cross-entropy for weights (w, b): dw, db
 * (double, laid out like w, b); returns the loss. */
static double reference(tg_activation act, float *const *w, float *const *b,
                        const float *x, const int32_t *y, double **dw,
                        double **db) {
  double *h[NL + 1], *z[NL]; /* h[0] = x, h[l+1] = act(z[l]); z[NL-1] logits */
  h[0] = xmalloc(sizeof(double) * B * WIDTHS[0]);
  for (int i = 0; i < B * WIDTHS[0]; i++) h[0][i] = x[i];
  for (int l = 0; l < NL; l++) {
    int in = WIDTHS[l], out = WIDTHS[l + 1];
    z[l] = xmalloc(sizeof(double) * B * out);
    h[l + 1] = xmalloc(sizeof(double) * B * out);
    for (int r = 0; r < B; r++)
      for (int o = 0; o < out; o++) {
        double s = b[l][o];
        for (int k = 0; k < in; k++) s += h[l][r * in + k] * (double)w[l][o * in + k];
        z[l][r * out + o] = s;
        h[l + 1][r * out + o] = l + 1 < NL ? act_f(act, s) : s;
      }
  }
  /* softmax cross-entropy, mean over rows */
  int C = WIDTHS[NL];
  double loss = 0;
  double *dz = xmalloc(sizeof(double) * B * C);
  for (int r = 0; r < B; r++) {
    const double *lg = &z[NL - 1][r * C];
    double mx = lg[0];
    for (int c = 1; c < C; c++) mx = lg[c] > mx ? lg[c] : mx;
    double se = 0;
    for (int c = 0; c < C; c++) se += exp(lg[c] - mx);
    double lse = mx + log(se);
    loss += (lse - lg[y[r]]) / B;
    for (int c = 0; c < C; c++)
      dz[r * C + c] = (exp(lg[c] - lse) - (c == y[r] ? 1.0 : 0.0)) / B;
  }
  for (int l = NL - 1; l >= 0; l--) {
    int in = WIDTHS[l], out = WIDTHS[l + 1];
    for (int o = 0; o < out; o++) {
      double sb = 0;
      for (int r = 0; r < B; r++) sb += dz[r * out + o];
      db[l][o] = sb;
      for (int k = 0; k < in; k++) {
        double s = 0;
        for (int r = 0; r < B; r++) s += dz[r * out + o] * h[l][r * in + k];
        dw[l][o * in + k] = s;
      }
    }
    if (l == 0) break;
    double *dprev = xmalloc(sizeof(double) * B * in);
    for (int r = 0; r < B; r++)
      for (int k = 0; k < in; k++) {
        double s = 0;
        for (int o = 0; o < out; o++) s += dz[r * out + o] * (double)w[l][o * in + k];
        dprev[r * in + k] = s * act_df(act, z[l - 1][r * in + k]);
      }
    free(dz);
    dz = dprev;
  }
  free(dz);
  for (int l = 0; l <= NL; l++) free(h[l]);
  for (int l = 0; l < NL; l++) free(z[l]);
  return loss;
}

static void check_activation(tg_activation act, const float *x, const int32_t *y) {
  const char *aname = act == TG_ACT_RELU ? "relu" : "gelu";
  tg_mlp_config cfg = {.nlayers = NL, .act = act};
  for (int l = 0; l <= NL; l++) cfg.widths[l] = WIDTHS[l];

  result res[NSPLITS];
  int ok[NSPLITS];
  for (int s = 0; s < NSPLITS; s++) {
    ok[s] = run_split(&cfg, x, y, SPLITS[s], &res[s]) == 0;
    CHECK(ok[s], "%s: the run with M = %d failed", aname, SPLITS[s]);
  }
  if (!ok[0]) {
    for (int s = 1; s < NSPLITS; s++)
      if (ok[s]) result_free(&res[s]);
    return;
  }

  /* M = 1 against the float64 reference from the same weights */
  double *rdw[NL], *rdb[NL];
  for (int l = 0; l < NL; l++) {
    rdw[l] = xmalloc(sizeof(double) * WIDTHS[l + 1] * WIDTHS[l]);
    rdb[l] = xmalloc(sizeof(double) * WIDTHS[l + 1]);
  }
  double rloss = reference(act, res[0].w, res[0].b, x, y, rdw, rdb);
  double lerr = fabs(res[0].loss - rloss) / fabs(rloss);
  printf("%s M=1 vs float64: loss %.9f (ref %.9f, rel err %.2e)\n", aname,
         res[0].loss, rloss, lerr);
  char what[128];
  snprintf(what, sizeof what, "%s M=1 loss vs float64", aname);
  CHECK_REL(lerr, REF_TOL, what);
  for (int l = 0; l < NL; l++) {
    size_t nw = (size_t)WIDTHS[l + 1] * WIDTHS[l], nb = (size_t)WIDTHS[l + 1];
    double ew = tg_rel_err_f64(res[0].dw[l], rdw[l], nw);
    double eb = tg_rel_err_f64(res[0].db[l], rdb[l], nb);
    printf("%s M=1 vs float64: layer %d dW rel err %.2e, db rel err %.2e\n", aname,
           l, ew, eb);
    snprintf(what, sizeof what, "%s M=1 dW[%d] vs float64", aname, l);
    CHECK_REL(ew, REF_TOL, what);
    snprintf(what, sizeof what, "%s M=1 db[%d] vs float64", aname, l);
    CHECK_REL(eb, REF_TOL, what);
    free(rdw[l]);
    free(rdb[l]);
  }

  /* every split against M = 1 */
  for (int s = 1; s < NSPLITS; s++) {
    if (!ok[s]) continue;
    int m = SPLITS[s];
    /* the weights must be identical, or the comparison is meaningless */
    for (int l = 0; l < NL; l++) {
      size_t nw = (size_t)WIDTHS[l + 1] * WIDTHS[l], nb = (size_t)WIDTHS[l + 1];
      CHECK(memcmp(res[s].w[l], res[0].w[l], sizeof(float) * nw) == 0 &&
                memcmp(res[s].b[l], res[0].b[l], sizeof(float) * nb) == 0,
            "%s M=%d: layer %d weights differ from the M=1 model (same seed)", aname,
            m, l);
    }
    double le = fabs(res[s].loss - res[0].loss) / fabs(res[0].loss);
    double worst = 0;
    for (int l = 0; l < NL; l++) {
      size_t nw = (size_t)WIDTHS[l + 1] * WIDTHS[l], nb = (size_t)WIDTHS[l + 1];
      double ew = tg_rel_err_f32(res[s].dw[l], res[0].dw[l], nw);
      double eb = tg_rel_err_f32(res[s].db[l], res[0].db[l], nb);
      snprintf(what, sizeof what, "%s M=%d dW[%d] vs M=1", aname, m, l);
      CHECK_REL(ew, GRAD_TOL, what);
      snprintf(what, sizeof what, "%s M=%d db[%d] vs M=1", aname, m, l);
      CHECK_REL(eb, GRAD_TOL, what);
      worst = fmax(worst, fmax(ew, eb));
    }
    printf("%s M=%d vs M=1: loss %.9f (rel err %.2e), worst gradient rel err %.2e\n",
           aname, m, res[s].loss, le, worst);
    snprintf(what, sizeof what, "%s M=%d loss vs M=1", aname, m);
    CHECK_REL(le, LOSS_TOL, what);
    result_free(&res[s]);
  }
  result_free(&res[0]);
}

int main(void) {
  if (tg_init(NULL) < 0) {
    fprintf(stderr, "tg_init: %s\n", tg_last_error());
    return 1;
  }
  printf("test_mlp_redux: %d CPU workers, %d CUDA workers\n", tg_ncpu_workers(),
         tg_ncuda_workers());
  float *x = xmalloc(sizeof(float) * B * WIDTHS[0]);
  int32_t y[B];
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  tg_rng_fill(&rng, x, (size_t)B * WIDTHS[0], 1.5f);
  for (int r = 0; r < B; r++) y[r] = (int32_t)(tg_rng_next(&rng) % WIDTHS[NL]);

  check_activation(TG_ACT_RELU, x, y);
  check_activation(TG_ACT_GELU, x, y);

  free(x);
  tg_shutdown();
  return tg_test_finish("test_mlp_redux");
}
