/*
 * Rows act_fwd and act_bwd (codelets/activation.c): ReLU and GELU, forward
 * and backward; each case checks the op of the row it runs for.
 *  ref       against float64 definitions, sizes from {1, 7, 33, 257},
 *            padded leading dimensions, out of place and in place; the
 *            backward against finite differences; GELU pointwise over
 *            [-5, 5] (negative tail included); ReLU keeps NaN;
 *  pair      both activations, every shape of g_shapes, in place;
 *  cuda-emu  the four launchers, out of place and in place (Y == X,
 *            dX == dY), ReLU exact, GELU within kTolEw.
 */

#include "ref_util.h"
#include "pair.h"

/* ---- ref --------------------------------------------------------------------- */

static double ref_relu(double x) { return x > 0 ? x : 0; }
static double ref_gelu(double x) {
  const double k0 = sqrt(2.0 / M_PI), k1 = 0.044715;
  return 0.5 * x * (1.0 + tanh(k0 * (x + k1 * x * x * x)));
}

/* L(x) = sum W .* act(x), all compact */
typedef struct {
  size_t n;
  const double *W;
  double (*act)(double);
} act_fd_ctx;

static double act_loss(const double *x, const void *vctx) {
  const act_fd_ctx *c = vctx;
  double L = 0;
  for (size_t i = 0; i < c->n; i++) L += c->W[i] * c->act(x[i]);
  return L;
}

typedef void (*act_fwd_fn)(int, int, const float *, int, float *, int);
typedef void (*act_bwd_fn)(int, int, const float *, int, const float *, int,
                           float *, int);

static void ref_activation(tg_rng *rng, const char *name, act_fwd_fn fwd,
                            act_bwd_fn bwd, double (*ref)(double),
                            float xscale) {
  char what[96];
  int is_relu = ref == ref_relu;
  for (int ir = 0; ir < NSIZES; ir++)
    for (int ic = 0; ic < NSIZES; ic++) {
      int rows = SIZES[ir], cols = SIZES[ic];
      int ldx = cols + 1, ldy = cols + 4;
      size_t n = (size_t)rows * cols;
      float *X = tg_rand_mat(rng, rows, cols, ldx, xscale, NAN);
      if (is_relu) /* keep FD points at least 0.05 away from the kink */
        for (int r = 0; r < rows; r++)
          for (int j = 0; j < cols; j++) {
            float *x = &X[(size_t)r * ldx + j];
            *x = *x < 0 ? *x - 0.05f : *x + 0.05f;
          }
      double *Xd = tg_compact_f64(X, rows, cols, ldx);

      /* forward */
      double *yref = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) yref[i] = ref(Xd[i]);
      float *Y = tg_const_mat(rows, cols, ldy, NAN, OUT_PAD);
      fwd(rows, cols, X, ldx, Y, ldy);
      snprintf(what, sizeof what, "%s fwd %dx%d", name, rows, cols);
      const int check_fwd = ops_row_is("act_fwd"), check_bwd = ops_row_is("act_bwd");
      if (check_fwd) {
        CHECK_REL(mat_err(Y, rows, cols, ldy, yref), TOL_FWD, what);
        CHECK(pad_intact(Y, rows, cols, ldy, OUT_PAD), "%s wrote padding", what);
      }

      /* forward in place (Y == X) gives the same values */
      float *Xi = copy_mat(X, rows, ldx);
      fwd(rows, cols, Xi, ldx, Xi, ldx);
      int same = 1;
      for (int r = 0; r < rows; r++)
        same &= memcmp(&Xi[(size_t)r * ldx], &Y[(size_t)r * ldy],
                       sizeof(float) * cols) == 0;
      if (check_fwd) CHECK(same, "%s in place differs", what);

      /* backward against FD of L = sum W .* act(X) (FD on small sizes) */
      float *W = tg_rand_mat(rng, rows, cols, ldy, 1.0f, NAN);
      float *dX = tg_const_mat(rows, cols, ldx + 2, NAN, OUT_PAD);
      bwd(rows, cols, X, ldx, W, ldy, dX, ldx + 2);
      if (n <= 2000 && check_bwd) {
        double *Wd = tg_compact_f64(W, rows, cols, ldy);
        act_fd_ctx ctx = {.n = n, .W = Wd, .act = ref};
        double *g = tg_fd_grad(act_loss, &ctx, Xd, n, FD_H);
        snprintf(what, sizeof what, "%s bwd vs FD %dx%d", name, rows, cols);
        CHECK_REL(mat_err(dX, rows, cols, ldx + 2, g), TOL_FD, what);
        free(g);
        free(Wd);
      }
      if (check_bwd)
        CHECK(pad_intact(dX, rows, cols, ldx + 2, OUT_PAD), "%s bwd wrote padding", name);

      /* backward in place (dX == dY) gives the same values */
      float *Wi = copy_mat(W, rows, ldy);
      bwd(rows, cols, X, ldx, Wi, ldy, Wi, ldy);
      same = 1;
      for (int r = 0; r < rows; r++)
        same &= memcmp(&Wi[(size_t)r * ldy], &dX[(size_t)r * (ldx + 2)],
                       sizeof(float) * cols) == 0;
      if (check_bwd) CHECK(same, "%s bwd in place differs", name);

      free(Wi);
      free(dX);
      free(W);
      free(Xi);
      free(Y);
      free(yref);
      free(Xd);
      free(X);
    }
}

