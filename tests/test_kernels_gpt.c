/*
 * GPT-2 CPU kernels (embedding, layernorm, residual, classifier) against
 * independent float64 references written here with naive loops.
 *
 *  - forward: odd sizes (n in {1, 7, 33, 100}, C in {1, 7, 33, 64}, T
 *    dividing n or not, V in {1, 7, 250, 257} with padded vocabularies
 *    Vp > V and V == Vp, chunk in {1, 16, 64, 1000}), leading dimensions
 *    larger than the rows.  Input padding is NaN or 1e30 (reading it poisons
 *    the result), output padding a sentinel that must survive bit for bit.
 *    Norm-relative error (tg_rel_err_f64) <= 1e-5, the loss 1e-5 relative.
 *  - backward: against central finite differences in double of a scalar
 *    function of the double forward, L = sum(G .* f(x)) with random G (the
 *    loss itself for the classifier), and for the classifier also against
 *    the analytic double gradient on every case.  Accumulated outputs start
 *    from random non-zero values and the increment (after - before) is what
 *    is compared, so a write instead of += fails, and so does a gradient
 *    that only adds where it should write (dlnf starts as NaN).  Norm-
 *    relative error <= 1e-4 vs FD (the FD error is ~1e-8 here, float
 *    kernels ~1e-7; a sign error or a missing term gives O(1e-2) or more).
 *    The classifier's analytic dwte is held to 1e-5, its dlnf to 1e-4 (see
 *    cls_case).  LayerNorm also runs rows with a mean large against their
 *    spread (1000 + 0.03 u), where a float mean alone is 2e-3 off.
 *  - untouched memory: padded vocabulary rows of dwte, dwte rows that no
 *    token references, dwpe rows >= T, output padding, a guard after the
 *    classifier's scratch: all compared bit for bit; embedding_bwd must also
 *    equal the sequential float sums bit for bit (fixed row order).
 *
 * No StarPU: only kernels_cpu.h and the kernels (and OpenBLAS through them).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "taskgrad/kernels_cpu.h"
#include "testutil.h"

#define TOL_FWD 1e-5
#define TOL_FD 1e-4
#define FD_H 1e-4

static const float OUT_PAD = -12345.5f; /* sentinel in output padding */
static const float UNTOUCHED = 7.25f;   /* sentinel in rows never written */

#define NN 4
static const int NS[NN] = {1, 7, 33, 100};
#define NC 4
static const int CS[NC] = {1, 7, 33, 64};

/* ---- helpers ------------------------------------------------------------- */

/* norm-relative error of the (rows, cols) part of a padded float matrix
 * against a compact double reference */
static double mat_err(const float *got, int rows, int cols, int ld,
                      const double *ref) {
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
static double delta_err(const float *got, const float *before, int rows,
                        int cols, int ld, const double *ref) {
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
static int pad_intact(const float *m, int rows, int cols, int ld, float pad) {
  for (int r = 0; r < rows; r++)
    for (int c = cols; c < ld; c++)
      if (memcmp(&m[(size_t)r * ld + c], &pad, sizeof pad) != 0) return 0;
  return 1;
}

static int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, sizeof(float) * n) == 0;
}

static double rel_err_scalar(double got, double ref) {
  if (got != got) return INFINITY;
  return fabs(got - ref) / fmax(fabs(ref), 1e-300);
}

/* Central finite differences of a scalar function f(x, ctx) in double. */
static int32_t *rand_tokens(tg_rng *rng, int n, int V, int skip) {
  int32_t *t = tg_test_malloc(sizeof(int32_t) * (n + 1));
  for (int i = 0; i < n; i++) {
    int32_t v;
    do v = (int32_t)(tg_rng_next(rng) % (uint64_t)V);
    while (v == skip && V > 1);
    t[i] = v;
  }
  return t;
}

/* ---- embedding ----------------------------------------------------------- */

typedef struct {
  int n, T, C, Vp;
  const int32_t *tok;
  const double *G; /* (n, C) */
} emb_ctx;

/* L(wte, wpe) = sum G .* X, x = [wte (Vp, C) | wpe (T, C)] */
static double emb_loss(const double *x, const void *vctx) {
  const emb_ctx *c = vctx;
  const double *wte = x, *wpe = x + (size_t)c->Vp * c->C;
  double L = 0;
  for (int i = 0; i < c->n; i++)
    for (int j = 0; j < c->C; j++)
      L += c->G[(size_t)i * c->C + j] *
           (wte[(size_t)c->tok[i] * c->C + j] +
            wpe[(size_t)(i % c->T) * c->C + j]);
  return L;
}

