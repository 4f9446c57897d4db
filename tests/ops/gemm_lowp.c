/*
 * Row gemm_lowp (codelets/gemm_lowp.c): the GEMM on bf16 / fp16
 * operands with fp32 accumulation, f32 or 16-bit C.
 *  ref       tg_cpu_gemm_lowp, all transposes, sizes 1, 37 x 53 x 29 and
 *            300 x 261 x 517 (several 256-tiles with remainders), padded
 *            leading dimensions (NaN input padding, sentinel in C), beta 0
 *            over NaN; against float64 on the widened 16-bit inputs: f32 C
 *            within 1e-5, 16-bit C within half an ulp + 1e-5; the workspace
 *            malloc'd at exactly its announced size (ASan); k == 0 and
 *            alpha == 0 read neither A nor B; all of it again on the native
 *            bf16 path where the CPU has AVX512-BF16 (else said, not run),
 *            with more shapes than a thread's primitive cache holds;
 *  cpu       the codelet with 1 and 2 CPU workers (every task of a section
 *            submitted before any result is read): against float64 on the
 *            original f32 inputs <= 1e-2 (bf16), 2e-3 (fp16) and more than
 *            10x the fp32 codelet's error (the 16-bit inputs were used);
 *            against float64 on the rounded inputs as in ref; TG_ACCUMULATE
 *            and two REDUX contributions into an f32 C; the refusals (lowp
 *            f32, an f32 B, inner dimensions, a 16-bit C reduced); then the
 *            pair cases;
 *  pair      all transposes, f32 and 16-bit C, beta 0 and 0.5: f32 C within
 *            1e-5 (1e-4 for k >= 257), 16-bit C within half an ulp;
 *  cuda-emu  tg_cuda_gemm_lowp and its aligned variant, k = 29 and 513
 *            (the zero-padding path).
 */

#include <errno.h>
#include <float.h>

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"

/* ---- ref --------------------------------------------------------------------- */

static uint16_t nan16(tg_dtype t) { return t == TG_BF16 ? 0x7fc0 : 0x7e00; }

/* (rows, ld) 16-bit matrix of rounded uniform values, NaN padding */
static uint16_t *rand16(tg_rng *rng, tg_dtype t, int rows, int cols, int ld, float scale) {
  uint16_t *m = tg_test_malloc(sizeof(uint16_t) * (size_t)rows * ld);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < ld; c++) {
      float x = scale * tg_rng_uniform(rng);
      uint16_t h = t == TG_BF16 ? tg_f32_to_bf16(x) : tg_f32_to_f16(x);
      m[(size_t)r * ld + c] = c < cols ? h : nan16(t);
    }
  return m;
}

static double w16(tg_dtype t, uint16_t h) {
  return t == TG_BF16 ? tg_bf16_to_f32(h) : tg_f16_to_f32(h);
}

/* element (i, j) of op(X), X stored (rows, ld) */
static double op_at(tg_dtype t, const uint16_t *X, int ld, int trans, int i, int j) {
  return trans ? w16(t, X[(size_t)j * ld + i]) : w16(t, X[(size_t)i * ld + j]);
}

