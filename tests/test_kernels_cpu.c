/*
 * Layer-1 CPU kernels against independent float64 references.
 *
 *  - forward kernels: naive double loops written here, fresh seeded random
 *    inputs, odd sizes from {1, 7, 33, 257}, leading dimensions larger than
 *    the row length.  Padding of inputs is NaN (reading it would poison the
 *    result), padding of outputs a sentinel that must survive bit for bit.
 *    Norm-relative error (tg_rel_err_f64) <= 1e-5.
 *  - backward kernels: against central finite differences, in double, of a
 *    scalar function of the double reference forward, L = sum(W .* f(x))
 *    with random W (for softmax_xent, L is the loss itself).  Norm-relative
 *    error <= 1e-4: the FD error is ~1e-9 here (h = 1e-4, double), the float
 *    kernels ~1e-7, while a sign or transposition error gives O(1) and a
 *    single wrong element of an n-vector at least ~1/sqrt(n) >= 1e-2.
 *  - SGD and AdamW: several steps against a double reference that uses the
 *    same float hyperparameters, relative error < 1e-5 on w and on the
 *    optimizer state, < 1e-4 on the total update w - w0.
 *
 * No StarPU here: this only needs kernels_cpu.h and the kernels.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "taskgrad/kernels_cpu.h"
#include "testutil.h"

#define NSIZES 4
static const int SIZES[NSIZES] = {1, 7, 33, 257};

#define TOL_FWD 1e-5
#define TOL_FD 1e-4
#define FD_H 1e-4

static const float OUT_PAD = -12345.5f; /* sentinel in output padding */

/* ---- helpers -------------------------------------------------------------- */

static float *copy_mat(const float *m, int rows, int ld) {
  float *c = tg_test_malloc(sizeof(float) * (size_t)rows * ld);
  memcpy(c, m, sizeof(float) * (size_t)rows * ld);
  return c;
}

/* compact float copy (rows * cols) of a padded matrix */
static float *compact_f32(const float *m, int rows, int cols, int ld) {
  float *c = tg_test_malloc(sizeof(float) * ((size_t)rows * cols + 1));
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) c[(size_t)r * cols + j] = m[(size_t)r * ld + j];
  return c;
}

/* norm-relative error of the (rows, cols) part of a padded float matrix
 * against a compact double reference */
static double mat_err(const float *got, int rows, int cols, int ld,
                      const double *ref) {
  float *g = compact_f32(got, rows, cols, ld);
  double e = tg_rel_err_f64(g, ref, (size_t)rows * cols);
  free(g);
  return e;
}

/* the padding floats of every row still equal `pad`, bit for bit */
static int pad_intact(const float *m, int rows, int cols, int ld, float pad) {
  for (int r = 0; r < rows; r++)
    for (int c = cols; c < ld; c++)
      if (memcmp(&m[(size_t)r * ld + c], &pad, sizeof pad) != 0) return 0;
  return 1;
}

static double rel_err_scalar(double got, double ref) {
  return fabs(got - ref) / fmax(fabs(ref), 1e-300);
}

/* ||a - b|| / ||b|| over two double vectors */
static double rel_err_dd(const double *a, const double *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den < 1e-300 ? sqrt(num) : sqrt(num / den);
}

/* Central finite differences of a scalar function f(x, ctx) in double. */
/* ---- GEMM ----------------------------------------------------------------- */

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

static void test_gemm_forward(tg_rng *rng) {
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
            free(ref);
            free(ab);
            free(A);
            free(B);
          }
}

