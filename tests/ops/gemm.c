/*
 * Row gemm (codelets/gemm.c): tg_gemm and its CUDA launcher.
 *  ref       tg_cpu_gemm on each back end (OpenBLAS, oneDNN, libxsmm:
 *            gemm_libs.h) against a float64 product, every transpose, sizes
 *            from {1, 7, 33, 257}, padded leading dimensions (NaN input
 *            padding, sentinel output padding), beta 0 over NaN, k == 0 and
 *            alpha == 0; tg_cpu_gemm_bias (C = AB + a bias row, over
 *            NaN) the same way; dA and dB (GEMMs themselves) against finite
 *            differences of sum(W .* A B);
 *  pair      every transpose, alpha / beta, the four accumulation modes
 *            (two contributions in REDUX and COMMUTE), k up to 1025 (1e-4:
 *            another summation order on CUDA) and the left half of a
 *            partitioned C; and TG_COMMUTE's sum against float64: eight
 *            contributions submitted to any worker add into C (beta forced
 *            to 1, one task at a time: a lost update shows);
 *  cuda-emu  tg_cuda_gemm (cuBLAS on OpenBLAS) against tg_cpu_gemm, k 0.
 *  lowp      a 16-bit C accumulated through the adapter equals the f32
 *            GEMM's result rounded once, bit for bit (1 and 2 CPU workers);
 *            refused: 2-byte buffers without opts.lowp, a 2-byte REDUX
 *            target.
 */

#include <errno.h>

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"
#include "taskgrad/gemm_libs.h"

/* ---- ref --------------------------------------------------------------------- */

/* AB(i, j) = sum_p op(A)(i, p) op(B)(p, j) in double */
static double *ref_gemm_ab(int ta, int tb, int m, int n, int k, const float *A,
                           int lda, const float *B, int ldb) {
  double *ab = tg_test_malloc(sizeof(double) * ((size_t)m * n + 1));
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) {
        double a = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
        double b = tb ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
        s += a * b;
      }
      ab[(size_t)i * n + j] = s;
    }
  return ab;
}