static void test_embedding(tg_rng *rng) {
  char what[128];
  const int V = 30, Vp = 37, SKIP = 5; /* token 5 and rows >= 30 unused */
  for (int in = 0; in < NN; in++)
    for (int ic = 0; ic < NC; ic++)
      for (int it = 0; it < 3; it++) {
        int n = NS[in], C = CS[ic];
        int T = it == 0 ? 1 : it == 1 ? 7 : n; /* 7 does not divide 33, 100 */
        int maxT = T + 3, ldx = C + 3;
        int32_t *tok = rand_tokens(rng, n, V, SKIP);
        float *wte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
        float *wpe = tg_pad_mat(rng, maxT, C, C, 1.0f, 0.0f, 0.0f);
        for (int v = V; v < Vp; v++) /* never referenced: poison */
          for (int j = 0; j < C; j++) wte[(size_t)v * C + j] = NAN;
        for (int t = T; t < maxT; t++)
          for (int j = 0; j < C; j++) wpe[(size_t)t * C + j] = NAN;

        /* forward */
        double *ref = tg_test_malloc(sizeof(double) * n * C);
        for (int i = 0; i < n; i++)
          for (int j = 0; j < C; j++)
            ref[(size_t)i * C + j] = (double)wte[(size_t)tok[i] * C + j] +
                                     (double)wpe[(size_t)(i % T) * C + j];
        float *X = tg_const_mat(n, C, ldx, NAN, OUT_PAD);
        tg_cpu_embedding_fwd(n, T, C, tok, wte, wpe, X, ldx);
        snprintf(what, sizeof what, "embedding_fwd n=%d T=%d C=%d", n, T, C);
        CHECK_REL(mat_err(X, n, C, ldx, ref), TOL_FWD, what);
        CHECK(pad_intact(X, n, C, ldx, OUT_PAD), "%s wrote padding", what);

        /* backward: G = dX, accumulated onto random tables */
        float *dX = tg_pad_mat(rng, n, C, ldx, 1.0f, 0.0f, NAN);
        float *dwte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
        float *dwpe = tg_pad_mat(rng, maxT, C, C, 1.0f, 0.0f, 0.0f);
        for (int j = 0; j < C; j++) dwte[(size_t)SKIP * C + j] = UNTOUCHED;
        for (size_t k = (size_t)V * C; k < (size_t)Vp * C; k++)
          dwte[k] = UNTOUCHED;
        for (size_t k = (size_t)T * C; k < (size_t)maxT * C; k++)
          dwpe[k] = UNTOUCHED;
        float *dwte0 = tg_copy_f(dwte, (size_t)Vp * C);
        float *dwpe0 = tg_copy_f(dwpe, (size_t)maxT * C);
        tg_cpu_embedding_bwd(n, T, C, tok, dX, ldx, dwte, dwpe);

        /* FD of L = sum dX .* X(wte, wpe) */
        double *G = tg_compact_f64(dX, n, C, ldx);
        size_t nv = (size_t)(Vp + T) * C;
        double *x = tg_test_malloc(sizeof(double) * (nv + 1));
        for (size_t k = 0; k < (size_t)Vp * C; k++) x[k] = wte[k];
        for (size_t k = 0; k < (size_t)T * C; k++)
          x[(size_t)Vp * C + k] = wpe[k];
        for (size_t k = (size_t)V * C; k < (size_t)Vp * C; k++) x[k] = 0.0;
        emb_ctx ctx = {n, T, C, Vp, tok, G};
        double *g = tg_fd_grad(emb_loss, &ctx, x, nv, FD_H);
        snprintf(what, sizeof what, "embedding_bwd dwte vs FD n=%d T=%d C=%d",
                 n, T, C);
        CHECK_REL(delta_err(dwte, dwte0, V, C, C, g), TOL_FD, what);
        snprintf(what, sizeof what, "embedding_bwd dwpe vs FD n=%d T=%d C=%d",
                 n, T, C);
        CHECK_REL(delta_err(dwpe, dwpe0, T, C, C, g + (size_t)Vp * C), TOL_FD,
                  what);
        CHECK(same_bits(dwte + (size_t)SKIP * C, dwte0 + (size_t)SKIP * C, C) &&
                  same_bits(dwte + (size_t)V * C, dwte0 + (size_t)V * C,
                            (size_t)(Vp - V) * C) &&
                  same_bits(dwpe + (size_t)T * C, dwpe0 + (size_t)T * C,
                            (size_t)(maxT - T) * C),
              "embedding_bwd touched unreferenced rows n=%d T=%d C=%d", n, T,
              C);

        /* deterministic order: bit-identical to the sequential float sums */
        for (int i = 0; i < n; i++)
          for (int j = 0; j < C; j++) {
            float d = dX[(size_t)i * ldx + j];
            dwte0[(size_t)tok[i] * C + j] += d;
            dwpe0[(size_t)(i % T) * C + j] += d;
          }
        CHECK(same_bits(dwte, dwte0, (size_t)Vp * C) &&
                  same_bits(dwpe, dwpe0, (size_t)maxT * C),
              "embedding_bwd not the sequential row order n=%d T=%d C=%d", n,
              T, C);
        free(g);
        free(x);
        free(G);
        free(dwte0);
        free(dwpe0);
        free(dwte);
        free(dwpe);
        free(dX);
        free(X);
        free(ref);
        free(wte);
        free(wpe);
        free(tok);
      }
}

