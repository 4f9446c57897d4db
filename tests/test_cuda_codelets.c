/*
 * test_cuda_codelets: every codelet of codelets.h run twice on identical
 * inputs, once forced on a CPU worker and once forced on a CUDA worker, into
 * separate output tensors, and the two results compared:
 *   relative error (norm-wise) <= 1e-5, 1e-4 for GEMMs with k >= 257 (cuBLAS
 *   may sum in another order), exact equality for accuracy counts.
 * Sizes are odd (1, 7, 33, 257, and wider rows for the block-per-row softmax
 * path) so that remainder tiles are hit.  Write-only outputs start as NaN, so
 * a kernel that reads them (beta == 0 handled as a multiply) fails.  A few
 * cases run on the left half of a column-partitioned matrix, where the CPU
 * side sees a leading dimension larger than the number of columns.
 *
 * Needs a CUDA worker: without one (CPU-only build, no GPU, STARPU_NCUDA=0)
 * it prints "SKIP: no CUDA worker" and exits with TG_TEST_SKIP (77).
 */
#include "cuda_pair.h"

static const char *accum_name(tg_accum a) {
  return a == TG_OVERWRITE ? "overwrite" : a == TG_ACCUMULATE ? "accumulate"
                                                              : "reduce";
}

/* ---- GEMM ----------------------------------------------------------------- */

typedef struct gemm_ctx {
  int ta, tb;
  float alpha, beta;
  tg_accum accum;
  starpu_data_handle_t A, B;
  int ld_test; /* output handle is the left half of a partitioned tensor */
} gemm_ctx;

static void split_columns(tg_tensor *t) {
  struct starpu_data_filter f;
  memset(&f, 0, sizeof f);
  f.filter_func = starpu_matrix_filter_block; /* along nx = columns */
  f.nchildren = 2;
  starpu_data_partition(t->handle, &f);
}
static starpu_data_handle_t left_half(tg_tensor *t) {
  return starpu_data_get_sub_data(t->handle, 1, 0);
}
static void unsplit(tg_tensor *t) {
  starpu_data_unpartition(t->handle, STARPU_MAIN_RAM);
}

static int gemm_submit(const void *vctx, const tg_task_opts *o,
                       tg_tensor *out) {
  const gemm_ctx *c = vctx;
  if (c->ld_test) {
    split_columns(&out[0]);
    int rc = tg_gemm_insert(c->ta, c->tb, c->alpha, c->A, c->B, c->beta,
                            left_half(&out[0]), c->accum, o);
    unsplit(&out[0]);
    return rc;
  }
  int rc = tg_gemm_insert(c->ta, c->tb, c->alpha, c->A, c->B, c->beta,
                          out[0].handle, c->accum, o);
  if (rc == 0 && c->accum == TG_REDUCE) /* a second contribution */
    rc = tg_gemm_insert(c->ta, c->tb, -0.5f * c->alpha, c->A, c->B, c->beta,
                        out[0].handle, c->accum, o);
  return rc;
}

static void test_gemm(void) {
  static const int shapes[][3] = {/* m, n, k */
                                  {1, 1, 1},    {7, 1, 33},  {1, 7, 257},
                                  {33, 7, 7},   {257, 33, 1}, {33, 257, 257},
                                  {7, 33, 1025}};
  const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  for (int s = 0; s < nshapes; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        tg_tensor A, B;
        float *a = rnd((size_t)m * k, 1.0f), *b = rnd((size_t)k * n, 1.0f);
        new_tensor(&A, ta ? k : m, ta ? m : k, a);
        new_tensor(&B, tb ? n : k, tb ? k : n, b);
        float *c0 = rnd((size_t)m * n, 1.0f);
        const double tol = k >= 257 ? TOL_LARGE_K : TOL;
        for (int mode = 0; mode < 3; mode++) {
          gemm_ctx ctx = {ta, tb, 1.25f, 0.0f, (tg_accum)mode, A.handle,
                          B.handle, 0};
          if (mode == TG_ACCUMULATE) ctx.beta = 0.5f;
          if (mode == TG_REDUCE) ctx.beta = 1.0f;
          outspec o = {"C", m, n, mode == TG_OVERWRITE ? NULL : c0,
                       mode == TG_REDUCE, tol};
          char what[128];
          snprintf(what, sizeof what, "gemm m=%d n=%d k=%d ta=%d tb=%d %s", m,
                   n, k, ta, tb, accum_name((tg_accum)mode));
          run_pair(what, gemm_submit, &ctx, 1, &o, NULL, NULL);
        }
        free(a);
        free(b);
        free(c0);
        tg_tensor_free(&A);
        tg_tensor_free(&B);
      }
}

