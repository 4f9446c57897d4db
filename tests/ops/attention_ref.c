/*
 * The ref case of the attention row (tests/ops/attention.c): the CPU
 * attention kernels against float64 and finite differences, the chunked
 * kernels against the naive ones, the scratch size and causality (the
 * design note of attention.c lists them).  A file of its own for its size.
 */
#include "ref_util.h"
#include "taskgrad/precision_kernels.h"

#define TOL_CHUNK 1e-5
#define GUARD 64 /* floats after the scratch that must stay untouched */

/* ---- ref --------------------------------------------------------------------- */

/* qkv (n, ld): q and k in [-qk, qk), v in [-1, 1), NaN padding */
static float *rand_qkv(tg_rng *rng, int n, int C, int ld, float qk) {
  float *m = tg_rand_mat(rng, n, 3 * C, ld, 1.0f, NAN);
  for (int r = 0; r < n; r++)
    for (int c = 0; c < 2 * C; c++) m[(size_t)r * ld + c] *= qk;
  return m;
}

/* compact float copy of the column block [c0, c0 + cols) of a padded matrix */
static float *cols_f32(const float *m, int rows, int c0, int cols, int ld) {
  float *c = tg_test_malloc(sizeof(float) * ((size_t)rows * cols + 1));
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++)
      c[(size_t)r * cols + j] = m[(size_t)r * ld + c0 + j];
  return c;
}

/* norm-relative error of columns [c0, c0 + cols) of two padded matrices */
static double block_err(const float *got, int ldg, const float *ref, int ldr,
                        int rows, int c0, int cols) {
  float *g = cols_f32(got, rows, c0, cols, ldg);
  float *r = cols_f32(ref, rows, c0, cols, ldr);
  double e = tg_rel_err_f32(g, r, (size_t)rows * cols);
  free(g);
  free(r);
  return e;
}

/* rows [r0, r1) of columns [0, cols) are bitwise equal in a and b */
static int rows_equal(const float *a, const float *b, int r0, int r1,
                      int cols, int ld) {
  for (int r = r0; r < r1; r++)
    if (memcmp(a + (size_t)r * ld, b + (size_t)r * ld, sizeof(float) * cols))
      return 0;
  return 1;
}

/* columns [c0, c0 + w) of the rows [r0, r1) are bitwise equal */
static int block_equal(const float *a, const float *b, int r0, int r1, int c0,
                       int w, int ld) {
  for (int r = r0; r < r1; r++)
    if (memcmp(a + (size_t)r * ld + c0, b + (size_t)r * ld + c0,
               sizeof(float) * w))
      return 0;
  return 1;
}

static int all_finite(const float *a, int r0, int r1, int cols, int ld) {
  for (int r = r0; r < r1; r++)
    for (int c = 0; c < cols; c++)
      if (!isfinite(a[(size_t)r * ld + c])) return 0;
  return 1;
}

/* scratch of `floats` NaNs followed by GUARD sentinels */
static float *new_scratch(size_t floats) {
  float *s = tg_test_malloc(sizeof(float) * (floats + GUARD));
  for (size_t i = 0; i < floats; i++) s[i] = NAN;
  for (size_t i = floats; i < floats + GUARD; i++) s[i] = OUT_PAD;
  return s;
}
static int guard_intact(const float *s, size_t floats) {
  for (size_t i = floats; i < floats + GUARD; i++)
    if (memcmp(&s[i], &OUT_PAD, sizeof OUT_PAD)) return 0;
  return 1;
}

/* Causal attention in double on a compact qkv (n, 3C).  Writes out (n, C);
 * att (b, NH, T, T) and lse (n, NH) when not NULL. */
