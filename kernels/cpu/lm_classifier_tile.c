/*
 * The tied classifier in vocabulary tiles (graphs/gpt_tiles.c): the
 * softmax over a row's V logits split into tiles of columns, so that a
 * micro-batch's classifier is many tasks instead of one (the one task was
 * most of a 64-row micro-batch's critical path on many cores:
 * bench/results/2026-11-26-tiles.md).  Three passes, the middle one small:
 *   1. tg_cpu_lm_logits_tile, per tile [v0, v0 + m) of the padded
 *      vocabulary: logits (n, m) = lnf wte[v0 : v0 + m]^T (one GEMM) and
 *      the tile's softmax statistics per row: its max mx_v over the real
 *      columns (< V) and s_v = sum exp(x - mx_v) (in double, stored f32);
 *      a tile of padding only gets (-inf, 0);
 *   2. tg_cpu_lm_softmax_combine, once: M = max mx_v, S = sum s_v
 *      exp(mx_v - M) (double), lse = M + log S, kept as two floats (hi, lo:
 *      hi + lo is lse to about 2^-48 relative, so that pass 3's x - lse is
 *      not limited by a float lse); the loss row log S - (x_t - M), summed
 *      in double, scale * total added to *loss_acc once;
 *   3. tg_cpu_lm_dlogits_tile, per tile, in place: dl = alpha (exp(x - lse)
 *      - onehot(t)) on the real columns, the target entry as alpha expm1(x_t
 *      - lse) (no cancellation when p_t is near 1), zero on the padding.
 * The untiled kernel (lm_classifier.c) does the same in one pass per row;
 * here the sums are grouped per tile, so the results agree to rounding, not
 * bit for bit.  A target outside [0, V) is never used as an index: its row
 * gets a zero gradient and the loss is NaN, as in softmax_xent.c.
 */
#include <math.h>
#include <stdlib.h>

#include "taskgrad/gemm_libs.h"
#include "taskgrad/kernels_cpu.h"

void tg_cpu_lm_logits_tile(int n, int C, int V, int v0, int m, const float *lnf, int ldl,
                           const float *wte, float *logits, int ldo, float *stats, int lds) {
  if (n <= 0 || m <= 0) return;
  tg_cpu_gemm_in(TG_GEMM_CLASSIFIER, 0, 1, n, m, C, 1.0f, lnf, ldl, wte + (size_t)v0 * C, C,
                 0.0f, logits, ldo);
  int real = V - v0 < m ? V - v0 : m; /* columns of the tile below V */
  for (int r = 0; r < n; r++) {
    const float *x = logits + (size_t)r * ldo;
    float *st = stats + (size_t)r * lds;
    if (real <= 0) {
      st[0] = -INFINITY;
      st[1] = 0.0f;
      continue;
    }
    float mx = x[0];
    for (int c = 1; c < real; c++) mx = x[c] > mx ? x[c] : mx;
    double sum = 0.0;
    for (int c = 0; c < real; c++) sum += (double)expf(x[c] - mx);
    st[0] = mx;
    st[1] = (float)sum;
  }
}

void tg_cpu_lm_softmax_combine(int n, int V, int ntiles, const float *stats, int lds,
                               const float *logits, int ldo, const int32_t *targets,
                               float scale, float *lse, int ldlse, float *loss_acc) {
  double total = 0.0;
  for (int r = 0; r < n; r++) {
    const float *st = stats + (size_t)r * lds;
    float *out = lse + (size_t)r * ldlse;
    int32_t t = targets[r];
    double M = -INFINITY, S = 0.0;
    for (int v = 0; v < ntiles; v++) M = st[2 * v] > M ? st[2 * v] : M;
    for (int v = 0; v < ntiles; v++)
      if (st[2 * v + 1] > 0.0f) S += (double)st[2 * v + 1] * exp((double)st[2 * v] - M);
    double l = M + log(S);
    out[0] = (float)l;
    out[1] = (float)(l - (double)out[0]);
    if (t < 0 || t >= V) { /* defensive: never index with a bad target */
      total = NAN;
      continue;
    }
    total += log(S) - ((double)logits[(size_t)r * ldo + t] - M);
  }
  if (n > 0) *loss_acc = (float)((double)*loss_acc + (double)scale * total);
}

void tg_cpu_lm_dlogits_tile(int n, int V, int v0, int m, const float *lse, int ldlse,
                            const int32_t *targets, float alpha, float *dl, int ldd) {
  int real = V - v0 < m ? V - v0 : m;
  if (real < 0) real = 0;
  for (int r = 0; r < n; r++) {
    float *d = dl + (size_t)r * ldd;
    int32_t t = targets[r];
    if (t < 0 || t >= V) {
      for (int c = 0; c < m; c++) d[c] = 0.0f;
      continue;
    }
    double l = (double)lse[(size_t)r * ldlse] + (double)lse[(size_t)r * ldlse + 1];
    int tc = t - v0; /* the target's column in this tile, if it is here */
    float xt = tc >= 0 && tc < real ? d[tc] : 0.0f;
    for (int c = 0; c < real; c++) d[c] = alpha * expf((float)((double)d[c] - l));
    for (int c = real; c < m; c++) d[c] = 0.0f;
    if (tc >= 0 && tc < real) d[tc] = (float)((double)alpha * expm1((double)xt - l));
  }
}
