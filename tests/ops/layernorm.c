/*
 * Rows layernorm_fwd and layernorm_bwd (codelets/layernorm.c): LayerNorm
 * forward and backward; each case checks its row's op.
 *  ref       against float64 (y, mean, rstd), rows with a mean large
 *            against their spread (1000 + 0.03 u); the backward against
 *            finite differences, dX, dw, db accumulated;
 *  pair      shapes up to 64 x 768 with a non-zero mean; the backward's
 *            dw, db accumulated and overwritten (TG_OVERWRITE, NaN before);
 *  cuda-emu  both launchers (the backward's scratch sized by
 *            tg_cuda_layernorm_bwd_scratch_floats), the backward's dw, db
 *            accumulated and overwritten (NaN before);
 *  lowp      the forward with 16-bit X, Y (the statistics f32, bit for
 *            bit); the backward with 16-bit dY, X, dX (dX read-modify-write):
 *            equal to the f32 codelet's result rounded once, bit for bit,
 *            with 1 and 2 CPU workers.
 */

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"

/* ---- ref --------------------------------------------------------------------- */

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
  const int bwd = ops_row_is("layernorm_bwd");
  if (!bwd) {
    CHECK_REL(mat_err(Y, n, C, ldy, ref), TOL_FWD, what);
    if (!in_place) CHECK(pad_intact(Y, n, C, ldy, OUT_PAD), "%s wrote padding", what);
    CHECK_REL(tg_rel_err_f64(mean, mref, n), TOL_FWD, "layernorm_fwd mean");
    CHECK_REL(tg_rel_err_f64(rstd, rref, n), TOL_FWD, "layernorm_fwd rstd");
  }
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

  if (bwd) {
  double *G = tg_compact_f64(dY, n, C, ldd);
  double h = FD_H * spread; /* the scale on which LN(x) varies */
  ln_ctx ctx = {.n = n, .C = C, .X = Xd, .w = wd, .b = bd, .G = G, .wrt = 0, .row = 0};
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
  }
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

static void ref_layernorm(tg_rng *rng) {
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

static void layernorm_ref(void) {
  tg_rng rng = {.s = 0x2545F4914F6CDD1DULL};
  ref_layernorm(&rng);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int ln_fwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_layernorm_fwd_insert(c->h[0], c->h[1], c->h[2], out[0].handle, out[1].handle,
                                 out[2].handle, o);
}

static int ln_bwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_layernorm_bwd_insert(c->h[0], c->h[1], c->h[2], c->h[3], c->h[4], out[0].handle,
                                 out[1].handle, out[2].handle, c->accum, o);
}

