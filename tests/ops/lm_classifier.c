/*
 * Rows lm_classifier, lm_classifier_scaled, lm_classifier_dlogits and
 * lm_classifier_dwte (codelets/lm_classifier.c; each case checks its row's
 * op): the tied LM classifier (logits, softmax cross-entropy, dlnf, dwte)
 * in chunks of the vocabulary.
 *  ref       V in {1, 7, 250, 257} with padded vocabularies, chunk in
 *            {1, 16, 64, 1000}: the loss and the gradients against float64
 *            and finite differences, padded vocabulary rows of dwte
 *            untouched, a guard after the scratch;
 *  pair      V = 250 padded to 256 (padded rows hold 1e30: using them
 *            shows), chunks 7 and 63, dlnf within 1e-4 (long products);
 *  cuda-emu  tg_cuda_classifier against the CPU kernel (grad_scale 1).
 * The scaled form (tg_lm_classifier_scaled_insert, grad_scale = the loss
 * scale):
 *  ref       tg_cpu_classifier with grad_scale 8: the loss unchanged, dlnf
 *            and dwte's increment exactly 8 times;
 *  pair      the same through the insert wrapper, on both workers, and the
 *            pair compared as the fused form;
 *  cuda-emu  tg_cuda_classifier with grad_scale 2 against the CPU kernel.
 * The split form (tg_lm_classifier_dlogits_insert, *_classifier_dlogits):
 *  ref       in every ref case: loss and dlnf bit for bit as the fused
 *            kernel's, dlogits against float64 with zero padding columns
 *            and nothing written past them, dlogits^T lnf against dwte's
 *            analytic increment;
 *  pair      as the fused form, dlogits as a third output;
 *  cuda-emu  against the CPU kernel, and Vd < V refused.
 * The split form's dwte increment on a row block (tg_lm_classifier_dwte_insert):
 *  pair      v0 at 0, inside and at the end of dlogits, over NaN
 *            (TG_OVERWRITE) and onto values (TG_ACCUMULATE, TG_COMMUTE);
 *            and against float64: dwte split into 3 unequal row blocks
 *            (tg_split_start), two micro-batches' increments of every block
 *            left to any worker (TG_COMMUTE), then joined; bad ranges and
 *            mismatched shapes refused;
 *  cuda-emu  the call its CUDA version makes (tg_cuda_gemm on dlogits + v0,
 *            leading dimensions Vd and C + 1) against the CPU version's, v0
 *            at the start, middle and end, beta 0 over NaN and beta 1.
 */

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"
#include "taskgrad/precision_kernels.h"

/* ---- ref --------------------------------------------------------------------- */

typedef struct {
  int n, C, V;
  const double *lnf, *wte; /* (n, C), (V, C) */
  const int32_t *tg;
  double scale;
  int wrt_wte; /* FD variable: lnf (0) or wte[:V] (1) */
} cls_ctx;

/* logits, loss and (when p != NULL) probabilities of one row, in double */
static double ref_cls_row(int C, int V, const double *x, const double *wte,
                          int32_t t, double *p) {
  double *z = tg_test_malloc(sizeof(double) * V);
  double mx = -INFINITY, s = 0, zt = NAN;
  for (int v = 0; v < V; v++) {
    double a = 0;
    for (int j = 0; j < C; j++) a += x[j] * wte[(size_t)v * C + j];
    z[v] = a;
    if (v == t) zt = a;
    mx = fmax(mx, a);
  }
  for (int v = 0; v < V; v++) s += exp(z[v] - mx);
  double loss = log(s) - (zt - mx);
  if (p)
    for (int v = 0; v < V; v++) p[v] = exp(z[v] - mx) / s;
  free(z);
  return loss;
}

static double cls_loss(const double *x, const void *vctx) {
  const cls_ctx *c = vctx;
  const double *lnf = c->wrt_wte ? c->lnf : x, *wte = c->wrt_wte ? x : c->wte;
  double L = 0;
  for (int i = 0; i < c->n; i++)
    L += ref_cls_row(c->C, c->V, lnf + (size_t)i * c->C, wte, c->tg[i], NULL);
  return c->scale * L;
}

/* One classifier case against the double reference; fd != 0 adds the FD
 * check (O((n + V) C * n V C) work, small cases only). */
static void cls_case(tg_rng *rng, int n, int C, int V, int Vp, int chunk,
                     float padval, int fd) {
  char what[160];
  snprintf(what, sizeof what, "n=%d C=%d V=%d Vp=%d chunk=%d", n, C, V, Vp,
           chunk);
  int ldl = C + 3, lddl = C + 2;
  float scale = 1.0f / (float)(n + 2);
  float *lnf = tg_pad_mat(rng, n, C, ldl, 1.0f, 0.0f, NAN);
  float *wte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
  for (size_t k = (size_t)V * C; k < (size_t)Vp * C; k++) wte[k] = padval;
  int32_t *tg = rand_tokens(rng, n, V, -1);
  if (n > 2) { /* the edges of the vocabulary */
    tg[0] = V - 1;
    tg[1] = 0;
  }

  /* double reference: loss, dlogits, dlnf = dlogits wte and
   * dwte = dlogits^T lnf */
  double *lnfd = tg_compact_f64(lnf, n, C, ldl), *wted = tg_compact_f64(wte, V, C, C);
  double *dl = tg_test_malloc(sizeof(double) * n * V);
  double lref = 0;
  for (int i = 0; i < n; i++) {
    double *p = dl + (size_t)i * V;
    lref += ref_cls_row(C, V, lnfd + (size_t)i * C, wted, tg[i], p);
    for (int v = 0; v < V; v++) p[v] = scale * (p[v] - (v == tg[i]));
  }
  lref *= scale;
  double *dlnf_ref = tg_test_malloc(sizeof(double) * n * C);
  double *dwte_ref = tg_test_malloc(sizeof(double) * V * C);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < C; j++) {
      double a = 0;
      for (int v = 0; v < V; v++)
        a += dl[(size_t)i * V + v] * wted[(size_t)v * C + j];
      dlnf_ref[(size_t)i * C + j] = a;
    }
  for (int v = 0; v < V; v++)
    for (int j = 0; j < C; j++) {
      double a = 0;
      for (int i = 0; i < n; i++)
        a += dl[(size_t)i * V + v] * lnfd[(size_t)i * C + j];
      dwte_ref[(size_t)v * C + j] = a;
    }

  /* scratch of exactly chunk * V floats, then a guard */
  size_t ns = (size_t)chunk * V;
  float *scratch = tg_const_mat(1, (int)ns + 16, (int)ns + 16, NAN, NAN);
  for (int k = 0; k < 16; k++) scratch[ns + k] = UNTOUCHED;
  float guard[16];
  for (int k = 0; k < 16; k++) guard[k] = UNTOUCHED;

  /* forward only: dlnf and dwte NULL */
  const int fused = ops_row_is("lm_classifier"), split = ops_row_is("lm_classifier_dlogits");
  float loss = 0.25f;
  tg_cpu_classifier(n, C, V, chunk, lnf, ldl, wte, tg, scale, 1.0f, 0, NULL, 0, NULL,
                    &loss, scratch);
  if (fused) {
    char w2[200];
    snprintf(w2, sizeof w2, "classifier fwd loss %s", what);
    CHECK_REL(rel_err_scalar((double)loss - 0.25, lref), TOL_FWD, w2);
  }

  /* forward + backward: dlnf written over NaN, dwte[:V] accumulated onto
   * values of the increment's size (a large base would bury the increment
   * under its own float rounding, one per chunk) */
  float *dlnf = tg_const_mat(n, C, lddl, NAN, OUT_PAD);
  float *dwte = tg_pad_mat(rng, Vp, C, C, 1e-3f, 0.0f, 0.0f);
  for (size_t k = (size_t)V * C; k < (size_t)Vp * C; k++) dwte[k] = UNTOUCHED;
  float *dwte0 = tg_copy_f(dwte, (size_t)Vp * C);
  float *lnf0 = tg_copy_f(lnf, (size_t)n * ldl);
  float *wte0 = tg_copy_f(wte, (size_t)Vp * C);
  float loss2 = -0.5f;
  tg_cpu_classifier(n, C, V, chunk, lnf, ldl, wte, tg, scale, 1.0f, 1, dlnf, lddl,
                    dwte, &loss2, scratch);
  if (fused) {
    char w2[200];
    snprintf(w2, sizeof w2, "classifier fwd+bwd loss %s", what);
    CHECK_REL(rel_err_scalar((double)loss2 + 0.5, lref), TOL_FWD, w2);
    /* dlnf at the backward tolerance: with C = 1 a row of dlnf is one sum
     * sum_v dlogits_v wte_v whose terms cancel (dlogits sums to 0), and the
     * float result is measured up to 7e-6 off for n = 1, V = 250 */
    snprintf(w2, sizeof w2, "classifier dlnf vs analytic %s", what);
    CHECK_REL(mat_err(dlnf, n, C, lddl, dlnf_ref), TOL_FD, w2);
    CHECK(pad_intact(dlnf, n, C, lddl, OUT_PAD), "%s wrote padding", w2);
    snprintf(w2, sizeof w2, "classifier dwte vs analytic %s", what);
    CHECK_REL(delta_err(dwte, dwte0, V, C, C, dwte_ref), TOL_FWD, w2);
    CHECK(same_bits(dwte + (size_t)V * C, dwte0 + (size_t)V * C,
                    (size_t)(Vp - V) * C),
          "classifier touched padded rows of dwte %s", what);
    CHECK(same_bits(scratch + ns, guard, 16),
          "classifier wrote past chunk * V scratch floats %s", what);
    CHECK(same_bits(lnf, lnf0, (size_t)n * ldl) &&
              same_bits(wte, wte0, (size_t)Vp * C),
          "classifier changed its inputs %s", what);
  }

  /* the split form: loss and dlnf bit for bit as the fused kernel's, the
   * kept dlogits against the double reference with zero padding columns,
   * and dwte's increment as grad_scale dlogits^T lnf */
  if (split) {
    int Vd = Vp + 1; /* wider than wte: the padding is the kernel's to zero */
    float *dlnf_s = tg_const_mat(n, C, lddl, NAN, OUT_PAD);
    float *dlog = tg_const_mat(1, n * Vd + 16, n * Vd + 16, NAN, NAN);
    for (int k = 0; k < 16; k++) dlog[(size_t)n * Vd + k] = UNTOUCHED;
    float loss3 = -0.5f;
    tg_cpu_classifier_dlogits(n, C, V, chunk, lnf, ldl, wte, tg, scale, 1.0f, dlnf_s, lddl,
                              &loss3, dlog, Vd);
    char w2[200];
    snprintf(w2, sizeof w2, "classifier split %s", what);
    CHECK(same_bits(&loss3, &loss2, 1) && same_bits(dlnf_s, dlnf, (size_t)n * lddl),
          "%s: loss and dlnf differ from the fused kernel's", w2);
    double *dl_got = tg_test_malloc(sizeof(double) * n * V);
    int pad_zero = 1;
    for (int i = 0; i < n; i++) {
      for (int v = 0; v < V; v++) dl_got[(size_t)i * V + v] = dlog[(size_t)i * Vd + v];
      for (int v = V; v < Vd; v++) pad_zero &= dlog[(size_t)i * Vd + v] == 0.0f;
    }
    double e = 0;
    for (size_t k = 0; k < (size_t)n * V; k++) {
      double d = fabs(dl_got[k] - dl[k]) / (fabs(dl[k]) + 1e-3 * scale);
      e = d > e ? d : e;
    }
    CHECK_REL(e, TOL_FWD, w2);
    CHECK(pad_zero, "%s: padding columns of dlogits not zero", w2);
    CHECK(same_bits(dlog + (size_t)n * Vd, guard, 16), "%s wrote past n * Vd floats", w2);
    /* dwte[:V] = dwte0 + dlogits^T lnf, against the analytic increment */
    float *dwte_s = tg_copy_f(dwte0, (size_t)Vp * C);
    tg_cpu_gemm(1, 0, V, C, n, 1.0f, dlog, Vd, lnf, ldl, 1.0f, dwte_s, C);
    CHECK_REL(delta_err(dwte_s, dwte0, V, C, C, dwte_ref), TOL_FWD, w2);
    free(dwte_s);
    free(dl_got);
    free(dlog);
    free(dlnf_s);
  }

  if (fd && fused) {
    cls_ctx ctx = {
        .n = n, .C = C, .V = V, .lnf = lnfd, .wte = wted, .tg = tg, .scale = scale, .wrt_wte = 0};
    double *g = tg_fd_grad(cls_loss, &ctx, lnfd, (size_t)n * C, FD_H);
    char w2[200];
    snprintf(w2, sizeof w2, "classifier dlnf vs FD %s", what);
    CHECK_REL(mat_err(dlnf, n, C, lddl, g), TOL_FD, w2);
    free(g);
    ctx.wrt_wte = 1;
    g = tg_fd_grad(cls_loss, &ctx, wted, (size_t)V * C, FD_H);
    snprintf(w2, sizeof w2, "classifier dwte vs FD %s", what);
    CHECK_REL(delta_err(dwte, dwte0, V, C, C, g), TOL_FD, w2);
    free(g);
  }

  free(dlnf);
  free(dwte);
  free(dwte0);
  free(lnf0);
  free(wte0);
  free(scratch);
  free(dlnf_ref);
  free(dwte_ref);
  free(dl);
  free(lnfd);
  free(wted);
  free(tg);
  free(lnf);
  free(wte);
}

