/*
 * test_cuda_emulated, transformer launchers: embedding, LayerNorm, naive and
 * chunked attention, the tied classifier, each against its CPU kernel
 * (conventions, tolerances and helpers: tests/test_cuda_emulated.c and
 * emu_test.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu/emu_test.h"

static int32_t *tokens(int n, int V) {
  int32_t *t = tg_test_malloc(sizeof(int32_t) * n);
  for (int i = 0; i < n; i++) t[i] = (int32_t)(tg_rng_next(&g_rng) % (uint64_t)V);
  return t;
}

void test_embedding(void) {
  /* C = 300: two channel blocks of 256; n = 70: three 32-token words with
   * a partial last one; T > n: fewer positions than T */
  static const int shapes[][4] = {{21, 7, 33, 50}, {70, 9, 300, 130}, {5, 8, 40, 3}};
  for (int s = 0; s < 3; s++) {
    FULL_ONLY(s == 1);
    const int n = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3];
    const int maxT = T + 2, ld = C + 5;
    int32_t *tok = tokens(n, V);
    float *wte = input(V, C, C, 1.0f), *wpe = input(maxT, C, C, 1.0f), *X[2];
    outputs(X, n, C, ld, 0);
    ok("tg_cuda_embedding_fwd", "", tg_cuda_embedding_fwd(n, T, C, tok, wte, wpe, X[0], ld, NULL));
    tg_cpu_embedding_fwd(n, T, C, tok, wte, wpe, X[1], ld);
    compare("tg_cuda_embedding_fwd", "X", X[0], X[1], (size_t)n * ld, EXACT);
    free2(X);
    float *dX = input(n, C, ld, 1.0f), *dwte[2], *dwpe[2];
    outputs(dwte, V, C, C, 1);
    outputs(dwpe, maxT, C, C, 1);
    ok("tg_cuda_embedding_bwd", "",
       tg_cuda_embedding_bwd(n, T, C, tok, dX, ld, dwte[0], dwpe[0], NULL));
    tg_cpu_embedding_bwd(n, T, C, tok, dX, ld, dwte[1], dwpe[1]);
    /* the same adds in the same order, by design */
    compare("tg_cuda_embedding_bwd", "dwte", dwte[0], dwte[1], (size_t)V * C, EXACT);
    compare("tg_cuda_embedding_bwd", "dwpe", dwpe[0], dwpe[1], (size_t)maxT * C, EXACT);
    free2(dwte);
    free2(dwpe);
    free(tok); free(wte); free(wpe); free(dX);
  }
}

void test_layernorm(void) {
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
    compare("tg_cuda_layernorm_fwd", "Y", Y[0], Y[1], sz, kTolRed);
    compare("tg_cuda_layernorm_fwd", "mean", mean[0], mean[1], n, kTolRed);
    compare("tg_cuda_layernorm_fwd", "rstd", rstd[0], rstd[1], n, kTolRed);
    /* in place (Y == X); the CUDA launcher also takes NULL mean / rstd */
    float *io[2] = {tg_copy_f(X, sz), tg_copy_f(X, sz)}, *stats = fmalloc(2 * (size_t)n);
    ok("tg_cuda_layernorm_fwd", "in place",
       tg_cuda_layernorm_fwd(n, C, io[0], ld, w, b, io[0], ld, NULL, NULL, NULL));
    tg_cpu_layernorm_fwd(n, C, io[1], ld, w, b, io[1], ld, stats, stats + n);
    free(stats);
    compare("tg_cuda_layernorm_fwd", "in place", io[0], io[1], sz, kTolRed);
    free2(io);

    float *dY = input(n, C, C, 1.0f), *dX[2], *dw[2], *db[2];
    outputs(dX, n, C, ld, 1);
    outputs(dw, 1, C, C, 1);
    outputs(db, 1, C, C, 1);
    const size_t ns = tg_cuda_layernorm_bwd_scratch_floats(n, C);
    float *scratch = tg_const_mat(1, (int)ns, (int)ns, NAN, NAN);
    ok("tg_cuda_layernorm_bwd", "",
       tg_cuda_layernorm_bwd(n, C, dY, C, X, ld, w, mean[1], rstd[1], dX[0], ld, dw[0], db[0],
                             scratch, NULL));
    tg_cpu_layernorm_bwd(n, C, dY, C, X, ld, w, mean[1], rstd[1], dX[1], ld, dw[1], db[1]);
    compare("tg_cuda_layernorm_bwd", "dX", dX[0], dX[1], sz, kTolRed);
    compare("tg_cuda_layernorm_bwd", "dw", dw[0], dw[1], C, kTolRed);
    compare("tg_cuda_layernorm_bwd", "db", db[0], db[1], C, kTolRed);
    free2(Y); free2(mean); free2(rstd); free2(dX); free2(dw); free2(db);
    free(X); free(w); free(b); free(dY); free(scratch);
  }
}

