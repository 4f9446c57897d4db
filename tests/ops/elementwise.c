/*
 * Rows fill, accumulate and scale (codelets/elementwise.c; each case checks
 * its row's op): fill, accumulate (also
 * the REDUX merge, tg_accumulate_redux_cl, and the zero init,
 * tg_fill_zero_cl, which every REDUX case of the other rows runs), scale.
 *  ref       against float64, sizes from {1, 7, 33, 257}, padding intact;
 *  pair      every shape of g_shapes, accumulate on the left halves of
 *            partitioned matrices;
 *  cuda-emu  the three launchers, exact;
 *  lowp      fill and scale refuse a bf16 tensor (no adapter for them).
 */

#include <errno.h>

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"

/* ---- ref --------------------------------------------------------------------- */

static void ref_elementwise(tg_rng *rng) {
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic], ld = cols + 3, lds = cols + 6;
      size_t n = (size_t)rows * cols;

      float *X = tg_const_mat(rows, cols, ld, NAN, OUT_PAD);
      tg_cpu_fill(rows, cols, X, ld, 0.375f);
      int ok = 1;
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) ok &= X[(size_t)r * ld + j] == 0.375f;
      const int fill = ops_row_is("fill"), acc = ops_row_is("accumulate");
      if (fill) CHECK(ok && pad_intact(X, rows, cols, ld, OUT_PAD), "fill %dx%d", rows, cols);
      free(X);
      /* the zero fill (memset): +0 with padding, +0 contiguous, and -0,
       * which must keep its sign bit (the loop, not memset) */
      for (int k = 0; k < 3; k++) {
        int ldk = k == 1 ? cols : ld;
        float v = k == 2 ? -0.0f : 0.0f;
        float *Z = tg_const_mat(rows, cols, ldk, NAN, OUT_PAD);
        tg_cpu_fill(rows, cols, Z, ldk, v);
        int okz = 1;
        for (int r = 0; r < rows; r++)
          for (int j = 0; j < cols; j++) okz &= same_bits(&Z[(size_t)r * ldk + j], &v, 1);
        if (fill) CHECK(okz && (ldk == cols || pad_intact(Z, rows, cols, ldk, OUT_PAD)),
              "fill %dx%d with %s0 (ld %d)", rows, cols, k == 2 ? "-" : "+", ldk);
        free(Z);
      }

      float *D = tg_rand_mat(rng, rows, cols, ld, 1.0f, OUT_PAD);
      float *S = tg_rand_mat(rng, rows, cols, lds, 1.0f, NAN);
      double *ref = tg_compact_f64(D, rows, cols, ld);
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++)
          ref[(size_t)r * cols + j] += S[(size_t)r * lds + j];
      tg_cpu_accumulate(rows, cols, D, ld, S, lds);
      if (acc) {
        CHECK_REL(mat_err(D, rows, cols, ld, ref), TOL_FWD, "accumulate");
        CHECK(pad_intact(D, rows, cols, ld, OUT_PAD), "accumulate wrote padding");
      }

      for (size_t i = 0; i < n; i++) ref[i] *= -1.75;
      tg_cpu_scale(rows, cols, D, ld, -1.75f);
      if (ops_row_is("scale")) {
        CHECK_REL(mat_err(D, rows, cols, ld, ref), TOL_FWD, "scale");
        CHECK(pad_intact(D, rows, cols, ld, OUT_PAD), "scale wrote padding");
      }
      free(ref);
      free(S);
      free(D);
    }
}