static void ref_classifier(tg_rng *rng) {
  static const int VS[4] = {1, 7, 250, 257};
  static const int CHUNKS[4] = {1, 16, 64, 1000};
  int k = 0;
  const int scaled = ops_row_is("lm_classifier_scaled");
  for (int in = 0; in < NN && !scaled; in++)
    for (int ic = 0; ic < NC; ic++)
      for (int iv = 0; iv < 4; iv++)
        for (int ik = 0; ik < 4; ik++, k++) {
          int n = NS[in], C = CS[ic], V = VS[iv];
          /* Vp: V rounded up to 8 (257 -> 264, 250 -> 256, 1, 7 -> 8), or
           * V itself on every third case */
          int Vp = k % 3 == 2 ? V : (V + 7) / 8 * 8 + (V % 8 == 0 ? 8 : 0);
          float padval = k % 2 ? NAN : 1e30f;
          cls_case(rng, n, C, V, Vp, CHUNKS[ik], padval, 0);
        }
  /* FD on a few cases small enough for O((n + V) C * n V C) (the FD checks
   * for lm_classifier, the split form's checks on the same cases for
   * lm_classifier_dlogits) */
  if (!scaled) {
    cls_case(rng, 7, 7, 257, 264, 3, NAN, 1);
    cls_case(rng, 33, 7, 7, 8, 16, 1e30f, 1);
    cls_case(rng, 1, 33, 250, 250, 1, NAN, 1);
    cls_case(rng, 100, 1, 7, 16, 64, 1e30f, 1);
    cls_case(rng, 5, 64, 33, 40, 2, NAN, 1);
  }

  /* grad_scale (the loss scale) multiplies dlnf and dwte's increment, never
   * the loss: a power of two, so exactly 8 times the unscaled results */
  static const int GS_CHUNKS[3] = {1, 4, 13}; /* one row, several, all in one chunk */
  for (int ik = 0; ik < 3 && scaled; ik++) {
    int n = 9, C = 11, V = 13, Vp = 16, chunk = GS_CHUNKS[ik];
    float *lnf = tg_pad_mat(rng, n, C, C, 1.0f, 0.0f, 0.0f);
    float *wte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
    int32_t tg[9];
    for (int i = 0; i < n; i++) tg[i] = (i * 5) % V;
    float *dlnf[2], *dwte[2], loss[2] = {0.0f, 0.0f};
    float *scratch = tg_const_mat(chunk, V, V, NAN, NAN);
    for (int s = 0; s < 2; s++) {
      dlnf[s] = tg_const_mat(n, C, C, NAN, NAN);
      dwte[s] = tg_const_mat(Vp, C, C, 0.0f, 0.0f);
      tg_cpu_classifier(n, C, V, chunk, lnf, C, wte, tg, 0.25f, s ? 8.0f : 1.0f, 1, dlnf[s], C,
                        dwte[s], &loss[s], scratch);
    }
    int exact = loss[0] == loss[1];
    for (int i = 0; i < n * C; i++) exact &= dlnf[1][i] == 8.0f * dlnf[0][i];
    for (int i = 0; i < Vp * C; i++) exact &= dwte[1][i] == 8.0f * dwte[0][i];
    CHECK(exact, "classifier grad_scale 8, chunk %d: loss unchanged, dlnf and dwte exactly 8x",
          chunk);
    for (int s = 0; s < 2; s++) {
      free(dlnf[s]);
      free(dwte[s]);
    }
    free(lnf);
    free(wte);
    free(scratch);
  }

  /* out-of-range targets: NaN loss, zero dlnf rows, no gradient from them */
  if (ops_row_is("lm_classifier")) {
    int n = 4, C = 7, V = 9, Vp = 16;
    float *lnf = tg_pad_mat(rng, n, C, C, 1.0f, 0.0f, 0.0f);
    float *wte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
    int32_t tg[4] = {V, 2, -1, Vp};
    float *dlnf = tg_const_mat(n, C, C, NAN, NAN);
    float *dwte = tg_const_mat(Vp, C, C, 0.0f, 0.0f);
    float *scratch = tg_const_mat(2, V, V, NAN, NAN);
    float loss = 0.0f;
    tg_cpu_classifier(n, C, V, 2, lnf, C, wte, tg, 1.0f, 1.0f, 1, dlnf, C, dwte,
                      &loss, scratch);
    int zero = 1;
    for (int j = 0; j < C; j++)
      zero &= dlnf[j] == 0.0f && dlnf[2 * C + j] == 0.0f &&
              dlnf[3 * C + j] == 0.0f;
    /* the valid row alone gives dwte = dlogits(1)^T lnf(1) */
    double *lnfd = tg_compact_f64(lnf, n, C, C), *wted = tg_compact_f64(wte, V, C, C);
    double p[9], *ref = tg_test_malloc(sizeof(double) * Vp * C);
    ref_cls_row(C, V, lnfd + C, wted, 2, p);
    for (int v = 0; v < Vp; v++)
      for (int j = 0; j < C; j++)
        ref[(size_t)v * C + j] =
            v < V ? (p[v] - (v == 2)) * lnfd[(size_t)C + j] : 0.0;
    CHECK(isnan(loss) && zero, "classifier bad targets: NaN loss, zero rows");
    CHECK_REL(mat_err(dwte, Vp, C, C, ref), TOL_FWD,
              "classifier bad targets: dwte from the valid row only");
    free(ref);
    free(lnfd);
    free(wted);
    free(lnf);
    free(wte);
    free(dlnf);
    free(dwte);
    free(scratch);
  }
}

