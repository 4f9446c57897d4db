/*
 * test_cuda_precision: the mixed-precision codelets (precision.h) run once
 * forced on a CPU worker and once on a CUDA worker, on identical inputs and
 * separate outputs (the cuda_pair.h harness), results compared:
 *  - convert: f32 -> 16-bit bit for bit (the hardware's cvt.rn against our
 *    bit manipulation; specials, subnormals, overflow included), NaN -> NaN;
 *    16-bit -> f32 exact;
 *  - gemm_lowp (cublasGemmEx, COMPUTE_32F): all transposes, f32 and 16-bit
 *    C, beta 0 and 0.5: f32 C within 1e-5 (1e-4 for k >= 257: another
 *    summation order), 16-bit C within half an ulp of the type (a sum on
 *    either side of a rounding boundary may round the other way);
 *  - nonfinite: the flag, exactly, for finite data, a NaN, an Inf, and
 *    several gradients into one flag;
 *  - adamw_amp with the flag clear (w, m, v within 1e-5, the 16-bit copy
 *    within half an ulp) and set (w, m, v equal to their inputs on both
 *    sides, exactly);
 *  - the low-precision adapter: the fused linear forward (an f32 codelet)
 *    on bf16 / fp16 X, W, Z, H, within half an ulp of the type.
 * Odd sizes throughout.  SKIP (77) without a CUDA worker; it compiles in a
 * CPU-only build (public API only).
 */
#include "cuda_pair.h"
#include "precision_testlib.h"

/* ---- 16-bit outputs: the pair harness for tensors of any dtype ---------------- */

typedef struct out16 {
  const char *name;
  int rows, cols;
  tg_dtype dt;       /* TG_F32 or 16-bit */
  const float *init; /* rounded to dt; NULL: NaN */
  double tol;        /* relative (Frobenius), or EXACT */
} out16;

enum { MAX_OUT16 = 4 };
typedef int (*submit16_fn)(const void *ctx, const tg_task_opts *opts, tg_tensor *out);

static void run_pair16(const char *what, submit16_fn fn, const void *ctx, int nout,
                       const out16 *spec) {
  tg_tensor out[2][MAX_OUT16];
  const int workers[2] = {g_cpu_worker, g_cuda_worker};
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < nout; i++) {
      size_t n = (size_t)spec[i].rows * spec[i].cols;
      float *nan_init = spec[i].init ? NULL : filled(n, NAN);
      const float *init = spec[i].init ? spec[i].init : nan_init;
      if (spec[i].dt == TG_F32) new_tensor(&out[side][i], spec[i].rows, spec[i].cols, init);
      else new_low(&out[side][i], spec[i].dt, spec[i].rows, spec[i].cols, init);
      free(nan_init);
    }
  for (int side = 0; side < 2; side++) {
    tg_task_opts o = on_worker(workers[side]);
    int rc = fn(ctx, &o, out[side]);
    CHECK(rc == 0, "%s: submission on the %s worker failed: %s", what, side ? "CUDA" : "CPU",
          tg_last_error());
  }
  for (int i = 0; i < nout; i++) {
    size_t n = (size_t)spec[i].rows * spec[i].cols;
    float *cpu = read_as_f32(&out[0][i], spec[i].dt), *gpu = read_as_f32(&out[1][i], spec[i].dt);
    char label[256];
    snprintf(label, sizeof label, "%s [%s]", what, spec[i].name);
    compare(label, cpu, gpu, n, spec[i].tol);
    free(cpu);
    free(gpu);
  }
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < nout; i++) tg_tensor_free(&out[side][i]);
}

static double half_ulp(tg_dtype t) { return ldexp(1.0, -(mant_bits(t) + 1)); }

/* ---- conversion --------------------------------------------------------------------- */

typedef struct conv_ctx {
  tg_dtype t;
  starpu_data_handle_t src;
} conv_ctx;

static int conv_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const conv_ctx *c = v;
  return tg_convert_insert(c->t, c->src, out[0].handle, o);
}

