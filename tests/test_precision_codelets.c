/*
 * test_precision_codelets: the mixed-precision codelets of precision.h under
 * StarPU, once with 1 CPU worker and once with 2 (the program re-runs itself
 * as a child per configuration, STARPU_NCPU set, STARPU_NCUDA=0: this is the
 * CPU test; test_cuda_precision.c compares with CUDA).  Every task of a
 * section is submitted before any result is read, so with 2 workers the
 * GEMMs run concurrently, each with its own scratch workspace.
 *
 *  - convert: f32 -> bf16 / fp16 -> f32 through tasks, specials included,
 *    bit for bit against the scalar conversions; once on the left half of a
 *    column-partitioned tensor (leading dimension twice the width), whose
 *    right half must stay untouched;
 *  - gemm_lowp: bf16 and fp16, all transposes, f32 and 16-bit C, 37x53x29
 *    and 300x261x517 (remainder tiles), f32 inputs rounded to the 16-bit type
 *    on the host.  Against a float64 reference on the original f32 inputs:
 *    relative (Frobenius) error <= 1e-2 (bf16), 2e-3 (fp16), and more than
 *    10x the error of the fp32 codelet (tg_gemm_insert) on the same inputs,
 *    which proves that the 16-bit inputs were used.  Against a reference on
 *    the rounded inputs: <= 1e-5 for an f32 C (fp32 accumulation), half an
 *    ulp of the type (+1e-5) for a 16-bit C (one rounding).  Plus beta != 0
 *    (TG_ACCUMULATE) and two contributions in TG_REDUCE into an f32 C.
 * The other codelets are in test_precision_amp.c.
 */
#include <float.h>
#include <math.h>

#include "precision_testlib.h"

/* ---- GEMM -------------------------------------------------------------------- */

typedef struct gemm_case {
  tg_dtype t;
  int c_low, ta, tb, m, n, k;
  float *Af, *Bf;                  /* original f32 inputs */
  tg_tensor A32, B32, A16, B16, C, Cf32;
} gemm_case;

static void gemm_submit(gemm_case *g, tg_rng *rng) {
  int ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  int br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  g->Af = tg_rand_mat(rng, ar, ac, ac, 1.0f, 0.0f);
  g->Bf = tg_rand_mat(rng, br, bc, bc, 1.0f, 0.0f);
  new_f32(&g->A32, ar, ac, g->Af);
  new_f32(&g->B32, br, bc, g->Bf);
  new_low(&g->A16, g->t, ar, ac, g->Af);
  new_low(&g->B16, g->t, br, bc, g->Bf);
  if (tg_tensor_alloc(&g->C, g->m, g->n, g->c_low ? g->t : TG_F32) != 0) fatal_error("alloc C");
  new_f32(&g->Cf32, g->m, g->n, NULL);
  int rc = tg_gemm_lowp_insert(g->t, g->ta, g->tb, 1.0f, g->A16.handle, g->B16.handle, 0.0f,
                               g->C.handle, TG_OVERWRITE, NULL);
  CHECK(rc == 0, "tg_gemm_lowp_insert: %s", tg_last_error());
  rc = tg_gemm_insert(g->ta, g->tb, 1.0f, g->A32.handle, g->B32.handle, 0.0f, g->Cf32.handle,
                      TG_OVERWRITE, NULL);
  CHECK(rc == 0, "tg_gemm_insert: %s", tg_last_error());
}

/* C(m, n) = op(A) op(B) in float64; `rounded`: A and B through the 16-bit
 * type.  op(A) and op(B)^T are first copied row-major, so that the dot
 * products run over contiguous rows. */
static double *gemm_ref(const gemm_case *g, int rounded) {
  int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
  double *a = tg_test_malloc(sizeof(double) * (size_t)g->m * g->k); // op(A) (m, k)
  double *bt = tg_test_malloc(sizeof(double) * (size_t)g->n * g->k); // op(B)^T (n, k)
  for (int p = 0; p < g->k; p++) {
    for (int i = 0; i < g->m; i++) {
      float x = g->ta ? g->Af[(size_t)p * lda + i] : g->Af[(size_t)i * lda + p];
      a[(size_t)i * g->k + p] = rounded ? round16(g->t, x) : x;
    }
    for (int j = 0; j < g->n; j++) {
      float x = g->tb ? g->Bf[(size_t)j * ldb + p] : g->Bf[(size_t)p * ldb + j];
      bt[(size_t)j * g->k + p] = rounded ? round16(g->t, x) : x;
    }
  }
  double *ref = tg_test_malloc(sizeof(double) * (size_t)g->m * g->n);
  for (int i = 0; i < g->m; i++)
    for (int j = 0; j < g->n; j++) {
      const double *ai = a + (size_t)i * g->k, *bj = bt + (size_t)j * g->k;
      double s = 0;
      for (int p = 0; p < g->k; p++) s += ai[p] * bj[p];
      ref[(size_t)i * g->n + j] = s;
    }
  free(a);
  free(bt);
  return ref;
}