/* ---- layernorm ----------------------------------------------------------- */

/* y = (x - mean) / sqrt(var + eps) * w + b over one row, in double; the
 * statistics returned through mean, rstd when not NULL */
static void ref_ln_row(int C, const double *x, const double *w,
                       const double *b, double *y, double *mean,
                       double *rstd) {
  double m = 0, v = 0;
  for (int j = 0; j < C; j++) m += x[j];
  m /= C;
  for (int j = 0; j < C; j++) v += (x[j] - m) * (x[j] - m);
  v /= C;
  double r = 1.0 / sqrt(v + 1e-5);
  for (int j = 0; j < C; j++) y[j] = (x[j] - m) * r * w[j] + b[j];
  if (mean) *mean = m;
  if (rstd) *rstd = r;
}

typedef struct {
  int n, C;
  const double *X, *w, *b, *G; /* X (n, C), w, b (C), G (n, C) */
  int wrt;                     /* FD variable: 0 X row `row`, 1 w, 2 b */
  int row;
} ln_ctx;

/* L = sum G .* LN(X; w, b): the whole sum for wrt w or b, only row `row`
 * (the only one x in X's row depends on) for wrt X */
static double ln_loss(const double *x, const void *vctx) {
  const ln_ctx *c = vctx;
  double *y = tg_test_malloc(sizeof(double) * c->C);
  double L = 0;
  int r0 = c->wrt == 0 ? c->row : 0, r1 = c->wrt == 0 ? c->row + 1 : c->n;
  for (int r = r0; r < r1; r++) {
    const double *xr = c->wrt == 0 ? x : c->X + (size_t)r * c->C;
    ref_ln_row(c->C, xr, c->wrt == 1 ? x : c->w, c->wrt == 2 ? x : c->b, y,
               NULL, NULL);
    for (int j = 0; j < c->C; j++) L += c->G[(size_t)r * c->C + j] * y[j];
  }
  free(y);
  return L;
}

/* One layernorm case: rows of X = offset + spread * u (each row its own
 * random offset in [-1.5, 1.5) when offset is 0), forward and backward. */