static void ref_gemm_forward(tg_rng *rng) {
  int ncase = 0;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int im = 0; im < NSIZES; im++)
        for (int in = 0; in < NSIZES; in++)
          for (int ik = 0; ik < NSIZES; ik++) {
            int m = SIZES[im], n = SIZES[in], k = SIZES[ik];
            int arows = ta ? k : m, acols = ta ? m : k;
            int brows = tb ? n : k, bcols = tb ? k : n;
            int lda = acols + 3, ldb = bcols + 5, ldc = n + 2;
            float *A = tg_rand_mat(rng, arows, acols, lda, 1.0f, NAN);
            float *B = tg_rand_mat(rng, brows, bcols, ldb, 1.0f, NAN);
            double *ab = ref_gemm_ab(ta, tb, m, n, k, A, lda, B, ldb);
            float alpha = (ncase++ % 2) ? -0.7f : 1.3f;
            double *ref = tg_test_malloc(sizeof(double) * (size_t)m * n);

            /* beta == 0: C is write-only, even when it holds NaN */
            float *C = tg_const_mat(m, n, ldc, NAN, OUT_PAD);
            tg_cpu_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, 0.0f, C, ldc);
            for (size_t i = 0; i < (size_t)m * n; i++) ref[i] = alpha * ab[i];
            double e = mat_err(C, m, n, ldc, ref);
            CHECK_REL(e, TOL_FWD, "gemm beta=0");
            CHECK(pad_intact(C, m, n, ldc, OUT_PAD),
                  "gemm beta=0 wrote C padding (ta=%d tb=%d m=%d n=%d k=%d)",
                  ta, tb, m, n, k);
            if (!(e <= TOL_FWD))
              fprintf(stderr, "  ta=%d tb=%d m=%d n=%d k=%d\n", ta, tb, m, n, k);
            free(C);

            /* beta != 0: C = alpha AB + beta C0 */
            float beta = -0.45f;
            C = tg_rand_mat(rng, m, n, ldc, 1.0f, OUT_PAD);
            for (int i = 0; i < m; i++)
              for (int j = 0; j < n; j++)
                ref[(size_t)i * n + j] = alpha * ab[(size_t)i * n + j] +
                                         beta * (double)C[(size_t)i * ldc + j];
            tg_cpu_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
            e = mat_err(C, m, n, ldc, ref);
            CHECK_REL(e, TOL_FWD, "gemm beta!=0");
            CHECK(pad_intact(C, m, n, ldc, OUT_PAD),
                  "gemm wrote C padding (ta=%d tb=%d m=%d n=%d k=%d)", ta, tb,
                  m, n, k);
            if (!(e <= TOL_FWD))
              fprintf(stderr, "  ta=%d tb=%d m=%d n=%d k=%d\n", ta, tb, m, n, k);
            free(C);

            /* with a bias: C = AB + bias (every row), C write-only */
            float *bias = tg_rand_mat(rng, 1, n, n, 1.0f, NAN);
            C = tg_const_mat(m, n, ldc, NAN, OUT_PAD);
            for (int i = 0; i < m; i++)
              for (int j = 0; j < n; j++)
                ref[(size_t)i * n + j] = ab[(size_t)i * n + j] + (double)bias[j];
            tg_cpu_gemm_bias(ta, tb, m, n, k, A, lda, B, ldb, bias, C, ldc);
            e = mat_err(C, m, n, ldc, ref);
            CHECK_REL(e, TOL_FWD, "gemm with bias");
            CHECK(pad_intact(C, m, n, ldc, OUT_PAD),
                  "gemm with bias wrote C padding (ta=%d tb=%d m=%d n=%d k=%d)", ta, tb,
                  m, n, k);
            if (!(e <= TOL_FWD))
              fprintf(stderr, "  bias: ta=%d tb=%d m=%d n=%d k=%d\n", ta, tb, m, n, k);
            free(bias);
            free(C);
            free(ref);
            free(ab);
            free(A);
            free(B);
          }
}

static void ref_gemm_degenerate(tg_rng *rng) {
  int m = 7, n = 33, ldc = 35;
  /* k == 0, beta == 0: zeros over NaN */
  float *C = tg_const_mat(m, n, ldc, NAN, OUT_PAD);
  float dummy[4] = {NAN, NAN, NAN, NAN};
  tg_cpu_gemm(0, 0, m, n, 0, 1.0f, dummy, 1, dummy, n, 0.0f, C, ldc);
  int ok = 1;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) ok &= C[(size_t)i * ldc + j] == 0.0f;
  CHECK(ok, "gemm k=0 beta=0 must write zeros over NaN");
  CHECK(pad_intact(C, m, n, ldc, OUT_PAD), "gemm k=0 wrote C padding");
  free(C);

  /* k == 0, beta == 2: C doubled */
  C = tg_rand_mat(rng, m, n, ldc, 1.0f, OUT_PAD);
  float *C0 = copy_mat(C, m, ldc);
  tg_cpu_gemm(1, 1, m, n, 0, 1.0f, dummy, 1, dummy, 1, 2.0f, C, ldc);
  ok = 1;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++)
      ok &= C[(size_t)i * ldc + j] == 2.0f * C0[(size_t)i * ldc + j];
  CHECK(ok, "gemm k=0 beta=2 must double C");
  free(C0);

  /* k == 0 with a bias: every row is the bias */
  float bias[33];
  for (int j = 0; j < n; j++) bias[j] = 0.25f * (float)j - 3.0f;
  float *Cb = tg_const_mat(m, n, ldc, NAN, OUT_PAD);
  tg_cpu_gemm_bias(0, 1, m, n, 0, dummy, 1, dummy, 1, bias, Cb, ldc);
  ok = 1;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) ok &= Cb[(size_t)i * ldc + j] == bias[j];
  CHECK(ok, "gemm with bias, k=0: every row must be the bias");
  free(Cb);

  /* m == 0 or n == 0: nothing touched, NULL operands allowed */
  C0 = copy_mat(C, m, ldc);
  tg_cpu_gemm(0, 0, 0, n, 5, 1.0f, NULL, 5, NULL, n, 0.0f, C, ldc);
  tg_cpu_gemm(0, 0, m, 0, 5, 1.0f, NULL, 5, NULL, 1, 0.0f, C, ldc);
  CHECK(memcmp(C, C0, sizeof(float) * (size_t)m * ldc) == 0,
        "gemm with m=0 or n=0 must not touch C");
  free(C0);

  /* alpha == 0 (BLAS semantics): A, B not read, C = beta C */
  int k = 33;
  float *A = tg_const_mat(m, k, k, NAN, NAN);
  float *B = tg_const_mat(k, n, n, NAN, NAN);
  C0 = copy_mat(C, m, ldc);
  tg_cpu_gemm(0, 0, m, n, k, 0.0f, A, k, B, n, 0.5f, C, ldc);
  ok = 1;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++)
      ok &= C[(size_t)i * ldc + j] == 0.5f * C0[(size_t)i * ldc + j];
  CHECK(ok, "gemm alpha=0 must give beta*C without reading A, B");
  free(A);
  free(B);
  free(C0);
  free(C);
}