static void test_gemm_degenerate(tg_rng *rng) {
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
static void test_gemm_grad(tg_rng *rng) {
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
    gemm_fd_ctx ctx = {m, n, k, Ad, Bd, Wd, 1};
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

/* ---- bias ----------------------------------------------------------------- */

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

static void test_bias(tg_rng *rng) {
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
      CHECK_REL(mat_err(Y, rows, cols, ld, ref), TOL_FWD, "bias_add");
      CHECK(pad_intact(Y, rows, cols, ld, OUT_PAD), "bias_add wrote padding");
      free(ref);

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
        bias_fd_ctx ctx = {rows, cols, Y0d, Wd};
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

/* ---- activations ---------------------------------------------------------- */

static double ref_relu(double x) { return x > 0 ? x : 0; }
static double ref_gelu(double x) {
  const double k0 = sqrt(2.0 / M_PI), k1 = 0.044715;
  return 0.5 * x * (1.0 + tanh(k0 * (x + k1 * x * x * x)));
}

/* L(x) = sum W .* act(x), all compact */
typedef struct {
  size_t n;
  const double *W;
  double (*act)(double);
} act_fd_ctx;

static double act_loss(const double *x, const void *vctx) {
  const act_fd_ctx *c = vctx;
  double L = 0;
  for (size_t i = 0; i < c->n; i++) L += c->W[i] * c->act(x[i]);
  return L;
}

typedef void (*act_fwd_fn)(int, int, const float *, int, float *, int);
typedef void (*act_bwd_fn)(int, int, const float *, int, const float *, int,
                           float *, int);

static void test_activation(tg_rng *rng, const char *name, act_fwd_fn fwd,
                            act_bwd_fn bwd, double (*ref)(double),
                            float xscale) {
  char what[96];
  int is_relu = ref == ref_relu;
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic];
      int ldx = cols + 1, ldy = cols + 4;
      size_t n = (size_t)rows * cols;
      float *X = tg_rand_mat(rng, rows, cols, ldx, xscale, NAN);
      if (is_relu) /* keep FD points at least 0.05 away from the kink */
        for (int r = 0; r < rows; r++)
          for (int j = 0; j < cols; j++) {
            float *x = &X[(size_t)r * ldx + j];
            *x = *x < 0 ? *x - 0.05f : *x + 0.05f;
          }
      double *Xd = tg_compact_f64(X, rows, cols, ldx);

      /* forward */
      double *yref = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) yref[i] = ref(Xd[i]);
      float *Y = tg_const_mat(rows, cols, ldy, NAN, OUT_PAD);
      fwd(rows, cols, X, ldx, Y, ldy);
      snprintf(what, sizeof what, "%s fwd %dx%d", name, rows, cols);
      CHECK_REL(mat_err(Y, rows, cols, ldy, yref), TOL_FWD, what);
      CHECK(pad_intact(Y, rows, cols, ldy, OUT_PAD), "%s wrote padding", what);

      /* forward in place (Y == X) gives the same values */
      float *Xi = copy_mat(X, rows, ldx);
      fwd(rows, cols, Xi, ldx, Xi, ldx);
      int same = 1;
      for (int r = 0; r < rows; r++)
        same &= memcmp(&Xi[(size_t)r * ldx], &Y[(size_t)r * ldy],
                       sizeof(float) * cols) == 0;
      CHECK(same, "%s in place differs", what);

      /* backward against FD of L = sum W .* act(X) (FD on small sizes) */
      float *W = tg_rand_mat(rng, rows, cols, ldy, 1.0f, NAN);
      float *dX = tg_const_mat(rows, cols, ldx + 2, NAN, OUT_PAD);
      bwd(rows, cols, X, ldx, W, ldy, dX, ldx + 2);
      if (n <= 2000) {
        double *Wd = tg_compact_f64(W, rows, cols, ldy);
        act_fd_ctx ctx = {n, Wd, ref};
        double *g = tg_fd_grad(act_loss, &ctx, Xd, n, FD_H);
        snprintf(what, sizeof what, "%s bwd vs FD %dx%d", name, rows, cols);
        CHECK_REL(mat_err(dX, rows, cols, ldx + 2, g), TOL_FD, what);
        free(g);
        free(Wd);
      }
      CHECK(pad_intact(dX, rows, cols, ldx + 2, OUT_PAD),
            "%s bwd wrote padding", name);

      /* backward in place (dX == dY) gives the same values */
      float *Wi = copy_mat(W, rows, ldy);
      bwd(rows, cols, X, ldx, Wi, ldy, Wi, ldy);
      same = 1;
      for (int r = 0; r < rows; r++)
        same &= memcmp(&Wi[(size_t)r * ldy], &dX[(size_t)r * (ldx + 2)],
                       sizeof(float) * cols) == 0;
      CHECK(same, "%s bwd in place differs", name);

      free(Wi);
      free(dX);
      free(W);
      free(Xi);
      free(Y);
      free(yref);
      free(Xd);
      free(X);
    }
}

/* GELU elementwise over [-5, 5] (its negative tail included) and at extreme
 * inputs, where the derivative must be exactly 1 or 0 and never NaN. */
