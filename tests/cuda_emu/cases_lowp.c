/*
 * test_cuda_emulated, 16-bit launchers: conversions (every 16-bit pattern),
 * the bf16 / fp16 GEMM and its zero-padded twin (k = 29, 513), the
 * non-finite check and the AMP AdamW, each against its CPU kernel
 * (conventions, tolerances and helpers: tests/test_cuda_emulated.c and
 * emu_test.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu/emu_test.h"

static const tg_dtype g_lowp[2] = {TG_BF16, TG_F16};

static int is_nan16(tg_dtype t, uint16_t h) {
  return t == TG_BF16 ? (h & 0x7f80) == 0x7f80 && (h & 0x7f) : (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

/* n 16-bit values: equal bits, or NaN on both sides (the device returns a
 * canonical NaN, the CPU keeps the payload) */
static void compare16(const char *launcher, const char *what, tg_dtype t, const uint16_t *emu,
                      const uint16_t *cpu, size_t n) {
  size_t bad = 0, first = 0;
  for (size_t i = n; i-- > 0;)
    if (emu[i] != cpu[i] && !(is_nan16(t, emu[i]) && is_nan16(t, cpu[i]))) {
      bad++;
      first = i;
    }
  CHECK(bad == 0, "%s %s (%s): %zu of %zu values differ (first at %zu: emu 0x%04x, cpu 0x%04x)",
        launcher, what, tg_dtype_name(t), bad, n, first, emu[first], cpu[first]);
  record(launcher, bad ? INFINITY : 0.0);
}

/* 16-bit values widened, for the GEMM with a 16-bit C */
static float *widen16(tg_dtype t, const uint16_t *h, size_t n) {
  float *f = fmalloc(n);
  tg_cpu_from_lowp(t, 1, (int)n, h, (int)n, f, (int)n);
  return f;
}

void test_conversions(void) {
  /* specials and rounding cases: zeros, f32 subnormals, 16-bit subnormals,
   * halfway ties, overflow to Inf, Inf, NaN; then random values */
  static const float special[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 6e-8f, 2.98e-8f, 1e-5f,
                                  1.00390625f, 1.01171875f, 1.0009765625f, 65519.0f, 65520.0f,
                                  7e4f, 3.39e38f, -3.4e38f, INFINITY, -INFINITY, NAN};
  const int ns = (int)(sizeof special / sizeof *special), rows = 9, cols = 40, ld = 43;
  float *X = input(rows, cols, ld, 3.0f);
  for (int i = 0; i < ns; i++) X[i] = special[i];
  for (int t = 0; t < 2; t++) {
    const tg_dtype lp = g_lowp[t];
    uint16_t *Y[2];
    for (int side = 0; side < 2; side++) {
      Y[side] = tg_test_malloc(sizeof(uint16_t) * rows * (ld + 1));
      memset(Y[side], 0x5a, sizeof(uint16_t) * rows * (ld + 1)); /* padding sentinel */
    }
    ok("tg_cuda_to_lowp", "", tg_cuda_to_lowp(lp, rows, cols, X, ld, Y[0], ld + 1, NULL));
    tg_cpu_to_lowp(lp, rows, cols, X, ld, Y[1], ld + 1);
    compare16("tg_cuda_to_lowp", "Y", lp, Y[0], Y[1], (size_t)rows * (ld + 1));

    /* every 16-bit pattern back to f32 (quick: every 16th) */
    const int fr = g_quick ? 16 : 256, step = 256 / fr;
    uint16_t *all = tg_test_malloc(sizeof(uint16_t) * 65536);
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)(i * step);
    float *F[2];
    outputs(F, fr, 256, 257, 0);
    ok("tg_cuda_from_lowp", "", tg_cuda_from_lowp(lp, fr, 256, all, 256, F[0], 257, NULL));
    tg_cpu_from_lowp(lp, fr, 256, all, 256, F[1], 257);
    compare("tg_cuda_from_lowp", "all patterns", F[0], F[1], (size_t)fr * 257, EXACT);
    free2(F);
    free(all);

    for (int b = 0; b < 3; b++) { /* beta 0 (zeros over anything), 0.5, 3 */
      const float beta = b == 0 ? 0.0f : b == 1 ? 0.5f : 3.0f;
      uint16_t *S[2] = {tg_test_malloc(sizeof(uint16_t) * rows * (ld + 1)),
                        tg_test_malloc(sizeof(uint16_t) * rows * (ld + 1))};
      memcpy(S[0], Y[1], sizeof(uint16_t) * rows * (ld + 1));
      memcpy(S[1], Y[1], sizeof(uint16_t) * rows * (ld + 1));
      ok("tg_cuda_scale_lowp", "", tg_cuda_scale_lowp(lp, rows, cols, S[0], ld + 1, beta, NULL));
      /* the definition: X = lowp(beta * f32(X)), beta == 0 writing zeros */
      float *f = fmalloc((size_t)rows * cols);
      tg_cpu_from_lowp(lp, rows, cols, S[1], ld + 1, f, cols);
      for (int i = 0; i < rows * cols; i++) f[i] = beta == 0.0f ? 0.0f : beta * f[i];
      tg_cpu_to_lowp(lp, rows, cols, f, cols, S[1], ld + 1);
      compare16("tg_cuda_scale_lowp", "X", lp, S[0], S[1], (size_t)rows * (ld + 1));
      free(f);
      free(S[0]);
      free(S[1]);
    }
    free(Y[0]);
    free(Y[1]);
  }
  free(X);
}

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

