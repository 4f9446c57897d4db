/*
 * Rows softmax_xent and accuracy (codelets/classifier.c): softmax +
 * cross-entropy and the accuracy count; each case checks its row's op.
 *  ref       softmax_xent against float64 (loss and dlogits) and finite
 *            differences of the loss, in place, corrupt labels; accuracy
 *            with tied maxima (the first one wins);
 *  pair      the MLP's classification shapes, accuracy counts exact, the
 *            count into a REDUX target;
 *  cuda-emu  warp-per-row and block-per-row shapes (1537 columns), in
 *            place, a corrupt label (NaN loss on both sides), tied maxima.
 */

#include "ref_util.h"
#include "pair.h"

/* ---- ref --------------------------------------------------------------------- */

typedef struct {
  int rows, cols;
  const int32_t *labels;
  double scale;
} xent_ctx;

/* scale * sum_r -log softmax(x_r)(label_r), max-subtracted, in double */
static double xent_loss(const double *x, const void *vctx) {
  const xent_ctx *c = vctx;
  double L = 0;
  for (int r = 0; r < c->rows; r++) {
    const double *row = x + (size_t)r * c->cols;
    double mx = row[0];
    for (int j = 1; j < c->cols; j++) mx = fmax(mx, row[j]);
    double s = 0;
    for (int j = 0; j < c->cols; j++) s += exp(row[j] - mx);
    L += mx + log(s) - row[c->labels[r]];
  }
  return c->scale * L;
}

static void ref_softmax_xent(tg_rng *rng) {
  char what[96];
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic], ldl = cols + 2, ldd = cols + 5;
      size_t n = (size_t)rows * cols;
      float scale = 1.0f / (float)(2 * rows + 1);
      /* wide logits: confident rows, where p_label - 1 could cancel */
      float *X = tg_rand_mat(rng, rows, cols, ldl, 6.0f, NAN);
      int32_t *lab = tg_test_malloc(sizeof(int32_t) * rows);
      for (int r = 0; r < rows; r++)
        lab[r] = (int32_t)(tg_rng_next(rng) % (uint64_t)cols);
      double *Xd = tg_compact_f64(X, rows, cols, ldl);
      xent_ctx ctx = {.rows = rows, .cols = cols, .labels = lab, .scale = scale};

      /* reference dlogits and loss */
      double *dref = tg_test_malloc(sizeof(double) * n);
      for (int r = 0; r < rows; r++) {
        const double *x = Xd + (size_t)r * cols;
        double mx = x[0], s = 0;
        for (int j = 1; j < cols; j++) mx = fmax(mx, x[j]);
        for (int j = 0; j < cols; j++) s += exp(x[j] - mx);
        for (int j = 0; j < cols; j++)
          dref[(size_t)r * cols + j] =
              scale * (exp(x[j] - mx) / s - (j == lab[r] ? 1.0 : 0.0));
      }
      double lref = 0.25 + xent_loss(Xd, &ctx);

      float *D = tg_const_mat(rows, cols, ldd, NAN, OUT_PAD);
      float loss = 0.25f;
      tg_cpu_softmax_xent(rows, cols, X, ldl, lab, scale, D, ldd, &loss);
      snprintf(what, sizeof what, "softmax_xent dlogits %dx%d", rows, cols);
      CHECK_REL(mat_err(D, rows, cols, ldd, dref), TOL_FWD, what);
      CHECK(pad_intact(D, rows, cols, ldd, OUT_PAD), "%s wrote padding", what);
      snprintf(what, sizeof what, "softmax_xent loss %dx%d", rows, cols);
      CHECK_REL(rel_err_scalar(loss, lref), TOL_FWD, what);

      /* shifted by +1000: same result (max subtraction); in place */
      float *Xs = copy_mat(X, rows, ldl);
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) Xs[(size_t)r * ldl + j] += 1000.0f;
      double *Xsd = tg_compact_f64(Xs, rows, cols, ldl);
      double lsref = 0.25 + xent_loss(Xsd, &ctx);
      float lshift = 0.25f;
      tg_cpu_softmax_xent(rows, cols, Xs, ldl, lab, scale, Xs, ldl, &lshift);
      snprintf(what, sizeof what, "softmax_xent +1000 in place %dx%d", rows,
               cols);
      /* the shifted logits lose 1000's ulp (6e-5) of precision in float, so
       * compare with the reference for those shifted float inputs */
      {
        double *dsref = tg_test_malloc(sizeof(double) * n);
        for (int r = 0; r < rows; r++) {
          const double *x = Xsd + (size_t)r * cols;
          double mx = x[0], s = 0;
          for (int j = 1; j < cols; j++) mx = fmax(mx, x[j]);
          for (int j = 0; j < cols; j++) s += exp(x[j] - mx);
          for (int j = 0; j < cols; j++)
            dsref[(size_t)r * cols + j] =
                scale * (exp(x[j] - mx) / s - (j == lab[r] ? 1.0 : 0.0));
        }
        CHECK_REL(mat_err(Xs, rows, cols, ldl, dsref), TOL_FWD, what);
        CHECK(isfinite(lshift) && rel_err_scalar(lshift, lsref) <= TOL_FWD,
              "%s: loss %g vs %g", what, lshift, lsref);
        free(dsref);
      }

      /* dlogits is the gradient of the loss: FD */
      if (n <= 2000) {
        double *g = tg_fd_grad(xent_loss, &ctx, Xd, n, FD_H);
        snprintf(what, sizeof what, "softmax_xent dlogits vs FD %dx%d", rows,
                 cols);
        CHECK_REL(mat_err(D, rows, cols, ldd, g), TOL_FD, what);
        free(g);
      }
      free(Xsd);
      free(Xs);
      free(D);
      free(dref);
      free(Xd);
      free(lab);
      free(X);
    }

  /* out-of-range labels: no out-of-bounds read, zero gradient, NaN loss */
  {
    float x[2 * 3] = {1, 2, 3, 4, 5, 6}, d[2 * 3];
    int32_t bad[2] = {3, -1};
    float loss = 0.0f;
    tg_cpu_softmax_xent(2, 3, x, 3, bad, 1.0f, d, 3, &loss);
    int zero = 1;
    for (int i = 0; i < 6; i++) zero &= d[i] == 0.0f;
    CHECK(zero && isnan(loss), "softmax_xent bad labels: zero grad, NaN loss");
  }
}