/* tg_cpu_classifier_dlogits_lowp: bf16 lnf and wte, against float64 on
 * their values: the loss (1e-5), each dlogits entry the bf16 rounding of
 * scale (p - onehot) (half an ulp + 1e-6 absolute), zero padding, and dlnf
 * = grad_scale dlogits wte from the kernel's own rounded dlogits (1e-5);
 * chunks of 1, 3 and all rows, on the widened path and, where the CPU has
 * it, the native one */
static void ref_classifier_lowp_case(tg_rng *rng, int n, int C, int V, int Vp, int chunk,
                                     int native) {
  const float scale = 0.25f, gscale = 2.0f;
  uint16_t *lnf = tg_test_malloc(2 * (size_t)n * C), *wte = tg_test_malloc(2 * (size_t)Vp * C);
  uint16_t *dl = tg_test_malloc(2 * (size_t)n * Vp);
  int32_t *tg = tg_test_malloc(sizeof(int32_t) * n);
  float *dlnf = tg_test_malloc(sizeof(float) * (size_t)n * C);
  float *scratch =
      tg_test_malloc(sizeof(float) * tg_cpu_classifier_lowp_scratch_floats(C, V, chunk));
  double *x = tg_test_malloc(sizeof(double) * C), *w = tg_test_malloc(sizeof(double) * V * C);
  double *p = tg_test_malloc(sizeof(double) * V);
  for (size_t i = 0; i < (size_t)n * C; i++) lnf[i] = tg_f32_to_bf16(tg_rng_uniform(rng));
  for (size_t i = 0; i < (size_t)Vp * C; i++) wte[i] = tg_f32_to_bf16(tg_rng_uniform(rng));
  for (size_t i = 0; i < (size_t)n * Vp; i++) dl[i] = 0x7fc0; /* NaN: write-only */
  for (int r = 0; r < n; r++) tg[r] = (int32_t)((r * 7 + 3) % V);
  for (size_t i = 0; i < (size_t)V * C; i++) w[i] = tg_bf16_to_f32(wte[i]);
  float loss = 0.0f;
  tg_cpu_gemm_bf16_set_native(native);
  tg_cpu_classifier_dlogits_lowp(n, C, V, chunk, lnf, C, wte, tg, scale, gscale, dlnf, C,
                                 &loss, dl, Vp, scratch);
  double want_loss = 0, worst_dl = 0, worst_dlnf = 0;
  int pad_ok = 1;
  for (int r = 0; r < n; r++) {
    for (int j = 0; j < C; j++) x[j] = tg_bf16_to_f32(lnf[(size_t)r * C + j]);
    want_loss += scale * ref_cls_row(C, V, x, w, tg[r], p);
    for (int v = 0; v < V; v++) {
      double want = scale * (p[v] - (v == tg[r])), got = tg_bf16_to_f32(dl[(size_t)r * Vp + v]);
      double err = fabs(got - want) / (fabs(want) * ldexp(1.0, -8) + 1e-6);
      worst_dl = fmax(worst_dl, err);
    }
    for (int v = V; v < Vp; v++) pad_ok &= dl[(size_t)r * Vp + v] == 0;
    for (int j = 0; j < C; j++) {
      double g = 0, mag = 0;
      for (int v = 0; v < V; v++) {
        double d = tg_bf16_to_f32(dl[(size_t)r * Vp + v]);
        g += d * w[(size_t)v * C + j];
        mag += fabs(d * w[(size_t)v * C + j]);
      }
      worst_dlnf = fmax(worst_dlnf, fabs(dlnf[(size_t)r * C + j] - gscale * g) /
                                        (gscale * mag + 1e-30));
    }
  }
  char what[112];
  snprintf(what, sizeof what, "classifier_dlogits_lowp %s n=%d C=%d V=%d Vp=%d chunk=%d",
           native ? "native" : "widened", n, C, V, Vp, chunk);
  CHECK_REL(fabs(loss - want_loss) / fabs(want_loss), 1e-5, what);
  CHECK(worst_dl <= 1.0, "%s: dlogits off by %.3g half-ulps", what, worst_dl);
  CHECK(pad_ok, "%s: padding columns not zero", what);
  CHECK_REL(worst_dlnf, 1e-5, what);
  free(lnf); free(wte); free(dl); free(tg); free(dlnf); free(scratch); free(x); free(w);
  free(p);
}

static void lm_classifier_ref(void) {
  tg_rng rng = {.s = 0x2545F4914F6CDD1DULL};
  ref_classifier(&rng);
  if (!ops_row_is("lm_classifier_dlogits")) return;
  const int had = tg_cpu_gemm_bf16_native();
  for (int native = 0; native < 1 + tg_cpu_gemm_bf16_supported(); native++)
    for (int chunk = 1; chunk <= 5; chunk += chunk == 1 ? 2 : 2) {
      ref_classifier_lowp_case(&rng, 5, 24, 37, 40, chunk, native);
      ref_classifier_lowp_case(&rng, 3, 64, 300, 304, chunk, native);
    }
  if (!tg_cpu_gemm_bf16_supported())
    printf("classifier_dlogits_lowp: no AVX512-BF16 here, widened path only\n");
  tg_cpu_gemm_bf16_set_native(had);
}

/* ---- lowp: the split form and its dwte blocks on bf16 buffers --------------- */

/* worst |a - b| / (rel |b| + abs) over n values (a: the bf16 run's) */
static double worst_close(const float *a, const float *b, size_t n, double rel, double abs) {
  double w = 0;
  for (size_t i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]) / (rel * fabs(b[i]) + abs));
  return w;
}

/* tg_lm_classifier_dlogits_insert with bf16 lnf, wte, dlogits and dlnf
 * (native bf16 GEMMs where the CPU has them, else the adapter's widening)
 * against the f32 codelet on the same rounded inputs: the loss within 1e-5,
 * each dlogits entry within a bf16 ulp of the f32 one (the rounding, and
 * logits summed in another order), dlnf within 1e-2 in norm (it may come
 * from the rounded dlogits); then the dwte row blocks on those bf16
 * dlogits against the f32 block on the same values, within 1e-5 */