void test_gemm_lowp(void) {
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
}

void test_nonfinite_amp(void) {
  static const size_t sizes[] = {1, 300, 5000};
  for (int s = 0; s < 3; s++)
    for (int bad = 0; bad < 3; bad++) { /* none, Inf at the end, NaN at 256 */
      FULL_ONLY(s == 2);
      const size_t n = sizes[s];
      float *g = input(1, (int)n, (int)n, 100.0f);
      if (bad == 1) g[n - 1] = -INFINITY;
      if (bad == 2) g[n > 256 ? 256 : 0] = NAN;
      for (int start = 0; start < 2; start++) { /* the flag is only ever set */
        float flag[2] = {(float)start, (float)start};
        ok("tg_cuda_nonfinite_check", "", tg_cuda_nonfinite_check(g, n, &flag[0], NULL));
        tg_cpu_nonfinite_check(g, n, &flag[1]);
        compare("tg_cuda_nonfinite_check", "flag", &flag[0], &flag[1], 1, EXACT);
      }
      free(g);
    }
  for (int t = 0; t < 2; t++)
    for (int skip = 0; skip < 2; skip++)
      for (int low = 0; low < 2; low++) {
        const size_t n = 1000;
        const tg_dtype lp = g_lowp[t];
        float *g = input(1, (int)n, (int)n, 1.0f), *w[2], *m[2], *v[2];
        const float flag = (float)skip;
        outputs(w, 1, (int)n, (int)n, 1);
        outputs(m, 1, (int)n, (int)n, 1);
        outputs(v, 1, (int)n, (int)n, 1);
        for (size_t i = 0; i < n; i++) v[0][i] = v[1][i] = fabsf(v[0][i]);
        uint16_t *wl[2] = {tg_test_malloc(2 * n), tg_test_malloc(2 * n)};
        memset(wl[0], 0xff, 2 * n);
        memset(wl[1], 0xff, 2 * n);
        ok("tg_cuda_adamw_amp", "",
           tg_cuda_adamw_amp(n, w[0], g, m[0], v[0], &flag, lp, low ? wl[0] : NULL, 1e-2f, 0.9f,
                             0.999f, 1e-8f, 1e-2f, 0.1f, 0.001f, 0.25f, NULL));
        tg_cpu_adamw_amp(n, w[1], g, m[1], v[1], &flag, lp, low ? wl[1] : NULL, 1e-2f, 0.9f,
                         0.999f, 1e-8f, 1e-2f, 0.1f, 0.001f, 0.25f);
        compare("tg_cuda_adamw_amp", "w", w[0], w[1], n, skip ? EXACT : kTolEw);
        compare("tg_cuda_adamw_amp", "m", m[0], m[1], n, skip ? EXACT : kTolEw);
        compare("tg_cuda_adamw_amp", "v", v[0], v[1], n, skip ? EXACT : kTolEw);
        float *f0 = widen16(lp, wl[0], n), *f1 = widen16(lp, wl[1], n);
        compare("tg_cuda_adamw_amp", "w_low", f0, f1, n, lp == TG_BF16 ? 1.0 / 256 : 1.0 / 2048);
        free(f0); free(f1); free(wl[0]); free(wl[1]);
        free2(w); free2(m); free2(v); free(g);
      }
}

/* this file's CHECKs, added to the test's totals by main() */
void emu_cases_lowp_counts(int *checks, int *failures) {
  *checks += tg_test_checks;
  *failures += tg_test_failures;
}