static void ref_attention(int b, int T, int C, int NH, const double *qkv,
                          double *out, double *att, double *lse) {
  int hs = C / NH;
  double scale = 1.0 / sqrt((double)hs);
  double *p = tg_test_malloc(sizeof(double) * T);
  for (int s = 0; s < b; s++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *q = qkv + (size_t)(s * T + t) * 3 * C + h * hs;
        double mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const double *k = qkv + (size_t)(s * T + t2) * 3 * C + C + h * hs;
          double d = 0;
          for (int j = 0; j < hs; j++) d += q[j] * k[j];
          p[t2] = d * scale;
          if (p[t2] > mx) mx = p[t2];
        }
        double sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += exp(p[t2] - mx);
        if (lse) lse[(size_t)(s * T + t) * NH + h] = mx + log(sum);
        for (int t2 = 0; t2 <= t; t2++) p[t2] = exp(p[t2] - mx) / sum;
        if (att) {
          double *a = att + (((size_t)s * NH + h) * T + t) * T;
          for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? p[t2] : 0.0;
        }
        double *o = out + (size_t)(s * T + t) * C + h * hs;
        for (int j = 0; j < hs; j++) {
          double acc = 0;
          for (int t2 = 0; t2 <= t; t2++)
            acc += p[t2] * qkv[(size_t)(s * T + t2) * 3 * C + 2 * C +
                               h * hs + j];
          o[j] = acc;
        }
      }
  free(p);
}

static void ref_naive_fwd(tg_rng *rng) {
  static const int BS[] = {1, 2}, TS[] = {1, 5, 17};
  static const int CH[][2] = {{8, 2}, {12, 3}, {64, 4}};
  double worst_o = 0, worst_a = 0;
  for (int ib = 0; ib < 2; ib++)
    for (int it = 0; it < 3; it++)
      for (int ic = 0; ic < 3; ic++) {
        int b = BS[ib], T = TS[it], C = CH[ic][0], NH = CH[ic][1], n = b * T;
        int ldqkv = 3 * C + 3, ldo = C + 2;
        float *qkv = rand_qkv(rng, n, C, ldqkv, 2.0f);
        size_t natt = (size_t)b * NH * T * T;
        float *att = tg_test_malloc(sizeof(float) * natt);
        for (size_t i = 0; i < natt; i++) att[i] = NAN;
        float *out = tg_const_mat(n, C, ldo, NAN, OUT_PAD);
        tg_cpu_attention_naive_fwd(b, T, C, NH, qkv, ldqkv, att, out, ldo);

        double *x = tg_compact_f64(qkv, n, 3 * C, ldqkv);
        double *ro = tg_test_malloc(sizeof(double) * n * C);
        double *ra = tg_test_malloc(sizeof(double) * natt);
        ref_attention(b, T, C, NH, x, ro, ra, NULL);
        float *o = cols_f32(out, n, 0, C, ldo);
        double eo = tg_rel_err_f64(o, ro, (size_t)n * C);
        double ea = tg_rel_err_f64(att, ra, natt);
        int upper_zero = 1;
        for (size_t i = 0; i < natt; i++) {
          size_t t = (i / T) % T, t2 = i % T;
          if (t2 > t && memcmp(&att[i], &(float){0.0f}, sizeof(float)))
            upper_zero = 0;
        }
        CHECK_REL(eo, TOL_FWD, "naive fwd out");
        CHECK_REL(ea, TOL_FWD, "naive fwd att");
        CHECK(upper_zero, "naive fwd: att above the diagonal not +0");
        CHECK(pad_intact(out, n, C, ldo, OUT_PAD), "naive fwd wrote padding");
        if (!(eo <= TOL_FWD && ea <= TOL_FWD))
          fprintf(stderr, "  b=%d T=%d C=%d NH=%d\n", b, T, C, NH);
        worst_o = fmax(worst_o, eo);
        worst_a = fmax(worst_a, ea);
        free(qkv), free(att), free(out), free(x), free(ro), free(ra), free(o);
      }
  printf("naive fwd: worst rel err out %.2e, att %.2e\n", worst_o, worst_a);
}

typedef struct {
  int b, T, C, NH;
  const double *G; /* (n, C) */
} fd_ctx;