static void ref_accuracy(tg_rng *rng) {
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic], ldl = cols + 3;
      float *X = tg_rand_mat(rng, rows, cols, ldl, 1.0f, NAN);
      int32_t *lab = tg_test_malloc(sizeof(int32_t) * rows);
      int expect = 0;
      for (int r = 0; r < rows; r++) {
        float *x = X + (size_t)r * ldl;
        if (r % 3 == 1 && cols > 2) { /* a tie: first maximum wins */
          x[cols - 1] = 2.0f;
          x[cols / 2] = 2.0f;
        }
        int best = 0;
        for (int j = 1; j < cols; j++)
          if (x[j] > x[best]) best = j;
        /* label: the argmax for about half the rows, else something else
         * (for ties, sometimes the second maximum, which must not count) */
        uint64_t u = tg_rng_next(rng) % 3;
        lab[r] = u == 0 ? best
                        : (r % 3 == 1 && cols > 2 && u == 1)
                              ? cols - 1
                              : (int32_t)((best + 1 + (int)u) % cols);
        expect += lab[r] == best;
      }
      float correct = 3.0f;
      tg_cpu_accuracy_count(rows, cols, X, ldl, lab, &correct);
      CHECK(correct == 3.0f + (float)expect,
            "accuracy_count %dx%d: %g, expected %d", rows, cols,
            (double)correct - 3.0, expect);
      free(lab);
      free(X);
    }
  /* explicit ties */
  float x[2 * 4] = {1, 5, 5, 0, 7, 7, 7, 7};
  int32_t l1[2] = {1, 0}, l2[2] = {2, 3};
  float c1 = 0, c2 = 0;
  tg_cpu_accuracy_count(2, 4, x, 4, l1, &c1);
  tg_cpu_accuracy_count(2, 4, x, 4, l2, &c2);
  CHECK(c1 == 2.0f && c2 == 0.0f, "accuracy ties: %g %g (expected 2 0)", c1,
        c2);
}