static void lowp_classifier_split(void) {
  const int n = 37, C = 33, V = 250, Vp = 256, chunk = 7, vb = 100;
  const float scale = 1.0f / 37.0f, gs = 2.0f;
  tg_rng rng = {.s = 0xB16C1A55};
  float *lnf = rounded_rand(&rng, TG_BF16, n, C, 1.0f);
  float *wte = rounded_rand(&rng, TG_BF16, Vp, C, 1.0f);
  tg_tensor L16, W16, L32, W32, tok, loss16, loss32, dl16, dl32, dn16, dn32;
  new_low(&L16, TG_BF16, n, C, lnf);
  new_low(&W16, TG_BF16, Vp, C, wte);
  new_f32(&L32, n, C, lnf);
  new_f32(&W32, Vp, C, wte);
  tokens_tensor(&tok, n, V);
  new_f32(&loss16, 1, 1, NULL);
  new_f32(&loss32, 1, 1, NULL);
  new_f32(&dl32, n, Vp, NULL);
  new_f32(&dn32, n, C, NULL);
  CHECK(tg_tensor_alloc(&dl16, n, Vp, TG_BF16) == 0 && tg_tensor_alloc(&dn16, n, C, TG_BF16) == 0,
        "alloc: %s", tg_last_error());
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = TG_BF16};
  CHECK(tg_lm_classifier_dlogits_insert(V, chunk, scale, gs, L16.handle, W16.handle, tok.handle,
                                        dn16.handle, dl16.handle, loss16.handle, TG_ACCUMULATE,
                                        &o) == 0, "bf16 split classifier: %s", tg_last_error());
  CHECK(tg_lm_classifier_dlogits_insert(V, chunk, scale, gs, L32.handle, W32.handle, tok.handle,
                                        dn32.handle, dl32.handle, loss32.handle, TG_ACCUMULATE,
                                        NULL) == 0, "f32 split classifier: %s", tg_last_error());
  float *l16 = read_as_f32(&loss16, TG_F32), *l32 = read_as_f32(&loss32, TG_F32);
  float *a = read_as_f32(&dl16, TG_BF16), *b = read_as_f32(&dl32, TG_F32);
  float *da = read_as_f32(&dn16, TG_BF16), *db = read_as_f32(&dn32, TG_F32);
  double dd = 0, dn = 0;
  for (int i = 0; i < n * C; i++) {
    dd += ((double)da[i] - db[i]) * ((double)da[i] - db[i]);
    dn += (double)db[i] * db[i];
  }
  const char *path = tg_cpu_gemm_bf16_native() ? "native" : "widened";
  CHECK_REL(fabs(l16[0] - l32[0]) / fabs(l32[0]), 1e-5, "bf16 split classifier: loss");
  CHECK(worst_close(a, b, (size_t)n * Vp, ldexp(1.0, -7), 1e-7) <= 1.0,
        "bf16 split classifier (%s): dlogits off by more than a bf16 ulp", path);
  CHECK_REL(sqrt(dd / dn), 1e-2, "bf16 split classifier: dlnf");
  printf("ok   bf16 split classifier (%s GEMMs): loss %g (f32 %g), dlnf %.2g apart in norm\n",
         path, l16[0], l32[0], sqrt(dd / dn));

  /* dwte rows [v0, v0 + vb) from the bf16 dlogits, against f32 on the
   * same (rounded) values */
  tg_tensor R16, R32, D32b;
  new_f32(&D32b, n, Vp, a); /* the bf16 dlogits' values, in f32 */
  float *init = tg_rand_mat(&rng, vb, C, C, 0.01f, 0.0f);
  for (int v0 = 0; v0 <= Vp - vb; v0 += Vp - vb) {
    new_f32(&R16, vb, C, init);
    new_f32(&R32, vb, C, init);
    CHECK(tg_lm_classifier_dwte_insert(v0, gs, dl16.handle, L16.handle, R16.handle,
                                       TG_ACCUMULATE, &o) == 0, "bf16 dwte: %s",
          tg_last_error());
    CHECK(tg_lm_classifier_dwte_insert(v0, gs, D32b.handle, L32.handle, R32.handle,
                                       TG_ACCUMULATE, NULL) == 0, "f32 dwte: %s",
          tg_last_error());
    float *r16 = read_as_f32(&R16, TG_F32), *r32 = read_as_f32(&R32, TG_F32);
    char what[64];
    snprintf(what, sizeof what, "bf16 dwte rows %d..%d", v0, v0 + vb - 1);
    CHECK_REL(tg_rel_err_f32(r16, r32, (size_t)vb * C), 1e-5, what);
    free(r16);
    free(r32);
    tg_tensor_free(&R16);
    tg_tensor_free(&R32);
  }
  tg_tensor *all[] = {&L16, &W16, &L32, &W32, &tok, &loss16, &loss32,
                      &dl16, &dl32, &dn16, &dn32, &D32b};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(lnf); free(wte); free(l16); free(l32); free(a); free(b); free(da); free(db); free(init);
}

static void lowp_classifier(void) { ops_run_worker_counts(lowp_classifier_split); }

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int classifier(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_lm_classifier_insert(c->V, c->chunk, 1.0f / 37.0f, c->h[0], c->h[1], c->h[2],
                                 out[1].handle, out[2].handle, c->accum, out[0].handle,
                                 c->accum, o);
}

/* the split form: loss, dlnf and the kept dlogits (Vp columns, the padding
 * zeroed) */
static int classifier_dlogits(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_lm_classifier_dlogits_insert(c->V, c->chunk, 1.0f / 37.0f, 2.0f, c->h[0], c->h[1],
                                         c->h[2], out[1].handle, out[2].handle, out[0].handle,
                                         c->accum, o);
}

/* the fused form (dwte accumulated onto random values), then the split
 * form (dlogits written over NaN) */
static void pair_classifier(void) {
  const int n = 37, C = 33, V = 250, Vp = 256;
  float *lnf = rnd((size_t)n * C, 1), *wte = rnd((size_t)Vp * C, 1);
  for (int i = V * C; i < Vp * C; i++) wte[i] = 1e30f; /* padded rows: never used */
  float *dwte0 = rnd((size_t)Vp * C, 0.01f), *loss0 = filled(1, 0.5f);
  tg_tensor L, Wt, tok;
  new_tensor(&L, n, C, lnf);
  new_tensor(&Wt, Vp, C, wte);
  tokens_tensor(&tok, n, V);
  for (int split = 0; split < 2; split++)
    for (int chunk = 7; chunk <= 64; chunk *= 9) {
      if (!ops_row_is(split ? "lm_classifier_dlogits" : "lm_classifier")) continue;
      gctx c = {.h = {L.handle, Wt.handle, tok.handle},
                .T = 0,
                .NH = 0,
                .chunk = chunk,
                .V = V,
                .kind = 0,
                .accum = TG_ACCUMULATE};
      outspec o[3] = {
          {.name = "loss", .rows = 1, .cols = 1, .init = loss0, .redux = 0, .tol = TOL},
          {.name = "dlnf", .rows = n, .cols = C, .init = NULL, .redux = 0, .tol = TOL_LARGE_K},
          {.name = split ? "dlogits" : "dwte", .rows = split ? n : Vp,
           .cols = split ? Vp : C, .init = split ? NULL : dwte0, .redux = 0, .tol = TOL}};
      char what[64];
      snprintf(what, sizeof what, "lm_classifier%s chunk=%d", split ? "_dlogits" : "", chunk);
      run_pair(what, split ? classifier_dlogits : classifier, &c, 3, o, NULL, NULL);
    }
  free(lnf); free(wte); free(dwte0); free(loss0);
  tg_tensor_free(&L); tg_tensor_free(&Wt); tg_tensor_free(&tok);
}

/* cuda, lm_classifier_dlogits row: the f32 pairs, then the bf16 split
 * (Vp = 256: dlogits rows 8-aligned) and fused forms with a bf16 dlnf on
 * the CUDA worker, the bf16-logits path (lm_classifier_bf16.cu), against
 * the f32 codelet on the CPU worker on the same rounded inputs.  The GPU
 * rounds the logits to bf16 before the softmax (|logit| ~ 2 here: 2^-8 in
 * each), so the loss within 2^-8 relative and dlogits, dlnf and dwte's
 * increment within 2e-2 in norm; dlogits' padding columns exactly zero. */
static void cuda_classifier_bf16(void) {
  pair_classifier();
  if (!ops_row_is("lm_classifier_dlogits")) return;
  const int n = 37, C = 33, V = 250, Vp = 256, chunk = 16;
  const float scale = 1.0f / 37.0f, gs = 2.0f;
  tg_rng rng = {.s = 0xC1A55B16ULL};
  float *lnf = rounded_rand(&rng, TG_BF16, n, C, 1.0f);
  float *wte = rounded_rand(&rng, TG_BF16, Vp, C, 1.0f);
  tg_tensor L16, W16, L32, W32, tok;
  new_low(&L16, TG_BF16, n, C, lnf);
  new_low(&W16, TG_BF16, Vp, C, wte);
  new_f32(&L32, n, C, lnf);
  new_f32(&W32, Vp, C, wte);
  tokens_tensor(&tok, n, V);
  tg_task_opts og = on_worker(g_cuda_worker), oc = on_worker(g_cpu_worker);
  og.lowp = TG_BF16;
  for (int fused = 0; fused < 2; fused++) {
    const char *what = fused ? "bf16 fused classifier on CUDA" : "bf16 split classifier on CUDA";
    tg_tensor l16, l32, dn16, dn32, o16, o32; /* o: dlogits (split) or dwte (fused) */
    new_f32(&l16, 1, 1, NULL);
    new_f32(&l32, 1, 1, NULL);
    new_f32(&dn32, n, C, NULL);
    CHECK(tg_tensor_alloc(&dn16, n, C, TG_BF16) == 0, "alloc: %s", tg_last_error());
    if (fused) {
      new_f32(&o16, Vp, C, NULL);
      new_f32(&o32, Vp, C, NULL);
      CHECK(tg_lm_classifier_scaled_insert(V, chunk, scale, gs, L16.handle, W16.handle,
                                           tok.handle, dn16.handle, o16.handle, TG_ACCUMULATE,
                                           l16.handle, TG_ACCUMULATE, &og) == 0 &&
                tg_lm_classifier_scaled_insert(V, chunk, scale, gs, L32.handle, W32.handle,
                                               tok.handle, dn32.handle, o32.handle,
                                               TG_ACCUMULATE, l32.handle, TG_ACCUMULATE,
                                               &oc) == 0,
            "%s: %s", what, tg_last_error());
    } else {
      new_f32(&o32, n, Vp, NULL);
      CHECK(tg_tensor_alloc(&o16, n, Vp, TG_BF16) == 0, "alloc: %s", tg_last_error());
      CHECK(tg_lm_classifier_dlogits_insert(V, chunk, scale, gs, L16.handle, W16.handle,
                                            tok.handle, dn16.handle, o16.handle, l16.handle,
                                            TG_ACCUMULATE, &og) == 0 &&
                tg_lm_classifier_dlogits_insert(V, chunk, scale, gs, L32.handle, W32.handle,
                                                tok.handle, dn32.handle, o32.handle,
                                                l32.handle, TG_ACCUMULATE, &oc) == 0,
            "%s: %s", what, tg_last_error());
    }
    float *a = read_as_f32(&l16, TG_F32), *b = read_as_f32(&l32, TG_F32);
    CHECK_REL(fabs(a[0] - b[0]) / fabs(b[0]), 0x1p-8, what);
    free(a); free(b);
    a = read_as_f32(&dn16, TG_BF16);
    b = read_as_f32(&dn32, TG_F32);
    CHECK_REL(tg_rel_err_f32(a, b, (size_t)n * C), 2e-2, what);
    free(a); free(b);
    a = read_as_f32(&o16, fused ? TG_F32 : TG_BF16);
    b = read_as_f32(&o32, TG_F32);
    CHECK_REL(tg_rel_err_f32(a, b, (size_t)(fused ? Vp * C : n * Vp)), 2e-2, what);
    int pad = 1;
    for (int r = 0; r < n && !fused; r++)
      for (int v = V; v < Vp; v++) pad &= a[(size_t)r * Vp + v] == 0.0f;
    CHECK(pad, "%s: dlogits padding columns not zero", what);
    free(a); free(b);
    tg_tensor *t[] = {&l16, &l32, &dn16, &dn32, &o16, &o32};
    for (size_t i = 0; i < 6; i++) tg_tensor_free(t[i]);
  }
  tg_tensor *all[] = {&L16, &W16, &L32, &W32, &tok};
  for (size_t i = 0; i < 5; i++) tg_tensor_free(all[i]);
  free(lnf); free(wte);
}