/* L = sum(G .* out(qkv)) */
static double fd_loss(const double *qkv, const fd_ctx *cx) {
  size_t no = (size_t)cx->b * cx->T * cx->C;
  double *o = tg_test_malloc(sizeof(double) * no);
  ref_attention(cx->b, cx->T, cx->C, cx->NH, qkv, o, NULL, NULL);
  double L = 0;
  for (size_t i = 0; i < no; i++) L += cx->G[i] * o[i];
  free(o);
  return L;
}

static void ref_naive_bwd(tg_rng *rng) {
  static const int CASES[][4] = {/* b, T, C, NH */
                                 {1, 5, 8, 2},
                                 {2, 4, 12, 3},
                                 {2, 17, 8, 2},
                                 {1, 1, 8, 2}};
  double worst = 0;
  for (int ic = 0; ic < 4; ic++) {
    int b = CASES[ic][0], T = CASES[ic][1], C = CASES[ic][2], NH = CASES[ic][3];
    int n = b * T, ldqkv = 3 * C + 1, lddo = C + 3, lddq = 3 * C + 2;
    float *qkv = rand_qkv(rng, n, C, ldqkv, 2.0f);
    float *dout = tg_rand_mat(rng, n, C, lddo, 1.0f, NAN);
    float *att = tg_test_malloc(sizeof(float) * (size_t)b * NH * T * T);
    float *out = tg_test_malloc(sizeof(float) * (size_t)n * C);
    tg_cpu_attention_naive_fwd(b, T, C, NH, qkv, ldqkv, att, out, C);
    float *dqkv = tg_const_mat(n, 3 * C, lddq, NAN, OUT_PAD);
    float *scratch = new_scratch((size_t)T);
    tg_cpu_attention_naive_bwd(b, T, C, NH, qkv, ldqkv, att, dout, lddo, dqkv,
                               lddq, scratch);

    double *x = tg_compact_f64(qkv, n, 3 * C, ldqkv);
    double *G = tg_compact_f64(dout, n, C, lddo);
    fd_ctx cx = {.b = b, .T = T, .C = C, .NH = NH, .G = G};
    size_t nx = (size_t)n * 3 * C;
    double *g = tg_test_malloc(sizeof(double) * nx);
    for (size_t i = 0; i < nx; i++) {
      double x0 = x[i];
      x[i] = x0 + FD_H;
      double fp = fd_loss(x, &cx);
      x[i] = x0 - FD_H;
      double fm = fd_loss(x, &cx);
      x[i] = x0;
      g[i] = (fp - fm) / (2 * FD_H);
    }
    float *d = cols_f32(dqkv, n, 0, 3 * C, lddq);
    double e = tg_rel_err_f64(d, g, nx);
    CHECK_REL(e, TOL_FD, "naive bwd dqkv vs finite differences");
    if (!(e <= TOL_FD))
      fprintf(stderr, "  b=%d T=%d C=%d NH=%d\n", b, T, C, NH);
    CHECK(pad_intact(dqkv, n, 3 * C, lddq, OUT_PAD), "naive bwd wrote padding");
    CHECK(guard_intact(scratch, (size_t)T), "naive bwd: scratch overrun");
    worst = fmax(worst, e);
    free(qkv), free(dout), free(att), free(out), free(dqkv), free(scratch);
    free(x), free(G), free(g), free(d);
  }
  printf("naive bwd: worst rel err vs finite differences %.2e\n", worst);
}

typedef struct {
  int T, chunk;
  int pad;   /* leading dimensions larger than the rows */
  float qk;  /* scale of q and k */
  int C, NH;
} chunk_case;