static void test_gelu_pointwise(void) {
  enum { N = 1001 };
  float x[N], y[N], ones[N];
  double worst = 0;
  for (int i = 0; i < N; i++) {
    x[i] = (float)(-5.0 + 10.0 * i / (N - 1));
    ones[i] = 1.0f;
  }
  tg_cpu_gelu_fwd(1, N, x, N, y, N);
  for (int i = 0; i < N; i++) {
    double r = ref_gelu(x[i]);
    double e = fabs(y[i] - r) / fmax(fabs(r), 1e-30);
    if (x[i] != 0.0f && e > worst) worst = e;
  }
  CHECK(worst <= TOL_FWD, "gelu elementwise on [-5, 5]: rel err %.3e", worst);

  float xs[8] = {30.0f, -30.0f, 1e30f, -1e30f, 20.5f, -20.5f, 0.0f, -0.0f};
  float dd[8], yy[8];
  tg_cpu_gelu_bwd(1, 8, xs, 8, ones, 8, dd, 8);
  tg_cpu_gelu_fwd(1, 8, xs, 8, yy, 8);
  CHECK(dd[0] == 1.0f && dd[2] == 1.0f && dd[4] == 1.0f,
        "gelu' for large x: %g %g %g", dd[0], dd[2], dd[4]);
  CHECK(dd[1] == 0.0f && dd[3] == 0.0f && dd[5] == 0.0f,
        "gelu' for very negative x: %g %g %g", dd[1], dd[3], dd[5]);
  CHECK(dd[6] == 0.5f && dd[7] == 0.5f, "gelu'(0) = %g", dd[6]);
  CHECK(yy[0] == 30.0f && yy[2] == 1e30f && yy[1] == 0.0f && yy[3] == 0.0f &&
            yy[6] == 0.0f,
        "gelu at extremes: %g %g %g %g", yy[0], yy[1], yy[2], yy[3]);
}

static void test_relu_nan(void) {
  float x[3] = {NAN, -1.0f, 2.0f}, y[3], dy[3] = {NAN, NAN, 3.0f}, dx[3];
  tg_cpu_relu_fwd(1, 3, x, 3, y, 3);
  CHECK(isnan(y[0]) && y[1] == 0.0f && y[2] == 2.0f, "relu NaN/neg/pos");
  tg_cpu_relu_bwd(1, 3, x, 3, dy, 3, dx, 3);
  CHECK(dx[0] == 0.0f && dx[1] == 0.0f && dx[2] == 3.0f,
        "relu_bwd selects dy where x > 0 only");
}

/* ---- softmax + cross-entropy ---------------------------------------------- */

typedef struct {
  int rows, cols;
  const int32_t *labels;
  double scale;
} xent_ctx;

/* scale * sum_r -log softmax(x_r)(label_r), max-subtracted, in double */
static double xent_loss(const double *x, const void *vctx) {
  const xent_ctx *c = vctx;
  double L = 0;
  for (int r = 0; r < c->rows; r++) {
    const double *row = x + (size_t)r * c->cols;
    double mx = row[0];
    for (int j = 1; j < c->cols; j++) mx = fmax(mx, row[j]);
    double s = 0;
    for (int j = 0; j < c->cols; j++) s += exp(row[j] - mx);
    L += mx + log(s) - row[c->labels[r]];
  }
  return c->scale * L;
}

