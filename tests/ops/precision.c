/*
 * Rows convert, nonfinite and adamw_amp (codelets/precision.c): f32 <->
 * bf16 / fp16 conversion, the non-finite gradient check, and the
 * mixed-precision AdamW (adamw_amp) with its overflow skip.  Moved here
 * from test_precision.c (convert's ref, in convert_ref.c) and
 * test_precision_amp.c (the cpu cases' worker-count bodies).
 *  ref       convert: convert_ref.c (every 16-bit pattern, every tie,
 *            random values, named cases, the array kernels);
 *            tg_cpu_nonfinite_check: NaN, +Inf, -Inf at the first, middle
 *            or last place raise the flag, finite data (FLT_MAX,
 *            subnormals) leaves it; tg_cpu_adamw_amp over several chunks:
 *            flag 1 or NaN leaves w, m, v bit-identical and still writes the
 *            copy, flag 0 gives tg_cpu_adamw's result within 1e-6 and the
 *            16-bit copy equal to the conversion, bit for bit (the scalar
 *            conversions themselves: test_precision.c);
 *  cpu       with 1 and 2 CPU workers: the convert codelet, specials
 *            included, bit for bit against the scalar conversions, once on
 *            the left half of a partitioned tensor; several gradients
 *            checked into one flag (finite, NaN or +-Inf first, middle or
 *            last), tg_fill_insert resetting it; the AMP step as a graph
 *            fill -> nonfinite -> adamw_amp (skipped on an Inf: w, m, v
 *            bit-identical, the copy still written; else tg_cpu_adamw's
 *            result within 1e-6, the copy lowp(w) bit for bit), with and
 *            without the copy; each wrapper's refusals (-EINVAL, a message
 *            naming it); then the pair cases;
 *  pair      convert both ways, the flag for finite data, NaN, Inf and
 *            several gradients, adamw_amp with the flag clear and set;
 *  cuda-emu  the conversion, 16-bit scale, non-finite and adamw_amp
 *            launchers, exact.
 */

#include <errno.h>
#include <float.h>

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"
#include "taskgrad/kernels_cpu.h"

/* convert_ref.c (was test_precision.c) */
void convert_ref(void);

/* ---- ref --------------------------------------------------------------------- */