static void run_chunk_case(tg_rng *rng, chunk_case cc, double worst[5]) {
  const int b = 2, C = cc.C, NH = cc.NH, T = cc.T, n = b * T;
  const int ldqkv = 3 * C + (cc.pad ? 5 : 0), ldo = C + (cc.pad ? 3 : 0);
  const int lddo = C + (cc.pad ? 7 : 0), lddq = 3 * C + (cc.pad ? 2 : 0);
  float *qkv = rand_qkv(rng, n, C, ldqkv, cc.qk);
  float *dout = tg_rand_mat(rng, n, C, lddo, 1.0f, NAN);

  /* naive */
  float *att = tg_test_malloc(sizeof(float) * (size_t)b * NH * T * T);
  float *out_n = tg_const_mat(n, C, ldo, NAN, OUT_PAD);
  tg_cpu_attention_naive_fwd(b, T, C, NH, qkv, ldqkv, att, out_n, ldo);
  float *dq_n = tg_const_mat(n, 3 * C, lddq, NAN, OUT_PAD);
  float *sn = tg_test_malloc(sizeof(float) * T);
  tg_cpu_attention_naive_bwd(b, T, C, NH, qkv, ldqkv, att, dout, lddo, dq_n,
                             lddq, sn);

  /* chunked */
  size_t ns = tg_attention_chunked_scratch_floats(T, C, NH, cc.chunk);
  float *scr = new_scratch(ns);
  float *out_c = tg_const_mat(n, C, ldo, NAN, OUT_PAD);
  float *lse = tg_test_malloc(sizeof(float) * (size_t)n * NH);
  for (size_t i = 0; i < (size_t)n * NH; i++) lse[i] = NAN;
  tg_cpu_attention_chunked_fwd(b, T, C, NH, cc.chunk, qkv, ldqkv, out_c, ldo,
                               lse, scr);
  const int fwd = ops_row_is("attention_fwd");
  if (fwd) CHECK(guard_intact(scr, ns), "chunked fwd: scratch overrun");
  for (size_t i = 0; i < ns; i++) scr[i] = NAN;
  float *dq_c = tg_const_mat(n, 3 * C, lddq, NAN, OUT_PAD);
  tg_cpu_attention_chunked_bwd(b, T, C, NH, cc.chunk, qkv, ldqkv, out_c, ldo,
                               lse, dout, lddo, dq_c, lddq, scr);
  if (!fwd) CHECK(guard_intact(scr, ns), "chunked bwd: scratch overrun");

  /* reference lse from the float64 scores */
  double *x = tg_compact_f64(qkv, n, 3 * C, ldqkv);
  double *ro = tg_test_malloc(sizeof(double) * n * C);
  double *rl = tg_test_malloc(sizeof(double) * n * NH);
  ref_attention(b, T, C, NH, x, ro, NULL, rl);

  double e[5];
  e[0] = block_err(out_c, ldo, out_n, ldo, n, 0, C);
  e[1] = tg_rel_err_f64(lse, rl, (size_t)n * NH);
  e[2] = block_err(dq_c, lddq, dq_n, lddq, n, 0, C);
  e[3] = block_err(dq_c, lddq, dq_n, lddq, n, C, C);
  e[4] = block_err(dq_c, lddq, dq_n, lddq, n, 2 * C, C);
  static const char *what[5] = {"chunked out", "chunked lse", "chunked dq",
                                "chunked dk", "chunked dv"};
  int bad = 0;
  for (int i = fwd ? 0 : 2; i < (fwd ? 2 : 5); i++) { /* out, lse | dq, dk, dv */
    CHECK_REL(e[i], TOL_CHUNK, what[i]);
    bad |= !(e[i] <= TOL_CHUNK);
    worst[i] = fmax(worst[i], e[i]);
  }
  if (fwd)
    CHECK(pad_intact(out_c, n, C, ldo, OUT_PAD), "chunked fwd wrote padding");
  else
    CHECK(pad_intact(dq_c, n, 3 * C, lddq, OUT_PAD), "chunked bwd wrote padding");
  if (bad)
    fprintf(stderr, "  T=%d chunk=%d pad=%d qk=%g C=%d NH=%d\n", T, cc.chunk,
            cc.pad, (double)cc.qk, C, NH);
  free(qkv), free(dout), free(att), free(out_n), free(dq_n), free(sn);
  free(scr), free(out_c), free(lse), free(dq_c), free(x), free(ro), free(rl);
}