/* L(A, B) = sum W .* (A B), A (m, k), B (k, n), all compact double */
typedef struct {
  int m, n, k;
  const double *A, *B, *W;
  int wrt_a; /* the FD variable: A (1) or B (0) */
} gemm_fd_ctx;

static double gemm_loss(const double *x, const void *vctx) {
  const gemm_fd_ctx *c = vctx;
  const double *A = c->wrt_a ? x : c->A, *B = c->wrt_a ? c->B : x;
  double L = 0;
  for (int i = 0; i < c->m; i++)
    for (int j = 0; j < c->n; j++) {
      double s = 0;
      for (int p = 0; p < c->k; p++)
        s += A[(size_t)i * c->k + p] * B[(size_t)p * c->n + j];
      L += c->W[(size_t)i * c->n + j] * s;
    }
  return L;
}

/* dA = W B^T and dB = A^T W, both computed with tg_cpu_gemm, against FD */
static void ref_gemm_grad(tg_rng *rng) {
  static const int shapes[][3] = {{7, 33, 1}, {33, 7, 7}, {1, 257, 7},
                                  {7, 1, 33}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
    int lda = k + 1, ldb = n + 3, ldw = n + 2, ldda = k + 4, lddb = n + 1;
    float *A = tg_rand_mat(rng, m, k, lda, 1.0f, NAN);
    float *B = tg_rand_mat(rng, k, n, ldb, 1.0f, NAN);
    float *W = tg_rand_mat(rng, m, n, ldw, 1.0f, NAN);
    float *dA = tg_const_mat(m, k, ldda, NAN, OUT_PAD);
    float *dB = tg_const_mat(k, n, lddb, NAN, OUT_PAD);
    /* dA (m, k) = W (m, n) * B^T, B stored (k, n) */
    tg_cpu_gemm(0, 1, m, k, n, 1.0f, W, ldw, B, ldb, 0.0f, dA, ldda);
    /* dB (k, n) = A^T * W, A stored (m, k) */
    tg_cpu_gemm(1, 0, k, n, m, 1.0f, A, lda, W, ldw, 0.0f, dB, lddb);

    double *Ad = tg_compact_f64(A, m, k, lda), *Bd = tg_compact_f64(B, k, n, ldb);
    double *Wd = tg_compact_f64(W, m, n, ldw);
    gemm_fd_ctx ctx = {.m = m, .n = n, .k = k, .A = Ad, .B = Bd, .W = Wd, .wrt_a = 1};
    double *gA = tg_fd_grad(gemm_loss, &ctx, Ad, (size_t)m * k, FD_H);
    ctx.wrt_a = 0;
    double *gB = tg_fd_grad(gemm_loss, &ctx, Bd, (size_t)k * n, FD_H);
    CHECK_REL(mat_err(dA, m, k, ldda, gA), TOL_FD, "gemm dA = W B^T vs FD");
    CHECK_REL(mat_err(dB, k, n, lddb, gB), TOL_FD, "gemm dB = A^T W vs FD");
    CHECK(pad_intact(dA, m, k, ldda, OUT_PAD) &&
              pad_intact(dB, k, n, lddb, OUT_PAD),
          "gemm grad wrote padding");
    free(gA);
    free(gB);
    free(Ad);
    free(Bd);
    free(Wd);
    free(A);
    free(B);
    free(W);
    free(dA);
    free(dB);
  }
}

