/*
 * Row residual (codelets/residual.c): Y = A + B.
 *  ref       against float64, n in {1, 7, 33, 100}, C in {1, 7, 33, 64},
 *            padded leading dimensions;
 *  pair      33 x 257;
 *  cuda-emu  the launcher out of place and aliased (Y == A, Y == B), exact.
 */

#include "ref_util.h"
#include "pair.h"

/* ---- ref --------------------------------------------------------------------- */

static void ref_residual(tg_rng *rng) {
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

static void residual_ref(void) {
  tg_rng rng = {.s = 0x2545F4914F6CDD1DULL};
  ref_residual(&rng);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int residual(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_residual_insert(c->h[0], c->h[1], out[0].handle, o);
}

static void pair_residual(void) {
  const int n = 33, C = 257;
  float *a = rnd((size_t)n * C, 1), *b = rnd((size_t)n * C, 1);
  tg_tensor A, B;
  new_tensor(&A, n, C, a);
  new_tensor(&B, n, C, b);
  gctx c = {.h = {A.handle, B.handle},
            .T = 0,
            .NH = 0,
            .chunk = 0,
            .V = 0,
            .kind = 0,
            .accum = TG_OVERWRITE};
  outspec o = {.name = "Y", .rows = n, .cols = C, .init = NULL, .redux = 0, .tol = TOL};
  run_pair("residual", residual, &c, 1, &o, NULL, NULL);
  free(a); free(b);
  tg_tensor_free(&A); tg_tensor_free(&B);
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_residual(void) {
  for (int s = 0; s < NSHAPES; s++) {
    FULL_ONLY(s != 1);
    const int rows = g_shapes[s][0], cols = g_shapes[s][1], ld = cols + 3;
    const size_t n = (size_t)rows * ld;
    float *X = input(rows, cols, ld, 2.0f), *dY = input(rows, cols, ld, 1.0f);
    float *o[2];
    outputs(o, rows, cols, ld, 0);
    ok("tg_cuda_residual_fwd", "", tg_cuda_residual_fwd(rows, cols, X, ld, dY, ld, o[0], ld, NULL));
    tg_cpu_residual_fwd(rows, cols, X, ld, dY, ld, o[1], ld);
    compare("tg_cuda_residual_fwd", "Y", o[0], o[1], n, EXACT);
    free2(o);
    for (int alias = 0; alias < 2; alias++) { /* Y == A, then Y == B */
      float *a[2] = {tg_copy_f(X, n), tg_copy_f(X, n)};
      for (int side = 0; side < 2; side++) {
        const float *A = alias ? dY : a[side], *Bm = alias ? a[side] : dY;
        if (side == 0)
          ok("tg_cuda_residual_fwd", "aliased", tg_cuda_residual_fwd(rows, cols, A, ld, Bm, ld, a[0], ld, NULL));
        else
          tg_cpu_residual_fwd(rows, cols, A, ld, Bm, ld, a[1], ld);
      }
      compare("tg_cuda_residual_fwd", "aliased", a[0], a[1], n, EXACT);
      free2(a);
    }
    free(X);
    free(dY);
  }
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "residual",
     .doc = "residual add",
     .buffers = "A (R), B (R), Y (W or RW in place)",
     .covers = "tg_residual_cl tg_residual_insert tg_cuda_residual_fwd",
     .kernels = "tg_cpu_residual_fwd",
     .run = {[OPS_REF] = residual_ref, [OPS_CPU] = pair_residual,
             [OPS_CUDA] = pair_residual, [OPS_DEVICE] = pair_residual,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_residual)},
     .why_not = {[OPS_LOWP] = ADAPTER_ELSEWHERE, [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