/* GELU elementwise over [-5, 5] (its negative tail included) and at extreme
 * inputs, where the derivative must be exactly 1 or 0 and never NaN. */
static void ref_gelu_pointwise(void) {
  enum { N = 1001 };
  float x[N], y[N], ones[N];
  double worst = 0;
  for (int i = 0; i < N; i++) {
    x[i] = (float)(-5.0 + 10.0 * i / (N - 1));
    ones[i] = 1.0f;
  }
  tg_cpu_gelu_fwd(1, N, x, N, y, N);
  for (int i = 0; i < N; i++) {
    double r = ref_gelu(x[i]);
    double e = fabs(y[i] - r) / fmax(fabs(r), 1e-30);
    if (x[i] != 0.0f && e > worst) worst = e;
  }
  if (ops_row_is("act_fwd"))
    CHECK(worst <= TOL_FWD, "gelu elementwise on [-5, 5]: rel err %.3e", worst);

  float xs[8] = {30.0f, -30.0f, 1e30f, -1e30f, 20.5f, -20.5f, 0.0f, -0.0f};
  float dd[8], yy[8];
  tg_cpu_gelu_bwd(1, 8, xs, 8, ones, 8, dd, 8);
  tg_cpu_gelu_fwd(1, 8, xs, 8, yy, 8);
  if (ops_row_is("act_bwd")) {
    CHECK(dd[0] == 1.0f && dd[2] == 1.0f && dd[4] == 1.0f, "gelu' for large x: %g %g %g",
          dd[0], dd[2], dd[4]);
    CHECK(dd[1] == 0.0f && dd[3] == 0.0f && dd[5] == 0.0f,
          "gelu' for very negative x: %g %g %g", dd[1], dd[3], dd[5]);
    CHECK(dd[6] == 0.5f && dd[7] == 0.5f, "gelu'(0) = %g", dd[6]);
    return;
  }
  CHECK(yy[0] == 30.0f && yy[2] == 1e30f && yy[1] == 0.0f && yy[3] == 0.0f &&
            yy[6] == 0.0f,
        "gelu at extremes: %g %g %g %g", yy[0], yy[1], yy[2], yy[3]);
}

static void ref_relu_nan(void) {
  float x[3] = {NAN, -1.0f, 2.0f}, y[3], dy[3] = {NAN, NAN, 3.0f}, dx[3];
  tg_cpu_relu_fwd(1, 3, x, 3, y, 3);
  if (ops_row_is("act_fwd")) CHECK(isnan(y[0]) && y[1] == 0.0f && y[2] == 2.0f, "relu NaN/neg/pos");
  tg_cpu_relu_bwd(1, 3, x, 3, dy, 3, dx, 3);
  if (ops_row_is("act_bwd")) CHECK(dx[0] == 0.0f && dx[1] == 0.0f && dx[2] == 3.0f,
        "relu_bwd selects dy where x > 0 only");
}