static void ln_case(tg_rng *rng, int n, int C, float offset, float spread,
                    int in_place) {
  char what[128];
  int ldx = C + 3, ldy = in_place ? ldx : C + 5, ldd = C + 2;
  float *X = tg_pad_mat(rng, n, C, ldx, spread, offset, NAN);
  for (int i = 0; i < n; i++) { /* per-row offsets */
    float o = (offset == 0.0f ? 1.5f : 0.0f) * tg_rng_uniform(rng);
    for (int j = 0; j < C; j++) X[(size_t)i * ldx + j] += o;
  }
  float *w = tg_pad_mat(rng, 1, C, C, 1.0f, 0.0f, 0.0f);
  float *b = tg_pad_mat(rng, 1, C, C, 1.0f, 0.0f, 0.0f);
  double *Xd = tg_compact_f64(X, n, C, ldx), *wd = tg_compact_f64(w, 1, C, C),
         *bd = tg_compact_f64(b, 1, C, C);
  double *ref = tg_test_malloc(sizeof(double) * n * C);
  double *mref = tg_test_malloc(sizeof(double) * n);
  double *rref = tg_test_malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++)
    ref_ln_row(C, Xd + (size_t)i * C, wd, bd, ref + (size_t)i * C, &mref[i],
               &rref[i]);

  /* forward */
  float *Xkeep = tg_copy_f(X, (size_t)n * ldx);
  float *Y = in_place ? X : tg_const_mat(n, C, ldy, NAN, OUT_PAD);
  float *mean = tg_const_mat(1, n, n, NAN, NAN);
  float *rstd = tg_const_mat(1, n, n, NAN, NAN);
  tg_cpu_layernorm_fwd(n, C, X, ldx, w, b, Y, ldy, mean, rstd);
  snprintf(what, sizeof what, "layernorm_fwd n=%d C=%d offset=%g%s", n, C,
           (double)offset, in_place ? " in place" : "");
  CHECK_REL(mat_err(Y, n, C, ldy, ref), TOL_FWD, what);
  if (!in_place)
    CHECK(pad_intact(Y, n, C, ldy, OUT_PAD), "%s wrote padding", what);
  CHECK_REL(tg_rel_err_f64(mean, mref, n), TOL_FWD, "layernorm_fwd mean");
  CHECK_REL(tg_rel_err_f64(rstd, rref, n), TOL_FWD, "layernorm_fwd rstd");
  if (in_place) {
    free(Xkeep);
    free(Xd);
    free(wd);
    free(bd);
    free(ref);
    free(mref);
    free(rref);
    free(mean);
    free(rstd);
    free(w);
    free(b);
    free(X);
    return;
  }

  /* backward: G = dY, accumulated onto random dX, dw, db */
  float *dY = tg_pad_mat(rng, n, C, ldd, 1.0f, 0.0f, NAN);
  float *dX = tg_pad_mat(rng, n, C, ldx, 1.0f, 0.0f, OUT_PAD);
  float *dw = tg_pad_mat(rng, 1, C, C, 1.0f, 0.0f, 0.0f);
  float *db = tg_pad_mat(rng, 1, C, C, 1.0f, 0.0f, 0.0f);
  float *dX0 = tg_copy_f(dX, (size_t)n * ldx), *dw0 = tg_copy_f(dw, C),
        *db0 = tg_copy_f(db, C);
  tg_cpu_layernorm_bwd(n, C, dY, ldd, X, ldx, w, mean, rstd, dX, ldx, dw, db);
  CHECK(same_bits(X, Xkeep, (size_t)n * ldx), "layernorm changed X");

  double *G = tg_compact_f64(dY, n, C, ldd);
  double h = FD_H * spread; /* the scale on which LN(x) varies */
  ln_ctx ctx = {n, C, Xd, wd, bd, G, 0, 0};
  double *gx = tg_test_malloc(sizeof(double) * n * C);
  for (int i = 0; i < n; i++) { /* row by row: x(i, :) only enters row i */
    ctx.row = i;
    double *g = tg_fd_grad(ln_loss, &ctx, Xd + (size_t)i * C, C, h);
    memcpy(gx + (size_t)i * C, g, sizeof(double) * C);
    free(g);
  }
  ctx.wrt = 1;
  double *gw = tg_fd_grad(ln_loss, &ctx, wd, C, FD_H);
  ctx.wrt = 2;
  double *gb = tg_fd_grad(ln_loss, &ctx, bd, C, FD_H);
  snprintf(what, sizeof what, "layernorm_bwd dX vs FD n=%d C=%d offset=%g", n,
           C, (double)offset);
  CHECK_REL(delta_err(dX, dX0, n, C, ldx, gx), TOL_FD, what);
  CHECK(pad_intact(dX, n, C, ldx, OUT_PAD), "%s wrote padding", what);
  snprintf(what, sizeof what, "layernorm_bwd dw vs FD n=%d C=%d offset=%g", n,
           C, (double)offset);
  CHECK_REL(delta_err(dw, dw0, 1, C, C, gw), TOL_FD, what);
  snprintf(what, sizeof what, "layernorm_bwd db vs FD n=%d C=%d offset=%g", n,
           C, (double)offset);
  CHECK_REL(delta_err(db, db0, 1, C, C, gb), TOL_FD, what);

  free(gx);
  free(gw);
  free(gb);
  free(G);
  free(dY);
  free(dX);
  free(dw);
  free(db);
  free(dX0);
  free(dw0);
  free(db0);
  free(Xkeep);
  free(Y);
  free(Xd);
  free(wd);
  free(bd);
  free(ref);
  free(mref);
  free(rref);
  free(mean);
  free(rstd);
  free(w);
  free(b);
  free(X);
}