/* GEMM whose output is the left half of a (m, 2n) matrix: ldc = 2n on the
 * CPU side; the right half must stay untouched. */
static void test_gemm_ld(void) {
  const int m = 33, n = 7, k = 33;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int mode = 0; mode < 2; mode++) {
        tg_tensor A, B;
        float *a = rnd((size_t)m * k, 1.0f), *b = rnd((size_t)k * n, 1.0f);
        float *c0 = rnd((size_t)m * 2 * n, 1.0f);
        new_tensor(&A, ta ? k : m, ta ? m : k, a);
        new_tensor(&B, tb ? n : k, tb ? k : n, b);
        gemm_ctx ctx = {ta, tb, 0.75f, mode ? 0.5f : 0.0f, (tg_accum)mode,
                        A.handle, B.handle, 1};
        outspec o = {"C(:, 0:n) of (m, 2n)", m, 2 * n, c0, 0, TOL};
        char what[128];
        snprintf(what, sizeof what, "gemm ldc=2n ta=%d tb=%d %s", ta, tb,
                 accum_name((tg_accum)mode));
        run_pair(what, gemm_submit, &ctx, 1, &o, NULL, NULL);
        free(a);
        free(b);
        free(c0);
        tg_tensor_free(&A);
        tg_tensor_free(&B);
      }
}

/* ---- bias ----------------------------------------------------------------- */

static const int g_shapes[][2] = {{1, 1}, {7, 33}, {257, 7}, {33, 257}};
#define NSHAPES ((int)(sizeof g_shapes / sizeof g_shapes[0]))

typedef struct hctx {
  starpu_data_handle_t h[3];
  tg_accum accum;
  int act;
  float f;
  int ld_test; /* inputs/outputs on the left half of partitioned tensors */
} hctx;

static int bias_add_submit(const void *vctx, const tg_task_opts *o,
                           tg_tensor *out) {
  const hctx *c = vctx;
  return tg_bias_add_insert(out[0].handle, c->h[0], o);
}

static int bias_grad_submit(const void *vctx, const tg_task_opts *o,
                            tg_tensor *out) {
  const hctx *c = vctx;
  int rc = tg_bias_grad_insert(c->h[0], out[0].handle, c->accum, o);
  if (rc == 0 && c->accum == TG_REDUCE)
    rc = tg_bias_grad_insert(c->h[0], out[0].handle, c->accum, o);
  return rc;
}