static void gemm_check(gemm_case *g) {
  size_t mn = (size_t)g->m * g->n;
  float *got = read_as_f32(&g->C, g->c_low ? g->t : TG_F32);
  float *f32 = read_as_f32(&g->Cf32, TG_F32);
  double *ref = gemm_ref(g, 0), *rref = gemm_ref(g, 1);
  double err = tg_rel_err_f64(got, ref, mn), err32 = tg_rel_err_f64(f32, ref, mn);
  double rerr = tg_rel_err_f64(got, rref, mn);
  double tol = g->t == TG_BF16 ? 1e-2 : 2e-3;
  double rtol = g->c_low ? ldexp(1.0, -(mant_bits(g->t) + 1)) + 1e-5 : 1e-5;
  char what[128];
  snprintf(what, sizeof what, "gemm_lowp %s C=%s ta=%d tb=%d %dx%dx%d", tg_dtype_name(g->t),
           g->c_low ? tg_dtype_name(g->t) : "f32", g->ta, g->tb, g->m, g->n, g->k);
  CHECK_REL(err, tol, what);
  CHECK(err > 10 * err32, "%s: error %.2e not above 10x the fp32 GEMM's %.2e", what, err, err32);
  CHECK(rerr <= rtol, "%s: vs the rounded-input reference %.2e > %.1e", what, rerr, rtol);
  printf("%-44s rel err %.3e (fp32 %.3e), vs rounded inputs %.3e\n", what, err, err32, rerr);
  free(got); free(f32); free(ref); free(rref); free(g->Af); free(g->Bf);
  tg_tensor *all[] = {&g->A32, &g->B32, &g->A16, &g->B16, &g->C, &g->Cf32};
  for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
}

static void test_gemm(void) {
  enum { NCASE = 2 * 2 * 4 * 2 };
  static const int sizes[2][3] = {{37, 53, 29}, {300, 261, 517}};
  static gemm_case cases[NCASE];
  tg_rng rng = {0xABCDEF};
  int nc = 0;
  for (int d = 0; d < 2; d++)
    for (int cl = 0; cl < 2; cl++)
      for (int tr = 0; tr < 4; tr++)
        for (int s = 0; s < 2; s++) {
          gemm_case *g = &cases[nc++];
          *g = (gemm_case){.t = LOWP[d], .c_low = cl, .ta = tr & 1, .tb = tr >> 1,
                           .m = sizes[s][0], .n = sizes[s][1], .k = sizes[s][2]};
          gemm_submit(g, &rng);
        }
  for (int i = 0; i < nc; i++) gemm_check(&cases[i]);
}

/* C = 0.5 C0 + A B (TG_ACCUMULATE), and C0 + A B - 0.5 A B (TG_REDUCE, f32) */
static void test_gemm_accumulate(void) {
  const int m = 37, n = 53, k = 29;
  tg_rng rng = {99};
  for (int d = 0; d < 2; d++)
    for (int mode = 0; mode < 3; mode++) { /* accumulate f32, accumulate 16-bit, reduce */
      tg_dtype t = LOWP[d], ct = mode == 1 ? t : TG_F32;
      float *a = tg_rand_mat(&rng, m, k, k, 1, 0), *b = tg_rand_mat(&rng, k, n, n, 1, 0);
      float *c0 = tg_rand_mat(&rng, m, n, n, 1, 0);
      tg_tensor A, B, C;
      new_low(&A, t, m, k, a);
      new_low(&B, t, k, n, b);
      if (ct == TG_F32) new_f32(&C, m, n, c0);
      else new_low(&C, t, m, n, c0);
      if (mode == 2) tg_tensor_enable_reduction(&C);
      int rc = tg_gemm_lowp_insert(t, 0, 0, 1.0f, A.handle, B.handle, 0.5f, C.handle,
                                   mode == 2 ? TG_REDUCE : TG_ACCUMULATE, NULL);
      if (rc == 0 && mode == 2)
        rc = tg_gemm_lowp_insert(t, 0, 0, -0.5f, A.handle, B.handle, 0.5f, C.handle,
                                 TG_REDUCE, NULL);
      CHECK(rc == 0, "accumulate submission: %s", tg_last_error());
      float *got = read_as_f32(&C, ct);
      double *ref = tg_test_malloc(sizeof(double) * m * n);
      for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
          double s = 0;
          for (int p = 0; p < k; p++)
            s += (double)round16(t, a[i * k + p]) * round16(t, b[p * n + j]);
          double cc = ct == TG_F32 ? c0[i * n + j] : round16(t, c0[i * n + j]);
          ref[i * n + j] = mode == 2 ? cc + 0.5 * s : 0.5 * cc + s;
        }
      double err = tg_rel_err_f64(got, ref, (size_t)m * n);
      double tol = ct == TG_F32 ? 1e-5 : ldexp(1.0, -(mant_bits(t) + 1)) + 1e-5;
      CHECK(err <= tol, "gemm_lowp %s mode %d (accumulate/reduce): rel err %.2e > %.1e",
            tg_dtype_name(t), mode, err, tol);
      free(a); free(b); free(c0); free(got); free(ref);
      tg_tensor_free(&A); tg_tensor_free(&B); tg_tensor_free(&C);
    }
}

