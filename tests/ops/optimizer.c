/*
 * Rows sgd and adamw (codelets/optimizer.c): SGD with momentum and AdamW;
 * each case checks its row's op.
 *  ref       several steps against a double reference that uses the same
 *            float hyperparameters: w and the optimizer state within 1e-5,
 *            the total update w - w0 within 1e-4;
 *  pair      both optimizers, odd sizes;
 *  cuda-emu  sizes 1, 1000 and 70001 (274 blocks), two AdamW steps.
 */

#include "ref_util.h"
#include "pair.h"

/* ---- ref --------------------------------------------------------------------- */

static void ref_sgd(tg_rng *rng) {
  static const struct {
    float lr, momentum, wd, gscale;
  } hp[] = {{0.05f, 0.9f, 0.01f, 0.5f}, {0.1f, 0.0f, 0.0f, 1.0f},
            {0.02f, 0.8f, 0.1f, 2.0f}};
  for (size_t h = 0; h < sizeof hp / sizeof hp[0]; h++)
    for (int is = 0; is < NSIZES; is++) {
      size_t n = (size_t)SIZES[is] * (is == 3 ? 3 : 1); /* 1 7 33 771 */
      float *w = tg_rand_mat(rng, 1, (int)n, (int)n, 1.0f, 0);
      float *vel = tg_const_mat(1, (int)n, (int)n, 0.0f, 0);
      double *wd = tg_compact_f64(w, 1, (int)n, (int)n);
      double *w0 = tg_compact_f64(w, 1, (int)n, (int)n);
      double *vd = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) vd[i] = 0;
      double lr = hp[h].lr, mom = hp[h].momentum, dec = hp[h].wd,
             gs = hp[h].gscale;
      for (int step = 0; step < 5; step++) {
        float *g = tg_rand_mat(rng, 1, (int)n, (int)n, 1.0f, 0);
        for (size_t i = 0; i < n; i++) {
          double gi = gs * g[i] + dec * wd[i];
          vd[i] = mom * vd[i] + gi;
          wd[i] -= lr * vd[i];
        }
        tg_cpu_sgd(n, w, g, vel, hp[h].lr, hp[h].momentum, hp[h].wd,
                   hp[h].gscale);
        free(g);
      }
      CHECK_REL(tg_rel_err_f64(w, wd, n), 1e-5, "sgd w");
      CHECK_REL(tg_rel_err_f64(vel, vd, n), 1e-5, "sgd velocity");
      double *dw = tg_test_malloc(sizeof(double) * n), *dref = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) {
        dw[i] = (double)w[i] - w0[i];
        dref[i] = wd[i] - w0[i];
      }
      CHECK_REL(rel_err_dd(dw, dref, n), 1e-4, "sgd update w - w0");
      free(dw);
      free(dref);
      free(vd);
      free(w0);
      free(wd);
      free(vel);
      free(w);
    }
}

static void ref_adamw(tg_rng *rng) {
  static const struct {
    float lr, b1, b2, eps, wd, gscale;
  } hp[] = {{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.25f},
            {3e-3f, 0.8f, 0.99f, 1e-6f, 0.0f, 1.0f},
            {5e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 4.0f}};
  for (size_t h = 0; h < sizeof hp / sizeof hp[0]; h++)
    for (int is = 0; is < NSIZES; is++) {
      size_t n = (size_t)SIZES[is] * (is == 3 ? 3 : 1);
      float *w = tg_rand_mat(rng, 1, (int)n, (int)n, 1.0f, 0);
      float *m = tg_const_mat(1, (int)n, (int)n, 0.0f, 0);
      float *v = tg_const_mat(1, (int)n, (int)n, 0.0f, 0);
      double *wd = tg_compact_f64(w, 1, (int)n, (int)n);
      double *w0 = tg_compact_f64(w, 1, (int)n, (int)n);
      double *md = tg_test_malloc(sizeof(double) * n), *vd = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) md[i] = vd[i] = 0;
      /* the reference uses the same float hyperparameters, in double */
      double lr = hp[h].lr, b1 = hp[h].b1, b2 = hp[h].b2, eps = hp[h].eps,
             dec = hp[h].wd, gs = hp[h].gscale;
      for (int t = 1; t <= 6; t++) {
        float bc1 = (float)(1.0 - pow(hp[h].b1, t));
        float bc2 = (float)(1.0 - pow(hp[h].b2, t));
        float *g = tg_rand_mat(rng, 1, (int)n, (int)n, 1.0f, 0);
        for (size_t i = 0; i < n; i++) {
          double gi = gs * g[i];
          wd[i] *= 1.0 - lr * dec;
          md[i] = b1 * md[i] + (1.0 - b1) * gi;
          vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
          wd[i] -= lr * (md[i] / bc1) / (sqrt(vd[i] / bc2) + eps);
        }
        tg_cpu_adamw(n, w, g, m, v, hp[h].lr, hp[h].b1, hp[h].b2, hp[h].eps,
                     hp[h].wd, bc1, bc2, hp[h].gscale);
        free(g);
      }
      CHECK_REL(tg_rel_err_f64(w, wd, n), 1e-5, "adamw w");
      CHECK_REL(tg_rel_err_f64(m, md, n), 1e-5, "adamw m");
      CHECK_REL(tg_rel_err_f64(v, vd, n), 1e-5, "adamw v");
      double *dw = tg_test_malloc(sizeof(double) * n), *dref = tg_test_malloc(sizeof(double) * n);
      for (size_t i = 0; i < n; i++) {
        dw[i] = (double)w[i] - w0[i];
        dref[i] = wd[i] - w0[i];
      }
      CHECK_REL(rel_err_dd(dw, dref, n), 1e-4, "adamw update w - w0");
      free(dw);
      free(dref);
      free(md);
      free(vd);
      free(w0);
      free(wd);
      free(v);
      free(m);
      free(w);
    }
}