/* the scaled form: c->kind is grad_scale, c->T the order of the outputs
 * (which one is output 0, the one run_pair returns) */
static const int kScaledOrder[3][3] = {/* dlnf, dwte, loss */ {0, 1, 2}, {1, 0, 2}, {1, 2, 0}};

static int classifier_scaled(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  const int *k = kScaledOrder[c->T];
  return tg_lm_classifier_scaled_insert(c->V, c->chunk, 1.0f / 37.0f, (float)c->kind, c->h[0],
                                        c->h[1], c->h[2], out[k[0]].handle, out[k[1]].handle,
                                        c->accum, out[k[2]].handle, c->accum, o);
}

/* grad_scale 8 against grad_scale 1 through the insert wrapper, each pair
 * compared as the fused form's: dlnf and dwte's increment exactly 8 times,
 * the loss the same (grad_scale a power of two), on the CPU worker and on
 * the second worker (a CPU worker or an emulated device; a CUDA worker's
 * results within run_pair's tolerance of the CPU worker's) */
static void pair_classifier_scaled(void) {
  const int n = 37, C = 33, V = 250, Vp = 256;
  float *lnf = rnd((size_t)n * C, 1), *wte = rnd((size_t)Vp * C, 1);
  for (int i = V * C; i < Vp * C; i++) wte[i] = 1e30f;
  float *zero = filled(Vp * C, 0.0f), *loss0 = filled(1, 0.0f);
  tg_tensor L, Wt, tok;
  new_tensor(&L, n, C, lnf);
  new_tensor(&Wt, Vp, C, wte);
  tokens_tensor(&tok, n, V);
  static const char *const names[3] = {"dlnf", "dwte", "loss"};
  for (int order = 0; order < 3; order++) {
    const outspec spec[3] = {
        {.name = "dlnf", .rows = n, .cols = C, .init = NULL, .redux = 0, .tol = TOL_LARGE_K},
        {.name = "dwte", .rows = Vp, .cols = C, .init = zero, .redux = 0, .tol = TOL},
        {.name = "loss", .rows = 1, .cols = 1, .init = loss0, .redux = 0, .tol = TOL}};
    outspec o[3];
    for (int i = 0; i < 3; i++) o[kScaledOrder[order][i]] = spec[i];
    float *cpu[2], *gpu[2];
    for (int gs = 0; gs < 2; gs++) {
      gctx c = {.h = {L.handle, Wt.handle, tok.handle},
                .T = order,
                .NH = 0,
                .chunk = 7,
                .V = V,
                .kind = gs ? 8 : 1,
                .accum = TG_ACCUMULATE};
      char what[96];
      snprintf(what, sizeof what, "lm_classifier_scaled grad_scale=%d (%s)", c.kind,
               names[order]);
      run_pair(what, classifier_scaled, &c, 3, o, &cpu[gs], &gpu[gs]);
    }
    const size_t cnt = order == 0 ? (size_t)n * C : order == 1 ? (size_t)Vp * C : 1;
    const float factor = order == 2 ? 1.0f : 8.0f;
    /* on a CUDA worker, cuBLAS's choices are its own: there run_pair's
     * comparison with the CPU worker's (exact) results is the check */
    const int second_exact = ops_current_backend() != OPS_CUDA;
    int exact = 1;
    for (size_t i = 0; i < cnt; i++)
      exact &= cpu[1][i] == factor * cpu[0][i] &&
               (!second_exact || gpu[1][i] == factor * gpu[0][i]);
    CHECK(exact, "lm_classifier_scaled grad_scale 8: %s not exactly %g times the unscaled",
          names[order], (double)factor);
    for (int gs = 0; gs < 2; gs++) {
      free(cpu[gs]);
      free(gpu[gs]);
    }
  }
  free(lnf); free(wte); free(zero); free(loss0);
  tg_tensor_free(&L); tg_tensor_free(&Wt); tg_tensor_free(&tok);
}

/* dwte_rows (+)= 0.5 dlogits[:, v0 : v0 + Vb]^T lnf */
typedef struct dwte_ctx {
  starpu_data_handle_t dl, lnf;
  int v0;
  tg_accum accum;
} dwte_ctx;

static int classifier_dwte(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const dwte_ctx *c = v;
  return tg_lm_classifier_dwte_insert(c->v0, 0.5f, c->dl, c->lnf, out[0].handle, c->accum, o);
}

static void pair_classifier_dwte_cases(void) {
  const int n = 37, C = 33, Vd = 259, Vb = 50;
  float *dl = rnd((size_t)n * Vd, 1.0f), *lnf = rnd((size_t)n * C, 1.0f);
  float *w0 = rnd((size_t)Vb * C, 1.0f);
  tg_tensor D, L;
  new_tensor(&D, n, Vd, dl);
  new_tensor(&L, n, C, lnf);
  static const int v0s[3] = {0, 101, 259 - 50};
  static const tg_accum modes[3] = {TG_OVERWRITE, TG_ACCUMULATE, TG_COMMUTE};
  for (int iv = 0; iv < 3; iv++)
    for (int im = 0; im < 3; im++) {
      dwte_ctx c = {.dl = D.handle, .lnf = L.handle, .v0 = v0s[iv], .accum = modes[im]};
      outspec o = {.name = "dwte_rows", .rows = Vb, .cols = C,
                   .init = modes[im] == TG_OVERWRITE ? NULL : w0, .redux = 0, .tol = TOL};
      char what[96];
      snprintf(what, sizeof what, "lm_classifier_dwte v0=%d %s", v0s[iv], accum_name(modes[im]));
      run_pair(what, classifier_dwte, &c, 1, &o, NULL, NULL);
    }
  /* refused: a block past dlogits' columns, v0 < 0, lnf of other rows */
  tg_tensor W, L2;
  new_tensor(&W, Vb, C, w0);
  new_tensor(&L2, n + 1, C, NULL);
  CHECK(tg_lm_classifier_dwte_insert(Vd - Vb + 1, 1.0f, D.handle, L.handle, W.handle,
                                     TG_ACCUMULATE, NULL) < 0 &&
            strstr(tg_last_error(), "outside dlogits") != NULL,
        "lm_classifier_dwte: rows past dlogits refused (%s)", tg_last_error());
  CHECK(tg_lm_classifier_dwte_insert(-1, 1.0f, D.handle, L.handle, W.handle, TG_ACCUMULATE,
                                     NULL) < 0,
        "lm_classifier_dwte: v0 = -1 refused");
  CHECK(tg_lm_classifier_dwte_insert(0, 1.0f, D.handle, L2.handle, W.handle, TG_ACCUMULATE,
                                     NULL) < 0 &&
            strstr(tg_last_error(), "rows") != NULL,
        "lm_classifier_dwte: lnf with other rows refused (%s)", tg_last_error());
  free(dl); free(lnf); free(w0);
  tg_tensor_free(&D); tg_tensor_free(&L); tg_tensor_free(&W); tg_tensor_free(&L2);
}

/* dwte (Vp, C) = dwte0 + 0.5 sum over 2 micro-batches of dl_i^T lnf_i, in 3
 * row blocks of 22, 21 and 21 rows, each increment on any worker, against
 * float64: a wrong v0 for a block, or an increment lost, shows */