/* every back end (gemm_libs.h) in turn, through the kernels' table, so
 * that tg_cpu_gemm itself is what runs; the table is put back after */
static void gemm_ref(void) {
  tg_gemm_lib saved[TG_GEMM_NCLASSES];
  for (int c = 0; c < TG_GEMM_NCLASSES; c++) saved[c] = tg_cpu_gemm_lib(c);
  for (int lib = 0; lib < TG_GEMM_NLIBS; lib++) {
    tg_cpu_gemm_set_lib(-1, lib);
    int before = ops_failures();
    tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
    ref_gemm_forward(&rng);
    ref_gemm_degenerate(&rng);
    ref_gemm_grad(&rng);
    if (ops_failures() != before) fprintf(stderr, "  (back end %s)\n", tg_gemm_lib_name(lib));
  }
  for (int c = 0; c < TG_GEMM_NCLASSES; c++) tg_cpu_gemm_set_lib(c, saved[c]);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

typedef struct gemm_ctx {
  int ta, tb;
  float alpha, beta;
  tg_accum accum;
  starpu_data_handle_t A, B;
  int ld_test; /* output handle is the left half of a partitioned tensor */
} gemm_ctx;

static int gemm_submit(const void *vctx, const tg_task_opts *o,
                       tg_tensor *out) {
  const gemm_ctx *c = vctx;
  if (c->ld_test) {
    split_columns(&out[0]);
    int rc = tg_gemm_insert(c->ta, c->tb, c->alpha, c->A, c->B, c->beta,
                            left_half(&out[0]), c->accum, o);
    unsplit(&out[0]);
    return rc;
  }
  int rc = tg_gemm_insert(c->ta, c->tb, c->alpha, c->A, c->B, c->beta,
                          out[0].handle, c->accum, o);
  if (rc == 0 && (c->accum == TG_REDUCE || c->accum == TG_COMMUTE)) /* a second contribution */
    rc = tg_gemm_insert(c->ta, c->tb, -0.5f * c->alpha, c->A, c->B, c->beta,
                        out[0].handle, c->accum, o);
  return rc;
}

static void pair_gemm(void) {
  static const int shapes[][3] = {/* m, n, k */
                                  {1, 1, 1},    {7, 1, 33},  {1, 7, 257},
                                  {33, 7, 7},   {257, 33, 1}, {33, 257, 257},
                                  {7, 33, 1025}};
  const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  for (int s = 0; s < nshapes; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        tg_tensor A, B;
        float *a = rnd((size_t)m * k, 1.0f), *b = rnd((size_t)k * n, 1.0f);
        new_tensor(&A, ta ? k : m, ta ? m : k, a);
        new_tensor(&B, tb ? n : k, tb ? k : n, b);
        float *c0 = rnd((size_t)m * n, 1.0f);
        const double tol = k >= 257 ? TOL_LARGE_K : TOL;
        for (int mode = 0; mode < 4; mode++) {
          gemm_ctx ctx = {.ta = ta,
                          .tb = tb,
                          .alpha = 1.25f,
                          .beta = 0.0f,
                          .accum = (tg_accum)mode,
                          .A = A.handle,
                          .B = B.handle,
                          .ld_test = 0};
          if (mode == TG_ACCUMULATE) ctx.beta = 0.5f;
          if (mode == TG_REDUCE) ctx.beta = 1.0f;
          if (mode == TG_COMMUTE) ctx.beta = 0.5f; /* ignored: adds (beta 1) */
          outspec o = {.name = "C",
                       .rows = m,
                       .cols = n,
                       .init = mode == TG_OVERWRITE ? NULL : c0,
                       .redux = mode == TG_REDUCE,
                       .tol = tol};
          char what[128];
          snprintf(what, sizeof what, "gemm m=%d n=%d k=%d ta=%d tb=%d %s", m,
                   n, k, ta, tb, accum_name((tg_accum)mode));
          run_pair(what, gemm_submit, &ctx, 1, &o, NULL, NULL);
        }
        free(a);
        free(b);
        free(c0);
        tg_tensor_free(&A);
        tg_tensor_free(&B);
      }
}

/* GEMM whose output is the left half of a (m, 2n) matrix: ldc = 2n on the
 * CPU side; the right half must stay untouched. */
static void pair_gemm_ld(void) {
  const int m = 33, n = 7, k = 33;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int mode = 0; mode < 2; mode++) {
        tg_tensor A, B;
        float *a = rnd((size_t)m * k, 1.0f), *b = rnd((size_t)k * n, 1.0f);
        float *c0 = rnd((size_t)m * 2 * n, 1.0f);
        new_tensor(&A, ta ? k : m, ta ? m : k, a);
        new_tensor(&B, tb ? n : k, tb ? k : n, b);
        gemm_ctx ctx = {.ta = ta,
                        .tb = tb,
                        .alpha = 0.75f,
                        .beta = mode ? 0.5f : 0.0f,
                        .accum = (tg_accum)mode,
                        .A = A.handle,
                        .B = B.handle,
                        .ld_test = 1};
        outspec o = {.name = "C(:, 0:n) of (m, 2n)",
                     .rows = m,
                     .cols = 2 * n,
                     .init = c0,
                     .redux = 0,
                     .tol = TOL};
        char what[128];
        snprintf(what, sizeof what, "gemm ldc=2n ta=%d tb=%d %s", ta, tb,
                 accum_name((tg_accum)mode));
        run_pair(what, gemm_submit, &ctx, 1, &o, NULL, NULL);
        free(a);
        free(b);
        free(c0);
        tg_tensor_free(&A);
        tg_tensor_free(&B);
      }
}

