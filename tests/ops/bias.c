/*
 * Rows bias_add and bias_grad (codelets/bias.c); each case checks the
 * op of the row it runs for (ops_row_is).
 *  ref       against float64 sums, sizes from {1, 7, 33, 257}, padded
 *            leading dimensions; db against finite differences;
 *  pair      every shape of g_shapes, the accumulation modes of bias_grad
 *            (REDUX included) and dY on the left half of a partitioned
 *            matrix;
 *  cuda-emu  both launchers, beta 0 and 0.5, and zero rows (db = beta db);
 *            bias_grad also on tall shapes (8192 x 768, 1000 x 33) that the
 *            launcher splits into row slices (scratch partials, second
 *            kernel), and without its scratch (the single-pass fallback).
 */

#include "ref_util.h"
#include "pair.h"

/* ---- ref --------------------------------------------------------------------- */

/* L(b) = sum W .* (Y0 + 1 b^T) */
typedef struct {
  int rows, cols;
  const double *Y0, *W;
} bias_fd_ctx;

static double bias_loss(const double *b, const void *vctx) {
  const bias_fd_ctx *c = vctx;
  double L = 0;
  for (int r = 0; r < c->rows; r++)
    for (int j = 0; j < c->cols; j++)
      L += c->W[(size_t)r * c->cols + j] * (c->Y0[(size_t)r * c->cols + j] + b[j]);
  return L;
}

static void ref_bias(tg_rng *rng) {
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic], ld = cols + 3;
      /* bias_add */
      float *Y = tg_rand_mat(rng, rows, cols, ld, 1.0f, OUT_PAD);
      float *b = tg_rand_mat(rng, 1, cols, cols, 1.0f, NAN);
      double *ref = tg_compact_f64(Y, rows, cols, ld);
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) ref[(size_t)r * cols + j] += b[j];
      tg_cpu_bias_add(rows, cols, Y, ld, b);
      if (ops_row_is("bias_add")) {
        CHECK_REL(mat_err(Y, rows, cols, ld, ref), TOL_FWD, "bias_add");
        CHECK(pad_intact(Y, rows, cols, ld, OUT_PAD), "bias_add wrote padding");
      }
      free(ref);
      if (!ops_row_is("bias_grad")) {
        free(b);
        free(Y);
        continue;
      }

      /* bias_grad, beta == 0 over NaN, then beta != 0 */
      float *dY = tg_rand_mat(rng, rows, cols, ld, 1.0f, NAN);
      double *sums = tg_test_malloc(sizeof(double) * cols);
      for (int j = 0; j < cols; j++) {
        sums[j] = 0;
        for (int r = 0; r < rows; r++) sums[j] += dY[(size_t)r * ld + j];
      }
      float *db = tg_const_mat(1, cols, cols, NAN, NAN);
      tg_cpu_bias_grad(rows, cols, dY, ld, 0.0f, db);
      CHECK_REL(tg_rel_err_f64(db, sums, cols), TOL_FWD, "bias_grad beta=0");
      float *db0 = tg_rand_mat(rng, 1, cols, cols, 1.0f, NAN);
      memcpy(db, db0, sizeof(float) * cols);
      double *ref2 = tg_test_malloc(sizeof(double) * cols);
      for (int j = 0; j < cols; j++) ref2[j] = 0.8 * (double)db0[j] + sums[j];
      tg_cpu_bias_grad(rows, cols, dY, ld, 0.8f, db);
      CHECK_REL(tg_rel_err_f64(db, ref2, cols), TOL_FWD, "bias_grad beta=0.8");

      /* bias_grad(W) is dL/db for L = sum W .* bias_add(Y0, b) */
      if (ir < 3 || ic < 3) {
        float *W = tg_rand_mat(rng, rows, cols, ld, 1.0f, NAN);
        double *Y0d = tg_compact_f64(Y, rows, cols, ld);
        double *Wd = tg_compact_f64(W, rows, cols, ld);
        double *bd = tg_compact_f64(b, 1, cols, cols);
        bias_fd_ctx ctx = {.rows = rows, .cols = cols, .Y0 = Y0d, .W = Wd};
        double *g = tg_fd_grad(bias_loss, &ctx, bd, cols, FD_H);
        tg_cpu_bias_grad(rows, cols, W, ld, 0.0f, db);
        CHECK_REL(tg_rel_err_f64(db, g, cols), TOL_FD, "bias_grad vs FD");
        free(g);
        free(bd);
        free(Wd);
        free(Y0d);
        free(W);
      }
      free(ref2);
      free(db0);
      free(db);
      free(sums);
      free(dY);
      free(b);
      free(Y);
    }
}