static void ref_chunked(tg_rng *rng) {
  static const int TS[] = {1, 17, 64, 100, 256}, CS[] = {16, 64};
  double worst[5] = {0};
  for (int it = 0; it < 5; it++)
    for (int ic = 0; ic < 2; ic++)
      run_chunk_case(rng, (chunk_case){TS[it], CS[ic], 0, 2.0f, 64, 4},
                     worst);
  run_chunk_case(rng, (chunk_case){100, 16, 1, 2.0f, 64, 4}, worst);
  run_chunk_case(rng, (chunk_case){17, 64, 1, 2.0f, 64, 4}, worst);
  run_chunk_case(rng, (chunk_case){256, 64, 1, 2.0f, 64, 4}, worst);
  /* sharp softmax: scores spread over tens of units (exp's clamp reached) */
  run_chunk_case(rng, (chunk_case){100, 16, 0, 6.0f, 64, 4}, worst);
  run_chunk_case(rng, (chunk_case){64, 16, 1, 8.0f, 64, 4}, worst);
  /* head sizes that are not a multiple of the vector blocks, odd chunk */
  run_chunk_case(rng, (chunk_case){37, 16, 0, 2.0f, 24, 2}, worst);
  run_chunk_case(rng, (chunk_case){50, 7, 1, 2.0f, 12, 3}, worst);
  printf("chunked vs naive: worst rel err out %.2e lse %.2e dq %.2e dk %.2e "
         "dv %.2e\n", worst[0], worst[1], worst[2], worst[3], worst[4]);
}

/* ---- the 16-bit kernels: the f32 kernels' bits on widened copies ------------ */

/* m (rows, cols, ld) rounded to lowp in a (rows, ld16) matrix whose padding
 * is the pattern 0xdead */
static uint16_t *to16(tg_dtype lowp, const float *m, int rows, int cols, int ld, int ld16) {
  uint16_t *h = tg_test_malloc(sizeof(uint16_t) * (size_t)rows * ld16);
  for (size_t i = 0; i < (size_t)rows * ld16; i++) h[i] = 0xdead;
  tg_cpu_to_lowp(lowp, rows, cols, m, ld, h, ld16);
  return h;
}

/* a compact f32 copy of a 16-bit (rows, cols, ld) matrix: what the adapter
 * hands the f32 kernels */
static float *widen(tg_dtype lowp, const uint16_t *h, int rows, int cols, int ld) {
  float *m = tg_test_malloc(sizeof(float) * ((size_t)rows * cols + 1));
  tg_cpu_from_lowp(lowp, rows, cols, h, ld, m, cols);
  return m;
}

/* columns [0, cols) of a and b equal bit for bit, and b's padding the pattern */
static int same16(const uint16_t *a, int lda, const uint16_t *b, int ldb, int rows, int cols) {
  for (int r = 0; r < rows; r++) {
    if (memcmp(a + (size_t)r * lda, b + (size_t)r * ldb, sizeof(uint16_t) * cols)) return 0;
    for (int c = cols; c < ldb; c++)
      if (b[(size_t)r * ldb + c] != 0xdead) return 0;
  }
  return 1;
}