/* C = C0 + sum_i alpha_i A B by eight TG_COMMUTE GEMMs left to the
 * scheduler (every worker of the backend may take some), against float64:
 * beta is forced to 1 whatever is given, and the tasks must add one at a
 * time (two at once would lose an update). */
static void pair_gemm_commute_sum(void) {
  const int m = 33, n = 65, k = 257, ncontrib = 8;
  tg_tensor A, B, C;
  float *a = rnd((size_t)m * k, 1.0f), *b = rnd((size_t)k * n, 1.0f);
  float *c0 = rnd((size_t)m * n, 1.0f), *c = xmalloc(sizeof(float) * m * n);
  new_tensor(&A, m, k, a);
  new_tensor(&B, k, n, b);
  new_tensor(&C, m, n, c0);
  double alpha_sum = 0;
  for (int i = 0; i < ncontrib; i++) {
    const float alpha = 0.25f * (float)(i + 1) * (i % 2 ? -1.0f : 1.0f);
    alpha_sum += alpha;
    CHECK(tg_gemm_insert(0, 0, alpha, A.handle, B.handle, 0.5f, C.handle, TG_COMMUTE, NULL) == 0,
          "%s", tg_last_error());
  }
  CHECK(tg_tensor_read(&C, c) == 0, "%s", tg_last_error());
  double *ab = ref_gemm_ab(0, 0, m, n, k, a, k, b, n);
  for (size_t i = 0; i < (size_t)m * n; i++) ab[i] = c0[i] + alpha_sum * ab[i];
  CHECK_REL(tg_rel_err_f64(c, ab, (size_t)m * n), TOL_LARGE_K,
            "gemm TG_COMMUTE: 8 contributions on any worker vs float64");
  free(ab);
  free(a);
  free(b);
  free(c0);
  free(c);
  tg_tensor_free(&A);
  tg_tensor_free(&B);
  tg_tensor_free(&C);
}