static void bias_ref(void) {
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  ref_bias(&rng);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int bias_add_submit(const void *vctx, const tg_task_opts *o,
                           tg_tensor *out) {
  const hctx *c = vctx;
  return tg_bias_add_insert(out[0].handle, c->h[0], o);
}

static int bias_grad_submit(const void *vctx, const tg_task_opts *o,
                            tg_tensor *out) {
  const hctx *c = vctx;
  int rc = tg_bias_grad_insert(c->h[0], out[0].handle, c->accum, o);
  if (rc == 0 && c->accum == TG_REDUCE)
    rc = tg_bias_grad_insert(c->h[0], out[0].handle, c->accum, o);
  return rc;
}

static void pair_bias(void) {
  for (int s = 0; s < NSHAPES; s++) {
    const int rows = g_shapes[s][0], cols = g_shapes[s][1];
    char what[128];
    float *y0 = rnd((size_t)rows * cols, 1.0f), *b = rnd((size_t)cols, 1.0f);
    tg_tensor B, DY;
    new_tensor(&B, 1, cols, b);
    new_tensor(&DY, rows, cols, y0);

    hctx ctx = {.h = {B.handle}, .accum = TG_OVERWRITE, .act = 0, .f = 0, .ld_test = 0};
    outspec o = {.name = "Y", .rows = rows, .cols = cols, .init = y0, .redux = 0, .tol = TOL};
    snprintf(what, sizeof what, "bias_add %dx%d", rows, cols);
    if (ops_row_is("bias_add")) run_pair(what, bias_add_submit, &ctx, 1, &o, NULL, NULL);

    for (int mode = 0; mode < 3 && ops_row_is("bias_grad"); mode++) {
      hctx g = {.h = {DY.handle}, .accum = (tg_accum)mode, .act = 0, .f = 0, .ld_test = 0};
      outspec od = {.name = "db",
                    .rows = 1,
                    .cols = cols,
                    .init = mode == TG_OVERWRITE ? NULL : b,
                    .redux = mode == TG_REDUCE,
                    .tol = TOL};
      snprintf(what, sizeof what, "bias_grad %dx%d %s", rows, cols,
               accum_name((tg_accum)mode));
      run_pair(what, bias_grad_submit, &g, 1, &od, NULL, NULL);
    }
    free(y0);
    free(b);
    tg_tensor_free(&B);
    tg_tensor_free(&DY);
  }
}

/* bias_grad of the left half of a (rows, 2 cols) dY: lddy = 2 cols on the
 * CPU side. */
static int bias_grad_ld_submit(const void *vctx, const tg_task_opts *o,
                               tg_tensor *out) {
  const hctx *c = vctx;
  tg_tensor parent = {.handle = c->h[0], .rows = 0, .cols = 0, .dtype = TG_F32, .host = NULL};
  split_columns(&parent);
  int rc = tg_bias_grad_insert(left_half(&parent), out[0].handle, c->accum, o);
  unsplit(&parent);
  return rc;
}

static void pair_bias_grad_ld(void) {
  const int rows = 257, cols = 33;
  float *dy = rnd((size_t)rows * 2 * cols, 1.0f);
  tg_tensor DY;
  new_tensor(&DY, rows, 2 * cols, dy);
  hctx ctx = {.h = {DY.handle}, .accum = TG_OVERWRITE, .act = 0, .f = 0, .ld_test = 1};
  outspec o = {.name = "db", .rows = 1, .cols = cols, .init = NULL, .redux = 0, .tol = TOL};
  run_pair("bias_grad lddy=2cols", bias_grad_ld_submit, &ctx, 1, &o, NULL,
           NULL);
  free(dy);
  tg_tensor_free(&DY);
}

static void bias_pair(void) {
  pair_bias();
  if (ops_row_is("bias_grad")) pair_bias_grad_ld();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"
#include "scratch_sizes.h"

/* tg_cuda_bias_grad against tg_cpu_bias_grad, beta 0 (over NaN) and 0.5,
 * with the scratch the codelet gives it (exactly its size) or none */
static void emu_bias_grad(int rows, int cols, int ld, const float *dY, int scratch) {
  const size_t wf = tg_bias_grad_scratch_floats(rows, cols);
  float *work = scratch && wf ? tg_test_malloc(sizeof(float) * wf) : NULL;
  char what[64];
  snprintf(what, sizeof what, "%dx%d%s", rows, cols, scratch ? "" : " no scratch");
  for (int beta = 0; beta < 2; beta++) {
    float *o[2];
    outputs(o, 1, cols, cols, beta);
    if (!beta)
      for (int c = 0; c < cols; c++) o[0][c] = o[1][c] = NAN;
    ok("tg_cuda_bias_grad", what,
       tg_cuda_bias_grad(rows, cols, dY, ld, 0.5f * beta, o[0], work,
                         work ? sizeof(float) * wf : 0, NULL));
    tg_cpu_bias_grad(rows, cols, dY, ld, 0.5f * beta, o[1]);
    /* double sums on both sides, rounded once to float */
    compare("tg_cuda_bias_grad", what, o[0], o[1], cols, kTolEw);
    free2(o);
  }
  free(work);
}

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_bias(void) {
  for (int s = 0; s < NSHAPES; s++) {
    FULL_ONLY(s != 1);
    const int rows = g_shapes[s][0], cols = g_shapes[s][1], ld = cols + 3;
    const size_t n = (size_t)rows * ld;
    float *B = input(1, cols, cols, 1.0f), *dY = input(rows, cols, ld, 1.0f);
    float *o[2];

    outputs(o, rows, cols, ld, 1);
    if (ops_row_is("bias_add")) {
      ok("tg_cuda_bias_add", "", tg_cuda_bias_add(rows, cols, o[0], ld, B, NULL));
      tg_cpu_bias_add(rows, cols, o[1], ld, B);
      compare("tg_cuda_bias_add", "Y", o[0], o[1], n, EXACT);
    }
    free2(o);

    if (ops_row_is("bias_grad")) emu_bias_grad(rows, cols, ld, dY, 1);
    free(B);
    free(dY);
  }
  if (!ops_row_is("bias_grad")) return;
  /* tall shapes: row slices over the whole GPU (1000 x 33: 4 slices of 250
   * rows, one tile; 8192 x 768: 11 slices of 745 rows, 24 tiles), and the
   * fallback without scratch */
  static const int tall[][2] = {{1000, 33}, {8192, 768}};
  for (int s = 0; s < 2; s++) {
    const int rows = tall[s][0], cols = tall[s][1], ld = cols + 1;
    float *dY = input(rows, cols, ld, 1.0f);
    emu_bias_grad(rows, cols, ld, dY, 1);
    if (s == 0) emu_bias_grad(rows, cols, ld, dY, 0);
    free(dY);
  }
  /* bias_grad over zero rows: db = beta * db */
  float *o[2];
  outputs(o, 1, 40, 40, 1);
  ok("tg_cuda_bias_grad", "rows 0",
     tg_cuda_bias_grad(0, 40, NULL, 40, 0.5f, o[0], NULL, 0, NULL));
  tg_cpu_bias_grad(0, 40, NULL, 40, 0.5f, o[1]);
  compare("tg_cuda_bias_grad", "rows 0", o[0], o[1], 40, kTolEw);
  free2(o);
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "bias_add",
     .doc = "bias add `Y += b`",
     .buffers = "Y (RW), b (R)",
     .covers = "tg_bias_add_cl tg_bias_add_insert tg_cuda_bias_add",
     .kernels = "tg_cpu_bias_add",
     .run = {[OPS_REF] = bias_ref, [OPS_CPU] = bias_pair, [OPS_CUDA] = bias_pair,
             [OPS_DEVICE] = bias_pair, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_bias)},
     .why_not = {[OPS_LOWP] = ADAPTER_ELSEWHERE, [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "bias_grad",
     .doc = "bias gradient `db (+)= colsum(dY)`",
     .buffers = "dY (R), db (W / RW / REDUX), scratch",
     .covers = "tg_bias_grad_cl tg_bias_grad_insert tg_cuda_bias_grad",
     .kernels = "tg_cpu_bias_grad",
     .run = {[OPS_REF] = bias_ref, [OPS_CPU] = bias_pair, [OPS_CUDA] = bias_pair,
             [OPS_DEVICE] = bias_pair, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_bias)},
     .why_not = {[OPS_LOWP] = ADAPTER_ELSEWHERE, [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