/* ||x|| over the C columns [c0, c0 + C) of (rows, ld) */
static double cols_norm(const float *x, int rows, int ld, int c0, int C) {
  double s = 0;
  for (int r = 0; r < rows; r++)
    for (int j = c0; j < c0 + C; j++) s += (double)x[(size_t)r * ld + j] * x[(size_t)r * ld + j];
  return sqrt(s);
}

/* dqkv compared per third (q, k, v gradients): their magnitudes differ by
 * orders (dk is ~400 times smaller than dv here), and one normwise error
 * over the whole buffer would hide a dk wrong by 1e-4.  With T == 1 the
 * softmax has one key, P = 1, and dq = dk = 0 exactly: both sides return
 * rounding noise, which is measured against ||dv|| instead (a noise of
 * ~1e-8 relative; a real error would be O(1)). */
static void compare_qkv(const char *launcher, const float *emu, const float *cpu, int rows,
                        int C, int ld, int T) {
  static const char *const names[3] = {"dq", "dk", "dv"};
  float *e = tg_test_malloc(sizeof(float) * (size_t)rows * C);
  float *c = tg_test_malloc(sizeof(float) * (size_t)rows * C);
  const double dv = cols_norm(cpu, rows, ld, 2 * C, C);
  for (int third = 0; third < 3; third++) {
    for (int r = 0; r < rows; r++)
      for (int j = 0; j < C; j++) {
        e[(size_t)r * C + j] = emu[(size_t)r * ld + third * C + j];
        c[(size_t)r * C + j] = cpu[(size_t)r * ld + third * C + j];
      }
    if (T == 1 && third < 2) {
      const double ne = cols_norm(emu, rows, ld, third * C, C) / dv;
      const double nc = cols_norm(cpu, rows, ld, third * C, C) / dv;
      CHECK(ne <= kTolRed && nc <= kTolRed, "%s T 1: %s not zero: %.3e (cpu %.3e) of ||dv||",
            launcher, names[third], ne, nc);
      record(launcher, ne);
    } else {
      compare(launcher, names[third], e, c, (size_t)rows * C, kTolRed);
    }
  }
  free(e);
  free(c);
  /* the padding columns must be untouched */
  for (int r = 0; r < rows; r++)
    for (int j = 3 * C; j < ld; j++)
      CHECK(emu[(size_t)r * ld + j] == kSentinel, "%s: padding (%d, %d) overwritten", launcher, r, j);
}

/* One attention shape through the four launchers.  The naive kernels run a
 * 256-thread block per (sequence, head, query), so the large shapes use
 * the chunked kernels only (naive = 0) to keep the test fast. */
static void attention_case(int b, int T, int C, int NH, int naive) {
  const int n = b * T, chunk = 16, ldq = 3 * C + 1, ldo = C + 2;
  float *qkv = input(n, 3 * C, ldq, 2.0f), *dout = input(n, C, ldo, 1.0f);
  float *out[2], *dqkv[2];
  if (naive) {
    float *att[2];
    float *cpu_scratch = fmalloc((size_t)T);
    outputs(att, b * NH * T, T, T, 0);
    outputs(out, n, C, ldo, 0);
    ok("tg_cuda_attention_naive_fwd", "",
       tg_cuda_attention_naive_fwd(b, T, C, NH, qkv, ldq, att[0], out[0], ldo, NULL));
    tg_cpu_attention_naive_fwd(b, T, C, NH, qkv, ldq, att[1], out[1], ldo);
    compare("tg_cuda_attention_naive_fwd", "att", att[0], att[1], (size_t)b * NH * T * T, kTolRed);
    compare("tg_cuda_attention_naive_fwd", "out", out[0], out[1], (size_t)n * ldo, kTolRed);
    outputs(dqkv, n, 3 * C, ldq, 0);
    ok("tg_cuda_attention_naive_bwd", "",
       tg_cuda_attention_naive_bwd(b, T, C, NH, qkv, ldq, att[1], dout, ldo, dqkv[0], ldq, NULL,
                                   NULL));
    tg_cpu_attention_naive_bwd(b, T, C, NH, qkv, ldq, att[1], dout, ldo, dqkv[1], ldq,
                               cpu_scratch);
    compare_qkv("tg_cuda_attention_naive_bwd", dqkv[0], dqkv[1], n, C, ldq, T);
    free2(att); free2(out); free2(dqkv); free(cpu_scratch);
  }
  float *lse[2];
  const size_t ncpu = tg_attention_chunked_scratch_floats(T, C, NH, chunk);
  const size_t ncuda = tg_cuda_attention_chunked_scratch_floats(b, T, C, NH, chunk);
  float *cpu_scratch = fmalloc(ncpu), *scratch = tg_const_mat(1, (int)ncuda, (int)ncuda, NAN, NAN);
  outputs(out, n, C, ldo, 0);
  outputs(lse, n, NH, NH, 0);
  ok("tg_cuda_attention_chunked_fwd", "",
     tg_cuda_attention_chunked_fwd(b, T, C, NH, chunk, qkv, ldq, out[0], ldo, lse[0], NULL,
                                   NULL));
  tg_cpu_attention_chunked_fwd(b, T, C, NH, chunk, qkv, ldq, out[1], ldo, lse[1], cpu_scratch);
  compare("tg_cuda_attention_chunked_fwd", "out", out[0], out[1], (size_t)n * ldo, kTolRed);
  compare("tg_cuda_attention_chunked_fwd", "lse", lse[0], lse[1], (size_t)n * NH, kTolRed);
  outputs(dqkv, n, 3 * C, ldq, 0);
  ok("tg_cuda_attention_chunked_bwd", "",
     tg_cuda_attention_chunked_bwd(b, T, C, NH, chunk, qkv, ldq, out[1], ldo, lse[1], dout, ldo,
                                   dqkv[0], ldq, scratch, NULL));
  tg_cpu_attention_chunked_bwd(b, T, C, NH, chunk, qkv, ldq, out[1], ldo, lse[1], dout, ldo,
                               dqkv[1], ldq, cpu_scratch);
  compare_qkv("tg_cuda_attention_chunked_bwd", dqkv[0], dqkv[1], n, C, ldq, T);
  free2(out); free2(lse); free2(dqkv);
  free(cpu_scratch); free(scratch); free(qkv); free(dout);
}