static void elementwise_ref(void) {
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  ref_elementwise(&rng);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int fill_submit(const void *vctx, const tg_task_opts *o,
                       tg_tensor *out) {
  const hctx *c = vctx;
  return tg_fill_insert(out[0].handle, c->f, o);
}
static int accumulate_submit(const void *vctx, const tg_task_opts *o,
                             tg_tensor *out) {
  const hctx *c = vctx;
  if (c->ld_test) {
    tg_tensor psrc = {.handle = c->h[0], .rows = 0, .cols = 0, .dtype = TG_F32, .host = NULL};
    split_columns(&psrc);
    split_columns(&out[0]);
    int rc = tg_accumulate_insert(left_half(&out[0]), left_half(&psrc), o);
    unsplit(&out[0]);
    unsplit(&psrc);
    return rc;
  }
  return tg_accumulate_insert(out[0].handle, c->h[0], o);
}
static int scale_submit(const void *vctx, const tg_task_opts *o,
                        tg_tensor *out) {
  const hctx *c = vctx;
  return tg_scale_insert(out[0].handle, c->f, o);
}

static void pair_elementwise(void) {
  for (int s = 0; s < NSHAPES; s++) {
    const int rows = g_shapes[s][0], cols = g_shapes[s][1];
    const size_t n = (size_t)rows * cols;
    char what[128];
    float *x = rnd(n, 1.0f), *src = rnd(n, 1.0f);
    tg_tensor S;
    new_tensor(&S, rows, cols, src);

    hctx f = {.h = {NULL}, .accum = TG_OVERWRITE, .act = 0, .f = 0.75f, .ld_test = 0};
    outspec of = {.name = "X",
                  .rows = rows,
                  .cols = cols,
                  .init = NULL,
                  .redux = 0,
                  .tol = TOL}; /* NaN before: write-only */
    snprintf(what, sizeof what, "fill %dx%d", rows, cols);
    if (ops_row_is("fill")) run_pair(what, fill_submit, &f, 1, &of, NULL, NULL);

    hctx a = {.h = {S.handle}, .accum = TG_OVERWRITE, .act = 0, .f = 0, .ld_test = 0};
    outspec oa = {.name = "dst", .rows = rows, .cols = cols, .init = x, .redux = 0, .tol = TOL};
    snprintf(what, sizeof what, "accumulate %dx%d", rows, cols);
    if (ops_row_is("accumulate")) run_pair(what, accumulate_submit, &a, 1, &oa, NULL, NULL);

    hctx sc = {.h = {NULL}, .accum = TG_OVERWRITE, .act = 0, .f = -1.75f, .ld_test = 0};
    outspec os = {.name = "X", .rows = rows, .cols = cols, .init = x, .redux = 0, .tol = TOL};
    snprintf(what, sizeof what, "scale %dx%d", rows, cols);
    if (ops_row_is("scale")) run_pair(what, scale_submit, &sc, 1, &os, NULL, NULL);
    free(x);
    free(src);
    tg_tensor_free(&S);
  }
  /* accumulate on left halves of (rows, 2 cols) matrices */
  if (ops_row_is("accumulate")) {
    const int rows = 257, cols = 7;
    const size_t n = (size_t)rows * 2 * cols;
    float *x = rnd(n, 1.0f), *src = rnd(n, 1.0f);
    tg_tensor S;
    new_tensor(&S, rows, 2 * cols, src);
    hctx a = {.h = {S.handle}, .accum = TG_OVERWRITE, .act = 0, .f = 0, .ld_test = 1};
    outspec oa = {.name = "dst(:, 0:cols) of (rows, 2 cols)",
                  .rows = rows,
                  .cols = 2 * cols,
                  .init = x,
                  .redux = 0,
                  .tol = TOL};
    run_pair("accumulate ld=2cols", accumulate_submit, &a, 1, &oa, NULL, NULL);
    free(x);
    free(src);
    tg_tensor_free(&S);
  }
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_elementwise(void) {
  for (int s = 0; s < NSHAPES; s++) {
    FULL_ONLY(s != 1);
    const int rows = g_shapes[s][0], cols = g_shapes[s][1], ld = cols + 3;
    const size_t n = (size_t)rows * ld;
    float *dY = input(rows, cols, ld, 1.0f);
    float *o[2];

    outputs(o, rows, cols, ld, 1);
    if (ops_row_is("fill")) {
      ok("tg_cuda_fill", "", tg_cuda_fill(rows, cols, o[0], ld, -3.5f, NULL));
      tg_cpu_fill(rows, cols, o[1], ld, -3.5f);
      compare("tg_cuda_fill", "X", o[0], o[1], n, EXACT);
    }
    if (ops_row_is("accumulate")) {
      ok("tg_cuda_accumulate", "", tg_cuda_accumulate(rows, cols, o[0], ld, dY, ld, NULL));
      tg_cpu_accumulate(rows, cols, o[1], ld, dY, ld);
      compare("tg_cuda_accumulate", "dst", o[0], o[1], n, EXACT);
    }
    if (ops_row_is("scale")) {
      ok("tg_cuda_scale", "", tg_cuda_scale(rows, cols, o[0], ld, -0.75f, NULL));
      tg_cpu_scale(rows, cols, o[1], ld, -0.75f);
      compare("tg_cuda_scale", "X", o[0], o[1], n, EXACT);
    }
    free2(o);
    free(dY);
  }
}
#endif /* OPS_EMU */

/* ---- lowp -------------------------------------------------------------------- */

/* fill and scale refuse a 16-bit tensor (they would overrun it; was
 * test_precision_amp.c) */
static void elementwise_lowp_body(void) {
  tg_tensor c16;
  new_low(&c16, TG_BF16, 4, 5, (float[20]){0});
  if (ops_row_is("fill"))
    CHECK_REFUSED(tg_fill_insert(c16.handle, 0.0f, NULL), "tg_fill", "fill of a bf16 tensor");
  else
    CHECK_REFUSED(tg_scale_insert(c16.handle, 2.0f, NULL), "tg_scale", "scale of a bf16 tensor");
  tg_tensor_free(&c16);
}

static void elementwise_lowp(void) { ops_run_worker_counts(elementwise_lowp_body); }

#define ELEMENTWISE_CASES(lowp_case)                                               \
  .run = {[OPS_REF] = elementwise_ref, [OPS_CPU] = pair_elementwise,                    \
          [OPS_CUDA] = pair_elementwise, [OPS_DEVICE] = pair_elementwise,               \
          [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_elementwise), [OPS_LOWP] = lowp_case},      \
  .why_not = {[OPS_LOWP] = ADAPTER_ELSEWHERE, [OPS_CUDA_EMU] = OPS_EMU_ONLY}

static const ops_row rows[] = {
    {.name = "fill",
     .doc = "fill / zero (`tg_fill_zero_cl`: the REDUX init, run by every REDUX case)",
     .buffers = "X (W)",
     .covers = "tg_fill_cl tg_fill_insert tg_fill_zero_cl tg_cuda_fill",
     .kernels = "tg_cpu_fill",
     ELEMENTWISE_CASES(elementwise_lowp)},
    {.name = "accumulate",
     .doc = "accumulate `dst += src` (`tg_accumulate_cl`, `tg_accumulate_redux_cl`: the REDUX "
            "merge, run by every REDUX case)",
     .buffers = "dst (RW), src (R)",
     .covers = "tg_accumulate_cl tg_accumulate_insert tg_accumulate_redux_cl tg_cuda_accumulate",
     .kernels = "tg_cpu_accumulate",
     ELEMENTWISE_CASES(NULL)},
    {.name = "scale",
     .doc = "scale `X *= a`",
     .buffers = "X (RW)",
     .covers = "tg_scale_cl tg_scale_insert tg_cuda_scale",
     .kernels = "tg_cpu_scale",
     ELEMENTWISE_CASES(elementwise_lowp)},
};

OPS_ROWS(rows)