static void test_layernorm(tg_rng *rng) {
  for (int in = 0; in < NN; in++)
    for (int ic = 0; ic < NC; ic++) {
      ln_case(rng, NS[in], CS[ic], 0.0f, 1.0f, 0);
      ln_case(rng, NS[in], CS[ic], 0.0f, 1.0f, 1);
    }
  /* a mean large against the spread: x = 1000 + 0.03 u, where the float
   * mean is off by up to 3e-5 (half an ulp of 1000), 2e-3 of the spread */
  for (int ic = 1; ic < NC; ic++) {
    ln_case(rng, 33, CS[ic], 1000.0f, 0.03f, 0);
    ln_case(rng, 7, CS[ic], -300.0f, 0.01f, 1);
  }
}

/* ---- residual ------------------------------------------------------------ */

static void test_residual(tg_rng *rng) {
  char what[96];
  for (int in = 0; in < NN; in++)
    for (int ic = 0; ic < NC; ic++) {
      int n = NS[in], C = CS[ic], lda = C + 1, ldb = C + 4, ldy = C + 2;
      float *A = tg_pad_mat(rng, n, C, lda, 1.0f, 0.0f, NAN);
      float *B = tg_pad_mat(rng, n, C, ldb, 1.0f, 0.0f, NAN);
      double *ref = tg_compact_f64(A, n, C, lda);
      for (int i = 0; i < n; i++)
        for (int j = 0; j < C; j++)
          ref[(size_t)i * C + j] += (double)B[(size_t)i * ldb + j];
      float *Y = tg_const_mat(n, C, ldy, NAN, OUT_PAD);
      tg_cpu_residual_fwd(n, C, A, lda, B, ldb, Y, ldy);
      snprintf(what, sizeof what, "residual n=%d C=%d", n, C);
      CHECK_REL(mat_err(Y, n, C, ldy, ref), TOL_FWD, what);
      CHECK(pad_intact(Y, n, C, ldy, OUT_PAD), "%s wrote padding", what);

      /* in place, Y == B (ld of B) */
      float *B2 = tg_copy_f(B, (size_t)n * ldb);
      tg_cpu_residual_fwd(n, C, A, lda, B2, ldb, B2, ldb);
      snprintf(what, sizeof what, "residual in place Y == B n=%d C=%d", n, C);
      CHECK_REL(mat_err(B2, n, C, ldb, ref), TOL_FWD, what);
      /* in place, Y == A: padding of A is NaN and must stay NaN */
      tg_cpu_residual_fwd(n, C, A, lda, B, ldb, A, lda);
      snprintf(what, sizeof what, "residual in place Y == A n=%d C=%d", n, C);
      CHECK_REL(mat_err(A, n, C, lda, ref), TOL_FWD, what);
      free(B2);
      free(Y);
      free(ref);
      free(A);
      free(B);
    }
}

/* ---- classifier ---------------------------------------------------------- */

typedef struct {
  int n, C, V;
  const double *lnf, *wte; /* (n, C), (V, C) */
  const int32_t *tg;
  double scale;
  int wrt_wte; /* FD variable: lnf (0) or wte[:V] (1) */
} cls_ctx;

/* logits, loss and (when p != NULL) probabilities of one row, in double */
static double ref_cls_row(int C, int V, const double *x, const double *wte,
                          int32_t t, double *p) {
  double *z = tg_test_malloc(sizeof(double) * V);
  double mx = -INFINITY, s = 0, zt = NAN;
  for (int v = 0; v < V; v++) {
    double a = 0;
    for (int j = 0; j < C; j++) a += x[j] * wte[(size_t)v * C + j];
    z[v] = a;
    if (v == t) zt = a;
    mx = fmax(mx, a);
  }
  for (int v = 0; v < V; v++) s += exp(z[v] - mx);
  double loss = log(s) - (zt - mx);
  if (p)
    for (int v = 0; v < V; v++) p[v] = exp(z[v] - mx) / s;
  free(z);
  return loss;
}