static void ref_nonfinite(void) {
  static const int sizes[4] = {1, 7, 33, 1000};
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  for (int s = 0; s < 4; s++) {
    int n = sizes[s];
    float *g = tg_test_malloc(sizeof(float) * n);
    tg_rng rng = {.s = 77 + (uint64_t)n};
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

static void ref_adamw_amp(void) {
  enum { N = 2500 }; /* two full chunks and a remainder */
  static float w0[N], g[N], m0[N], v0[N], w[N], m[N], v[N], wr[N], mr[N], vr[N];
  static uint16_t low[N], lowref[N];
  tg_rng rng = {.s = 4242};
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


/* ---- cpu: the convert codelet with 1 and 2 CPU workers ----------------------- */

/* f32 values with every special case in front, then random ones */
static float *convert_input(size_t n) {
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.0f,
                                  65520.0f, -65520.0f, FLT_MAX, 1e-40f, -1e-45f,
                                  5.9604645e-8f /* 2^-24 */, 2.9802322e-8f /* 2^-25 */,
                                  1.00390625f, 1.00048828125f};
  float *x = tg_test_malloc(sizeof(float) * n);
  tg_rng rng = {.s = 31337};
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

static void cpu_convert(void) {
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

/* ---- cpu: under StarPU with 1 and 2 CPU workers (was test_precision_amp.c) ---- */

/* the refusals of one wrapper: -EINVAL with a message naming it, nothing
 * submitted */
static void refusals(const char *op) {
  tg_tensor a16, c16, f32, flag, flag2;
  new_low(&a16, TG_BF16, 4, 3, (float[12]){0});
  new_low(&c16, TG_BF16, 4, 5, (float[20]){0});
  new_f32(&f32, 4, 5, NULL);
  new_f32(&flag, 1, 1, NULL);
  new_f32(&flag2, 2, 1, NULL);
  tg_adamw_hyper h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1};
  if (strcmp(op, "convert") == 0) {
    CHECK_REFUSED(tg_convert_insert(TG_F16, f32.handle, f32.handle, NULL), "tg_convert",
                  "f32 -> f32");
    CHECK_REFUSED(tg_convert_insert(TG_F16, f32.handle, a16.handle, NULL), "tg_convert",
                  "shapes differ");
    CHECK_REFUSED(tg_convert_insert(TG_I32, f32.handle, c16.handle, NULL), "tg_convert",
                  "lowp = i32");
  }
  if (strcmp(op, "nonfinite") == 0) {
    CHECK_REFUSED(tg_nonfinite_insert(f32.handle, flag2.handle, NULL), "tg_nonfinite",
                  "a (2, 1) flag");
    CHECK_REFUSED(tg_nonfinite_insert(c16.handle, flag.handle, NULL), "tg_nonfinite",
                  "a bf16 gradient");
  }
  if (strcmp(op, "adamw_amp") == 0) {
    CHECK_REFUSED(tg_adamw_amp_insert(TG_BF16, f32.handle, f32.handle, f32.handle, f32.handle,
                                      f32.handle, flag.handle, &h, NULL), "tg_adamw_amp",
                  "an f32 w_low");
    CHECK_REFUSED(tg_adamw_amp_insert(TG_BF16, f32.handle, f32.handle, f32.handle, f32.handle,
                                      a16.handle, flag.handle, &h, NULL), "tg_adamw_amp",
                  "w_low of another shape");
    CHECK_REFUSED(tg_adamw_amp_insert(TG_BF16, f32.handle, f32.handle, f32.handle, f32.handle,
                                      c16.handle, flag2.handle, &h, NULL), "tg_adamw_amp",
                  "a (2, 1) flag");
    h.step = 0;
    CHECK_REFUSED(tg_adamw_amp_insert(TG_BF16, f32.handle, f32.handle, f32.handle, f32.handle,
                                      c16.handle, flag.handle, &h, NULL), "tg_adamw_amp",
                  "step 0");
  }
  tg_tensor *all[] = {&a16, &c16, &f32, &flag, &flag2};
  for (int i = 0; i < 5; i++) tg_tensor_free(all[i]);
}

static void cpu_convert_body(void) {
  cpu_convert();
  refusals("convert");
}

static float read_flag(tg_tensor *flag) {
  float f = -1.0f;
  if (tg_tensor_read(flag, &f) != 0) fatal_error("read flag");
  return f;
}

/* several gradients checked into one flag (RW) leave it 0 when all are
 * finite (FLT_MAX, subnormals included) and raise it when any holds a NaN
 * or +-Inf, wherever (first, middle, last element); tg_fill_insert resets
 * a raised flag */
static void cpu_nonfinite_body(void) {
  enum { R = 33, C = 257, NF = 8 };
  const size_t n = (size_t)R * C;
  tg_rng rng = {2024};
  float *g = tg_test_malloc(sizeof(float) * n);
  tg_rng_fill(&rng, g, n, 1e30f);
  g[0] = FLT_MAX;
  g[n / 2] = -FLT_MAX;
  g[n - 1] = 1e-45f;
  tg_tensor fin1, fin2, bad[9], flag[NF];
  new_f32(&fin1, R, C, g);
  new_f32(&fin2, R, C, g); /* the same finite data in another tensor */
  const float vals[3] = {NAN, INFINITY, -INFINITY};
  const size_t where[3] = {0, n / 2, n - 1};
  for (int i = 0; i < 9; i++) {
    float keep = g[where[i % 3]];
    g[where[i % 3]] = vals[i / 3];
    new_f32(&bad[i], R, C, g);
    g[where[i % 3]] = keep;
  }
  for (int i = 0; i < NF; i++) {
    new_f32(&flag[i], 1, 1, NULL);
    CHECK(tg_fill_insert(flag[i].handle, 0.0f, NULL) == 0, "fill: %s", tg_last_error());
  }
  /* flag 0: finite only; flag 1: finite, bad, finite; flags 2..: one bad each */
  tg_nonfinite_insert(fin1.handle, flag[0].handle, NULL);
  tg_nonfinite_insert(fin2.handle, flag[0].handle, NULL);
  tg_nonfinite_insert(fin1.handle, flag[1].handle, NULL);
  tg_nonfinite_insert(bad[4].handle, flag[1].handle, NULL);
  tg_nonfinite_insert(fin2.handle, flag[1].handle, NULL);
  CHECK(read_flag(&flag[0]) == 0.0f, "nonfinite: finite gradients raised the flag");
  CHECK(read_flag(&flag[1]) == 1.0f, "nonfinite: an Inf among finite gradients was missed");
  for (int i = 0; i < 9; i++) {
    tg_tensor *fl = &flag[2 + i % (NF - 2)];
    CHECK(tg_fill_insert(fl->handle, 0.0f, NULL) == 0, "fill: %s", tg_last_error());
    CHECK(tg_nonfinite_insert(bad[i].handle, fl->handle, NULL) == 0, "nonfinite: %s",
          tg_last_error());
    CHECK(read_flag(fl) == 1.0f, "nonfinite: %g at element %zu missed", vals[i / 3],
          where[i % 3]);
  }
  tg_fill_insert(flag[1].handle, 0.0f, NULL); /* reset after a raise */
  tg_nonfinite_insert(fin1.handle, flag[1].handle, NULL);
  CHECK(read_flag(&flag[1]) == 0.0f, "nonfinite: tg_fill_insert did not reset the flag");
  free(g);
  tg_tensor_free(&fin1);
  tg_tensor_free(&fin2);
  for (int i = 0; i < 9; i++) tg_tensor_free(&bad[i]);
  for (int i = 0; i < NF; i++) tg_tensor_free(&flag[i]);
  refusals("nonfinite");
}

/* One AMP step through the graph fill -> nonfinite -> adamw_amp, no host
 * wait in between.  A gradient with an Inf makes the step a no-op: w, m, v
 * bit-identical; the 16-bit copy is still written (lowp(w)).  A finite
 * gradient gives tg_cpu_adamw's result on the same inputs (scaled
 * gradients, grad_scale = 1 / 512, relative error <= 1e-6) and the copy
 * equal to the conversion of the new weights, bit for bit; without a copy
 * (w_low NULL) the weights are the same. */
static void amp_case(tg_dtype t, int overflow, int with_low) {
  enum { R = 37, C = 65 };
  const size_t n = (size_t)R * C;
  tg_rng rng = {777 + (uint64_t)t};
  float *w0 = tg_test_malloc(sizeof(float) * n), *g = tg_test_malloc(sizeof(float) * n);
  float *m0 = tg_test_malloc(sizeof(float) * n), *v0 = tg_test_malloc(sizeof(float) * n);
  tg_rng_fill(&rng, w0, n, 1.0f);
  tg_rng_fill(&rng, g, n, 512.0f); /* loss scale 512 */
  tg_rng_fill(&rng, m0, n, 0.1f);
  for (size_t i = 0; i < n; i++) v0[i] = 0.01f * fabsf(tg_rng_uniform(&rng));
  if (overflow) g[n - 2] = INFINITY;
  tg_adamw_hyper h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f / 512, 3};
  tg_tensor W, G, M, V, WL, F;
  new_f32(&W, R, C, w0); new_f32(&G, R, C, g); new_f32(&M, R, C, m0); new_f32(&V, R, C, v0);
  new_f32(&F, 1, 1, NULL);
  if (tg_tensor_alloc(&WL, R, C, t) != 0) fatal_error("alloc");
  int rc = tg_fill_insert(F.handle, 0.0f, NULL);
  if (rc == 0) rc = tg_nonfinite_insert(G.handle, F.handle, NULL);
  if (rc == 0)
    rc = tg_adamw_amp_insert(t, W.handle, G.handle, M.handle, V.handle,
                             with_low ? WL.handle : NULL, F.handle, &h, NULL);
  CHECK(rc == 0, "AMP step submission: %s", tg_last_error());
  float *w = read_as_f32(&W, TG_F32), *m = read_as_f32(&M, TG_F32);
  float *v = read_as_f32(&V, TG_F32);
  uint16_t *low = tg_test_malloc(sizeof(uint16_t) * n);
  uint16_t *lowref = tg_test_malloc(sizeof(uint16_t) * n);
  if (tg_tensor_read(&WL, low) != 0) fatal_error("read");
  const char *tn = tg_dtype_name(t);
  if (overflow) {
    CHECK(!memcmp(w, w0, sizeof(float) * n) && !memcmp(m, m0, sizeof(float) * n) &&
              !memcmp(v, v0, sizeof(float) * n),
          "%s AMP step with an Inf gradient was not skipped", tn);
  } else {
    CHECK(memcmp(w, w0, sizeof(float) * n) != 0, "%s AMP step: nothing was updated", tn);
    float bc1 = (float)(1.0 - pow(h.beta1, h.step)), bc2 = (float)(1.0 - pow(h.beta2, h.step));
    tg_cpu_adamw(n, w0, g, m0, v0, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, bc1, bc2,
                 h.grad_scale);
    double ew = tg_rel_err_f32(w, w0, n), em = tg_rel_err_f32(m, m0, n);
    double ev = tg_rel_err_f32(v, v0, n);
    CHECK(ew <= 1e-6 && em <= 1e-6 && ev <= 1e-6,
          "%s AMP step vs tg_cpu_adamw: rel err w %.2e m %.2e v %.2e", tn, ew, em, ev);
  }
  if (with_low) {
    tg_cpu_to_lowp(t, 1, (int)n, w, (int)n, lowref, (int)n);
    CHECK(!memcmp(low, lowref, sizeof(uint16_t) * n),
          "%s AMP step (overflow %d): copy != lowp(w)", tn, overflow);
  }
  free(w0); free(g); free(m0); free(v0); free(w); free(m); free(v); free(low); free(lowref);
  tg_tensor *all[] = {&W, &G, &M, &V, &WL, &F};
  for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
}

static void cpu_adamw_amp_body(void) {
  for (int d = 0; d < 2; d++)
    for (int overflow = 0; overflow < 2; overflow++)
      for (int with_low = 0; with_low < 2; with_low++) amp_case(LOWP[d], overflow, with_low);
  refusals("adamw_amp");
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

typedef struct conv_ctx {
  tg_dtype t;
  starpu_data_handle_t src;
} conv_ctx;

static int conv_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const conv_ctx *c = v;
  return tg_convert_insert(c->t, c->src, out[0].handle, o);
}

static void pair_convert(void) {
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
    conv_ctx c = {.t = t, .src = X.handle};
    out16 o = {.name = "Y", .rows = rows, .cols = cols, .dt = t, .init = NULL, .tol = PAIR_EXACT};
    snprintf(what, sizeof what, "convert f32 -> %s", tg_dtype_name(t));
    run_pair16(what, conv_submit, &c, 1, &o);
    c.src = H.handle;
    outspec back = {
        .name = "Y", .rows = rows, .cols = cols, .init = NULL, .redux = 0, .tol = PAIR_EXACT};
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

static void pair_nonfinite(void) {
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
    outspec o = {.name = "flag", .rows = 1, .cols = 1, .init = NULL, .redux = 0, .tol = PAIR_EXACT};
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

static void pair_adamw_amp(void) {
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
      amp_ctx c = {.t = t, .nh = 0, .h = {G.handle, F.handle}};
      outspec o3[3] = {{.name = "w",
                        .rows = rows,
                        .cols = cols,
                        .init = w,
                        .redux = 0,
                        .tol = set ? PAIR_EXACT : TOL},
                       {.name = "m",
                        .rows = rows,
                        .cols = cols,
                        .init = m,
                        .redux = 0,
                        .tol = set ? PAIR_EXACT : TOL},
                       {.name = "v",
                        .rows = rows,
                        .cols = cols,
                        .init = v,
                        .redux = 0,
                        .tol = set ? PAIR_EXACT : TOL}};
      float *cw = NULL, *gw = NULL;
      snprintf(what, sizeof what, "adamw_amp %s flag=%d", tg_dtype_name(t), set);
      run_pair(what, amp_submit, &c, 3, o3, &cw, &gw);
      if (set) /* skipped on both sides: the inputs, bit for bit */
        CHECK(!memcmp(cw, w, n * sizeof *w) && !memcmp(gw, w, n * sizeof *w),
              "%s: w changed", what);
      free(cw); free(gw);
      c.nh = 1; /* with the 16-bit copy */
      out16 o4[4] = {{.name = "w",
                      .rows = rows,
                      .cols = cols,
                      .dt = TG_F32,
                      .init = w,
                      .tol = set ? PAIR_EXACT : TOL},
                     {.name = "m",
                      .rows = rows,
                      .cols = cols,
                      .dt = TG_F32,
                      .init = m,
                      .tol = set ? PAIR_EXACT : TOL},
                     {.name = "v",
                      .rows = rows,
                      .cols = cols,
                      .dt = TG_F32,
                      .init = v,
                      .tol = set ? PAIR_EXACT : TOL},
                     {.name = "w_low",
                      .rows = rows,
                      .cols = cols,
                      .dt = t,
                      .init = NULL,
                      .tol = set ? PAIR_EXACT : half_ulp(t)}};
      snprintf(what, sizeof what, "adamw_amp %s flag=%d with w_low", tg_dtype_name(t), set);
      run_pair16(what, amp_submit, &c, 4, o4);
      tg_tensor_free(&F);
    }
  free(w); free(g); free(m); free(v);
  tg_tensor_free(&G);
}

static void convert_cpu(void) {
  ops_run_worker_counts(cpu_convert_body);
  pair_convert();
}

static void nonfinite_cpu(void) {
  ops_run_worker_counts(cpu_nonfinite_body);
  pair_nonfinite();
}

static void adamw_amp_cpu(void) {
  ops_run_worker_counts(cpu_adamw_amp_body);
  pair_adamw_amp();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_conversions(void) {
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

static void emu_nonfinite(void) {
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
}

static void emu_adamw_amp(void) {
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


#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "convert",
     .doc = "convert f32 <-> bf16 / fp16 (round to nearest even)",
     .buffers = "src (R), dst (W)",
     .covers = "tg_convert_cl tg_convert_insert tg_cuda_to_lowp tg_cuda_from_lowp "
               "tg_cuda_scale_lowp",
     .kernels = "tg_cpu_to_lowp tg_cpu_from_lowp tg_f32_to_bf16 tg_bf16_to_f32 tg_f32_to_f16 "
                "tg_f16_to_f32 tg_f32_to_bf16_n tg_bf16_to_f32_n tg_f32_to_f16_n tg_f16_to_f32_n",
     .run = {[OPS_REF] = convert_ref, [OPS_CPU] = convert_cpu, [OPS_CUDA] = pair_convert,
             [OPS_DEVICE] = pair_convert, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_conversions)},
     .why_not = {[OPS_LOWP] = "the codelet takes 16-bit buffers itself (no adapter)",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "nonfinite",
     .doc = "non-finite check of a gradient (raises the overflow flag)",
     .buffers = "grad (R), flag (RW)",
     .covers = "tg_nonfinite_cl tg_nonfinite_insert tg_cuda_nonfinite_check",
     .kernels = "tg_cpu_nonfinite_check",
     .run = {[OPS_REF] = ref_nonfinite, [OPS_CPU] = nonfinite_cpu, [OPS_CUDA] = pair_nonfinite,
             [OPS_DEVICE] = pair_nonfinite, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_nonfinite)},
     .why_not = {[OPS_LOWP] = "gradients are checked in f32 (16-bit gradients are refused)",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "adamw_amp",
     .doc = "AdamW on fp32 master weights, loss-scale unscaling, skipped when the overflow flag "
            "is set, writes the bf16 / fp16 copy",
     .buffers = "w (RW), grad (R), m (RW), v (RW), flag (R), w_low (W, optional)",
     .covers = "tg_adamw_amp_cl tg_adamw_amp_insert tg_cuda_adamw_amp",
     .kernels = "tg_cpu_adamw_amp",
     .run = {[OPS_REF] = ref_adamw_amp, [OPS_CPU] = adamw_amp_cpu, [OPS_CUDA] = pair_adamw_amp,
             [OPS_DEVICE] = pair_adamw_amp, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_adamw_amp)},
     .why_not = {[OPS_LOWP] = "the codelet takes its 16-bit copy itself (no adapter)",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