static void test_bias(void) {
  for (int s = 0; s < NSHAPES; s++) {
    const int rows = g_shapes[s][0], cols = g_shapes[s][1];
    char what[128];
    float *y0 = rnd((size_t)rows * cols, 1.0f), *b = rnd((size_t)cols, 1.0f);
    tg_tensor B, DY;
    new_tensor(&B, 1, cols, b);
    new_tensor(&DY, rows, cols, y0);

    hctx ctx = {{B.handle}, TG_OVERWRITE, 0, 0, 0};
    outspec o = {"Y", rows, cols, y0, 0, TOL};
    snprintf(what, sizeof what, "bias_add %dx%d", rows, cols);
    run_pair(what, bias_add_submit, &ctx, 1, &o, NULL, NULL);

    for (int mode = 0; mode < 3; mode++) {
      hctx g = {{DY.handle}, (tg_accum)mode, 0, 0, 0};
      outspec od = {"db", 1, cols, mode == TG_OVERWRITE ? NULL : b,
                    mode == TG_REDUCE, TOL};
      snprintf(what, sizeof what, "bias_grad %dx%d %s", rows, cols,
               accum_name((tg_accum)mode));
      run_pair(what, bias_grad_submit, &g, 1, &od, NULL, NULL);
    }
    free(y0);
    free(b);
    tg_tensor_free(&B);
    tg_tensor_free(&DY);
  }
}

/* bias_grad of the left half of a (rows, 2 cols) dY: lddy = 2 cols on the
 * CPU side. */
static int bias_grad_ld_submit(const void *vctx, const tg_task_opts *o,
                               tg_tensor *out) {
  const hctx *c = vctx;
  tg_tensor parent = {c->h[0], 0, 0, TG_F32, NULL};
  split_columns(&parent);
  int rc = tg_bias_grad_insert(left_half(&parent), out[0].handle, c->accum, o);
  unsplit(&parent);
  return rc;
}

static void test_bias_grad_ld(void) {
  const int rows = 257, cols = 33;
  float *dy = rnd((size_t)rows * 2 * cols, 1.0f);
  tg_tensor DY;
  new_tensor(&DY, rows, 2 * cols, dy);
  hctx ctx = {{DY.handle}, TG_OVERWRITE, 0, 0, 1};
  outspec o = {"db", 1, cols, NULL, 0, TOL};
  run_pair("bias_grad lddy=2cols", bias_grad_ld_submit, &ctx, 1, &o, NULL,
           NULL);
  free(dy);
  tg_tensor_free(&DY);
}

/* ---- activations ---------------------------------------------------------- */

static int act_fwd_submit(const void *vctx, const tg_task_opts *o,
                          tg_tensor *out) {
  const hctx *c = vctx;
  return tg_act_fwd_insert((tg_activation)c->act, c->h[0], out[0].handle, o);
}

static int act_bwd_submit(const void *vctx, const tg_task_opts *o,
                          tg_tensor *out) {
  const hctx *c = vctx;
  if (c->ld_test) {
    tg_tensor px = {c->h[0], 0, 0, TG_F32, NULL};
    tg_tensor pdy = {c->h[1], 0, 0, TG_F32, NULL};
    split_columns(&px);
    split_columns(&pdy);
    split_columns(&out[0]);
    int rc = tg_act_bwd_insert((tg_activation)c->act, left_half(&px),
                               left_half(&pdy), left_half(&out[0]), o);
    unsplit(&out[0]);
    unsplit(&pdy);
    unsplit(&px);
    return rc;
  }
  return tg_act_bwd_insert((tg_activation)c->act, c->h[0], c->h[1],
                           out[0].handle, o);
}