static void pair_layernorm(void) {
  static const int shapes[][2] = {{1, 1}, {7, 33}, {33, 257}, {64, 768}};
  for (int s = 0; s < 4; s++) {
    int n = shapes[s][0], C = shapes[s][1];
    float *x = rnd((size_t)n * C, 2), *w = rnd(C, 1), *b = rnd(C, 1), *dy = rnd((size_t)n * C, 1);
    for (size_t i = 0; i < (size_t)n * C; i++) x[i] += 3.0f; /* a non-zero mean */
    float *y = xmalloc(sizeof(float) * n * C), *mean = xmalloc(sizeof(float) * n);
    float *rstd = xmalloc(sizeof(float) * n), *dx0 = rnd((size_t)n * C, 1);
    float *dw0 = rnd(C, 1), *db0 = rnd(C, 1);
    tg_cpu_layernorm_fwd(n, C, x, C, w, b, y, C, mean, rstd);
    tg_tensor X, Wt, B, DY, M, R;
    new_tensor(&X, n, C, x); new_tensor(&Wt, 1, C, w); new_tensor(&B, 1, C, b);
    new_tensor(&DY, n, C, dy); new_tensor(&M, n, 1, mean); new_tensor(&R, n, 1, rstd);
    char what[64];
    gctx c = {.h = {X.handle, Wt.handle, B.handle},
              .T = 0,
              .NH = 0,
              .chunk = 0,
              .V = 0,
              .kind = 0,
              .accum = TG_ACCUMULATE};
    outspec fo[3] = {{.name = "Y", .rows = n, .cols = C, .init = NULL, .redux = 0, .tol = TOL},
                     {.name = "mean", .rows = n, .cols = 1, .init = NULL, .redux = 0, .tol = TOL},
                     {.name = "rstd", .rows = n, .cols = 1, .init = NULL, .redux = 0, .tol = TOL}};
    snprintf(what, sizeof what, "layernorm_fwd %dx%d", n, C);
    if (ops_row_is("layernorm_fwd")) run_pair(what, ln_fwd, &c, 3, fo, NULL, NULL);
    gctx cb = {.h = {DY.handle, X.handle, Wt.handle, M.handle, R.handle},
               .T = 0,
               .NH = 0,
               .chunk = 0,
               .V = 0,
               .kind = 0,
               .accum = TG_ACCUMULATE};
    outspec bo[3] = {{.name = "dX", .rows = n, .cols = C, .init = dx0, .redux = 0, .tol = TOL},
                     {.name = "dw", .rows = 1, .cols = C, .init = dw0, .redux = 0, .tol = TOL},
                     {.name = "db", .rows = 1, .cols = C, .init = db0, .redux = 0, .tol = TOL}};
    snprintf(what, sizeof what, "layernorm_bwd %dx%d", n, C);
    if (ops_row_is("layernorm_bwd")) run_pair(what, ln_bwd, &cb, 3, bo, NULL, NULL);
    /* overwriting: dw, db start as NaN and are written; dX still adds */
    cb.accum = TG_OVERWRITE;
    outspec bw[3] = {bo[0], {.name = "dw", .rows = 1, .cols = C, .init = NULL, .redux = 0, .tol = TOL},
                     {.name = "db", .rows = 1, .cols = C, .init = NULL, .redux = 0, .tol = TOL}};
    snprintf(what, sizeof what, "layernorm_bwd overwrite %dx%d", n, C);
    if (ops_row_is("layernorm_bwd")) run_pair(what, ln_bwd, &cb, 3, bw, NULL, NULL);
    free(x); free(w); free(b); free(dy); free(y); free(mean); free(rstd);
    free(dx0); free(dw0); free(db0);
    tg_tensor *all[] = {&X, &Wt, &B, &DY, &M, &R};
    for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
  }
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_layernorm(void) {
  /* n = 130: three row blocks in the dw / db partial sums; n = 4133: the
   * 64 row blocks' cap, 65 rows each, the last one short */
  static const int shapes[][2] = {{1, 1}, {7, 33}, {33, 257}, {64, 768}, {130, 40}, {4133, 3}};
  for (int s = 0; s < 6; s++) {
    FULL_ONLY(s != 1 && s != 4);
    const int n = shapes[s][0], C = shapes[s][1], ld = C + 2;
    const size_t sz = (size_t)n * ld;
    float *X = tg_pad_mat(&g_rng, n, C, ld, 2.0f, 3.0f, NAN); /* non-zero mean */
    float *w = input(1, C, C, 1.0f), *b = input(1, C, C, 1.0f), *Y[2], *mean[2], *rstd[2];
    outputs(Y, n, C, ld, 0);
    outputs(mean, 1, n, n, 0);
    outputs(rstd, 1, n, n, 0);
    ok("tg_cuda_layernorm_fwd", "",
       tg_cuda_layernorm_fwd(n, C, X, ld, w, b, Y[0], ld, mean[0], rstd[0], NULL));
    tg_cpu_layernorm_fwd(n, C, X, ld, w, b, Y[1], ld, mean[1], rstd[1]);
    const int fwd = ops_row_is("layernorm_fwd");
    if (fwd) {
      compare("tg_cuda_layernorm_fwd", "Y", Y[0], Y[1], sz, kTolRed);
      compare("tg_cuda_layernorm_fwd", "mean", mean[0], mean[1], n, kTolRed);
      compare("tg_cuda_layernorm_fwd", "rstd", rstd[0], rstd[1], n, kTolRed);
    }
    /* in place (Y == X); the CUDA launcher also takes NULL mean / rstd */
    float *io[2] = {tg_copy_f(X, sz), tg_copy_f(X, sz)}, *stats = fmalloc(2 * (size_t)n);
    ok("tg_cuda_layernorm_fwd", "in place",
       tg_cuda_layernorm_fwd(n, C, io[0], ld, w, b, io[0], ld, NULL, NULL, NULL));
    tg_cpu_layernorm_fwd(n, C, io[1], ld, w, b, io[1], ld, stats, stats + n);
    free(stats);
    if (fwd) compare("tg_cuda_layernorm_fwd", "in place", io[0], io[1], sz, kTolRed);
    free2(io);

    float *dY = input(n, C, C, 1.0f), *dX[2], *dw[2], *db[2];
    outputs(dX, n, C, ld, 1);
    outputs(dw, 1, C, C, 1);
    outputs(db, 1, C, C, 1);
    const size_t ns = tg_cuda_layernorm_bwd_scratch_floats(n, C);
    float *scratch = tg_const_mat(1, (int)ns, (int)ns, NAN, NAN);
    if (!fwd) {
      ok("tg_cuda_layernorm_bwd", "",
         tg_cuda_layernorm_bwd(n, C, dY, C, X, ld, w, mean[1], rstd[1], dX[0], ld, dw[0], db[0],
                               1, scratch, NULL));
      tg_cpu_layernorm_bwd(n, C, dY, C, X, ld, w, mean[1], rstd[1], dX[1], ld, dw[1], db[1]);
      compare("tg_cuda_layernorm_bwd", "dX", dX[0], dX[1], sz, kTolRed);
      compare("tg_cuda_layernorm_bwd", "dw", dw[0], dw[1], C, kTolRed);
      compare("tg_cuda_layernorm_bwd", "db", db[0], db[1], C, kTolRed);
      /* overwriting: NaN in dw, db on the device, zeros before the CPU's
       * accumulation (what the codelet does) */
      for (int j = 0; j < C; j++) {
        dw[0][j] = db[0][j] = NAN;
        dw[1][j] = db[1][j] = 0.0f;
      }
      ok("tg_cuda_layernorm_bwd", "overwrite",
         tg_cuda_layernorm_bwd(n, C, dY, C, X, ld, w, mean[1], rstd[1], dX[0], ld, dw[0], db[0],
                               0, scratch, NULL));
      tg_cpu_layernorm_bwd(n, C, dY, C, X, ld, w, mean[1], rstd[1], dX[1], ld, dw[1], db[1]);
      compare("tg_cuda_layernorm_bwd", "dw overwritten", dw[0], dw[1], C, kTolRed);
      compare("tg_cuda_layernorm_bwd", "db overwritten", db[0], db[1], C, kTolRed);
    }
    free2(Y); free2(mean); free2(rstd); free2(dX); free2(dw); free2(db);
    free(X); free(w); free(b); free(dY); free(scratch);
  }
}
#endif /* OPS_EMU */

/* ---- lowp -------------------------------------------------------------------- */

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
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = t};
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