static void test_convert(void) {
  const int rows = 9, cols = 37;
  size_t n = (size_t)rows * cols;
  float *x = rnd(n, 70000.0f); /* beyond the fp16 range too */
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.0f,
                                  65520.0f, 3.4e38f, 1e-40f, -1e-45f, 5.9604645e-8f,
                                  2.9802322e-8f, 8.940697e-8f, 1.00390625f, 1.00048828125f};
  memcpy(x, special, sizeof special);
  for (size_t i = sizeof special / sizeof *special; i < 64; i++)
    x[i] = ldexpf(x[i] / 70000.0f, -2 * (int)i); /* down through the subnormals */
  for (int d = 0; d < 2; d++) {
    tg_dtype t = LOWP[d];
    tg_tensor X, H;
    new_tensor(&X, rows, cols, x);
    new_low(&H, t, rows, cols, x);
    char what[64];
    conv_ctx c = {t, X.handle};
    out16 o = {"Y", rows, cols, t, NULL, EXACT};
    snprintf(what, sizeof what, "convert f32 -> %s", tg_dtype_name(t));
    run_pair16(what, conv_submit, &c, 1, &o);
    c.src = H.handle;
    outspec back = {"Y", rows, cols, NULL, 0, EXACT};
    snprintf(what, sizeof what, "convert %s -> f32", tg_dtype_name(t));
    run_pair(what, conv_submit, &c, 1, &back, NULL, NULL);
    tg_tensor_free(&X);
    tg_tensor_free(&H);
    /* NaN: a NaN on both sides (payloads may differ) */
    tg_tensor N, HN[2];
    float nans[3] = {NAN, -NAN, 0.0f};
    uint32_t snan = 0x7f800001u; /* payload only in the low bits */
    memcpy(&nans[2], &snan, sizeof snan);
    new_tensor(&N, 1, 3, nans);
    int ok = 1;
    for (int side = 0; side < 2; side++) {
      if (tg_tensor_alloc(&HN[side], 1, 3, t) != 0) fatal_error("alloc");
      tg_task_opts op = on_worker(side ? g_cuda_worker : g_cpu_worker);
      CHECK(tg_convert_insert(t, N.handle, HN[side].handle, &op) == 0, "convert NaN: %s",
            tg_last_error());
      float *r = read_as_f32(&HN[side], t);
      for (int i = 0; i < 3; i++) ok &= isnan(r[i]);
      free(r);
      tg_tensor_free(&HN[side]);
    }
    CHECK(ok, "convert f32 -> %s: a NaN did not stay NaN", tg_dtype_name(t));
    tg_tensor_free(&N);
  }
  free(x);
}

/* ---- GEMM ------------------------------------------------------------------------------ */

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

static void test_gemm(void) {
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
            gemm16_ctx c = {t, ta, tb, acc ? 0.5f : 0.0f, A.handle, B.handle};
            double tol = cl ? half_ulp(t) : k >= 257 ? TOL_LARGE_K : TOL;
            out16 o = {"C", m, n, cl ? t : TG_F32, acc ? c0 : NULL, tol};
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

/* ---- nonfinite and AMP AdamW ---------------------------------------------------------- */

typedef struct amp_ctx {
  tg_dtype t;
  int nh;
  starpu_data_handle_t h[3];
} amp_ctx;

/* out[0] = flag, zeroed, then every gradient h[0..nh) checked into it */
static int nonfinite_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const amp_ctx *c = v;
  int rc = tg_fill_insert(out[0].handle, 0.0f, o);
  for (int i = 0; i < c->nh && rc == 0; i++) rc = tg_nonfinite_insert(c->h[i], out[0].handle, o);
  return rc;
}

static void test_nonfinite(void) {
  const int rows = 65, cols = 129;
  size_t n = (size_t)rows * cols;
  float *g = rnd(n, 3e38f);
  tg_tensor fin, nan_mid, inf_last;
  new_tensor(&fin, rows, cols, g);
  g[n / 2] = NAN;
  new_tensor(&nan_mid, rows, cols, g);
  g[n / 2] = 1.0f;
  g[n - 1] = -INFINITY;
  new_tensor(&inf_last, rows, cols, g);
  const struct { const char *what; amp_ctx c; } cases[4] = {
      {"nonfinite finite", {TG_F32, 1, {fin.handle}}},
      {"nonfinite NaN", {TG_F32, 1, {nan_mid.handle}}},
      {"nonfinite -Inf", {TG_F32, 1, {inf_last.handle}}},
      {"nonfinite three into one", {TG_F32, 3, {fin.handle, nan_mid.handle, fin.handle}}},
  };
  for (int i = 0; i < 4; i++) {
    float *flag = NULL;
    outspec o = {"flag", 1, 1, NULL, 0, EXACT};
    run_pair(cases[i].what, nonfinite_submit, &cases[i].c, 1, &o, &flag, NULL);
    CHECK(flag && *flag == (i ? 1.0f : 0.0f), "%s: CPU flag %g", cases[i].what,
          flag ? *flag : -1.0f);
    free(flag);
  }
  free(g);
  tg_tensor_free(&fin); tg_tensor_free(&nan_mid); tg_tensor_free(&inf_last);
}