static void gemm_case(tg_rng *rng, tg_dtype t, int c_low, int ta, int tb, int m, int n, int k,
                      float beta) {
  const float alpha = 0.75f;
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int lda = ac + 3, ldb = bc + 1, ldc = n + 2;
  uint16_t *A = rand16(rng, t, ar, ac, lda, 1.0f), *B = rand16(rng, t, br, bc, ldb, 1.0f);
  uint16_t *C16 = rand16(rng, t, m, n, ldc, 1.0f);
  float *C32 = tg_rand_mat(rng, m, n, ldc, 1.0f, OUT_PAD);
  uint16_t pad16 = 0x1234;
  for (int r = 0; r < m; r++)
    for (int c = 0; c < ldc; c++) {
      if (c >= n) C16[(size_t)r * ldc + c] = pad16;
      else if (beta == 0.0f) {
        C16[(size_t)r * ldc + c] = nan16(t);
        C32[(size_t)r * ldc + c] = NAN;
      }
    }
  double *ref = tg_test_malloc(sizeof(double) * (size_t)m * n);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) s += op_at(t, A, lda, ta, i, p) * op_at(t, B, ldb, tb, p, j);
      double c0 = c_low ? w16(t, C16[(size_t)i * ldc + j]) : C32[(size_t)i * ldc + j];
      ref[(size_t)i * n + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * c0);
    }
  size_t wn = tg_cpu_gemm_lowp_work_floats(m, n, k);
  float *work = tg_test_malloc(sizeof(float) * wn);
  tg_cpu_gemm_lowp(t, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, c_low ? t : TG_F32,
                   c_low ? (void *)C16 : (void *)C32, ldc, work);
  float *got = tg_test_malloc(sizeof(float) * (size_t)m * n);
  int pad_ok = 1;
  for (int r = 0; r < m; r++) {
    for (int c = 0; c < n; c++)
      got[(size_t)r * n + c] = c_low ? (float)w16(t, C16[(size_t)r * ldc + c])
                                     : C32[(size_t)r * ldc + c];
    for (int c = n; c < ldc; c++)
      if (c_low ? C16[(size_t)r * ldc + c] != pad16
                : memcmp(&C32[(size_t)r * ldc + c], &OUT_PAD, sizeof(float)) != 0)
        pad_ok = 0;
  }
  double err = tg_rel_err_f64(got, ref, (size_t)m * n);
  double tol = c_low ? ldexp(1.0, -(mant_bits(t) + 1)) + 1e-5 : 1e-5;
  char what[128];
  snprintf(what, sizeof what, "gemm_lowp %s C=%s ta=%d tb=%d %dx%dx%d beta=%g",
           tg_dtype_name(t), c_low ? tg_dtype_name(t) : "f32", ta, tb, m, n, k, beta);
  CHECK_REL(err, tol, what);
  CHECK(pad_ok, "%s: C's padding was written", what);
  if (m == 300 && ta == 0 && tb == 0) printf("%s: rel err %.3e\n", what, err);
  free(A); free(B); free(C16); free(C32); free(ref); free(work); free(got);
}

static void ref_gemm(void) {
  static const int sizes[3][3] = {{1, 1, 1}, {37, 53, 29}, {300, 261, 517}};
  tg_rng rng = {.s = 0xC0FFEE};
  for (int d = 0; d < 2; d++)
    for (int cl = 0; cl < 2; cl++)
      for (int tr = 0; tr < 4; tr++)
        for (int s = 0; s < 3; s++) {
          const int *z = sizes[s];
          gemm_case(&rng, LOWP[d], cl, tr & 1, tr >> 1, z[0], z[1], z[2], 0.5f);
          if (s < 2) gemm_case(&rng, LOWP[d], cl, tr & 1, tr >> 1, z[0], z[1], z[2], 0.0f);
        }
}

/* k == 0, alpha == 0: C = beta C; A and B (NaN) never read */
static void ref_gemm_degenerate(void) {
  uint16_t A[4] = {0x7fc0, 0x7fc0, 0x7fc0, 0x7fc0}, B[4] = {0x7fc0, 0x7fc0, 0x7fc0, 0x7fc0};
  float work[64];
  for (int d = 0; d < 2; d++) {
    tg_dtype t = LOWP[d];
    uint16_t two = t == TG_BF16 ? tg_f32_to_bf16(2.0f) : tg_f32_to_f16(2.0f);
    for (int k = 0; k <= 2; k += 2) { /* k == 0, then alpha == 0 with k == 2 */
      uint16_t C16[4] = {two, two, two, two};
      float C32[4] = {2, 2, 2, 2};
      float alpha = k ? 0.0f : 1.0f;
      tg_cpu_gemm_lowp(t, 0, 0, 2, 2, k, alpha, A, 2, B, 2, 0.25f, t, C16, 2, work);
      tg_cpu_gemm_lowp(t, 0, 0, 2, 2, k, alpha, A, 2, B, 2, 0.25f, TG_F32, C32, 2, work);
      int ok = 1;
      for (int i = 0; i < 4; i++) ok &= w16(t, C16[i]) == 0.5 && C32[i] == 0.5f;
      CHECK(ok, "%s gemm_lowp k=%d alpha=%g: C = beta C expected 0.5, got %g and %g",
            tg_dtype_name(t), k, alpha, w16(t, C16[0]), C32[0]);
    }
  }
  CHECK(tg_cpu_gemm_lowp_work_floats(5000, 5000, 5000) == 3 * 256 * 256,
        "the workspace is bounded by three 256 x 256 tiles");
}