static void test_softmax_xent(tg_rng *rng) {
  char what[96];
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic], ldl = cols + 2, ldd = cols + 5;
      size_t n = (size_t)rows * cols;
      float scale = 1.0f / (float)(2 * rows + 1);
      /* wide logits: confident rows, where p_label - 1 could cancel */
      float *X = tg_rand_mat(rng, rows, cols, ldl, 6.0f, NAN);
      int32_t *lab = tg_test_malloc(sizeof(int32_t) * rows);
      for (int r = 0; r < rows; r++)
        lab[r] = (int32_t)(tg_rng_next(rng) % (uint64_t)cols);
      double *Xd = tg_compact_f64(X, rows, cols, ldl);
      xent_ctx ctx = {rows, cols, lab, scale};

      /* reference dlogits and loss */
      double *dref = tg_test_malloc(sizeof(double) * n);
      for (int r = 0; r < rows; r++) {
        const double *x = Xd + (size_t)r * cols;
        double mx = x[0], s = 0;
        for (int j = 1; j < cols; j++) mx = fmax(mx, x[j]);
        for (int j = 0; j < cols; j++) s += exp(x[j] - mx);
        for (int j = 0; j < cols; j++)
          dref[(size_t)r * cols + j] =
              scale * (exp(x[j] - mx) / s - (j == lab[r] ? 1.0 : 0.0));
      }
      double lref = 0.25 + xent_loss(Xd, &ctx);

      float *D = tg_const_mat(rows, cols, ldd, NAN, OUT_PAD);
      float loss = 0.25f;
      tg_cpu_softmax_xent(rows, cols, X, ldl, lab, scale, D, ldd, &loss);
      snprintf(what, sizeof what, "softmax_xent dlogits %dx%d", rows, cols);
      CHECK_REL(mat_err(D, rows, cols, ldd, dref), TOL_FWD, what);
      CHECK(pad_intact(D, rows, cols, ldd, OUT_PAD), "%s wrote padding", what);
      snprintf(what, sizeof what, "softmax_xent loss %dx%d", rows, cols);
      CHECK_REL(rel_err_scalar(loss, lref), TOL_FWD, what);

      /* shifted by +1000: same result (max subtraction); in place */
      float *Xs = copy_mat(X, rows, ldl);
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) Xs[(size_t)r * ldl + j] += 1000.0f;
      double *Xsd = tg_compact_f64(Xs, rows, cols, ldl);
      double lsref = 0.25 + xent_loss(Xsd, &ctx);
      float lshift = 0.25f;
      tg_cpu_softmax_xent(rows, cols, Xs, ldl, lab, scale, Xs, ldl, &lshift);
      snprintf(what, sizeof what, "softmax_xent +1000 in place %dx%d", rows,
               cols);
      /* the shifted logits lose 1000's ulp (6e-5) of precision in float, so
       * compare with the reference for those shifted float inputs */
      {
        double *dsref = tg_test_malloc(sizeof(double) * n);
        for (int r = 0; r < rows; r++) {
          const double *x = Xsd + (size_t)r * cols;
          double mx = x[0], s = 0;
          for (int j = 1; j < cols; j++) mx = fmax(mx, x[j]);
          for (int j = 0; j < cols; j++) s += exp(x[j] - mx);
          for (int j = 0; j < cols; j++)
            dsref[(size_t)r * cols + j] =
                scale * (exp(x[j] - mx) / s - (j == lab[r] ? 1.0 : 0.0));
        }
        CHECK_REL(mat_err(Xs, rows, cols, ldl, dsref), TOL_FWD, what);
        CHECK(isfinite(lshift) && rel_err_scalar(lshift, lsref) <= TOL_FWD,
              "%s: loss %g vs %g", what, lshift, lsref);
        free(dsref);
      }

      /* dlogits is the gradient of the loss: FD */
      if (n <= 2000) {
        double *g = tg_fd_grad(xent_loss, &ctx, Xd, n, FD_H);
        snprintf(what, sizeof what, "softmax_xent dlogits vs FD %dx%d", rows,
                 cols);
        CHECK_REL(mat_err(D, rows, cols, ldd, g), TOL_FD, what);
        free(g);
      }
      free(Xsd);
      free(Xs);
      free(D);
      free(dref);
      free(Xd);
      free(lab);
      free(X);
    }

  /* out-of-range labels: no out-of-bounds read, zero gradient, NaN loss */
  {
    float x[2 * 3] = {1, 2, 3, 4, 5, 6}, d[2 * 3];
    int32_t bad[2] = {3, -1};
    float loss = 0.0f;
    tg_cpu_softmax_xent(2, 3, x, 3, bad, 1.0f, d, 3, &loss);
    int zero = 1;
    for (int i = 0; i < 6; i++) zero &= d[i] == 0.0f;
    CHECK(zero && isnan(loss), "softmax_xent bad labels: zero grad, NaN loss");
  }
}