static void pair_classifier_dwte_blocks(void) {
  const int n = 19, C = 17, Vp = 64, nb = 3, nmb = 2;
  float *dl[2], *lnf[2], *w0 = rnd((size_t)Vp * C, 1.0f), *w = xmalloc(sizeof(float) * Vp * C);
  tg_tensor D[2], L[2], Wt;
  for (int i = 0; i < nmb; i++) {
    dl[i] = rnd((size_t)n * Vp, 1.0f);
    lnf[i] = rnd((size_t)n * C, 1.0f);
    new_tensor(&D[i], n, Vp, dl[i]);
    new_tensor(&L[i], n, C, lnf[i]);
  }
  new_tensor(&Wt, Vp, C, w0);
  tg_split s;
  CHECK(tg_split_plan(&Wt, nb, &s) == 0, "%s", tg_last_error());
  tg_split_write(&Wt, &s);
  for (int i = 0; i < nmb; i++)
    for (int j = 0; j < nb; j++)
      CHECK(tg_lm_classifier_dwte_insert(tg_split_start(Vp, nb, j, NULL), 0.5f, D[i].handle,
                                         L[i].handle, s.parts[j], TG_COMMUTE, NULL) == 0,
            "%s", tg_last_error());
  tg_split_free(&Wt, &s);
  CHECK(tg_tensor_read(&Wt, w) == 0, "%s", tg_last_error());
  double *ref = tg_test_malloc(sizeof(double) * Vp * C);
  for (int v = 0; v < Vp; v++)
    for (int c = 0; c < C; c++) {
      double acc = 0;
      for (int i = 0; i < nmb; i++)
        for (int r = 0; r < n; r++)
          acc += (double)dl[i][(size_t)r * Vp + v] * lnf[i][(size_t)r * C + c];
      ref[(size_t)v * C + c] = w0[(size_t)v * C + c] + 0.5 * acc;
    }
  CHECK_REL(tg_rel_err_f64(w, ref, (size_t)Vp * C), TOL,
            "lm_classifier_dwte: 2 increments of 3 row blocks on any worker vs float64");
  free(ref);
  for (int i = 0; i < nmb; i++) {
    free(dl[i]);
    free(lnf[i]);
    tg_tensor_free(&D[i]);
    tg_tensor_free(&L[i]);
  }
  free(w0);
  free(w);
  tg_tensor_free(&Wt);
}

static void pair_classifier_dwte(void) {
  pair_classifier_dwte_cases();
  pair_classifier_dwte_blocks();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

/* grad_scale 1 for the lm_classifier row, 2 for lm_classifier_scaled */
static void emu_classifier(void) {
  const float gs = ops_row_is("lm_classifier_scaled") ? 2.0f : 1.0f;
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
         tg_cuda_classifier(g_blas, n, C, V, chunk, lnf, ldl, wte, tok, 1.0f / 37.0f, gs,
                            backward, dlnf[0], ldl, dwte[0], &loss[0], scratch, NULL));
      tg_cpu_classifier(n, C, V, chunk, lnf, ldl, wte, tok, 1.0f / 37.0f, gs, backward,
                        dlnf[1], ldl, dwte[1], &loss[1], cpu_scratch);
      compare("tg_cuda_classifier", "loss", &loss[0], &loss[1], 1, kTolRed);
      compare("tg_cuda_classifier", "dlnf", dlnf[0], dlnf[1], (size_t)n * ldl, kTolLong);
      compare("tg_cuda_classifier", "dwte", dwte[0], dwte[1], (size_t)Vp * C, kTolRed);
      free2(dlnf); free2(dwte); free(scratch); free(cpu_scratch);
    }
  free(lnf); free(wte); free(tok);
}

/* the split form, dlogits wider than the vocabulary (Vd = Vp + 3) */
static void emu_classifier_dlogits(void) {
  const int n = 37, C = 33, V = 250, Vp = 256, Vd = Vp + 3, ldl = C + 1;
  float *lnf = input(n, C, ldl, 1.0f), *wte = input(Vp, C, C, 1.0f);
  for (int i = V * C; i < Vp * C; i++) wte[i] = 1e30f;
  int32_t *tok = tokens(n, V);
  for (int chunk = 7; chunk <= 64; chunk *= 9) {
    float *dlnf[2], *dlog[2], loss[2] = {0.5f, 0.5f};
    outputs(dlnf, n, C, ldl, 0);
    outputs(dlog, n, Vd, Vd, 0);
    ok("tg_cuda_classifier_dlogits", "",
       tg_cuda_classifier_dlogits(g_blas, n, C, V, chunk, lnf, ldl, wte, tok, 1.0f / 37.0f,
                                  2.0f, dlnf[0], ldl, &loss[0], dlog[0], Vd, NULL));
    tg_cpu_classifier_dlogits(n, C, V, chunk, lnf, ldl, wte, tok, 1.0f / 37.0f, 2.0f,
                              dlnf[1], ldl, &loss[1], dlog[1], Vd);
    compare("tg_cuda_classifier_dlogits", "loss", &loss[0], &loss[1], 1, kTolRed);
    compare("tg_cuda_classifier_dlogits", "dlnf", dlnf[0], dlnf[1], (size_t)n * ldl, kTolLong);
    compare("tg_cuda_classifier_dlogits", "dlogits", dlog[0], dlog[1], (size_t)n * Vd,
            kTolRed);
    free2(dlnf); free2(dlog);
  }
  float l = 0.0f;
  cudaError_t e = tg_cuda_classifier_dlogits(g_blas, n, C, V, 7, lnf, ldl, wte, tok, 1.0f,
                                             1.0f, NULL, ldl, &l, NULL, V - 1, NULL);
  CHECK(e == cudaErrorInvalidValue, "tg_cuda_classifier_dlogits Vd < V: status %d", (int)e);
  tg_emu_reset();
  free(lnf); free(wte); free(tok);
}

/* as tg_lm_classifier_dwte_cpu and _cuda call them: dwte_rows (Vb, C) (+)=
 * 0.5 dlogits[:, v0 : v0 + Vb]^T lnf */
static void emu_classifier_dwte(void) {
  const int n = 37, C = 33, Vd = 259, Vb = 50, ldl = C + 1;
  float *dl = input(n, Vd, Vd, 1.0f), *lnf = input(n, C, ldl, 1.0f);
  static const int v0s[3] = {0, 101, 259 - 50};
  for (int iv = 0; iv < 3; iv++)
    for (int b = 0; b < 2; b++) {
      float *w[2];
      outputs(w, Vb, C, C, b);
      ok("tg_cuda_gemm", "classifier dwte",
         tg_cuda_gemm(g_blas, 1, 0, Vb, C, n, 0.5f, dl + v0s[iv], Vd, lnf, ldl, (float)b, w[0],
                      C));
      tg_cpu_gemm(1, 0, Vb, C, n, 0.5f, dl + v0s[iv], Vd, lnf, ldl, (float)b, w[1], C);
      compare("tg_cuda_gemm", "classifier dwte", w[0], w[1], (size_t)Vb * C, kTolRed);
      free2(w);
    }
  free(dl);
  free(lnf);
}

/* tg_cuda_classifier_lowp (bf16 lnf and wte on the tensor cores).  The
 * split form against tg_cpu_classifier_dlogits_lowp, whose rounding points
 * it shares: the loss (kTolRed); dlogits, bf16, within one bf16 ulp in norm
 * (an entry may round the other way where the f32 logits differ in their
 * last bit); dlnf (f32, or bf16) against grad_scale dl wte on the
 * emulator's own dlogits (kTolLong; one bf16 ulp when dlnf is bf16); the
 * padding columns zero.  The fused form against the split form's results:
 * the loss and dlnf (kTolRed), dwte's increment against dl^T lnf on the
 * split form's dlogits (kTolRed); forward only, the loss alone.  Padded wte
 * rows hold bf16 3e38 (using them shows); a missing workspace is refused. */