void test_attention(void) {
  if (g_quick) { /* two query tiles, the last partial; DPL 1, 2 and 4 */
    attention_case(1, 33, 16, 2, 0);
    attention_case(1, 9, 16, 2, 1);
    attention_case(1, 17, 128, 2, 0);
    attention_case(1, 1, 128, 1, 1);
    return;
  }
  /* test_cuda_gpt_codelets' shapes (hs = 8): T = 1, 17, 64 and 100 (not
   * multiples of the 32-query tile, nor of the CPU's 16-row chunk) */
  static const int Ts[] = {1, 17, 64, 100};
  for (int t = 0; t < 4; t++) attention_case(2, Ts[t], 32, 4, Ts[t] <= 64);
  /* head sizes 32, 64 and 128 (DPL 1, 2, 4) */
  attention_case(1, 33, 64, 2, 1);
  attention_case(1, 45, 128, 2, 0);
  attention_case(2, 1, 128, 1, 1);
  attention_case(1, 40, 128, 1, 0);
  /* T > 256: the naive kernels' loops over 256-query and 256-key chunks */
  attention_case(1, 300, 8, 1, 1);
  /* hs = 40, not a multiple of the 32 lanes (masked channels); hs = 256,
   * the largest head (DPL 8, > 96 KiB of shared memory: the opt-in) */
  attention_case(2, 20, 80, 2, 1);
  attention_case(1, 33, 256, 1, 0);
}

void test_classifier(void) {
  const int n = 37, C = 33, V = 250, Vp = 256, ldl = C + 1;
  float *lnf = input(n, C, ldl, 1.0f), *wte = input(Vp, C, C, 1.0f);
  for (int i = V * C; i < Vp * C; i++) wte[i] = 1e30f; /* padded rows: never used */
  int32_t *tok = tokens(n, V);
  for (int chunk = 7; chunk <= 64; chunk *= 9)
    for (int backward = 0; backward < 2; backward++) {
      FULL_ONLY(chunk == 7 || !backward);
      float *dlnf[2], *dwte[2], loss[2] = {0.5f, 0.5f};
      outputs(dlnf, n, C, ldl, 0);
      outputs(dwte, Vp, C, C, 1);
      float *scratch = tg_const_mat(chunk, V, V, NAN, NAN), *cpu_scratch = fmalloc((size_t)chunk * V);
      ok("tg_cuda_classifier", "",
         tg_cuda_classifier(g_blas, n, C, V, chunk, lnf, ldl, wte, tok, 1.0f / 37.0f, 2.0f,
                            backward, dlnf[0], ldl, dwte[0], &loss[0], scratch, NULL));
      tg_cpu_classifier(n, C, V, chunk, lnf, ldl, wte, tok, 1.0f / 37.0f, 2.0f, backward,
                        dlnf[1], ldl, dwte[1], &loss[1], cpu_scratch);
      compare("tg_cuda_classifier", "loss", &loss[0], &loss[1], 1, kTolRed);
      compare("tg_cuda_classifier", "dlnf", dlnf[0], dlnf[1], (size_t)n * ldl, kTolLong);
      compare("tg_cuda_classifier", "dwte", dwte[0], dwte[1], (size_t)Vp * C, kTolRed);
      free2(dlnf); free2(dwte); free(scratch); free(cpu_scratch);
    }
  free(lnf); free(wte); free(tok);
}

/* this file's CHECKs, added to the test's totals by main() */
void emu_cases_gpt_counts(int *checks, int *failures) {
  *checks += tg_test_checks;
  *failures += tg_test_failures;
}