static void test_activations(void) {
  for (int act = 0; act < 2; act++)
    for (int s = 0; s < NSHAPES; s++) {
      const int rows = g_shapes[s][0], cols = g_shapes[s][1];
      const size_t n = (size_t)rows * cols;
      const char *an = act == TG_ACT_RELU ? "relu" : "gelu";
      char what[128];
      float *x = rnd(n, 4.0f), *dy = rnd(n, 1.0f);
      for (size_t i = 0; i < n; i += 5) x[i] = 0.0f; /* relu's kink */
      tg_tensor X, DY;
      new_tensor(&X, rows, cols, x);
      new_tensor(&DY, rows, cols, dy);
      hctx ctx = {{X.handle, DY.handle}, TG_OVERWRITE, act, 0, 0};
      outspec o = {"out", rows, cols, NULL, 0, TOL};
      snprintf(what, sizeof what, "%s_fwd %dx%d", an, rows, cols);
      run_pair(what, act_fwd_submit, &ctx, 1, &o, NULL, NULL);
      snprintf(what, sizeof what, "%s_bwd %dx%d", an, rows, cols);
      run_pair(what, act_bwd_submit, &ctx, 1, &o, NULL, NULL);
      free(x);
      free(dy);
      tg_tensor_free(&X);
      tg_tensor_free(&DY);
    }
  /* strided: left halves of (rows, 2 cols) matrices */
  for (int act = 0; act < 2; act++) {
    const int rows = 33, cols = 7;
    const size_t n = (size_t)rows * 2 * cols;
    float *x = rnd(n, 4.0f), *dy = rnd(n, 1.0f), *dx0 = rnd(n, 1.0f);
    tg_tensor X, DY;
    new_tensor(&X, rows, 2 * cols, x);
    new_tensor(&DY, rows, 2 * cols, dy);
    hctx ctx = {{X.handle, DY.handle}, TG_OVERWRITE, act, 0, 1};
    outspec o = {"dX(:, 0:cols) of (rows, 2 cols)", rows, 2 * cols, dx0, 0,
                 TOL};
    run_pair(act == TG_ACT_RELU ? "relu_bwd ld=2cols" : "gelu_bwd ld=2cols",
             act_bwd_submit, &ctx, 1, &o, NULL, NULL);
    free(x);
    free(dy);
    free(dx0);
    tg_tensor_free(&X);
    tg_tensor_free(&DY);
  }
}

/* ---- fused linear layer ---------------------------------------------------- */

/* h[0] = X (rows, in), h[1] = W (out, in), h[2] = b (1, out) */
static int linear_fwd_submit(const void *vctx, const tg_task_opts *o,
                             tg_tensor *out) {
  const hctx *c = vctx;
  int none = c->act == TG_ACT_NONE;
  return tg_linear_fwd_insert(c->h[0], c->h[1], c->h[2], (tg_activation)c->act,
                              out[0].handle, none ? NULL : out[1].handle, o);
}

/* h[0] = dZ (rows, out), h[1] = W (out, in), h[2] = Zprev (rows, in) */
static int linear_bwd_submit(const void *vctx, const tg_task_opts *o,
                             tg_tensor *out) {
  const hctx *c = vctx;
  return tg_linear_bwd_data_insert(c->h[0], c->h[1], (tg_activation)c->act,
                                   c->act == TG_ACT_NONE ? NULL : c->h[2],
                                   out[0].handle, o);
}

static void test_linear(void) {
  static const int shapes[][3] = {{1, 1, 1}, {7, 33, 257}, {257, 7, 33}, {33, 257, 7}};
  for (int act = 0; act < 3; act++)
    for (int s = 0; s < 4; s++) {
      const int rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
      float *x = rnd((size_t)rows * in, 1.0f), *w = rnd((size_t)out * in, 0.5f);
      float *b = rnd((size_t)out, 0.5f), *dz = rnd((size_t)rows * out, 1.0f);
      float *zp = rnd((size_t)rows * in, 2.0f);
      tg_tensor X, W, B, DZ, ZP;
      new_tensor(&X, rows, in, x);
      new_tensor(&W, out, in, w);
      new_tensor(&B, 1, out, b);
      new_tensor(&DZ, rows, out, dz);
      new_tensor(&ZP, rows, in, zp);
      double tol = in > 100 || out > 100 ? TOL_LARGE_K : TOL;
      char what[128];
      hctx fctx = {{X.handle, W.handle, B.handle}, TG_OVERWRITE, act, 0, 0};
      outspec fo[2] = {{"Z", rows, out, NULL, 0, tol}, {"H", rows, out, NULL, 0, tol}};
      snprintf(what, sizeof what, "linear_fwd act=%d %dx%d->%d", act, rows, in, out);
      run_pair(what, linear_fwd_submit, &fctx, act == TG_ACT_NONE ? 1 : 2, fo, NULL, NULL);
      hctx bctx = {{DZ.handle, W.handle, ZP.handle}, TG_OVERWRITE, act, 0, 0};
      outspec bo = {"dX", rows, in, NULL, 0, tol};
      snprintf(what, sizeof what, "linear_bwd_data act=%d %dx%d<-%d", act, rows, in, out);
      run_pair(what, linear_bwd_submit, &bctx, 1, &bo, NULL, NULL);
      free(x); free(w); free(b); free(dz); free(zp);
      tg_tensor_free(&X); tg_tensor_free(&W); tg_tensor_free(&B);
      tg_tensor_free(&DZ); tg_tensor_free(&ZP);
    }
}