/* ---- conversion ---------------------------------------------------------------- */

/* f32 values with every special case in front, then random ones */
static float *convert_input(size_t n) {
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.0f,
                                  65520.0f, -65520.0f, FLT_MAX, 1e-40f, -1e-45f,
                                  5.9604645e-8f /* 2^-24 */, 2.9802322e-8f /* 2^-25 */,
                                  1.00390625f, 1.00048828125f};
  float *x = tg_test_malloc(sizeof(float) * n);
  tg_rng rng = {31337};
  tg_rng_fill(&rng, x, n, 1000.0f);
  memcpy(x, special, sizeof special);
  return x;
}

/* got (n values of type dt, as bits) equals the scalar conversion of x */
static int same16(tg_dtype dt, const uint16_t *got, const float *x, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint16_t want = dt == TG_BF16 ? tg_f32_to_bf16(x[i]) : tg_f32_to_f16(x[i]);
    if (got[i] != want) bad++;
  }
  return bad;
}

/* back equals widen(narrow(x)), NaN for NaN */
static int same_back(tg_dtype dt, const float *back, const float *x, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = round16(dt, x[i]);
    if (isnan(want) ? !isnan(back[i]) : memcmp(&want, &back[i], sizeof want) != 0) bad++;
  }
  return bad;
}

static void test_convert(void) {
  const int rows = 7, cols = 33;
  size_t n = (size_t)rows * cols;
  float *x = convert_input(2 * n);
  uint16_t *h = tg_test_malloc(sizeof(uint16_t) * n);
  float *back = tg_test_malloc(sizeof(float) * 2 * n);
  for (int d = 0; d < 2; d++) {
    tg_dtype t = LOWP[d];
    tg_tensor X, H, Y, X2, Y2;
    new_f32(&X, rows, cols, x);
    if (tg_tensor_alloc(&H, rows, cols, t) != 0) fatal_error("alloc H");
    new_f32(&Y, rows, cols, NULL);
    CHECK(tg_convert_insert(t, X.handle, H.handle, NULL) == 0, "convert: %s", tg_last_error());
    CHECK(tg_convert_insert(t, H.handle, Y.handle, NULL) == 0, "convert: %s", tg_last_error());
    if (tg_tensor_read(&H, h) != 0 || tg_tensor_read(&Y, back) != 0) fatal_error("read");
    CHECK(same16(t, h, x, n) == 0, "convert f32 -> %s: values differ", tg_dtype_name(t));
    CHECK(same_back(t, back, x, n) == 0, "convert %s -> f32: values differ", tg_dtype_name(t));
    /* leading dimension 2 * cols: the left halves of (rows, 2 cols) tensors */
    new_f32(&X2, rows, 2 * cols, x);
    float *sentinel = tg_const_mat(rows, 2 * cols, 2 * cols, -7.0f, -7.0f);
    new_f32(&Y2, rows, 2 * cols, sentinel);
    struct starpu_data_filter f = {.filter_func = starpu_matrix_filter_block, .nchildren = 2};
    starpu_data_partition(X2.handle, &f);
    starpu_data_partition(Y2.handle, &f);
    CHECK(tg_convert_insert(t, starpu_data_get_sub_data(X2.handle, 1, 0), H.handle, NULL) == 0,
          "convert (ld): %s", tg_last_error());
    CHECK(tg_convert_insert(t, H.handle, starpu_data_get_sub_data(Y2.handle, 1, 0), NULL) == 0,
          "convert (ld): %s", tg_last_error());
    starpu_data_unpartition(X2.handle, STARPU_MAIN_RAM);
    starpu_data_unpartition(Y2.handle, STARPU_MAIN_RAM);
    if (tg_tensor_read(&Y2, back) != 0) fatal_error("read");
    int bad = 0;
    for (int r = 0; r < rows; r++) {
      bad += same_back(t, back + (size_t)r * 2 * cols, x + (size_t)r * 2 * cols, (size_t)cols);
      for (int c = cols; c < 2 * cols; c++) bad += back[(size_t)r * 2 * cols + c] != -7.0f;
    }
    CHECK(bad == 0, "convert %s with ld = 2 cols: %d values wrong", tg_dtype_name(t), bad);
    free(sentinel);
    tg_tensor *all[] = {&X, &H, &Y, &X2, &Y2};
    for (int i = 0; i < 5; i++) tg_tensor_free(all[i]);
  }
  free(x); free(h); free(back);
}

static void body(void) {
  test_convert();
  test_gemm();
  test_gemm_accumulate();
}

int main(int argc, char **argv) {
  return precision_run_configs(argc, argv, "test_precision_codelets", body);
}