/* the forward with 16-bit X and Y (w, b, mean, rstd f32): Y equal to the
 * f32 codelet's rounded once, the statistics equal bit for bit */
static void layernorm_fwd_case(tg_rng *rng, tg_dtype t) {
  int rows = 19, C = 45;
  float *x = rounded_rand(rng, t, rows, C, 1.0f);
  for (int i = 0; i < rows * C; i++) x[i] = round16(t, x[i] + 2.0f); /* a non-zero mean */
  float *w = tg_rand_mat(rng, 1, C, C, 1.0f, 0.0f), *bb = tg_rand_mat(rng, 1, C, C, 0.1f, 0.0f);
  tg_tensor X, Y, X32, Y32, Wt, Bt, mean, rstd, mean32, rstd32;
  new_low(&X, t, rows, C, x);
  CHECK(tg_tensor_alloc(&Y, rows, C, t) == 0, "alloc");
  new_f32(&X32, rows, C, x);
  new_f32(&Y32, rows, C, NULL);
  new_f32(&Wt, 1, C, w);
  new_f32(&Bt, 1, C, bb);
  new_f32(&mean, rows, 1, NULL);
  new_f32(&rstd, rows, 1, NULL);
  new_f32(&mean32, rows, 1, NULL);
  new_f32(&rstd32, rows, 1, NULL);
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = t};
  CHECK(tg_layernorm_fwd_insert(X.handle, Wt.handle, Bt.handle, Y.handle, mean.handle,
                                rstd.handle, &o) == 0, "ln fwd 16-bit: %s", tg_last_error());
  CHECK(tg_layernorm_fwd_insert(X32.handle, Wt.handle, Bt.handle, Y32.handle, mean32.handle,
                                rstd32.handle, NULL) == 0, "ln fwd f32: %s", tg_last_error());
  expect_rounded(t, &Y, &Y32, "LayerNorm forward Y");
  float *m = read_as_f32(&mean, TG_F32), *m32 = read_as_f32(&mean32, TG_F32);
  float *r = read_as_f32(&rstd, TG_F32), *r32 = read_as_f32(&rstd32, TG_F32);
  CHECK(!memcmp(m, m32, sizeof(float) * rows) && !memcmp(r, r32, sizeof(float) * rows),
        "%s LayerNorm mean / rstd differ from f32", tg_dtype_name(t));
  CHECK_REFUSED(tg_layernorm_fwd_insert(X.handle, Wt.handle, Bt.handle, Y.handle, mean.handle,
                                        rstd.handle, NULL),
                "tg_layernorm_fwd", "2-byte buffers without opts.lowp");
  free(m); free(m32); free(r); free(r32);
  tg_tensor *all[] = {&X, &Y, &X32, &Y32, &Wt, &Bt, &mean, &rstd, &mean32, &rstd32};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(x);
  free(w);
  free(bb);
}