static void run_chunk16_case(tg_rng *rng, tg_dtype lowp, chunk_case cc) {
  const int b = 2, C = cc.C, NH = cc.NH, T = cc.T, n = b * T, p = cc.pad;
  const int ldqkv = 3 * C + (p ? 5 : 0), ldo = C + (p ? 3 : 0), lddo = C + (p ? 7 : 0);
  const int lddq = 3 * C + (p ? 2 : 0);
  const char *ty = lowp == TG_BF16 ? "bf16" : "fp16";
  float *qkv = rand_qkv(rng, n, C, 3 * C, cc.qk), *dout = tg_rand_mat(rng, n, C, C, 1.0f, NAN);
  uint16_t *qkv16 = to16(lowp, qkv, n, 3 * C, 3 * C, ldqkv);
  uint16_t *dout16 = to16(lowp, dout, n, C, C, lddo);
  float *qkvw = widen(lowp, qkv16, n, 3 * C, ldqkv), *doutw = widen(lowp, dout16, n, C, lddo);
  size_t ns = tg_attention_chunked_scratch_floats(T, C, NH, cc.chunk);
  float *scr = new_scratch(ns);
  /* forward: f32 kernel on the widened copy, rounded, against the 16-bit one */
  float *out_f = tg_test_malloc(sizeof(float) * (size_t)n * C);
  float *lse_f = tg_test_malloc(sizeof(float) * (size_t)n * NH);
  float *lse16 = tg_test_malloc(sizeof(float) * (size_t)n * NH);
  tg_cpu_attention_chunked_fwd(b, T, C, NH, cc.chunk, qkvw, 3 * C, out_f, C, lse_f, scr);
  uint16_t *out_ref = to16(lowp, out_f, n, C, C, C);
  uint16_t *out16 = to16(lowp, out_f, n, C, C, ldo); /* overwritten: NaN first */
  for (int r = 0; r < n; r++)
    for (int c = 0; c < C; c++) out16[(size_t)r * ldo + c] = 0x7fc0;
  for (size_t i = 0; i < ns; i++) scr[i] = NAN;
  tg_cpu_attention_chunked_fwd16(lowp, b, T, C, NH, cc.chunk, qkv16, ldqkv, out16, ldo, lse16,
                                 scr);
  const int fwd = ops_row_is("attention_fwd");
  if (fwd) {
    CHECK(guard_intact(scr, ns), "chunked fwd16 (%s): scratch overrun", ty);
    CHECK(same16(out_ref, C, out16, ldo, n, C) &&
              !memcmp(lse_f, lse16, sizeof(float) * (size_t)n * NH),
          "chunked fwd16 (%s) T=%d chunk=%d pad=%d C=%d NH=%d: not the f32 kernel's bits", ty, T,
          cc.chunk, p, C, NH);
  }
  if (!fwd) { /* backward from the 16-bit out, against the f32 kernel on its widening */
    float *outw = widen(lowp, out_ref, n, C, C);
    float *dq_f = tg_test_malloc(sizeof(float) * (size_t)n * 3 * C);
    for (size_t i = 0; i < ns; i++) scr[i] = NAN;
    tg_cpu_attention_chunked_bwd(b, T, C, NH, cc.chunk, qkvw, 3 * C, outw, C, lse_f, doutw, C,
                                 dq_f, 3 * C, scr);
    uint16_t *dq_ref = to16(lowp, dq_f, n, 3 * C, 3 * C, 3 * C);
    uint16_t *dq16 = to16(lowp, dq_f, n, 3 * C, 3 * C, lddq);
    for (int r = 0; r < n; r++)
      for (int c = 0; c < 3 * C; c++) dq16[(size_t)r * lddq + c] = 0x7fc0;
    uint16_t *out16c = to16(lowp, outw, n, C, C, ldo); /* out at the padded stride */
    for (size_t i = 0; i < ns; i++) scr[i] = NAN;
    tg_cpu_attention_chunked_bwd16(lowp, b, T, C, NH, cc.chunk, qkv16, ldqkv, out16c, ldo,
                                   lse_f, dout16, lddo, dq16, lddq, scr);
    CHECK(guard_intact(scr, ns), "chunked bwd16 (%s): scratch overrun", ty);
    CHECK(same16(dq_ref, 3 * C, dq16, lddq, n, 3 * C),
          "chunked bwd16 (%s) T=%d chunk=%d pad=%d C=%d NH=%d: not the f32 kernel's bits", ty, T,
          cc.chunk, p, C, NH);
    free(outw), free(dq_f), free(dq_ref), free(dq16), free(out16c);
  }
  free(qkv), free(dout), free(qkv16), free(dout16), free(qkvw), free(doutw), free(scr);
  free(out_f), free(lse_f), free(lse16), free(out_ref), free(out16);
}

