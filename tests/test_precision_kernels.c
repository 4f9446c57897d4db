/*
 * test_precision_kernels: the mixed-precision CPU kernels of precision.h
 * other than the conversions (test_precision.c), no StarPU.
 *
 *  - tg_cpu_gemm_lowp, bf16 and fp16, all transposes, f32 and 16-bit C,
 *    sizes 1, 37 x 53 x 29 and 300 x 261 x 517 (several 256-tiles with
 *    remainders in every dimension), padded leading dimensions whose
 *    padding is NaN in the inputs (reading it would show) and a sentinel in
 *    C (it must survive bit for bit), beta == 0 over a NaN-filled C.
 *    Reference: float64 on the exact (widened) 16-bit inputs.  An f32 C must
 *    be within 1e-5 (fp32 accumulation; a 16-bit accumulation would be
 *    ~1e-3), a 16-bit C within half an ulp of the type plus 1e-5 (one
 *    rounding at the end).  The workspace is malloc'd at exactly the size
 *    announced, so an overrun shows under ASan.
 *  - k == 0 and alpha == 0 give C = beta C without reading A or B (NaN).
 *  - tg_cpu_nonfinite_check: a NaN, +Inf or -Inf at the first, middle or
 *    last place raises the flag; finite data (FLT_MAX, subnormals) leaves it
 *    as it was, 0 or 1.
 *  - tg_cpu_adamw_amp over several chunks: flag 1 or NaN leaves w, m, v
 *    bit-identical (memcmp) and still writes the copy; flag 0 gives
 *    tg_cpu_adamw's result on the same scaled gradients (relative error
 *    <= 1e-6; the bit-identical count is printed) and the 16-bit copy equal
 *    to the conversion of the new weights, bit for bit.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision.h"
#include "testutil.h"

static const tg_dtype LOWP[2] = {TG_BF16, TG_F16};
static const float OUT_PAD = -12345.5f;

static uint16_t nan16(tg_dtype t) { return t == TG_BF16 ? 0x7fc0 : 0x7e00; }
static int mant_bits(tg_dtype t) { return t == TG_BF16 ? 7 : 10; }

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

static void test_gemm(void) {
  static const int sizes[3][3] = {{1, 1, 1}, {37, 53, 29}, {300, 261, 517}};
  tg_rng rng = {0xC0FFEE};
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
static void test_gemm_degenerate(void) {
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

static void test_nonfinite(void) {
  static const int sizes[4] = {1, 7, 33, 1000};
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  for (int s = 0; s < 4; s++) {
    int n = sizes[s];
    float *g = tg_test_malloc(sizeof(float) * n);
    tg_rng rng = {77 + (uint64_t)n};
    tg_rng_fill(&rng, g, (size_t)n, 1e30f);
    g[0] = FLT_MAX;
    g[n / 2] = -FLT_MAX;
    g[n - 1] = 1e-45f; /* subnormal */
    float flag = 0.0f, one = 1.0f;
    tg_cpu_nonfinite_check(g, (size_t)n, &flag);
    tg_cpu_nonfinite_check(g, (size_t)n, &one);
    CHECK(flag == 0.0f && one == 1.0f, "nonfinite n=%d: finite data changed the flag (%g, %g)",
          n, flag, one);
    const int where[3] = {0, n / 2, n - 1};
    for (int b = 0; b < 3; b++)
      for (int w = 0; w < 3; w++) {
        float keep = g[where[w]];
        g[where[w]] = bad[b];
        flag = 0.0f;
        tg_cpu_nonfinite_check(g, (size_t)n, &flag);
        CHECK(flag == 1.0f, "nonfinite n=%d: %g at %d not found", n, bad[b], where[w]);
        g[where[w]] = keep;
      }
    free(g);
  }
}

static void test_adamw_amp(void) {
  enum { N = 2500 }; /* two full chunks and a remainder */
  static float w0[N], g[N], m0[N], v0[N], w[N], m[N], v[N], wr[N], mr[N], vr[N];
  static uint16_t low[N], lowref[N];
  tg_rng rng = {4242};
  tg_rng_fill(&rng, w0, N, 1.0f);
  tg_rng_fill(&rng, g, N, 1024.0f); /* scaled by a loss scale of 1024 */
  tg_rng_fill(&rng, m0, N, 0.1f);
  for (int i = 0; i < N; i++) v0[i] = 0.01f * fabsf(tg_rng_uniform(&rng));
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, gs = 1.0f / 1024;
  const float bc1 = (float)(1.0 - pow(b1, 3)), bc2 = (float)(1.0 - pow(b2, 3));
  for (int d = 0; d < 2; d++) {
    tg_dtype t = LOWP[d];
    const char *tn = tg_dtype_name(t);
    const float flags[2] = {1.0f, NAN};
    for (int f = 0; f < 2; f++) {
      memcpy(w, w0, sizeof w); memcpy(m, m0, sizeof m); memcpy(v, v0, sizeof v);
      memset(low, 0, sizeof low);
      tg_cpu_adamw_amp(N, w, g, m, v, &flags[f], t, low, lr, b1, b2, eps, wd, bc1, bc2, gs);
      CHECK(!memcmp(w, w0, sizeof w) && !memcmp(m, m0, sizeof m) && !memcmp(v, v0, sizeof v),
            "%s adamw_amp flag=%g: the step was not skipped", tn, flags[f]);
      tg_cpu_to_lowp(t, 1, N, w0, N, lowref, N);
      CHECK(!memcmp(low, lowref, sizeof low), "%s adamw_amp flag=%g: copy not written", tn,
            flags[f]);
    }
    memcpy(wr, w0, sizeof wr); memcpy(mr, m0, sizeof mr); memcpy(vr, v0, sizeof vr);
    tg_cpu_adamw(N, wr, g, mr, vr, lr, b1, b2, eps, wd, bc1, bc2, gs);
    for (int with_low = 0; with_low < 2; with_low++) {
      float clear = 0.0f;
      memcpy(w, w0, sizeof w); memcpy(m, m0, sizeof m); memcpy(v, v0, sizeof v);
      tg_cpu_adamw_amp(N, w, g, m, v, &clear, t, with_low ? low : NULL, lr, b1, b2, eps, wd,
                       bc1, bc2, gs);
      double ew = tg_rel_err_f32(w, wr, N), em = tg_rel_err_f32(m, mr, N);
      double ev = tg_rel_err_f32(v, vr, N);
      CHECK(ew <= 1e-6 && em <= 1e-6 && ev <= 1e-6,
            "%s adamw_amp vs tg_cpu_adamw: rel err w %.2e m %.2e v %.2e", tn, ew, em, ev);
      CHECK(memcmp(w, w0, sizeof w) != 0, "%s adamw_amp flag=0: nothing was updated", tn);
      if (with_low) {
        tg_cpu_to_lowp(t, 1, N, w, N, lowref, N);
        CHECK(!memcmp(low, lowref, sizeof low), "%s adamw_amp: copy != lowp(new w)", tn);
        int same = !memcmp(w, wr, sizeof w) && !memcmp(m, mr, sizeof m);
        printf("%s adamw_amp vs tg_cpu_adamw: %s\n", tn,
               same ? "bit-identical" : "not bit-identical");
      }
    }
  }
}

int main(void) {
  test_gemm();
  test_gemm_degenerate();
  test_nonfinite();
  test_adamw_amp();
  return tg_test_finish("test_precision_kernels");
}