static void test_accuracy(tg_rng *rng) {
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic], ldl = cols + 3;
      float *X = tg_rand_mat(rng, rows, cols, ldl, 1.0f, NAN);
      int32_t *lab = tg_test_malloc(sizeof(int32_t) * rows);
      int expect = 0;
      for (int r = 0; r < rows; r++) {
        float *x = X + (size_t)r * ldl;
        if (r % 3 == 1 && cols > 2) { /* a tie: first maximum wins */
          x[cols - 1] = 2.0f;
          x[cols / 2] = 2.0f;
        }
        int best = 0;
        for (int j = 1; j < cols; j++)
          if (x[j] > x[best]) best = j;
        /* label: the argmax for about half the rows, else something else
         * (for ties, sometimes the second maximum, which must not count) */
        uint64_t u = tg_rng_next(rng) % 3;
        lab[r] = u == 0 ? best
                        : (r % 3 == 1 && cols > 2 && u == 1)
                              ? cols - 1
                              : (int32_t)((best + 1 + (int)u) % cols);
        expect += lab[r] == best;
      }
      float correct = 3.0f;
      tg_cpu_accuracy_count(rows, cols, X, ldl, lab, &correct);
      CHECK(correct == 3.0f + (float)expect,
            "accuracy_count %dx%d: %g, expected %d", rows, cols,
            (double)correct - 3.0, expect);
      free(lab);
      free(X);
    }
  /* explicit ties */
  float x[2 * 4] = {1, 5, 5, 0, 7, 7, 7, 7};
  int32_t l1[2] = {1, 0}, l2[2] = {2, 3};
  float c1 = 0, c2 = 0;
  tg_cpu_accuracy_count(2, 4, x, 4, l1, &c1);
  tg_cpu_accuracy_count(2, 4, x, 4, l2, &c2);
  CHECK(c1 == 2.0f && c2 == 0.0f, "accuracy ties: %g %g (expected 2 0)", c1,
        c2);
}

/* ---- optimizers ----------------------------------------------------------- */

static void test_sgd(tg_rng *rng) {
  static const struct {
    float lr, momentum, wd, gscale;
  } hp[] = {{0.05f, 0.9f, 0.01f, 0.5f}, {0.1f, 0.0f, 0.0f, 1.0f},
            {0.02f, 0.8f, 0.1f, 2.0f}};
  for (size_t h = 0; h < sizeof hp / sizeof hp[0]; h++)
    for (int is = 0; is < NSIZES; is++) {
      size_t n = (size_t)SIZES[is] * (is == 3 ? 3 : 1); /* 1 7 33 771 */
      float *w = tg_rand_mat(rng, 1, (int)n, (int)n, 1.0f, 0);
      float *vel = tg_const_mat(1, (int)n, (int)n, 0.0f, 0);
      double *wd = tg_compact_f64(w, 1, (int)n, (int)n);
      double *w0 = tg_compact_f64(w, 1, (int)n, (int)n);
      double *vd = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) vd[i] = 0;
      double lr = hp[h].lr, mom = hp[h].momentum, dec = hp[h].wd,
             gs = hp[h].gscale;
      for (int step = 0; step < 5; step++) {
        float *g = tg_rand_mat(rng, 1, (int)n, (int)n, 1.0f, 0);
        for (size_t i = 0; i < n; i++) {
          double gi = gs * g[i] + dec * wd[i];
          vd[i] = mom * vd[i] + gi;
          wd[i] -= lr * vd[i];
        }
        tg_cpu_sgd(n, w, g, vel, hp[h].lr, hp[h].momentum, hp[h].wd,
                   hp[h].gscale);
        free(g);
      }
      CHECK_REL(tg_rel_err_f64(w, wd, n), 1e-5, "sgd w");
      CHECK_REL(tg_rel_err_f64(vel, vd, n), 1e-5, "sgd velocity");
      double *dw = tg_test_malloc(sizeof(double) * n), *dref = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) {
        dw[i] = (double)w[i] - w0[i];
        dref[i] = wd[i] - w0[i];
      }
      CHECK_REL(rel_err_dd(dw, dref, n), 1e-4, "sgd update w - w0");
      free(dw);
      free(dref);
      free(vd);
      free(w0);
      free(wd);
      free(vel);
      free(w);
    }
}