/* The native bf16 path (kernels/cpu/matmul_onednn.c): on only where the CPU
 * has it, declining every call while off; on, the same float64 checks as
 * the widened path (ref_gemm), and more distinct GEMMs than a thread's
 * cache of primitives holds, so that entries are replaced and reused. */
static void ref_gemm_native(void) {
  const int had = tg_cpu_gemm_bf16_native();
  uint16_t one[1] = {0x3f80};
  float c[1] = {0};
  tg_cpu_gemm_bf16_set_native(0);
  CHECK(!tg_cpu_gemm_bf16_native() && tg_cpu_gemm_bf16(0, 0, 1, 1, 1, 1.0f, one, 1, one, 1,
                                                      0.0f, 0, c, 1) != 0 && c[0] == 0.0f,
        "native bf16 off: tg_cpu_gemm_bf16 declines and writes nothing");
  tg_cpu_gemm_bf16_set_native(1);
  CHECK(tg_cpu_gemm_bf16_native() == tg_cpu_gemm_bf16_supported(),
        "native bf16 turns on exactly where supported (%d, %d)", tg_cpu_gemm_bf16_native(),
        tg_cpu_gemm_bf16_supported());
  if (!tg_cpu_gemm_bf16_supported()) {
    printf("gemm_lowp native bf16: this CPU has no AVX512-BF16 (oneDNN's ISA), not run\n");
  } else {
    CHECK(tg_cpu_gemm_bf16(0, 0, 1, 1, 1, 1.0f, one, 1, one, 1, 0.0f, 0, c, 1) == 0 &&
              c[0] == 1.0f,
          "native bf16 on: 1 x 1 = %g", c[0]);
    printf("gemm_lowp native bf16 (oneDNN):\n");
    ref_gemm();
    tg_rng rng = {.s = 0xB16};
    for (int i = 0; i < 60; i++) /* 60 shapes, then the first ones again */
      gemm_case(&rng, TG_BF16, i & 1, (i >> 1) & 1, 0, 1 + i % 60, 5, 3, i & 2 ? 0.5f : 0.0f);
    for (int i = 0; i < 4; i++)
      gemm_case(&rng, TG_BF16, i & 1, (i >> 1) & 1, 0, 1 + i, 5, 3, i & 2 ? 0.5f : 0.0f);
  }
  tg_cpu_gemm_bf16_set_native(had);
}

static void gemm_lowp_ref(void) {
  const int had = tg_cpu_gemm_bf16_native();
  tg_cpu_gemm_bf16_set_native(0); /* the widened path */
  ref_gemm();
  ref_gemm_degenerate();
  tg_cpu_gemm_bf16_set_native(had);
  ref_gemm_native();
}

/* ---- cpu: the codelet with 1 and 2 CPU workers ------------------------------- */

typedef struct lowp_task {
  tg_dtype t;
  int c_low, ta, tb, m, n, k;
  float *Af, *Bf;                  /* original f32 inputs */
  tg_tensor A32, B32, A16, B16, C, Cf32;
} lowp_task;