static void ref_chunked16(tg_rng *rng) {
  static const chunk_case cases[] = {
      {1, 16, 0, 2.0f, 64, 4},  {17, 64, 1, 2.0f, 64, 4}, {100, 16, 1, 2.0f, 64, 4},
      {256, 64, 0, 2.0f, 64, 4}, {64, 16, 1, 8.0f, 64, 4}, {37, 16, 1, 2.0f, 24, 2},
      {50, 7, 1, 2.0f, 12, 3},
  };
  const tg_dtype types[] = {TG_BF16, TG_F16};
  for (int t = 0; t < 2; t++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      run_chunk16_case(rng, types[t], cases[i]);
  printf("chunked 16-bit kernels (bf16, fp16): the f32 kernels' bits on widened copies, "
         "%zu shapes\n", sizeof cases / sizeof cases[0]);
}

static void ref_scratch_size(void) {
  const int C = 256, NH = 4, chunk = 64;
  for (int T = 256; T <= 4096; T *= 4) {
    size_t s1 = tg_attention_chunked_scratch_floats(T, C, NH, chunk);
    size_t s2 = tg_attention_chunked_scratch_floats(2 * T, C, NH, chunk);
    CHECK(s2 <= 2 * s1 + 64,
          "scratch not linear in T: s(%d) = %zu, s(%d) = %zu", T, s1, 2 * T,
          s2);
  }
  size_t s = tg_attention_chunked_scratch_floats(4096, C, NH, chunk);
  CHECK(s <= (size_t)4096 * 4096 / 16, "scratch(4096) = %zu floats", s);
  CHECK(s > 0, "scratch(4096) = 0");
  printf("scratch floats (C 256, NH 4, chunk 64): T=4096 -> %zu\n", s);
}

typedef struct {
  float *out, *lse, *dqkv;
} chunk_run;

static chunk_run run_chunked(int b, int T, int C, int NH, int chunk,
                             const float *qkv, const float *dout,
                             const float *out_in, const float *lse_in) {
  int n = b * T;
  size_t ns = tg_attention_chunked_scratch_floats(T, C, NH, chunk);
  float *scr = new_scratch(ns);
  chunk_run r;
  r.out = tg_const_mat(n, C, C, NAN, 0);
  r.lse = tg_const_mat(n, NH, NH, NAN, 0);
  r.dqkv = tg_const_mat(n, 3 * C, 3 * C, NAN, 0);
  tg_cpu_attention_chunked_fwd(b, T, C, NH, chunk, qkv, 3 * C, r.out, C, r.lse,
                               scr);
  /* backward from the given out, lse (or this run's) */
  tg_cpu_attention_chunked_bwd(b, T, C, NH, chunk, qkv, 3 * C,
                               out_in ? out_in : r.out, C,
                               lse_in ? lse_in : r.lse, dout, C, r.dqkv, 3 * C,
                               scr);
  free(scr);
  return r;
}
static void free_run(chunk_run r) { free(r.out), free(r.lse), free(r.dqkv); }

static void ref_causality(tg_rng *rng) {
  const int fwd = ops_row_is("attention_fwd");
  const int b = 2, T = 100, C = 64, NH = 4, chunk = 16, n = b * T;
  float *qkv = rand_qkv(rng, n, C, 3 * C, 2.0f);
  float *dout = tg_rand_mat(rng, n, C, C, 1.0f, 0);
  chunk_run base = run_chunked(b, T, C, NH, chunk, qkv, dout, NULL, NULL);
  static const int T2S[] = {1, 15, 16, 17, 50, 99};
  for (int i = 0; i < 6; i++) {
    int t2 = T2S[i], row = T + t2; /* sequence 1 */
    /* qkv at t2 changes: nothing before t2 moves */
    float *q2 = tg_copy_f(qkv, (size_t)n * 3 * C);
    for (int c = 0; c < 3 * C; c++) q2[(size_t)row * 3 * C + c] += 0.5f;
    chunk_run r = run_chunked(b, T, C, NH, chunk, q2, dout, NULL, NULL);
    if (fwd) {
      CHECK(rows_equal(r.out, base.out, 0, row, C, C), "out before t2=%d changed with qkv(t2)",
            t2);
      CHECK(rows_equal(r.lse, base.lse, 0, row, NH, NH), "lse before t2=%d changed with qkv(t2)",
            t2);
    } else {
      CHECK(block_equal(r.dqkv, base.dqkv, 0, row, 0, C, 3 * C),
            "dq before t2=%d changed with qkv(t2)", t2);
    }
    CHECK(!rows_equal(r.out, base.out, row, row + 1, C, C),
          "out at t2=%d unchanged by qkv(t2): test is void", t2);
    free_run(r);
    free(q2);

    /* dout at t2 changes: dq elsewhere and dk, dv after t2 do not move */
    float *d2 = tg_copy_f(dout, (size_t)n * C);
    for (int c = 0; c < C; c++) d2[(size_t)row * C + c] += 0.5f;
    r = run_chunked(b, T, C, NH, chunk, qkv, d2, NULL, NULL);
    if (!fwd) CHECK(block_equal(r.dqkv, base.dqkv, 0, row, 0, C, 3 * C) &&
              block_equal(r.dqkv, base.dqkv, row + 1, n, 0, C, 3 * C),
          "dq off t2=%d changed with dout(t2)", t2);
    if (!fwd) CHECK(block_equal(r.dqkv, base.dqkv, row + 1, n, C, 2 * C, 3 * C),
          "dk, dv after t2=%d changed with dout(t2)", t2);
    if (!fwd) CHECK(!block_equal(r.dqkv, base.dqkv, row, row + 1, C, 2 * C, 3 * C),
          "dk, dv at t2=%d unchanged by dout(t2): test is void", t2);
    free_run(r);
    free(d2);
  }

  /* skipping: NaN in k and v of sequence 0 from key chunk 3 (rows 48..)
   * on; query chunks 0..2 must never see them.  The backward uses the clean
   * out and lse, so dq, dk, dv of rows < 48 are clean too. */
  const int cut = 3 * chunk;
  float *qp = tg_copy_f(qkv, (size_t)n * 3 * C);
  for (int t = cut; t < T; t++)
    for (int c = C; c < 3 * C; c++) qp[(size_t)t * 3 * C + c] = NAN;
  chunk_run r = run_chunked(b, T, C, NH, chunk, qp, dout, base.out, base.lse);
  if (fwd) {
    CHECK(rows_equal(r.out, base.out, 0, cut, C, C),
          "out before key chunk 3 reached by its NaN (chunk not skipped)");
    CHECK(rows_equal(r.lse, base.lse, 0, cut, NH, NH),
          "lse before key chunk 3 reached by its NaN");
    CHECK(rows_equal(r.out, base.out, T, n, C, C), "sequence 1 reached by sequence 0's NaN");
  } else {
    CHECK(rows_equal(r.dqkv, base.dqkv, 0, cut, 3 * C, 3 * C),
          "dqkv before key chunk 3 reached by its NaN (chunk not skipped)");
    CHECK(rows_equal(r.dqkv, base.dqkv, T, n, 3 * C, 3 * C),
          "sequence 1 reached by sequence 0's NaN (dqkv)");
  }
  CHECK(!all_finite(r.out, cut, cut + 1, C, C),
        "NaN keys did not reach their own row: test is void");
  free_run(r);
  free(qp);
  free_run(base);
  free(qkv), free(dout);
}

/* the rows attention_fwd (1. forward, 2. out and lse, 3., 4. out and lse)
 * and attention_bwd (1. backward, 2. dqkv, 4. dqkv) */
void attention_ref(void) {
  tg_rng rng = {.s = 0x5eed0a77e7710ULL};
  const int fwd = ops_row_is("attention_fwd");
  if (fwd)
    ref_naive_fwd(&rng);
  else
    ref_naive_bwd(&rng);
  ref_chunked(&rng);
  ref_chunked16(&rng);
  if (fwd) ref_scratch_size();
  ref_causality(&rng);
}