static void activation_ref(void) {
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  ref_activation(&rng, "relu", tg_cpu_relu_fwd, tg_cpu_relu_bwd, ref_relu, 1.0f);
  ref_relu_nan();
  ref_activation(&rng, "gelu", tg_cpu_gelu_fwd, tg_cpu_gelu_bwd, ref_gelu, 4.0f);
  ref_gelu_pointwise();
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int act_fwd_submit(const void *vctx, const tg_task_opts *o,
                          tg_tensor *out) {
  const hctx *c = vctx;
  return tg_act_fwd_insert((tg_activation)c->act, c->h[0], out[0].handle, o);
}

static int act_bwd_submit(const void *vctx, const tg_task_opts *o,
                          tg_tensor *out) {
  const hctx *c = vctx;
  if (c->ld_test) {
    tg_tensor px = {.handle = c->h[0], .rows = 0, .cols = 0, .dtype = TG_F32, .host = NULL};
    tg_tensor pdy = {.handle = c->h[1], .rows = 0, .cols = 0, .dtype = TG_F32, .host = NULL};
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

static void pair_activations(void) {
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
      hctx ctx = {
          .h = {X.handle, DY.handle}, .accum = TG_OVERWRITE, .act = act, .f = 0, .ld_test = 0};
      outspec o = {.name = "out", .rows = rows, .cols = cols, .init = NULL, .redux = 0, .tol = TOL};
      snprintf(what, sizeof what, "%s_fwd %dx%d", an, rows, cols);
      if (ops_row_is("act_fwd")) run_pair(what, act_fwd_submit, &ctx, 1, &o, NULL, NULL);
      snprintf(what, sizeof what, "%s_bwd %dx%d", an, rows, cols);
      if (ops_row_is("act_bwd")) run_pair(what, act_bwd_submit, &ctx, 1, &o, NULL, NULL);
      free(x);
      free(dy);
      tg_tensor_free(&X);
      tg_tensor_free(&DY);
    }
  /* strided: left halves of (rows, 2 cols) matrices */
  for (int act = 0; act < 2 && ops_row_is("act_bwd"); act++) {
    const int rows = 33, cols = 7;
    const size_t n = (size_t)rows * 2 * cols;
    float *x = rnd(n, 4.0f), *dy = rnd(n, 1.0f), *dx0 = rnd(n, 1.0f);
    tg_tensor X, DY;
    new_tensor(&X, rows, 2 * cols, x);
    new_tensor(&DY, rows, 2 * cols, dy);
    hctx ctx = {
        .h = {X.handle, DY.handle}, .accum = TG_OVERWRITE, .act = act, .f = 0, .ld_test = 1};
    outspec o = {.name = "dX(:, 0:cols) of (rows, 2 cols)",
                 .rows = rows,
                 .cols = 2 * cols,
                 .init = dx0,
                 .redux = 0,
                 .tol = TOL};
    run_pair(act == TG_ACT_RELU ? "relu_bwd ld=2cols" : "gelu_bwd ld=2cols",
             act_bwd_submit, &ctx, 1, &o, NULL, NULL);
    free(x);
    free(dy);
    free(dx0);
    tg_tensor_free(&X);
    tg_tensor_free(&DY);
  }
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

/* ReLU and GELU, forward and backward, out of place and in place (the API
 * allows Y == X and dX == dY) */
typedef struct activation {
  const char *fwd, *bwd; /* launcher names */
  cudaError_t (*cuda_fwd)(int, int, const float *, int, float *, int, cudaStream_t);
  void (*cpu_fwd)(int, int, const float *, int, float *, int);
  cudaError_t (*cuda_bwd)(int, int, const float *, int, const float *, int, float *, int,
                          cudaStream_t);
  void (*cpu_bwd)(int, int, const float *, int, const float *, int, float *, int);
  double tol; /* ReLU selects (exact); GELU evaluates exp */
} activation;

static const activation g_acts[2] = {{.fwd = "tg_cuda_relu_fwd",
                                      .bwd = "tg_cuda_relu_bwd",
                                      .cuda_fwd = tg_cuda_relu_fwd,
                                      .cpu_fwd = tg_cpu_relu_fwd,
                                      .cuda_bwd = tg_cuda_relu_bwd,
                                      .cpu_bwd = tg_cpu_relu_bwd,
                                      .tol = EXACT},
                                     {.fwd = "tg_cuda_gelu_fwd",
                                      .bwd = "tg_cuda_gelu_bwd",
                                      .cuda_fwd = tg_cuda_gelu_fwd,
                                      .cpu_fwd = tg_cpu_gelu_fwd,
                                      .cuda_bwd = tg_cuda_gelu_bwd,
                                      .cpu_bwd = tg_cpu_gelu_bwd,
                                      .tol = kTolEw}};

static void emu_activation(const activation *a, int rows, int cols, int ld, const float *X,
                            const float *dY) {
  const size_t n = (size_t)rows * ld;
  for (int inplace = 0; inplace < 2; inplace++) {
    float *o[2];
    if (inplace) {
      o[0] = tg_copy_f(X, n);
      o[1] = tg_copy_f(X, n);
    } else {
      outputs(o, rows, cols, ld, 0);
    }
    if (ops_row_is("act_fwd")) {
      ok(a->fwd, "", a->cuda_fwd(rows, cols, inplace ? o[0] : X, ld, o[0], ld, NULL));
      a->cpu_fwd(rows, cols, inplace ? o[1] : X, ld, o[1], ld);
      compare(a->fwd, inplace ? "in place" : "Y", o[0], o[1], n, a->tol);
    }
    free2(o);
    if (!ops_row_is("act_bwd")) continue;
    if (inplace) {
      o[0] = tg_copy_f(dY, n);
      o[1] = tg_copy_f(dY, n);
    } else {
      outputs(o, rows, cols, ld, 0);
    }
    ok(a->bwd, "", a->cuda_bwd(rows, cols, X, ld, inplace ? o[0] : dY, ld, o[0], ld, NULL));
    a->cpu_bwd(rows, cols, X, ld, inplace ? o[1] : dY, ld, o[1], ld);
    compare(a->bwd, inplace ? "in place" : "dX", o[0], o[1], n, a->tol);
    free2(o);
  }
}

static void emu_activations(void) {
  for (int s = 0; s < NSHAPES; s++) {
    FULL_ONLY(s != 1);
    const int rows = g_shapes[s][0], cols = g_shapes[s][1], ld = cols + 3;
    float *X = input(rows, cols, ld, 2.0f), *dY = input(rows, cols, ld, 1.0f);
    for (int a = 0; a < 2; a++) emu_activation(&g_acts[a], rows, cols, ld, X, dY);
    free(X);
    free(dY);
  }
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "act_fwd",
     .doc = "activation forward (ReLU, GELU tanh)",
     .buffers = "X (R), Y (W)",
     .covers = "tg_act_fwd_cl tg_act_fwd_insert tg_cuda_relu_fwd tg_cuda_gelu_fwd",
     .kernels = "tg_cpu_relu_fwd tg_cpu_gelu_fwd",
     .run = {[OPS_REF] = activation_ref, [OPS_CPU] = pair_activations,
             [OPS_CUDA] = pair_activations, [OPS_DEVICE] = pair_activations,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_activations)},
     .why_not = {[OPS_LOWP] = "in the linear_fwd row: the fused linear forward with GELU",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "act_bwd",
     .doc = "activation backward `dX = dY act'(X)`",
     .buffers = "X (R), dY (R), dX (W)",
     .covers = "tg_act_bwd_cl tg_act_bwd_insert tg_cuda_relu_bwd tg_cuda_gelu_bwd",
     .kernels = "tg_cpu_relu_bwd tg_cpu_gelu_bwd",
     .run = {[OPS_REF] = activation_ref, [OPS_CPU] = pair_activations,
             [OPS_CUDA] = pair_activations, [OPS_DEVICE] = pair_activations,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_activations)},
     .why_not = {[OPS_LOWP] = "in the linear_bwd_data row: the fused backward through GELU",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