static double cls_loss(const double *x, const void *vctx) {
  const cls_ctx *c = vctx;
  const double *lnf = c->wrt_wte ? c->lnf : x, *wte = c->wrt_wte ? x : c->wte;
  double L = 0;
  for (int i = 0; i < c->n; i++)
    L += ref_cls_row(c->C, c->V, lnf + (size_t)i * c->C, wte, c->tg[i], NULL);
  return c->scale * L;
}

/* One classifier case against the double reference; fd != 0 adds the FD
 * check (O((n + V) C * n V C) work, small cases only). */
static void cls_case(tg_rng *rng, int n, int C, int V, int Vp, int chunk,
                     float padval, int fd) {
  char what[160];
  snprintf(what, sizeof what, "n=%d C=%d V=%d Vp=%d chunk=%d", n, C, V, Vp,
           chunk);
  int ldl = C + 3, lddl = C + 2;
  float scale = 1.0f / (float)(n + 2);
  float *lnf = tg_pad_mat(rng, n, C, ldl, 1.0f, 0.0f, NAN);
  float *wte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
  for (size_t k = (size_t)V * C; k < (size_t)Vp * C; k++) wte[k] = padval;
  int32_t *tg = rand_tokens(rng, n, V, -1);
  if (n > 2) { /* the edges of the vocabulary */
    tg[0] = V - 1;
    tg[1] = 0;
  }

  /* double reference: loss, dlogits, dlnf = dlogits wte and
   * dwte = dlogits^T lnf */
  double *lnfd = tg_compact_f64(lnf, n, C, ldl), *wted = tg_compact_f64(wte, V, C, C);
  double *dl = tg_test_malloc(sizeof(double) * n * V);
  double lref = 0;
  for (int i = 0; i < n; i++) {
    double *p = dl + (size_t)i * V;
    lref += ref_cls_row(C, V, lnfd + (size_t)i * C, wted, tg[i], p);
    for (int v = 0; v < V; v++) p[v] = scale * (p[v] - (v == tg[i]));
  }
  lref *= scale;
  double *dlnf_ref = tg_test_malloc(sizeof(double) * n * C);
  double *dwte_ref = tg_test_malloc(sizeof(double) * V * C);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < C; j++) {
      double a = 0;
      for (int v = 0; v < V; v++)
        a += dl[(size_t)i * V + v] * wted[(size_t)v * C + j];
      dlnf_ref[(size_t)i * C + j] = a;
    }
  for (int v = 0; v < V; v++)
    for (int j = 0; j < C; j++) {
      double a = 0;
      for (int i = 0; i < n; i++)
        a += dl[(size_t)i * V + v] * lnfd[(size_t)i * C + j];
      dwte_ref[(size_t)v * C + j] = a;
    }

  /* scratch of exactly chunk * V floats, then a guard */
  size_t ns = (size_t)chunk * V;
  float *scratch = tg_const_mat(1, (int)ns + 16, (int)ns + 16, NAN, NAN);
  for (int k = 0; k < 16; k++) scratch[ns + k] = UNTOUCHED;
  float guard[16];
  for (int k = 0; k < 16; k++) guard[k] = UNTOUCHED;

  /* forward only: dlnf and dwte NULL */
  float loss = 0.25f;
  tg_cpu_classifier(n, C, V, chunk, lnf, ldl, wte, tg, scale, 1.0f, 0, NULL, 0, NULL,
                    &loss, scratch);
  {
    char w2[200];
    snprintf(w2, sizeof w2, "classifier fwd loss %s", what);
    CHECK_REL(rel_err_scalar((double)loss - 0.25, lref), TOL_FWD, w2);
  }

  /* forward + backward: dlnf written over NaN, dwte[:V] accumulated onto
   * values of the increment's size (a large base would bury the increment
   * under its own float rounding, one per chunk) */
  float *dlnf = tg_const_mat(n, C, lddl, NAN, OUT_PAD);
  float *dwte = tg_pad_mat(rng, Vp, C, C, 1e-3f, 0.0f, 0.0f);
  for (size_t k = (size_t)V * C; k < (size_t)Vp * C; k++) dwte[k] = UNTOUCHED;
  float *dwte0 = tg_copy_f(dwte, (size_t)Vp * C);
  float *lnf0 = tg_copy_f(lnf, (size_t)n * ldl);
  float *wte0 = tg_copy_f(wte, (size_t)Vp * C);
  float loss2 = -0.5f;
  tg_cpu_classifier(n, C, V, chunk, lnf, ldl, wte, tg, scale, 1.0f, 1, dlnf, lddl,
                    dwte, &loss2, scratch);
  {
    char w2[200];
    snprintf(w2, sizeof w2, "classifier fwd+bwd loss %s", what);
    CHECK_REL(rel_err_scalar((double)loss2 + 0.5, lref), TOL_FWD, w2);
    /* dlnf at the backward tolerance: with C = 1 a row of dlnf is one sum
     * sum_v dlogits_v wte_v whose terms cancel (dlogits sums to 0), and the
     * float result is measured up to 7e-6 off for n = 1, V = 250 */
    snprintf(w2, sizeof w2, "classifier dlnf vs analytic %s", what);
    CHECK_REL(mat_err(dlnf, n, C, lddl, dlnf_ref), TOL_FD, w2);
    CHECK(pad_intact(dlnf, n, C, lddl, OUT_PAD), "%s wrote padding", w2);
    snprintf(w2, sizeof w2, "classifier dwte vs analytic %s", what);
    CHECK_REL(delta_err(dwte, dwte0, V, C, C, dwte_ref), TOL_FWD, w2);
    CHECK(same_bits(dwte + (size_t)V * C, dwte0 + (size_t)V * C,
                    (size_t)(Vp - V) * C),
          "classifier touched padded rows of dwte %s", what);
    CHECK(same_bits(scratch + ns, guard, 16),
          "classifier wrote past chunk * V scratch floats %s", what);
    CHECK(same_bits(lnf, lnf0, (size_t)n * ldl) &&
              same_bits(wte, wte0, (size_t)Vp * C),
          "classifier changed its inputs %s", what);
  }

  if (fd) {
    cls_ctx ctx = {n, C, V, lnfd, wted, tg, scale, 0};
    double *g = tg_fd_grad(cls_loss, &ctx, lnfd, (size_t)n * C, FD_H);
    char w2[200];
    snprintf(w2, sizeof w2, "classifier dlnf vs FD %s", what);
    CHECK_REL(mat_err(dlnf, n, C, lddl, g), TOL_FD, w2);
    free(g);
    ctx.wrt_wte = 1;
    g = tg_fd_grad(cls_loss, &ctx, wted, (size_t)V * C, FD_H);
    snprintf(w2, sizeof w2, "classifier dwte vs FD %s", what);
    CHECK_REL(delta_err(dwte, dwte0, V, C, C, g), TOL_FD, w2);
    free(g);
  }

  free(dlnf);
  free(dwte);
  free(dwte0);
  free(lnf0);
  free(wte0);
  free(scratch);
  free(dlnf_ref);
  free(dwte_ref);
  free(dl);
  free(lnfd);
  free(wted);
  free(tg);
  free(lnf);
  free(wte);
}