static void lowp_task_submit(lowp_task *g, tg_rng *rng) {
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
static double *lowp_task_ref(const lowp_task *g, int rounded) {
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

static void lowp_task_check(lowp_task *g) {
  size_t mn = (size_t)g->m * g->n;
  float *got = read_as_f32(&g->C, g->c_low ? g->t : TG_F32);
  float *f32 = read_as_f32(&g->Cf32, TG_F32);
  double *ref = lowp_task_ref(g, 0), *rref = lowp_task_ref(g, 1);
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

static void cpu_gemm(void) {
  enum { NCASE = 2 * 2 * 4 * 2 };
  static const int sizes[2][3] = {{37, 53, 29}, {300, 261, 517}};
  static lowp_task cases[NCASE];
  tg_rng rng = {.s = 0xABCDEF};
  int nc = 0;
  for (int d = 0; d < 2; d++)
    for (int cl = 0; cl < 2; cl++)
      for (int tr = 0; tr < 4; tr++)
        for (int s = 0; s < 2; s++) {
          lowp_task *g = &cases[nc++];
          *g = (lowp_task){.t = LOWP[d], .c_low = cl, .ta = tr & 1, .tb = tr >> 1,
                           .m = sizes[s][0], .n = sizes[s][1], .k = sizes[s][2]};
          lowp_task_submit(g, &rng);
        }
  for (int i = 0; i < nc; i++) lowp_task_check(&cases[i]);
}

/* C = 0.5 C0 + A B (TG_ACCUMULATE), and C0 + A B - 0.5 A B (TG_REDUCE, f32) */
static void cpu_gemm_accumulate(void) {
  const int m = 37, n = 53, k = 29;
  tg_rng rng = {.s = 99};
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

/* a valid call, then the refusals (was test_precision_amp.c): -EINVAL with
 * a message naming the wrapper, nothing submitted */
static void cpu_gemm_refusals(void) {
  tg_tensor a16, b16, c16, f32, f32b;
  new_low(&a16, TG_BF16, 4, 3, (float[12]){0});
  new_low(&b16, TG_BF16, 3, 5, (float[15]){0});
  new_low(&c16, TG_BF16, 4, 5, (float[20]){0});
  new_f32(&f32, 4, 5, NULL);
  new_f32(&f32b, 3, 5, NULL);
  CHECK(tg_gemm_lowp_insert(TG_BF16, 0, 0, 1, a16.handle, b16.handle, 0, f32.handle,
                            TG_OVERWRITE, NULL) == 0, "a valid gemm_lowp: %s", tg_last_error());
  CHECK_REFUSED(tg_gemm_lowp_insert(TG_F32, 0, 0, 1, a16.handle, b16.handle, 0, f32.handle,
                                    TG_OVERWRITE, NULL), "tg_gemm_lowp", "lowp = f32");
  CHECK_REFUSED(tg_gemm_lowp_insert(TG_BF16, 0, 0, 1, a16.handle, f32b.handle, 0, f32.handle,
                                    TG_OVERWRITE, NULL), "tg_gemm_lowp", "an f32 B");
  CHECK_REFUSED(tg_gemm_lowp_insert(TG_BF16, 1, 0, 1, a16.handle, b16.handle, 0, f32.handle,
                                    TG_OVERWRITE, NULL), "tg_gemm_lowp", "inner dimensions");
  CHECK_REFUSED(tg_gemm_lowp_insert(TG_BF16, 0, 0, 1, a16.handle, b16.handle, 0, c16.handle,
                                    TG_REDUCE, NULL), "tg_gemm_lowp", "a 16-bit C reduced");
  tg_tensor *all[] = {&a16, &b16, &c16, &f32, &f32b};
  for (int i = 0; i < 5; i++) tg_tensor_free(all[i]);
}

static void gemm_lowp_cpu_body(void) {
  cpu_gemm();
  cpu_gemm_accumulate();
  cpu_gemm_refusals();
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

typedef struct gemm16_ctx {
  tg_dtype t;
  int ta, tb;
  float beta;
  starpu_data_handle_t A, B;
} gemm16_ctx;

static int gemm16_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gemm16_ctx *c = v;
  return tg_gemm_lowp_insert(c->t, c->ta, c->tb, 1.0f, c->A, c->B, c->beta, out[0].handle,
                             c->beta != 0.0f ? TG_ACCUMULATE : TG_OVERWRITE, o);
}

static void pair_gemm(void) {
  static const int sizes[3][3] = {{1, 1, 1}, {37, 53, 29}, {130, 67, 513}};
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < 3; s++)
      for (int tr = 0; tr < 4; tr++) {
        tg_dtype t = LOWP[d];
        int m = sizes[s][0], n = sizes[s][1], k = sizes[s][2], ta = tr & 1, tb = tr >> 1;
        float *a = rnd((size_t)m * k, 1), *b = rnd((size_t)k * n, 1), *c0 = rnd((size_t)m * n, 1);
        tg_tensor A, B;
        new_low(&A, t, ta ? k : m, ta ? m : k, a);
        new_low(&B, t, tb ? n : k, tb ? k : n, b);
        for (int cl = 0; cl < 2; cl++)
          for (int acc = 0; acc < 2; acc++) {
            gemm16_ctx c = {.t = t,
                            .ta = ta,
                            .tb = tb,
                            .beta = acc ? 0.5f : 0.0f,
                            .A = A.handle,
                            .B = B.handle};
            double tol = cl ? half_ulp(t) : k >= 257 ? TOL_LARGE_K : TOL;
            out16 o = {.name = "C",
                       .rows = m,
                       .cols = n,
                       .dt = cl ? t : TG_F32,
                       .init = acc ? c0 : NULL,
                       .tol = tol};
            char what[128];
            snprintf(what, sizeof what, "gemm_lowp %s C=%s ta=%d tb=%d %dx%dx%d beta=%g",
                     tg_dtype_name(t), cl ? tg_dtype_name(t) : "f32", ta, tb, m, n, k,
                     c.beta);
            run_pair16(what, gemm16_submit, &c, 1, &o);
          }
        free(a); free(b); free(c0);
        tg_tensor_free(&A);
        tg_tensor_free(&B);
      }
}

static void gemm_lowp_cpu(void) {
  ops_run_worker_counts(gemm_lowp_cpu_body);
  pair_gemm();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static uint16_t *lowp_input(tg_dtype lp, int rows, int cols, int ld) {
  float *f = input(rows, cols, ld, 1.0f);
  for (size_t i = 0; i < (size_t)rows * ld; i++) f[i] = isnan(f[i]) ? 0.0f : f[i];
  uint16_t *h = tg_test_malloc(sizeof(uint16_t) * (size_t)rows * ld);
  tg_cpu_to_lowp(lp, rows, ld, f, ld, h, ld);
  for (int r = 0; r < rows; r++) /* NaN padding: never read */
    for (int c = cols; c < ld; c++) h[(size_t)r * ld + c] = 0x7fff;
  free(f);
  return h;
}

/* tg_cuda_gemm_lowp_strided (the bf16 attention's products): 3 problems
 * at strides past their ends (the gaps NaN: read, they show), every
 * transpose, C f32 (beta 0.5 onto values) or 16-bit (beta 0), against
 * tg_cpu_gemm_lowp per problem */
static void emu_gemm_lowp_strided(void) {
  const int m = 7, n = 33, k = 29, batch = 3;
  for (int tr = 0; tr < 4; tr++)
    for (int cl = 0; cl < 2; cl++) {
      const tg_dtype lp = TG_BF16, ct = cl ? lp : TG_F32;
      const int ta = tr & 1, tb = tr >> 1, lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 3;
      const int ldc = n + 2, ra = ta ? k : m, rb = tb ? n : k;
      const long long sa = (long long)ra * lda + 5, sb = (long long)rb * ldb + 7,
                      sc = (long long)m * ldc + 3;
      uint16_t *A = lowp_input(lp, batch * (int)sa / lda + 1, lda, lda);
      uint16_t *B = lowp_input(lp, batch * (int)sb / ldb + 1, ldb, ldb);
      for (int i = 0; i < batch; i++) {
        for (int j = 0; j < 5; j++) A[ra * lda + i * sa + j] = 0x7fc0;
        for (int j = 0; j < 7; j++) B[rb * ldb + i * sb + j] = 0x7fc0;
      }
      const float beta = cl ? 0.0f : 0.5f;
      float *C[2];
      outputs(C, batch, (int)sc, (int)sc, 1);
      if (cl)
        for (int i = 0; i < 2; i++) { /* 16-bit C: bits in the first half */
          uint16_t *h = tg_test_malloc(sizeof(uint16_t) * (size_t)batch * sc);
          tg_cpu_to_lowp(lp, 1, batch * (int)sc, C[i], batch * (int)sc, h, batch * (int)sc);
          memcpy(C[i], h, sizeof(uint16_t) * (size_t)batch * sc);
          free(h);
        }
      ok("tg_cuda_gemm_lowp_strided", "",
         tg_cuda_gemm_lowp_strided(g_blas, lp, ta, tb, m, n, k, 1.5f, A, lda, sa, B, ldb, sb, beta,
                                   ct, C[0], ldc, sc, batch));
      float *cw = fmalloc(tg_cpu_gemm_lowp_work_floats(m, n, k));
      const size_t es = cl ? 2 : 4;
      for (int i = 0; i < batch; i++)
        tg_cpu_gemm_lowp(lp, ta, tb, m, n, k, 1.5f, A + i * sa, lda, B + i * sb, ldb, beta, ct,
                         (char *)C[1] + es * i * sc, ldc, cw);
      free(cw);
      const size_t nc = (size_t)batch * sc;
      if (!cl) {
        compare("tg_cuda_gemm_lowp_strided", "C f32", C[0], C[1], nc, kTolRed);
      } else {
        float *w[2];
        for (int i = 0; i < 2; i++) w[i] = widen16(lp, (const uint16_t *)C[i], nc);
        compare("tg_cuda_gemm_lowp_strided", "C 16-bit", w[0], w[1], nc, 1.0 / 256);
        free(w[0]);
        free(w[1]);
      }
      free2(C);
      free(A);
      free(B);
    }
}

static void emu_gemm_lowp(void) {
  /* k = 29 and 513 take the zero-padding path of the aligned GEMM */
  static const int shapes[][3] = {{7, 33, 29}, {33, 7, 513}, {1, 1, 1}, {5, 9, 64}};
  for (int t = 0; t < 2; t++)
    for (int s = 0; s < 4; s++)
      for (int tr = 0; tr < 4; tr++)
        for (int cl = 0; cl < 2; cl++) {
          const tg_dtype lp = g_lowp[t], ct = cl ? lp : TG_F32;
          const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
          const int ta = tr & 1, tb = tr >> 1, lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 3;
          const int ldc = n + 2;
          uint16_t *A = lowp_input(lp, ta ? k : m, ta ? m : k, lda);
          uint16_t *B = lowp_input(lp, tb ? n : k, tb ? k : n, ldb);
          const float beta = tr == 1 ? 0.0f : 0.5f;
          /* C: f32, or 16-bit bits stored in the low half of each float slot
           * of a buffer twice as long as needed */
          float *C[3];
          outputs(C, m, n, ldc, 1);
          C[2] = tg_copy_f(C[1], (size_t)m * ldc);
          if (cl)
            for (int i = 0; i < 3; i++) {
              uint16_t *h = tg_test_malloc(sizeof(uint16_t) * (size_t)m * ldc);
              tg_cpu_to_lowp(lp, m, ldc, C[i], ldc, h, ldc);
              memcpy(C[i], h, sizeof(uint16_t) * (size_t)m * ldc);
              free(h);
            }
          const size_t npad = tg_gemm_lowp_pad_elems(m, n, k);
          uint16_t *work = tg_test_malloc(sizeof(uint16_t) * (npad ? npad : 1));
          for (size_t i = 0; i < npad; i++) work[i] = 0x7fff; /* NaN: the zeros must be written */
          const int calls = tg_emu_gemmex_calls();
          ok("tg_cuda_gemm_lowp", "", tg_cuda_gemm_lowp(g_blas, lp, ta, tb, m, n, k, 1.5f, A, lda, B,
                                                        ldb, beta, ct, C[0], ldc));
          ok("tg_cuda_gemm_lowp_aligned", "",
             tg_cuda_gemm_lowp_aligned(g_blas, lp, ta, tb, m, n, k, 1.5f, A, lda, B, ldb, beta, ct,
                                       C[2], ldc, work));
          CHECK(tg_emu_gemmex_calls() == calls + 2 &&
                    tg_emu_gemmex_last_k() == (k % 8 ? (k + 7) / 8 * 8 : k),
                "gemm_lowp_aligned k %d: cublasGemmEx ran with k %d", k, tg_emu_gemmex_last_k());
          float *cw = fmalloc(tg_cpu_gemm_lowp_work_floats(m, n, k));
          tg_cpu_gemm_lowp(lp, ta, tb, m, n, k, 1.5f, A, lda, B, ldb, beta, ct, C[1], ldc, cw);
          free(cw);
          const size_t nc = (size_t)m * ldc;
          if (!cl) {
            const double tol = k > 257 ? kTolLong : kTolRed;
            compare("tg_cuda_gemm_lowp", "C f32", C[0], C[1], nc, tol);
            compare("tg_cuda_gemm_lowp_aligned", "C f32", C[2], C[1], nc, tol);
          } else { /* one 16-bit rounding step may flip (see the note) */
            const double tol = lp == TG_BF16 ? 1.0 / 256 : 1.0 / 2048;
            float *w[3];
            for (int i = 0; i < 3; i++) w[i] = widen16(lp, (const uint16_t *)C[i], nc);
            compare("tg_cuda_gemm_lowp", "C 16-bit", w[0], w[1], nc, tol);
            compare("tg_cuda_gemm_lowp_aligned", "C 16-bit", w[2], w[1], nc, tol);
            for (int i = 0; i < 3; i++) free(w[i]);
          }
          for (int i = 0; i < 3; i++) free(C[i]);
          free(A); free(B); free(work);
        }
  emu_gemm_lowp_strided();
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "gemm_lowp",
     .doc = "GEMM with bf16 / fp16 A, B, fp32 accumulation, C f32 or 16-bit (OpenBLAS sgemm on "
            "widened tiles, or oneDNN's native bf16 matmul on AVX512-BF16; cublasGemmEx, "
            "COMPUTE_32F)",
     .buffers = "A (R), B (R), C (W / RW / REDUX for f32), scratch",
     .covers = "tg_gemm_lowp_cl tg_gemm_lowp_insert tg_cuda_gemm_lowp tg_cuda_gemm_lowp_aligned "
               "tg_cuda_gemm_lowp_strided",
     .kernels = "tg_cpu_gemm_lowp tg_cpu_gemm_lowp_work_floats tg_cpu_gemm_bf16 "
                "tg_cpu_gemm_bf16_supported tg_cpu_gemm_bf16_set_native tg_cpu_gemm_bf16_native",
     .run = {[OPS_REF] = gemm_lowp_ref, [OPS_CPU] = gemm_lowp_cpu, [OPS_CUDA] = pair_gemm,
             [OPS_DEVICE] = pair_gemm, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_gemm_lowp)},
     .why_not = {[OPS_LOWP] = "the codelet takes 16-bit buffers itself (no adapter)",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