static void emu_classifier_lowp(void) {
  const int n = 37, C = 33, V = 250, Vp = 256, Vd = Vp + 3, ldl = C + 1;
  const float scale = 1.0f / 37.0f, gs = 2.0f;
  float *lnf = input(n, C, ldl, 1.0f), *wte = input(Vp, C, C, 1.0f);
  uint16_t *L16 = to16(TG_BF16, lnf, n, C, ldl, 1), *W16 = to16(TG_BF16, wte, Vp, C, C, 0);
  for (int i = V * C; i < Vp * C; i++) W16[i] = 0x7f7f;
  int32_t *tok = tokens(n, V);
  const int had = tg_cpu_gemm_bf16_native();
  for (int chunk = 7; chunk <= 63; chunk *= 9)
    for (int d16 = 0; d16 < 2; d16++) {
      FULL_ONLY(chunk != 7 && d16);
      const char *L = "tg_cuda_classifier_lowp";
      char what[64];
      snprintf(what, sizeof what, "chunk %d, dlnf %s", chunk, d16 ? "bf16" : "f32");
      uint16_t *dl = malloc(2 * (size_t)n * Vd), *dl_cpu = malloc(2 * (size_t)n * Vd);
      for (size_t i = 0; i < (size_t)n * Vd; i++) dl[i] = dl_cpu[i] = 0x7fc0;
      const int ldg = (V + 7) / 8 * 8; /* the logits' rows, aligned */
      float *logits = tg_const_mat(chunk, ldg, ldg, NAN, NAN);
      size_t wsplit = tg_cuda_classifier_lowp_scratch_floats(C, V, chunk, 0, d16);
      size_t wfused = tg_cuda_classifier_lowp_scratch_floats(C, V, chunk, 1, d16);
      float *work = tg_const_mat(1, (int)wfused, (int)wfused, NAN, NAN);
      float *dlnf = fmalloc((size_t)n * ldl), *dlnf_f = fmalloc((size_t)n * ldl);
      float *want = fmalloc((size_t)n * ldl), *got = fmalloc((size_t)n * ldl);
      uint16_t *dn16 = malloc(2 * (size_t)n * ldl), *dn16_f = malloc(2 * (size_t)n * ldl);
      void *dn = d16 ? (void *)dn16 : (void *)dlnf, *dnf = d16 ? (void *)dn16_f : (void *)dlnf_f;
      float loss[3] = {0.5f, 0.5f, 0.5f}, lossfwd = 0.5f;
      cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
      ok(L, "split",
         tg_cuda_classifier_lowp(g_blas, n, C, V, chunk, L16, ldl, W16, tok, scale, gs, 1, dn,
                                 ldl, d16, NULL, &loss[0], logits, dl, Vd,
                                 wsplit ? work : NULL, NULL, &cs));
      ok(L, "split cublas", cs);
      float *cpu_dlnf = fmalloc((size_t)n * C);
      float *cpu_scratch = fmalloc(tg_cpu_classifier_lowp_scratch_floats(C, V, chunk));
      tg_cpu_gemm_bf16_set_native(0);
      tg_cpu_classifier_dlogits_lowp(n, C, V, chunk, L16, ldl, W16, tok, scale, gs, cpu_dlnf,
                                     C, &loss[1], dl_cpu, Vd, cpu_scratch);
      tg_cpu_gemm_bf16_set_native(had);
      compare(L, "split loss", &loss[0], &loss[1], 1, kTolRed);
      float *a = widen16(TG_BF16, dl, (size_t)n * Vd), *b = widen16(TG_BF16, dl_cpu, (size_t)n * Vd);
      compare(L, "split dlogits", a, b, (size_t)n * Vd, 0x1p-8);
      int pad = 1;
      for (int r = 0; r < n; r++)
        for (int v = V; v < Vd; v++) pad &= dl[(size_t)r * Vd + v] == 0;
      CHECK(pad, "%s %s: dlogits padding columns not zero", L, what);
      /* dlnf from the emulator's own dlogits */
      tg_cpu_gemm(0, 0, n, C, V, gs, a, Vd, wte, C, 0.0f, want, ldl);
      for (int r = 0; r < n; r++)
        for (int c = 0; c < C; c++)
          got[(size_t)r * ldl + c] =
              d16 ? tg_bf16_to_f32(dn16[(size_t)r * ldl + c]) : dlnf[(size_t)r * ldl + c];
      for (int r = 0; r < n; r++) got[(size_t)r * ldl + C] = want[(size_t)r * ldl + C] = 0.0f;
      compare(L, "split dlnf", got, want, (size_t)n * ldl, d16 ? 0x1p-8 : kTolLong);

      /* fused: dwte (+)= gs dl^T lnf onto random values */
      float *dwte[2];
      outputs(dwte, Vp, C, C, 1);
      tg_cpu_gemm(1, 0, V, C, n, gs, a, Vd, lnf, ldl, 1.0f, dwte[1], C);
      ok(L, "fused",
         tg_cuda_classifier_lowp(g_blas, n, C, V, chunk, L16, ldl, W16, tok, scale, gs, 1, dnf,
                                 ldl, d16, dwte[0], &loss[2], logits, NULL, 0, work, NULL,
                                 &cs));
      compare(L, "fused loss", &loss[2], &loss[0], 1, kTolRed);
      if (d16) {
        float *x = widen16(TG_BF16, dn16_f, (size_t)n * ldl), *y = widen16(TG_BF16, dn16, (size_t)n * ldl);
        for (int r = 0; r < n; r++) x[(size_t)r * ldl + C] = y[(size_t)r * ldl + C] = 0.0f;
        compare(L, "fused dlnf", x, y, (size_t)n * ldl, 0x1p-8);
        free(x); free(y);
      } else {
        for (int r = 0; r < n; r++) dlnf_f[(size_t)r * ldl + C] = dlnf[(size_t)r * ldl + C] = 0.0f;
        compare(L, "fused dlnf", dlnf_f, dlnf, (size_t)n * ldl, kTolRed);
      }
      compare(L, "fused dwte", dwte[0], dwte[1], (size_t)Vp * C, kTolRed);
      /* forward only: the loss, nothing written */
      ok(L, "forward",
         tg_cuda_classifier_lowp(g_blas, n, C, V, chunk, L16, ldl, W16, tok, scale, gs, 0, NULL,
                                 0, 0, NULL, &lossfwd, logits, NULL, 0, work, NULL, &cs));
      compare(L, "forward loss", &lossfwd, &loss[0], 1, kTolRed);
      free(dl); free(dl_cpu); free(logits); free(work); free(dlnf); free(dlnf_f); free(want);
      free(got); free(dn16); free(dn16_f); free(cpu_dlnf); free(cpu_scratch); free(a); free(b);
      free2(dwte);
    }
  float l = 0.0f, lg[4];
  cublasStatus_t cs;
  uint16_t d1[2];
  cudaError_t e = tg_cuda_classifier_lowp(g_blas, 1, C, V, 4, L16, ldl, W16, tok, 1.0f, 1.0f,
                                          1, d1, C, 1, NULL, &l, lg, NULL, 0, NULL, NULL, &cs);
  CHECK(e == cudaErrorInvalidValue, "tg_cuda_classifier_lowp without its work: status %d",
        (int)e);
  tg_emu_reset();
  free(lnf); free(wte); free(L16); free(W16); free(tok);
}

/* tg_cuda_fused_classifier_bf16 against tg_cpu_softmax_xent on the same
 * bf16 logits widened: dlogits bf16, within one bf16 ulp in norm (0x1p-8:
 * each value rounded once from an f32 within kTolRed of the CPU's); the
 * row losses (f32, unscaled) and the scaled sum kTolRed; the columns
 * [V, ld) exactly zero although they held NaN; a target outside [0, V): a
 * zero row and a NaN loss; a misaligned ld refused.  Logits in [-8, 8)
 * make probabilities over several decades. */
static void emu_fused_classifier(void) {
  const char *L = "tg_cuda_fused_classifier_bf16";
  const int n = 13, V = 250, ld = 264;
  const float scale = 1.0f / 37.0f;
  float *x = input(n, V, V, 8.0f);
  uint16_t *dl = malloc(2 * (size_t)n * ld);
  for (size_t i = 0; i < (size_t)n * ld; i++) dl[i] = 0x7fc0; /* NaN */
  tg_cpu_to_lowp(TG_BF16, n, V, x, V, dl, ld);
  tg_cpu_from_lowp(TG_BF16, n, V, dl, ld, x, V); /* the logits the kernel sees */
  int32_t *tok = tokens(n, V);
  tok[5] = V; /* out of range */
  float *want = fmalloc((size_t)n * ld), *rl = fmalloc(n), *wl = fmalloc(n);
  float loss = 0.5f, wloss = 0.5f;
  for (int r = 0; r < n; r++) {
    wl[r] = 0.0f;
    if (r == 5) continue;
    tg_cpu_softmax_xent(1, V, x + (size_t)r * V, V, tok + r, 1.0f, want + (size_t)r * ld, ld,
                        &wl[r]);
    wloss += scale * wl[r];
    for (int c = 0; c < V; c++) want[(size_t)r * ld + c] *= scale;
    for (int c = V; c < ld; c++) want[(size_t)r * ld + c] = 0.0f;
  }
  for (int c = 0; c < ld; c++) want[(size_t)5 * ld + c] = 0.0f;
  ok(L, "", tg_cuda_fused_classifier_bf16(n, V, dl, ld, tok, scale, rl, &loss, NULL));
  float *got = widen16(TG_BF16, dl, (size_t)n * ld);
  CHECK(isnan(rl[5]) && isnan(loss), "%s: the bad target's loss %g, sum %g, want NaN", L,
        (double)rl[5], (double)loss);
  rl[5] = wl[5] = 0.0f;
  compare(L, "dlogits", got, want, (size_t)n * ld, 0x1p-8);
  compare(L, "row losses", rl, wl, (size_t)n, kTolRed);
  int pad = 1;
  for (int r = 0; r < n; r++)
    for (int c = r == 5 ? 0 : V; c < ld; c++) pad &= dl[(size_t)r * ld + c] == 0;
  CHECK(pad, "%s: padded columns (or the bad target's row) not zero", L);
  /* the sum without the bad row */
  tok[5] = 0;
  for (size_t i = 0; i < (size_t)n * ld; i++) dl[i] = 0x7fc0;
  tg_cpu_to_lowp(TG_BF16, n, V, x, V, dl, ld);
  loss = 0.5f;
  tg_cpu_softmax_xent(1, V, x + (size_t)5 * V, V, tok + 5, scale, want, ld, &wloss);
  ok(L, "loss", tg_cuda_fused_classifier_bf16(n, V, dl, ld, tok, scale, NULL, &loss, NULL));
  compare(L, "loss", &loss, &wloss, 1, kTolRed);
  cudaError_t e = tg_cuda_fused_classifier_bf16(n, V, dl, 252, tok, scale, NULL, &loss, NULL);
  CHECK(e == cudaErrorInvalidValue, "%s: ld 252 accepted (status %d)", L, (int)e);
  tg_emu_reset();
  free(x); free(dl); free(tok); free(want); free(rl); free(wl); free(got);
}