static void gemm_pair(void) {
  pair_gemm();
  pair_gemm_ld();
  pair_gemm_commute_sum();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static const int g_gemm_shapes[][3] = {{1, 1, 1},    {7, 1, 33},   {1, 7, 257},  {33, 7, 7},
                                       {257, 33, 1}, {33, 257, 257}, {7, 33, 1025}};
#define NGEMM 7

static void emu_gemm(void) {
  for (int s = 0; s < NGEMM; s++)
    for (int t = 0; t < 4; t++) {
      const int m = g_gemm_shapes[s][0], n = g_gemm_shapes[s][1], k = g_gemm_shapes[s][2];
      const int ta = t & 1, tb = t >> 1;
      const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      float *A = input(ar, ac, ac + 2, 1.0f), *B = input(br, bc, bc + 1, 1.0f), *C[2];
      const float beta = t == 3 ? 0.0f : 0.5f;
      outputs(C, m, n, n + 3, beta != 0.0f);
      ok("tg_cuda_gemm", "", tg_cuda_gemm(g_blas, ta, tb, m, n, k, 1.5f, A, ac + 2, B, bc + 1,
                                          beta, C[0], n + 3));
      tg_cpu_gemm(ta, tb, m, n, k, 1.5f, A, ac + 2, B, bc + 1, beta, C[1], n + 3);
      compare("tg_cuda_gemm", "C", C[0], C[1], (size_t)m * (n + 3), k > 257 ? kTolLong : kTolRed);
      free2(C);
      free(A);
      free(B);
    }
  /* tg_cuda_gemm_strided: 3 products whose operands interleave as the
   * attention's heads do (stride = a column block, not a whole matrix),
   * against tg_cpu_gemm on each */
  for (int t = 0; t < 4; t++) {
    const int m = 9, n = 7, k = 5, batch = 3, ta = t & 1, tb = t >> 1;
    const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    const int lda = batch * ac + 1, ldb = batch * bc, ldc = batch * n + 2;
    float *A = input(ar, batch * ac, lda, 1.0f), *B = input(br, batch * bc, ldb, 1.0f), *C[2];
    outputs(C, m, batch * n, ldc, 1);
    ok("tg_cuda_gemm_strided", "", tg_cuda_gemm_strided(g_blas, ta, tb, m, n, k, 0.75f, A, lda,
                                                        ac, B, ldb, bc, 0.5f, C[0], ldc, n,
                                                        batch));
    for (int i = 0; i < batch; i++)
      tg_cpu_gemm(ta, tb, m, n, k, 0.75f, A + i * ac, lda, B + i * bc, ldb, 0.5f, C[1] + i * n,
                  ldc);
    compare("tg_cuda_gemm_strided", "C", C[0], C[1], (size_t)m * ldc, kTolRed);
    free2(C);
    free(A);
    free(B);
  }
  /* k == 0: C = beta C, beta == 0 writing zeros over NaN; ld 0 operands */
  for (int b = 0; b < 3; b++) {
    float *C[2];
    const float beta = b == 0 ? 0.0f : b == 1 ? 1.0f : -2.0f;
    outputs(C, 5, 6, 7, b != 0);
    ok("tg_cuda_gemm", "k 0", tg_cuda_gemm(g_blas, 0, 0, 5, 6, 0, 1.0f, NULL, 0, NULL, 0, beta,
                                           C[0], 7));
    tg_cpu_gemm(0, 0, 5, 6, 0, 1.0f, NULL, 0, NULL, 0, beta, C[1], 7);
    compare("tg_cuda_gemm", "k 0", C[0], C[1], 35, EXACT);
    free2(C);
  }
}
#endif /* OPS_EMU */

/* ---- lowp (from the linear row) ---------------------------------------------- */

/* a 16-bit C accumulated, C = X W^T + C, equal to the f32 GEMM's result
 * rounded once; refusals: a 2-byte buffer without opts.lowp, a 2-byte
 * REDUX target */
static void gemm_lowp_case(tg_rng *rng, tg_dtype t) {
  int rows = 37, in = 29, out = 23;
  float *x = rounded_rand(rng, t, rows, in, 1.0f), *w = rounded_rand(rng, t, out, in, 0.3f);
  float *c0 = rounded_rand(rng, t, rows, out, 1.0f);
  tg_tensor X, Wt, X32, W32, C, C32;
  new_low(&X, t, rows, in, x);
  new_low(&Wt, t, out, in, w);
  new_f32(&X32, rows, in, x);
  new_f32(&W32, out, in, w);
  new_low(&C, t, rows, out, c0);
  new_f32(&C32, rows, out, c0);
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = t};
  CHECK(tg_gemm_insert(0, 1, 1.0f, X.handle, Wt.handle, 1.0f, C.handle, TG_ACCUMULATE, &o) == 0,
        "gemm 16-bit C: %s", tg_last_error());
  CHECK(tg_gemm_insert(0, 1, 1.0f, X32.handle, W32.handle, 1.0f, C32.handle, TG_ACCUMULATE,
                       NULL) == 0, "gemm f32: %s", tg_last_error());
  expect_rounded(t, &C, &C32, "GEMM with an accumulated 16-bit C");
  CHECK_REFUSED(tg_gemm_insert(0, 1, 1.0f, X.handle, Wt.handle, 1.0f, C.handle, TG_ACCUMULATE,
                               NULL), "tg_gemm", "a 2-byte buffer without opts.lowp");
  CHECK_REFUSED(tg_gemm_insert(0, 1, 1.0f, X.handle, W32.handle, 1.0f, C32.handle,
                               TG_ACCUMULATE, NULL),
                "tg_gemm", "a 16-bit A in the f32 GEMM (was test_precision_amp.c)");
  tg_tensor_enable_reduction(&C);
  CHECK_REFUSED(tg_gemm_insert(0, 1, 1.0f, X.handle, Wt.handle, 1.0f, C.handle, TG_REDUCE, &o),
                "tg_gemm", "a 2-byte REDUX target");
  tg_tensor *all[] = {&X, &Wt, &X32, &W32, &C, &C32};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(x);
  free(w);
  free(c0);
}

static void gemm_lowp_body(void) {
  tg_rng rng = {.s = 2025};
  for (int k = 0; k < 2; k++) gemm_lowp_case(&rng, LOWP[k]);
}

static void gemm_adapter(void) { ops_run_worker_counts(gemm_lowp_body); }

static const ops_row rows[] = {
    {.name = "gemm",
     .doc = "GEMM `C = a op(A) op(B) + b C`, all transposes (OpenBLAS, oneDNN or libxsmm sgemm; cuBLAS sgemm)",
     .buffers = "A (R), B (R), C (W / RW / REDUX / RW COMMUTE)",
     .covers = "tg_gemm_cl tg_gemm_insert tg_cuda_gemm tg_cuda_gemm_strided",
     .kernels = "tg_cpu_gemm tg_cpu_gemm_bias",
     .run = {[OPS_REF] = gemm_ref, [OPS_CPU] = gemm_pair, [OPS_CUDA] = gemm_pair,
             [OPS_DEVICE] = gemm_pair, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_gemm),
             [OPS_LOWP] = gemm_adapter},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