/* out: w, m, v [, w_low]; h: grad, flag */
static int amp_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const amp_ctx *c = v;
  tg_adamw_hyper hy = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f / 256, 2};
  return tg_adamw_amp_insert(c->t, out[0].handle, c->h[0], out[1].handle, out[2].handle,
                             c->nh ? out[3].handle : NULL, c->h[1], &hy, o);
}

static void test_adamw_amp(void) {
  const int rows = 33, cols = 257;
  size_t n = (size_t)rows * cols;
  float *w = rnd(n, 1), *g = rnd(n, 256), *m = rnd(n, 0.1f), *v = rnd(n, 0.01f);
  for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
  tg_tensor G, F;
  new_tensor(&G, rows, cols, g);
  for (int d = 0; d < 2; d++)
    for (int set = 0; set < 2; set++) {
      tg_dtype t = LOWP[d];
      float one = (float)set;
      new_tensor(&F, 1, 1, &one);
      char what[64];
      amp_ctx c = {t, 0, {G.handle, F.handle}};
      outspec o3[3] = {{"w", rows, cols, w, 0, set ? EXACT : TOL},
                       {"m", rows, cols, m, 0, set ? EXACT : TOL},
                       {"v", rows, cols, v, 0, set ? EXACT : TOL}};
      float *cw = NULL, *gw = NULL;
      snprintf(what, sizeof what, "adamw_amp %s flag=%d", tg_dtype_name(t), set);
      run_pair(what, amp_submit, &c, 3, o3, &cw, &gw);
      if (set) /* skipped on both sides: the inputs, bit for bit */
        CHECK(!memcmp(cw, w, n * sizeof *w) && !memcmp(gw, w, n * sizeof *w),
              "%s: w changed", what);
      free(cw); free(gw);
      c.nh = 1; /* with the 16-bit copy */
      out16 o4[4] = {{"w", rows, cols, TG_F32, w, set ? EXACT : TOL},
                     {"m", rows, cols, TG_F32, m, set ? EXACT : TOL},
                     {"v", rows, cols, TG_F32, v, set ? EXACT : TOL},
                     {"w_low", rows, cols, t, NULL, set ? EXACT : half_ulp(t)}};
      snprintf(what, sizeof what, "adamw_amp %s flag=%d with w_low", tg_dtype_name(t), set);
      run_pair16(what, amp_submit, &c, 4, o4);
      tg_tensor_free(&F);
    }
  free(w); free(g); free(m); free(v);
  tg_tensor_free(&G);
}

/* ---- the low-precision adapter: an f32 codelet on 16-bit buffers ------------------- */

typedef struct adapt_ctx {
  tg_dtype t;
  starpu_data_handle_t X, W, b;
} adapt_ctx;

static int linear16_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const adapt_ctx *c = v;
  tg_task_opts lo = *o;
  lo.lowp = c->t;
  return tg_linear_fwd_insert(c->X, c->W, c->b, TG_ACT_GELU, out[0].handle, out[1].handle, &lo);
}

static void test_adapter(void) {
  const int rows = 37, in = 29, outf = 23;
  for (int d = 0; d < 2; d++) {
    tg_dtype t = LOWP[d];
    float *x = rnd((size_t)rows * in, 1), *w = rnd((size_t)outf * in, 0.3f), *b = rnd(outf, 0.1f);
    tg_tensor X, W, B;
    new_low(&X, t, rows, in, x);
    new_low(&W, t, outf, in, w);
    new_tensor(&B, 1, outf, b);
    adapt_ctx c = {t, X.handle, W.handle, B.handle};
    /* one rounding of an f32 result on each side: at most half an ulp apart
     * after a sum that lands on either side of a rounding boundary */
    out16 o2[2] = {{"Z", rows, outf, t, NULL, half_ulp(t)}, {"H", rows, outf, t, NULL, half_ulp(t)}};
    char what[64];
    snprintf(what, sizeof what, "adapted linear fwd + GELU, %s buffers", tg_dtype_name(t));
    run_pair16(what, linear16_submit, &c, 2, o2);
    tg_tensor_free(&X);
    tg_tensor_free(&W);
    tg_tensor_free(&B);
    free(x);
    free(w);
    free(b);
  }
}

int main(void) {
  (void)new_labels; /* cuda_pair.h's label helper: no labels here */
  int rc = cuda_pair_start();
  if (rc) return rc;
  test_convert();
  test_gemm();
  test_nonfinite();
  test_adamw_amp();
  test_adapter();
  tg_shutdown();
  return tg_test_finish("test_cuda_precision");
}