static void test_classifier(tg_rng *rng) {
  static const int VS[4] = {1, 7, 250, 257};
  static const int CHUNKS[4] = {1, 16, 64, 1000};
  int k = 0;
  for (int in = 0; in < NN; in++)
    for (int ic = 0; ic < NC; ic++)
      for (int iv = 0; iv < 4; iv++)
        for (int ik = 0; ik < 4; ik++, k++) {
          int n = NS[in], C = CS[ic], V = VS[iv];
          /* Vp: V rounded up to 8 (257 -> 264, 250 -> 256, 1, 7 -> 8), or
           * V itself on every third case */
          int Vp = k % 3 == 2 ? V : (V + 7) / 8 * 8 + (V % 8 == 0 ? 8 : 0);
          float padval = k % 2 ? NAN : 1e30f;
          cls_case(rng, n, C, V, Vp, CHUNKS[ik], padval, 0);
        }
  /* FD on a few cases small enough for O((n + V) C * n V C) */
  cls_case(rng, 7, 7, 257, 264, 3, NAN, 1);
  cls_case(rng, 33, 7, 7, 8, 16, 1e30f, 1);
  cls_case(rng, 1, 33, 250, 250, 1, NAN, 1);
  cls_case(rng, 100, 1, 7, 16, 64, 1e30f, 1);
  cls_case(rng, 5, 64, 33, 40, 2, NAN, 1);

  /* grad_scale (the loss scale) multiplies dlnf and dwte's increment, never
   * the loss: a power of two, so exactly 8 times the unscaled results */
  {
    int n = 9, C = 11, V = 13, Vp = 16;
    float *lnf = tg_pad_mat(rng, n, C, C, 1.0f, 0.0f, 0.0f);
    float *wte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
    int32_t tg[9];
    for (int i = 0; i < n; i++) tg[i] = (i * 5) % V;
    float *dlnf[2], *dwte[2], loss[2] = {0.0f, 0.0f};
    float *scratch = tg_const_mat(4, V, V, NAN, NAN);
    for (int s = 0; s < 2; s++) {
      dlnf[s] = tg_const_mat(n, C, C, NAN, NAN);
      dwte[s] = tg_const_mat(Vp, C, C, 0.0f, 0.0f);
      tg_cpu_classifier(n, C, V, 4, lnf, C, wte, tg, 0.25f, s ? 8.0f : 1.0f, 1, dlnf[s], C,
                        dwte[s], &loss[s], scratch);
    }
    int exact = loss[0] == loss[1];
    for (int i = 0; i < n * C; i++) exact &= dlnf[1][i] == 8.0f * dlnf[0][i];
    for (int i = 0; i < Vp * C; i++) exact &= dwte[1][i] == 8.0f * dwte[0][i];
    CHECK(exact, "classifier grad_scale 8: loss unchanged, dlnf and dwte exactly 8x");
    for (int s = 0; s < 2; s++) {
      free(dlnf[s]);
      free(dwte[s]);
    }
    free(lnf);
    free(wte);
    free(scratch);
  }

  /* out-of-range targets: NaN loss, zero dlnf rows, no gradient from them */
  {
    int n = 4, C = 7, V = 9, Vp = 16;
    float *lnf = tg_pad_mat(rng, n, C, C, 1.0f, 0.0f, 0.0f);
    float *wte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
    int32_t tg[4] = {V, 2, -1, Vp};
    float *dlnf = tg_const_mat(n, C, C, NAN, NAN);
    float *dwte = tg_const_mat(Vp, C, C, 0.0f, 0.0f);
    float *scratch = tg_const_mat(2, V, V, NAN, NAN);
    float loss = 0.0f;
    tg_cpu_classifier(n, C, V, 2, lnf, C, wte, tg, 1.0f, 1.0f, 1, dlnf, C, dwte,
                      &loss, scratch);
    int zero = 1;
    for (int j = 0; j < C; j++)
      zero &= dlnf[j] == 0.0f && dlnf[2 * C + j] == 0.0f &&
              dlnf[3 * C + j] == 0.0f;
    /* the valid row alone gives dwte = dlogits(1)^T lnf(1) */
    double *lnfd = tg_compact_f64(lnf, n, C, C), *wted = tg_compact_f64(wte, V, C, C);
    double p[9], *ref = tg_test_malloc(sizeof(double) * Vp * C);
    ref_cls_row(C, V, lnfd + C, wted, 2, p);
    for (int v = 0; v < Vp; v++)
      for (int j = 0; j < C; j++)
        ref[(size_t)v * C + j] =
            v < V ? (p[v] - (v == 2)) * lnfd[(size_t)C + j] : 0.0;
    CHECK(isnan(loss) && zero, "classifier bad targets: NaN loss, zero rows");
    CHECK_REL(mat_err(dwte, Vp, C, C, ref), TOL_FWD,
              "classifier bad targets: dwte from the valid row only");
    free(ref);
    free(lnfd);
    free(wted);
    free(lnf);
    free(wte);
    free(dlnf);
    free(dwte);
    free(scratch);
  }
}

int main(void) {
  tg_rng rng = {0x2545F4914F6CDD1DULL};
  test_embedding(&rng);
  test_layernorm(&rng);
  test_residual(&rng);
  test_classifier(&rng);
  return tg_test_finish("test_kernels_gpt");
}