static void test_adamw(tg_rng *rng) {
  static const struct {
    float lr, b1, b2, eps, wd, gscale;
  } hp[] = {{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.25f},
            {3e-3f, 0.8f, 0.99f, 1e-6f, 0.0f, 1.0f},
            {5e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 4.0f}};
  for (size_t h = 0; h < sizeof hp / sizeof hp[0]; h++)
    for (int is = 0; is < NSIZES; is++) {
      size_t n = (size_t)SIZES[is] * (is == 3 ? 3 : 1);
      float *w = tg_rand_mat(rng, 1, (int)n, (int)n, 1.0f, 0);
      float *m = tg_const_mat(1, (int)n, (int)n, 0.0f, 0);
      float *v = tg_const_mat(1, (int)n, (int)n, 0.0f, 0);
      double *wd = tg_compact_f64(w, 1, (int)n, (int)n);
      double *w0 = tg_compact_f64(w, 1, (int)n, (int)n);
      double *md = tg_test_malloc(sizeof(double) * n), *vd = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) md[i] = vd[i] = 0;
      /* the reference uses the same float hyperparameters, in double */
      double lr = hp[h].lr, b1 = hp[h].b1, b2 = hp[h].b2, eps = hp[h].eps,
             dec = hp[h].wd, gs = hp[h].gscale;
      for (int t = 1; t <= 6; t++) {
        float bc1 = (float)(1.0 - pow(hp[h].b1, t));
        float bc2 = (float)(1.0 - pow(hp[h].b2, t));
        float *g = tg_rand_mat(rng, 1, (int)n, (int)n, 1.0f, 0);
        for (size_t i = 0; i < n; i++) {
          double gi = gs * g[i];
          wd[i] *= 1.0 - lr * dec;
          md[i] = b1 * md[i] + (1.0 - b1) * gi;
          vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
          wd[i] -= lr * (md[i] / bc1) / (sqrt(vd[i] / bc2) + eps);
        }
        tg_cpu_adamw(n, w, g, m, v, hp[h].lr, hp[h].b1, hp[h].b2, hp[h].eps,
                     hp[h].wd, bc1, bc2, hp[h].gscale);
        free(g);
      }
      CHECK_REL(tg_rel_err_f64(w, wd, n), 1e-5, "adamw w");
      CHECK_REL(tg_rel_err_f64(m, md, n), 1e-5, "adamw m");
      CHECK_REL(tg_rel_err_f64(v, vd, n), 1e-5, "adamw v");
      double *dw = tg_test_malloc(sizeof(double) * n), *dref = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) {
        dw[i] = (double)w[i] - w0[i];
        dref[i] = wd[i] - w0[i];
      }
      CHECK_REL(rel_err_dd(dw, dref, n), 1e-4, "adamw update w - w0");
      free(dw);
      free(dref);
      free(md);
      free(vd);
      free(w0);
      free(wd);
      free(v);
      free(m);
      free(w);
    }
}

/* ---- fill, accumulate, scale ---------------------------------------------- */

static void test_elementwise(tg_rng *rng) {
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic], ld = cols + 3, lds = cols + 6;
      size_t n = (size_t)rows * cols;

      float *X = tg_const_mat(rows, cols, ld, NAN, OUT_PAD);
      tg_cpu_fill(rows, cols, X, ld, 0.375f);
      int ok = 1;
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) ok &= X[(size_t)r * ld + j] == 0.375f;
      CHECK(ok && pad_intact(X, rows, cols, ld, OUT_PAD), "fill %dx%d", rows,
            cols);
      free(X);

      float *D = tg_rand_mat(rng, rows, cols, ld, 1.0f, OUT_PAD);
      float *S = tg_rand_mat(rng, rows, cols, lds, 1.0f, NAN);
      double *ref = tg_compact_f64(D, rows, cols, ld);
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++)
          ref[(size_t)r * cols + j] += S[(size_t)r * lds + j];
      tg_cpu_accumulate(rows, cols, D, ld, S, lds);
      CHECK_REL(mat_err(D, rows, cols, ld, ref), TOL_FWD, "accumulate");
      CHECK(pad_intact(D, rows, cols, ld, OUT_PAD), "accumulate wrote padding");

      for (size_t i = 0; i < n; i++) ref[i] *= -1.75;
      tg_cpu_scale(rows, cols, D, ld, -1.75f);
      CHECK_REL(mat_err(D, rows, cols, ld, ref), TOL_FWD, "scale");
      CHECK(pad_intact(D, rows, cols, ld, OUT_PAD), "scale wrote padding");
      free(ref);
      free(S);
      free(D);
    }
}

int main(void) {
  tg_rng rng = {0x9E3779B97F4A7C15ULL};
  test_gemm_forward(&rng);
  test_gemm_degenerate(&rng);
  test_gemm_grad(&rng);
  test_bias(&rng);
  test_activation(&rng, "relu", tg_cpu_relu_fwd, tg_cpu_relu_bwd, ref_relu,
                  1.0f);
  test_relu_nan();
  test_activation(&rng, "gelu", tg_cpu_gelu_fwd, tg_cpu_gelu_bwd, ref_gelu,
                  4.0f);
  test_gelu_pointwise();
  test_softmax_xent(&rng);
  test_accuracy(&rng);
  test_sgd(&rng);
  test_adamw(&rng);
  test_elementwise(&rng);
  return tg_test_finish("test_kernels_cpu");
}