static void sgd_ref(void) {
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  ref_sgd(&rng);
}

static void adamw_ref(void) {
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  ref_adamw(&rng);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

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

static void pair_optimizers(void) {
  for (int s = 0; s < NSHAPES; s++) {
    const int rows = g_shapes[s][0], cols = g_shapes[s][1];
    const size_t n = (size_t)rows * cols;
    char what[128];
    float *w = rnd(n, 1.0f), *g = rnd(n, 1.0f), *m = rnd(n, 0.1f),
          *v = rnd(n, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    tg_tensor G;
    new_tensor(&G, rows, cols, g);
    opt_ctx sgd = {.grad = G.handle, .adam = 0}, adam = {G.handle, 1};
    outspec os[2] = {
        {.name = "w", .rows = rows, .cols = cols, .init = w, .redux = 0, .tol = TOL},
        {.name = "vel", .rows = rows, .cols = cols, .init = m, .redux = 0, .tol = TOL}};
    snprintf(what, sizeof what, "sgd %dx%d", rows, cols);
    if (ops_row_is("sgd")) run_pair(what, opt_submit, &sgd, 2, os, NULL, NULL);
    outspec oa[3] = {{.name = "w", .rows = rows, .cols = cols, .init = w, .redux = 0, .tol = TOL},
                     {.name = "m", .rows = rows, .cols = cols, .init = m, .redux = 0, .tol = TOL},
                     {.name = "v", .rows = rows, .cols = cols, .init = v, .redux = 0, .tol = TOL}};
    snprintf(what, sizeof what, "adamw %dx%d", rows, cols);
    if (ops_row_is("adamw")) run_pair(what, opt_submit, &adam, 3, oa, NULL, NULL);
    free(w);
    free(g);
    free(m);
    free(v);
    tg_tensor_free(&G);
  }
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_optimizers(void) {
  static const size_t sizes[] = {1, 1000, 70001}; /* 70001: 274 blocks */
  for (int s = 0; s < 3; s++) {
    FULL_ONLY(s == 2);
    const size_t n = sizes[s];
    float *g = input(1, (int)n, (int)n, 1.0f);
    float *w[2], *m[2], *v[2];
    outputs(w, 1, (int)n, (int)n, 1);
    outputs(m, 1, (int)n, (int)n, 1);
    if (ops_row_is("sgd")) {
      ok("tg_cuda_sgd", "", tg_cuda_sgd(n, w[0], g, m[0], 0.1f, 0.9f, 1e-2f, 0.5f, NULL));
      tg_cpu_sgd(n, w[1], g, m[1], 0.1f, 0.9f, 1e-2f, 0.5f);
      compare("tg_cuda_sgd", "w", w[0], w[1], n, kTolEw);
      compare("tg_cuda_sgd", "vel", m[0], m[1], n, kTolEw);
    }
    free2(m);
    outputs(m, 1, (int)n, (int)n, 1);
    outputs(v, 1, (int)n, (int)n, 1);
    for (size_t i = 0; i < n; i++) v[0][i] = v[1][i] = fabsf(v[0][i]); /* second moments >= 0 */
    for (int step = 1; step <= 2 && ops_row_is("adamw"); step++) {
      const float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.999f, (float)step);
      ok("tg_cuda_adamw", "", tg_cuda_adamw(n, w[0], g, m[0], v[0], 1e-2f, 0.9f, 0.999f, 1e-8f,
                                            1e-2f, bc1, bc2, 0.5f, NULL));
      tg_cpu_adamw(n, w[1], g, m[1], v[1], 1e-2f, 0.9f, 0.999f, 1e-8f, 1e-2f, bc1, bc2, 0.5f);
      compare("tg_cuda_adamw", "w", w[0], w[1], n, kTolEw);
      compare("tg_cuda_adamw", "m", m[0], m[1], n, kTolEw);
      compare("tg_cuda_adamw", "v", v[0], v[1], n, kTolEw);
    }
    free2(w);
    free2(m);
    free2(v);
    free(g);
  }
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "sgd",
     .doc = "SGD with momentum",
     .buffers = "w (RW), grad (R), velocity (RW)",
     .covers = "tg_sgd_cl tg_sgd_insert tg_cuda_sgd",
     .kernels = "tg_cpu_sgd",
     .run = {[OPS_REF] = sgd_ref, [OPS_CPU] = pair_optimizers, [OPS_CUDA] = pair_optimizers,
             [OPS_DEVICE] = pair_optimizers, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_optimizers)},
     .why_not = {[OPS_LOWP] = "master weights and optimizer state stay f32",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "adamw",
     .doc = "AdamW (decoupled decay, bias correction)",
     .buffers = "w (RW), grad (R), m (RW), v (RW)",
     .covers = "tg_adamw_cl tg_adamw_insert tg_cuda_adamw",
     .kernels = "tg_cpu_adamw",
     .run = {[OPS_REF] = adamw_ref, [OPS_CPU] = pair_optimizers, [OPS_CUDA] = pair_optimizers,
             [OPS_DEVICE] = pair_optimizers, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_optimizers)},
     .why_not = {[OPS_LOWP] = "master weights and optimizer state stay f32 (the 16-bit "
                              "update is the adamw_amp row)",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