/* ---- softmax cross-entropy and accuracy ----------------------------------- */

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

static void test_classification(void) {
  for (int s = 0; s < NCLS; s++) {
    const int rows = g_cls_shapes[s][0], cols = g_cls_shapes[s][1];
    const size_t n = (size_t)rows * cols;
    char what[128];
    float *logits = rnd(n, 3.0f);
    int32_t *labels = xmalloc((size_t)rows * sizeof *labels);
    for (int r = 0; r < rows; r++)
      labels[r] = (int32_t)(tg_rng_next(&g_rng) % (uint64_t)cols);
    tg_tensor L, Y;
    new_tensor(&L, rows, cols, logits);
    new_labels(&Y, rows, labels);
    /* the loss and the count are accumulators: TG_ACCUMULATE or TG_REDUCE
     * (the insert functions reject TG_OVERWRITE for them) */
    const float loss0 = 0.25f;
    for (int mode = TG_ACCUMULATE; mode <= TG_REDUCE; mode++) {
      hctx ctx = {{L.handle, Y.handle}, (tg_accum)mode, 0, 1.0f / rows, 0};
      outspec o[2] = {{"dlogits", rows, cols, NULL, 0, TOL},
                      {"loss", 1, 1, &loss0, mode == TG_REDUCE, TOL}};
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
    for (int mode = TG_ACCUMULATE; mode <= TG_REDUCE; mode++) {
      hctx ctx = {{L.handle, Y.handle}, (tg_accum)mode, 0, 0, 0};
      outspec o = {"correct", 1, 1, &count0, mode == TG_REDUCE, EXACT};
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

/* ---- optimizers ------------------------------------------------------------ */

typedef struct opt_ctx {
  starpu_data_handle_t grad;
  int adam;
} opt_ctx;

static int opt_submit(const void *vctx, const tg_task_opts *o,
                      tg_tensor *out) {
  const opt_ctx *c = vctx;
  int rc = 0;
  for (int step = 1; step <= 2 && rc == 0; step++) { /* two chained steps */
    if (c->adam) {
      tg_adamw_hyper h = {1e-2f, 0.9f, 0.999f, 1e-8f, 1e-2f, 0.5f, step};
      rc = tg_adamw_insert(out[0].handle, c->grad, out[1].handle,
                           out[2].handle, &h, o);
    } else {
      tg_sgd_hyper h = {0.1f, 0.9f, 1e-2f, 0.5f};
      rc = tg_sgd_insert(out[0].handle, c->grad, out[1].handle, &h, o);
    }
  }
  return rc;
}

static void test_optimizers(void) {
  for (int s = 0; s < NSHAPES; s++) {
    const int rows = g_shapes[s][0], cols = g_shapes[s][1];
    const size_t n = (size_t)rows * cols;
    char what[128];
    float *w = rnd(n, 1.0f), *g = rnd(n, 1.0f), *m = rnd(n, 0.1f),
          *v = rnd(n, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    tg_tensor G;
    new_tensor(&G, rows, cols, g);
    opt_ctx sgd = {G.handle, 0}, adam = {G.handle, 1};
    outspec os[2] = {{"w", rows, cols, w, 0, TOL},
                     {"vel", rows, cols, m, 0, TOL}};
    snprintf(what, sizeof what, "sgd %dx%d", rows, cols);
    run_pair(what, opt_submit, &sgd, 2, os, NULL, NULL);
    outspec oa[3] = {{"w", rows, cols, w, 0, TOL},
                     {"m", rows, cols, m, 0, TOL},
                     {"v", rows, cols, v, 0, TOL}};
    snprintf(what, sizeof what, "adamw %dx%d", rows, cols);
    run_pair(what, opt_submit, &adam, 3, oa, NULL, NULL);
    free(w);
    free(g);
    free(m);
    free(v);
    tg_tensor_free(&G);
  }
}

/* ---- fill, accumulate, scale ----------------------------------------------- */

static int fill_submit(const void *vctx, const tg_task_opts *o,
                       tg_tensor *out) {
  const hctx *c = vctx;
  return tg_fill_insert(out[0].handle, c->f, o);
}
static int accumulate_submit(const void *vctx, const tg_task_opts *o,
                             tg_tensor *out) {
  const hctx *c = vctx;
  if (c->ld_test) {
    tg_tensor psrc = {c->h[0], 0, 0, TG_F32, NULL};
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

static void test_elementwise(void) {
  for (int s = 0; s < NSHAPES; s++) {
    const int rows = g_shapes[s][0], cols = g_shapes[s][1];
    const size_t n = (size_t)rows * cols;
    char what[128];
    float *x = rnd(n, 1.0f), *src = rnd(n, 1.0f);
    tg_tensor S;
    new_tensor(&S, rows, cols, src);

    hctx f = {{NULL}, TG_OVERWRITE, 0, 0.75f, 0};
    outspec of = {"X", rows, cols, NULL, 0, TOL}; /* NaN before: write-only */
    snprintf(what, sizeof what, "fill %dx%d", rows, cols);
    run_pair(what, fill_submit, &f, 1, &of, NULL, NULL);

    hctx a = {{S.handle}, TG_OVERWRITE, 0, 0, 0};
    outspec oa = {"dst", rows, cols, x, 0, TOL};
    snprintf(what, sizeof what, "accumulate %dx%d", rows, cols);
    run_pair(what, accumulate_submit, &a, 1, &oa, NULL, NULL);

    hctx sc = {{NULL}, TG_OVERWRITE, 0, -1.75f, 0};
    outspec os = {"X", rows, cols, x, 0, TOL};
    snprintf(what, sizeof what, "scale %dx%d", rows, cols);
    run_pair(what, scale_submit, &sc, 1, &os, NULL, NULL);
    free(x);
    free(src);
    tg_tensor_free(&S);
  }
  /* accumulate on left halves of (rows, 2 cols) matrices */
  {
    const int rows = 257, cols = 7;
    const size_t n = (size_t)rows * 2 * cols;
    float *x = rnd(n, 1.0f), *src = rnd(n, 1.0f);
    tg_tensor S;
    new_tensor(&S, rows, 2 * cols, src);
    hctx a = {{S.handle}, TG_OVERWRITE, 0, 0, 1};
    outspec oa = {"dst(:, 0:cols) of (rows, 2 cols)", rows, 2 * cols, x, 0,
                  TOL};
    run_pair("accumulate ld=2cols", accumulate_submit, &a, 1, &oa, NULL, NULL);
    free(x);
    free(src);
    tg_tensor_free(&S);
  }
}

/* ---- main ------------------------------------------------------------------- */

int main(void) {
  int rc = cuda_pair_start();
  if (rc) return rc;

  test_gemm();
  test_gemm_ld();
  test_bias();
  test_bias_grad_ld();
  test_activations();
  test_linear();
  test_classification();
  test_optimizers();
  test_elementwise();

  tg_shutdown();
  return tg_test_finish("test_cuda_codelets");
}