static void layernorm_lowp_body(void) {
  tg_rng rng = {.s = 2024};
  for (int k = 0; k < 2; k++)
    if (ops_row_is("layernorm_fwd"))
      layernorm_fwd_case(&rng, LOWP[k]);
    else
      layernorm_case(&rng, LOWP[k]);
}

static void layernorm_lowp(void) { ops_run_worker_counts(layernorm_lowp_body); }

static const ops_row rows[] = {
    {.name = "layernorm_fwd",
     .doc = "layer norm (keeps mean, rstd)",
     .buffers = "X (R), w (R), b (R), Y (W), mean (W), rstd (W)",
     .covers = "tg_layernorm_fwd_cl tg_layernorm_fwd_insert tg_cuda_layernorm_fwd",
     .kernels = "tg_cpu_layernorm_fwd",
     .run = {[OPS_REF] = layernorm_ref, [OPS_CPU] = pair_layernorm,
             [OPS_CUDA] = pair_layernorm, [OPS_DEVICE] = pair_layernorm,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_layernorm), [OPS_LOWP] = layernorm_lowp},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "layernorm_bwd",
     .doc = "layer norm backward (accumulates into dX; dw, db accumulate or are written)",
     .buffers = "dY, X, w, mean, rstd (R), dX (RW), dw, db (W / RW / REDUX), scratch",
     .covers = "tg_layernorm_bwd_cl tg_layernorm_bwd_insert tg_cuda_layernorm_bwd",
     .kernels = "tg_cpu_layernorm_bwd",
     .run = {[OPS_REF] = layernorm_ref, [OPS_CPU] = pair_layernorm,
             [OPS_CUDA] = pair_layernorm, [OPS_DEVICE] = pair_layernorm,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_layernorm), [OPS_LOWP] = layernorm_lowp},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