static void softmax_xent_ref(void) {
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  ref_softmax_xent(&rng);
}

static void accuracy_ref(void) {
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  ref_accuracy(&rng);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static const int g_cls_shapes[][2] = {
    {1, 1}, {7, 33}, {257, 10}, {33, 257}, {7, 1537}};
#define NCLS ((int)(sizeof g_cls_shapes / sizeof g_cls_shapes[0]))

static int xent_submit(const void *vctx, const tg_task_opts *o,
                       tg_tensor *out) {
  const hctx *c = vctx;
  int rc = tg_softmax_xent_insert(c->h[0], c->h[1], c->f, out[0].handle,
                                  out[1].handle, c->accum, o);
  if (rc == 0 && c->accum == TG_REDUCE)
    rc = tg_softmax_xent_insert(c->h[0], c->h[1], c->f, out[0].handle,
                                out[1].handle, c->accum, o);
  return rc;
}

static int accuracy_submit(const void *vctx, const tg_task_opts *o,
                           tg_tensor *out) {
  const hctx *c = vctx;
  int rc = tg_accuracy_insert(c->h[0], c->h[1], out[0].handle, c->accum, o);
  if (rc == 0 && c->accum == TG_REDUCE)
    rc = tg_accuracy_insert(c->h[0], c->h[1], out[0].handle, c->accum, o);
  return rc;
}

/* first maximum, as the kernels define it */
static int first_argmax(const float *x, int cols) {
  int best = 0;
  for (int c = 1; c < cols; c++)
    if (x[c] > x[best]) best = c;
  return best;
}

static void pair_classification(void) {
  for (int s = 0; s < NCLS; s++) {
    const int rows = g_cls_shapes[s][0], cols = g_cls_shapes[s][1];
    const size_t n = (size_t)rows * cols;
    char what[128];
    float *logits = rnd(n, 3.0f);
    int32_t *labels = xmalloc((size_t)rows * sizeof *labels);
    for (int r = 0; r < rows; r++)
      labels[r] = (int32_t)(tg_rng_next(&g_pair_rng) % (uint64_t)cols);
    tg_tensor L, Y;
    new_tensor(&L, rows, cols, logits);
    new_labels(&Y, rows, labels);
    /* the loss and the count are accumulators: TG_ACCUMULATE or TG_REDUCE
     * (the insert functions reject TG_OVERWRITE for them) */
    const float loss0 = 0.25f;
    for (int mode = TG_ACCUMULATE; mode <= TG_REDUCE && ops_row_is("softmax_xent"); mode++) {
      hctx ctx = {.h = {L.handle, Y.handle},
                  .accum = (tg_accum)mode,
                  .act = 0,
                  .f = 1.0f / rows,
                  .ld_test = 0};
      outspec o[2] = {
          {.name = "dlogits", .rows = rows, .cols = cols, .init = NULL, .redux = 0, .tol = TOL},
          {.name = "loss",
           .rows = 1,
           .cols = 1,
           .init = &loss0,
           .redux = mode == TG_REDUCE,
           .tol = TOL}};
      snprintf(what, sizeof what, "softmax_xent %dx%d loss %s", rows, cols,
               accum_name((tg_accum)mode));
      run_pair(what, xent_submit, &ctx, 2, o, NULL, NULL);
    }
    tg_tensor_free(&L);

    /* Accuracy: logits on a coarse grid (many ties, to check "first
     * maximum"), half of the labels set to the argmax. */
    for (size_t i = 0; i < n; i++) logits[i] = roundf(logits[i]);
    int expect = 0;
    for (int r = 0; r < rows; r++) {
      const int am = first_argmax(logits + (size_t)r * cols, cols);
      if (r % 2 == 0) labels[r] = am;
      expect += labels[r] == am;
    }
    new_tensor(&L, rows, cols, logits);
    tg_tensor_free(&Y);
    new_labels(&Y, rows, labels);
    const float count0 = 3.0f;
    for (int mode = TG_ACCUMULATE; mode <= TG_REDUCE && ops_row_is("accuracy"); mode++) {
      hctx ctx = {
          .h = {L.handle, Y.handle}, .accum = (tg_accum)mode, .act = 0, .f = 0, .ld_test = 0};
      outspec o = {.name = "correct",
                   .rows = 1,
                   .cols = 1,
                   .init = &count0,
                   .redux = mode == TG_REDUCE,
                   .tol = PAIR_EXACT};
      float *cpu = NULL, *gpu = NULL;
      snprintf(what, sizeof what, "accuracy %dx%d %s", rows, cols,
               accum_name((tg_accum)mode));
      run_pair(what, accuracy_submit, &ctx, 1, &o, &cpu, &gpu);
      const float want = mode == TG_ACCUMULATE ? count0 + (float)expect
                                               : count0 + 2.0f * expect;
      CHECK(gpu[0] == want, "%s: CUDA count %g, expected %g", what,
            (double)gpu[0], (double)want);
      CHECK(cpu[0] == want, "%s: CPU count %g, expected %g", what,
            (double)cpu[0], (double)want);
      free(cpu);
      free(gpu);
    }
    free(logits);
    free(labels);
    tg_tensor_free(&L);
    tg_tensor_free(&Y);
  }
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_softmax(void) {
  /* <= 1024 columns: a warp per row; 1537: a block per row */
  static const int shapes[][2] = {{1, 1}, {7, 33}, {257, 10}, {33, 257}, {7, 1537}};
  for (int s = 0; s < 5; s++) {
    FULL_ONLY(s != 1 && s != 4);
    const int rows = shapes[s][0], cols = shapes[s][1], ld = cols + 1;
    const size_t n = (size_t)rows * ld;
    float *X = input(rows, cols, ld, 4.0f);
    int32_t *lab = tg_test_malloc(sizeof(int32_t) * rows);
    for (int r = 0; r < rows; r++) lab[r] = (int32_t)(tg_rng_next(&g_rng) % (uint64_t)cols);
    if (ops_row_is("softmax_xent")) {
    float *o[2], loss[2] = {0.5f, 0.5f};
    outputs(o, rows, cols, ld, 0);
    ok("tg_cuda_softmax_xent", "",
       tg_cuda_softmax_xent(rows, cols, X, ld, lab, 0.25f, o[0], ld, &loss[0], NULL));
    tg_cpu_softmax_xent(rows, cols, X, ld, lab, 0.25f, o[1], ld, &loss[1]);
    compare("tg_cuda_softmax_xent", "dlogits", o[0], o[1], n, kTolRed);
    compare("tg_cuda_softmax_xent", "loss", &loss[0], &loss[1], 1, kTolRed);
    free2(o);

    /* in place (dlogits == logits), and a corrupt label in the last row:
     * zero gradient row, NaN loss on both sides */
    float *io[2] = {tg_copy_f(X, n), tg_copy_f(X, n)};
    lab[rows - 1] = cols;
    loss[0] = loss[1] = 0.0f;
    ok("tg_cuda_softmax_xent", "in place",
       tg_cuda_softmax_xent(rows, cols, io[0], ld, lab, 1.0f, io[0], ld, &loss[0], NULL));
    tg_cpu_softmax_xent(rows, cols, io[1], ld, lab, 1.0f, io[1], ld, &loss[1]);
    compare("tg_cuda_softmax_xent", "in place", io[0], io[1], n, kTolRed);
    CHECK(isnan(loss[0]) && isnan(loss[1]), "softmax_xent bad label: loss %g / %g, want NaN",
          (double)loss[0], (double)loss[1]);
    free2(io);

    /* bf16 dlogits (the bf16 classifier's backward): bit for bit the f32
     * kernel then tg_cuda_to_lowp, the loss too, the bad label's zero row
     * included; the rows' padding untouched */
    const char *B = "tg_cuda_softmax_xent_bf16";
    float *f = tg_const_mat(rows, ld, ld, NAN, NAN), lb[2] = {0.5f, 0.5f};
    uint16_t *d16 = tg_test_malloc(2 * n), *want16 = tg_test_malloc(2 * n);
    for (size_t i = 0; i < n; i++) d16[i] = want16[i] = 0x7fc1;
    ok(B, "", tg_cuda_softmax_xent_bf16(rows, cols, X, ld, lab, 0.25f, d16, ld, &lb[0], NULL));
    ok(B, "reference f32",
       tg_cuda_softmax_xent(rows, cols, X, ld, lab, 0.25f, f, ld, &lb[1], NULL));
    ok(B, "reference rounding", tg_cuda_to_lowp(TG_BF16, rows, cols, f, ld, want16, ld, NULL));
    CHECK(memcmp(d16, want16, 2 * n) == 0,
          "%s %dx%d: differs from tg_cuda_softmax_xent then tg_cuda_to_lowp", B, rows, cols);
    float *a = widen16(TG_BF16, d16, n), *b = widen16(TG_BF16, want16, n);
    compare(B, "dlogits", a, b, n, EXACT);
    compare(B, "loss", &lb[0], &lb[1], 1, EXACT);
    free(a);
    free(b);
    free(f);
    free(d16);
    free(want16);
    }

    /* accuracy: values on a coarse grid so that rows have tied maxima
     * (the first one wins) */
    if (ops_row_is("accuracy")) {
    for (size_t i = 0; i < n; i++) X[i] = roundf(X[i]);
    for (int r = 0; r < rows; r++) lab[r] = (int32_t)(tg_rng_next(&g_rng) % (uint64_t)cols);
    float acc[2] = {2.0f, 2.0f};
    ok("tg_cuda_accuracy_count", "", tg_cuda_accuracy_count(rows, cols, X, ld, lab, &acc[0], NULL));
    tg_cpu_accuracy_count(rows, cols, X, ld, lab, &acc[1]);
    compare("tg_cuda_accuracy_count", "count", &acc[0], &acc[1], 1, EXACT);
    /* the argmax of each row as label: every row is correct */
    for (int r = 0; r < rows; r++) {
      int best = 0;
      for (int c = 1; c < cols; c++)
        if (X[(size_t)r * ld + c] > X[(size_t)r * ld + best]) best = c;
      lab[r] = best;
    }
    acc[0] = acc[1] = 0.0f;
    ok("tg_cuda_accuracy_count", "", tg_cuda_accuracy_count(rows, cols, X, ld, lab, &acc[0], NULL));
    tg_cpu_accuracy_count(rows, cols, X, ld, lab, &acc[1]);
    compare("tg_cuda_accuracy_count", "all correct", &acc[0], &acc[1], 1, EXACT);
    CHECK(acc[0] == (float)rows, "accuracy_count: %g of %d first maxima", (double)acc[0], rows);
    }
    free(X);
    free(lab);
  }
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "softmax_xent",
     .doc = "softmax + cross-entropy (loss and dlogits in one pass)",
     .buffers = "logits (R), labels (R), dlogits (W), loss (RW / REDUX)",
     .covers = "tg_softmax_xent_cl tg_softmax_xent_insert tg_cuda_softmax_xent "
               "tg_cuda_softmax_xent_bf16",
     .kernels = "tg_cpu_softmax_xent",
     .run = {[OPS_REF] = softmax_xent_ref, [OPS_CPU] = pair_classification,
             [OPS_CUDA] = pair_classification, [OPS_DEVICE] = pair_classification,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_softmax)},
     .why_not = {[OPS_LOWP] = "logits stay f32 in every precision mode",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "accuracy",
     .doc = "accuracy count",
     .buffers = "logits (R), labels (R), count (RW / REDUX)",
     .covers = "tg_accuracy_cl tg_accuracy_insert tg_cuda_accuracy_count",
     .kernels = "tg_cpu_accuracy_count",
     .run = {[OPS_REF] = accuracy_ref, [OPS_CPU] = pair_classification,
             [OPS_CUDA] = pair_classification, [OPS_DEVICE] = pair_classification,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_softmax)},
     .why_not = {[OPS_LOWP] = "logits stay f32 in every precision mode",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