/* tg_cuda_classifier_bf16, split (whole) and fused (a chunk's block), dlnf
 * f32 and bf16: the loss against tg_cpu_softmax_xent on the emulator's own
 * bf16 logits (tg_cuda_gemm_lowp with a bf16 C, kTolRed); dlogits one bf16
 * ulp in norm; dlnf against grad_scale dl wte[:V] on its own dlogits
 * (kTolLong, one bf16 ulp when bf16); dwte's increment against dl^T lnf
 * (kTolRed).  Padded wte rows hold bf16 3e38 (using them shows). */
static void emu_classifier_bf16(void) {
  const char *L = "tg_cuda_classifier_bf16";
  const int n = 37, C = 33, V = 250, Vp = 256, ld = 264, ldl = C + 1, chunk = 16;
  const float scale = 1.0f / 37.0f, gs = 2.0f;
  float *lnf = input(n, C, ldl, 1.0f), *wte = input(Vp, C, C, 1.0f);
  uint16_t *L16 = to16(TG_BF16, lnf, n, C, ldl, 1), *W16 = to16(TG_BF16, wte, Vp, C, C, 0);
  for (int i = V * C; i < Vp * C; i++) W16[i] = 0x7f7f;
  int32_t *tok = tokens(n, V);
  /* the reference: the same bf16 logits, the CPU softmax */
  uint16_t *lg = malloc(2 * (size_t)n * ld);
  ok(L, "logits", tg_cuda_gemm_lowp(g_blas, TG_BF16, 0, 1, n, V, C, 1.0f, L16, ldl, W16, C,
                                    0.0f, TG_BF16, lg, ld));
  float *x = fmalloc((size_t)n * V), *want = fmalloc((size_t)n * ld), wloss = 0.5f;
  tg_cpu_from_lowp(TG_BF16, n, V, lg, ld, x, V);
  for (size_t i = 0; i < (size_t)n * ld; i++) want[i] = 0.0f;
  tg_cpu_softmax_xent(n, V, x, V, tok, scale, want, ld, &wloss);
  for (int form = 0; form < 2; form++)
    for (int d16 = 0; d16 < 2; d16++) {
      FULL_ONLY(form != d16);
      const int whole = form == 0;
      const size_t dlrows = whole ? (size_t)n : (size_t)chunk;
      uint16_t *dl = malloc(2 * dlrows * ld);
      for (size_t i = 0; i < dlrows * ld; i++) dl[i] = 0x7fc0;
      float *dlnf = tg_const_mat(n, C, ldl, NAN, 0.0f), *work = fmalloc((size_t)chunk * C);
      uint16_t *dn16 = malloc(2 * (size_t)n * ldl);
      float *dwte[2], loss = 0.5f;
      outputs(dwte, Vp, C, C, 1);
      cublasStatus_t cs;
      ok(L, whole ? "split" : "fused",
         tg_cuda_classifier_bf16(g_blas, n, C, V, chunk, L16, ldl, W16, tok, scale, gs, 1,
                                 d16 ? (void *)dn16 : (void *)dlnf, ldl, d16,
                                 whole ? NULL : dwte[0], &loss, dl, ld, whole, work, NULL,
                                 &cs));
      ok(L, "cublas", cs);
      compare(L, "loss", &loss, &wloss, 1, kTolRed);
      /* the dlogits behind dlnf and dwte: the kernel's own (split), or the
       * reference's rounded (fused: the block is reused) */
      uint16_t *w16 = malloc(2 * (size_t)n * ld);
      tg_cpu_to_lowp(TG_BF16, n, ld, want, ld, w16, ld);
      float *a = widen16(TG_BF16, whole ? dl : w16, (size_t)n * ld);
      if (whole) compare(L, "dlogits", a, want, (size_t)n * ld, 0x1p-8);
      float *ref = tg_const_mat(n, C, ldl, 0.0f, 0.0f), *got = tg_const_mat(n, C, ldl, 0.0f, 0.0f);
      tg_cpu_gemm(0, 0, n, C, V, gs, a, ld, wte, C, 0.0f, ref, ldl);
      for (int r = 0; r < n; r++)
        for (int c = 0; c < C; c++)
          got[(size_t)r * ldl + c] = d16 ? tg_bf16_to_f32(dn16[(size_t)r * ldl + c])
                                         : dlnf[(size_t)r * ldl + c];
      compare(L, "dlnf", got, ref, (size_t)n * ldl, d16 || !whole ? 0x1p-8 : kTolLong);
      if (!whole) {
        tg_cpu_gemm(1, 0, V, C, n, gs, a, ld, lnf, ldl, 1.0f, dwte[1], C);
        compare(L, "dwte", dwte[0], dwte[1], (size_t)Vp * C, 0x1p-8);
      }
      free(w16); free(a); free(ref); free(got);
      free(dl); free(dlnf); free(work); free(dn16); free2(dwte);
    }
  cublasStatus_t cs;
  float l = 0.0f;
  uint16_t d1[8];
  cudaError_t e = tg_cuda_classifier_bf16(g_blas, 1, C, V, 4, L16, ldl, W16, tok, 1.0f, 1.0f,
                                          0, NULL, 0, 0, NULL, &l, d1, 252, 1, NULL, NULL, &cs);
  CHECK(e == cudaErrorInvalidValue, "%s: ld 252 accepted (status %d)", L, (int)e);
  tg_emu_reset();
  free(lnf); free(wte); free(L16); free(W16); free(tok); free(lg); free(x); free(want);
}

static void emu_classifier_dlogits_all(void) {
  emu_classifier_dlogits();
  emu_fused_classifier();
  emu_classifier_bf16();
}

static void emu_classifier_all(void) {
  emu_classifier();
  emu_classifier_lowp();
}

#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "lm_classifier",
     .doc = "tied LM head + cross-entropy in row chunks",
     .buffers = "lnf, wte, targets (R), loss (RW / REDUX), scratch, dlnf (W), dwte (RW / REDUX)",
     .covers = "tg_lm_classifier_cl tg_lm_classifier_insert tg_cuda_classifier "
               "tg_cuda_classifier_lowp",
     .kernels = "tg_cpu_classifier",
     .run = {[OPS_REF] = lm_classifier_ref, [OPS_CPU] = pair_classifier,
             [OPS_CUDA] = pair_classifier, [OPS_DEVICE] = pair_classifier,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_classifier_all)},
     .why_not = {[OPS_LOWP] = "logits and the loss stay f32 in every precision mode",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "lm_classifier_scaled",
     .doc = "the same with the gradients multiplied by the loss scale (mixed precision)",
     .buffers = "as lm_classifier",
     .covers = "tg_lm_classifier_scaled_insert",
     .kernels = "tg_cpu_classifier",
     .run = {[OPS_REF] = lm_classifier_ref, [OPS_CPU] = pair_classifier_scaled,
             [OPS_CUDA] = pair_classifier_scaled, [OPS_DEVICE] = pair_classifier_scaled,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_classifier)},
     .why_not = {[OPS_LOWP] = "logits and the loss stay f32 in every precision mode",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "lm_classifier_dlogits",
     .doc = "the same split: loss, dlnf and the kept dlogits (padding columns zero), dwte left "
            "to a `tg_gemm` or `lm_classifier_dwte` task",
     .buffers = "lnf, wte, targets (R), loss (RW / REDUX), dlogits (W), dlnf (W) [, scratch: "
                "native bf16]",
     .covers = "tg_lm_classifier_dlogits_insert tg_cuda_classifier_dlogits "
               "tg_cuda_fused_classifier_bf16 tg_cuda_classifier_bf16",
     .kernels = "tg_cpu_classifier_dlogits tg_cpu_classifier_dlogits_lowp "
                "tg_cpu_classifier_lowp_scratch_floats",
     .run = {[OPS_REF] = lm_classifier_ref, [OPS_CPU] = pair_classifier,
             [OPS_CUDA] = cuda_classifier_bf16, [OPS_DEVICE] = pair_classifier,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_classifier_dlogits_all),
             [OPS_LOWP] = lowp_classifier},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "lm_classifier_dwte",
     .doc = "the split form's dwte increment on a row block of dwte (a column range of dlogits)",
     .buffers = "dlogits, lnf (R), dwte rows (W / RW / REDUX / RW COMMUTE)",
     .covers = "tg_lm_classifier_dwte_cl tg_lm_classifier_dwte_insert",
     .run = {[OPS_CPU] = pair_classifier_dwte, [OPS_CUDA] = pair_classifier_dwte,
             [OPS_DEVICE] = pair_classifier_dwte,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_classifier_dwte),
             [OPS_LOWP] = lowp_classifier},
     .why_not = {[OPS_REF] = "no kernel of its own: tg_cpu_gemm or tg_cpu_gemm_lowp on an "
                             "offset pointer (the gemm rows' ref); checked against float64 in "
                             "the pair backends",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
