/*
 * Row adamw_multi (codelets/adamw_multi.c): AdamW of up to
 * TG_ADAMW_MULTI_MAX parameters in one task, f32 or mixed precision.
 *  cpu       with 1 and 2 CPU workers: 3 parameters of different shapes
 *            (remainders of the CPU kernel's chunks) through one task, bit
 *            for bit against one tg_adamw (f32) or tg_adamw_amp task per
 *            parameter (bf16 and fp16, flag clear and set, a parameter
 *            without a 16-bit copy among them); a task of 12; the
 *            wrapper's refusals; then the pair case;
 *  pair      the same 3 parameters on both workers (the second: CUDA or an
 *            emulated device), each side on its own copies: w, m, v and
 *            the 16-bit copies, bit for bit on a device, within 1e-6 on
 *            CUDA (as adamw_amp's row);
 *  cuda-emu  tg_cuda_adamw_multi against tg_cuda_adamw_amp and
 *            tg_cuda_adamw per tensor (the same device arithmetic: exact)
 *            and against the CPU kernels (1e-6).
 */

#include <errno.h>

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"

enum { NP = 3 };
static const int SHAPES[NP][2] = {{7, 33}, {1, 1025}, {40, 52}};

/* the parameters' tensors: w, grad, m, v, w_low (16-bit or none) */
typedef struct mparams {
  tg_tensor t[NP][5];
  int has_low[NP];
} mparams;

/* identical contents for every seed: w, grad, m, v (v >= 0) */
static void mparams_new(mparams *p, tg_dtype lowp, float grad_scale) {
  tg_rng rng = {.s = 9090};
  for (int i = 0; i < NP; i++) {
    int r = SHAPES[i][0], c = SHAPES[i][1];
    size_t n = (size_t)r * c;
    float *w = tg_rand_mat(&rng, r, c, c, 1.0f, 0.0f), *g = tg_rand_mat(&rng, r, c, c, grad_scale, 0.0f);
    float *m = tg_rand_mat(&rng, r, c, c, 0.1f, 0.0f), *v = tg_rand_mat(&rng, r, c, c, 0.01f, 0.0f);
    for (size_t k = 0; k < n; k++) v[k] = fabsf(v[k]);
    const float *src[4] = {w, g, m, v};
    for (int t = 0; t < 4; t++) new_f32(&p->t[i][t], r, c, src[t]);
    p->has_low[i] = lowp != TG_F32 && i != 1; /* parameter 1: no copy */
    if (p->has_low[i] && tg_tensor_alloc(&p->t[i][4], r, c, lowp) != 0) fatal_error("alloc");
    free(w); free(g); free(m); free(v);
  }
}

static void mparams_free(mparams *p) {
  for (int i = 0; i < NP; i++)
    for (int t = 0; t < 5; t++)
      if (t < 4 || p->has_low[i]) tg_tensor_free(&p->t[i][t]);
}

static int multi_submit(tg_dtype lowp, mparams *p, starpu_data_handle_t flag,
                        const tg_adamw_hyper *h, const tg_task_opts *o) {
  starpu_data_handle_t w[NP], g[NP], m[NP], v[NP], low[NP];
  for (int i = 0; i < NP; i++) {
    w[i] = p->t[i][0].handle; g[i] = p->t[i][1].handle;
    m[i] = p->t[i][2].handle; v[i] = p->t[i][3].handle;
    low[i] = p->has_low[i] ? p->t[i][4].handle : NULL;
  }
  return tg_adamw_multi_insert(lowp, NP, w, g, m, v, lowp != TG_F32 ? low : NULL, flag, h, o);
}

static int single_submit(tg_dtype lowp, mparams *p, starpu_data_handle_t flag,
                         const tg_adamw_hyper *h, const tg_task_opts *o) {
  for (int i = 0; i < NP; i++) {
    tg_tensor *x = p->t[i];
    int rc = lowp == TG_F32
                 ? tg_adamw_insert(x[0].handle, x[1].handle, x[2].handle, x[3].handle, h, o)
                 : tg_adamw_amp_insert(lowp, x[0].handle, x[1].handle, x[2].handle,
                                       x[3].handle, p->has_low[i] ? x[4].handle : NULL, flag,
                                       h, o);
    if (rc) return rc;
  }
  return 0;
}

/* every tensor of a and b, bytes equal (tol < 0) or within tol (floats) */
static void mparams_compare(const char *what, mparams *a, mparams *b, tg_dtype lowp, double tol) {
  for (int i = 0; i < NP; i++)
    for (int t = 0; t < 5; t++) {
      if (t == 1 || (t == 4 && !a->has_low[i])) continue;
      tg_dtype dt = t == 4 ? lowp : TG_F32;
      float *x = read_as_f32(&a->t[i][t], dt), *y = read_as_f32(&b->t[i][t], dt);
      size_t n = tg_tensor_numel(&a->t[i][t]);
      char label[96];
      snprintf(label, sizeof label, "%s: parameter %d, tensor %d", what, i, t);
      if (tol < 0) CHECK(!memcmp(x, y, n * sizeof *x), "%s differs", label);
      else pair_compare(label, x, y, n, t == 4 ? half_ulp(dt) : tol);
      free(x);
      free(y);
    }
}

static const tg_adamw_hyper HYPER = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f / 256, 3};

/* ---- cpu ----------------------------------------------------------------------- */

static void cpu_cases(void) {
  static const tg_dtype types[3] = {TG_F32, TG_BF16, TG_F16};
  for (int ti = 0; ti < 3; ti++)
    for (int set = 0; set < (types[ti] == TG_F32 ? 1 : 2); set++) {
      tg_dtype lp = types[ti];
      tg_adamw_hyper h = HYPER;
      if (lp == TG_F32) h.grad_scale = 1.0f;
      mparams a, b;
      mparams_new(&a, lp, 256.0f);
      mparams_new(&b, lp, 256.0f);
      tg_tensor flag;
      float f = (float)set;
      new_f32(&flag, 1, 1, &f);
      starpu_data_handle_t fh = lp == TG_F32 ? NULL : flag.handle;
      CHECK(multi_submit(lp, &a, fh, &h, NULL) == 0, "adamw_multi: %s", tg_last_error());
      CHECK(single_submit(lp, &b, fh, &h, NULL) == 0, "adamw per tensor: %s", tg_last_error());
      char what[64];
      snprintf(what, sizeof what, "adamw_multi %s flag=%d vs per tensor", tg_dtype_name(lp), set);
      mparams_compare(what, &a, &b, lp, -1);
      mparams_free(&a);
      mparams_free(&b);
      tg_tensor_free(&flag);
    }
  /* a full task of TG_ADAMW_MULTI_MAX */
  tg_tensor t[TG_ADAMW_MULTI_MAX][4];
  starpu_data_handle_t hd[4][TG_ADAMW_MULTI_MAX];
  float *x = rnd(64, 1.0f);
  for (int i = 0; i < TG_ADAMW_MULTI_MAX; i++)
    for (int k = 0; k < 4; k++) {
      new_f32(&t[i][k], 1, 64, x);
      hd[k][i] = t[i][k].handle;
    }
  tg_adamw_hyper h = HYPER;
  CHECK(tg_adamw_multi_insert(TG_F32, TG_ADAMW_MULTI_MAX, hd[0], hd[1], hd[2], hd[3], NULL,
                              NULL, &h, NULL) == 0, "adamw_multi of %d: %s", TG_ADAMW_MULTI_MAX,
        tg_last_error());
  float *w0 = read_as_f32(&t[0][0], TG_F32), *wl = read_as_f32(&t[TG_ADAMW_MULTI_MAX - 1][0], TG_F32);
  CHECK(!memcmp(w0, wl, 64 * sizeof *w0) && memcmp(w0, x, 64 * sizeof *w0),
        "adamw_multi of %d: the first and last parameters differ or did not change",
        TG_ADAMW_MULTI_MAX);
  free(w0); free(wl); free(x);
  for (int i = 0; i < TG_ADAMW_MULTI_MAX; i++)
    for (int k = 0; k < 4; k++) tg_tensor_free(&t[i][k]);
}

static void refusals(void) {
  static const char op[] = "tg_adamw_multi";
  mparams p;
  mparams_new(&p, TG_BF16, 1.0f);
  tg_tensor flag, f2;
  new_f32(&flag, 1, 1, NULL);
  new_f32(&f2, 2, 1, NULL);
  starpu_data_handle_t w[2] = {p.t[0][0].handle, p.t[2][0].handle},
                       g[2] = {p.t[0][1].handle, p.t[2][1].handle},
                       m[2] = {p.t[0][2].handle, p.t[2][2].handle},
                       v[2] = {p.t[0][3].handle, p.t[2][3].handle},
                       low[2] = {p.t[0][4].handle, p.t[2][4].handle},
                       gbad[2] = {p.t[0][1].handle, p.t[1][1].handle}, /* another shape */
                       wdup[2] = {p.t[0][0].handle, p.t[0][0].handle},
                       lbad[2] = {p.t[2][4].handle, p.t[0][4].handle};
  tg_adamw_hyper h = HYPER;
  CHECK_REFUSED(tg_adamw_multi_insert(TG_BF16, 0, w, g, m, v, low, flag.handle, &h, NULL), op,
                "no parameter");
  CHECK_REFUSED(tg_adamw_multi_insert(TG_BF16, TG_ADAMW_MULTI_MAX + 1, w, g, m, v, low,
                                      flag.handle, &h, NULL), op, "too many");
  CHECK_REFUSED(tg_adamw_multi_insert(TG_BF16, 2, w, g, m, v, low, NULL, &h, NULL), op,
                "bf16 without the flag");
  CHECK_REFUSED(tg_adamw_multi_insert(TG_BF16, 2, w, g, m, v, low, f2.handle, &h, NULL), op,
                "a (2, 1) flag");
  CHECK_REFUSED(tg_adamw_multi_insert(TG_F32, 2, w, g, m, v, low, NULL, &h, NULL), op,
                "f32 with 16-bit copies");
  CHECK_REFUSED(tg_adamw_multi_insert(TG_BF16, 2, w, gbad, m, v, low, flag.handle, &h, NULL),
                op, "a gradient of another shape");
  CHECK_REFUSED(tg_adamw_multi_insert(TG_BF16, 2, wdup, g, m, v, low, flag.handle, &h, NULL),
                op, "a weight twice");
  CHECK_REFUSED(tg_adamw_multi_insert(TG_BF16, 2, w, g, m, v, lbad, flag.handle, &h, NULL), op,
                "a copy of another shape");
  CHECK_REFUSED(tg_adamw_multi_insert(TG_I32, 2, w, g, m, v, low, flag.handle, &h, NULL), op,
                "int copies");
  h.step = 0;
  CHECK_REFUSED(tg_adamw_multi_insert(TG_BF16, 2, w, g, m, v, low, flag.handle, &h, NULL), op,
                "step 0");
  mparams_free(&p);
  tg_tensor_free(&flag);
  tg_tensor_free(&f2);
}

static void cpu_body(void) {
  cpu_cases();
  refusals();
}

/* ---- pair ---------------------------------------------------------------------- */

static void pair_adamw_multi(void) {
  static const tg_dtype types[3] = {TG_F32, TG_BF16, TG_F16};
  for (int ti = 0; ti < 3; ti++) {
    tg_dtype lp = types[ti];
    tg_adamw_hyper h = HYPER;
    if (lp == TG_F32) h.grad_scale = 1.0f;
    mparams side[2];
    tg_tensor flag;
    float zero = 0.0f;
    new_f32(&flag, 1, 1, &zero);
    for (int s = 0; s < 2; s++) {
      mparams_new(&side[s], lp, 256.0f);
      tg_task_opts o = on_worker(s ? g_cuda_worker : g_cpu_worker);
      CHECK(multi_submit(lp, &side[s], lp == TG_F32 ? NULL : flag.handle, &h, &o) == 0,
            "adamw_multi on %s: %s", s ? pair_second_name() : "CPU", tg_last_error());
    }
    char what[64];
    snprintf(what, sizeof what, "adamw_multi %s", tg_dtype_name(lp));
    mparams_compare(what, &side[0], &side[1], lp, pair_bitwise() ? -1 : TOL);
    mparams_free(&side[0]);
    mparams_free(&side[1]);
    tg_tensor_free(&flag);
  }
}

static void adamw_multi_cpu(void) {
  ops_run_worker_counts(cpu_body);
  pair_adamw_multi();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ------------------------------------------------------------------ */

static void emu_adamw_multi(void) {
  static const tg_dtype types[3] = {TG_F32, TG_BF16, TG_F16};
  const size_t numel[NP] = {231, 1025, 2080};
  for (int ti = 0; ti < 3; ti++)
    for (int skip = 0; skip < (ti ? 2 : 1); skip++) {
      const tg_dtype lp = types[ti];
      const float flag = (float)skip, *fl = lp == TG_F32 ? NULL : &flag;
      float *w[3][NP], *m[3][NP], *v[3][NP], *g[NP];
      uint16_t *low[3][NP];
      for (int i = 0; i < NP; i++) {
        g[i] = input(1, (int)numel[i], (int)numel[i], 4.0f);
        float *w0 = input(1, (int)numel[i], (int)numel[i], 1.0f),
              *m0 = input(1, (int)numel[i], (int)numel[i], 0.1f),
              *v0 = input(1, (int)numel[i], (int)numel[i], 0.01f);
        for (size_t k = 0; k < numel[i]; k++) v0[k] = fabsf(v0[k]);
        for (int s = 0; s < 3; s++) { /* multi, per-tensor launch, CPU */
          w[s][i] = fmalloc(numel[i]); m[s][i] = fmalloc(numel[i]); v[s][i] = fmalloc(numel[i]);
          memcpy(w[s][i], w0, numel[i] * 4); memcpy(m[s][i], m0, numel[i] * 4);
          memcpy(v[s][i], v0, numel[i] * 4);
          low[s][i] = lp != TG_F32 && i != 1 ? tg_test_malloc(2 * numel[i]) : NULL;
        }
        free(w0); free(m0); free(v0);
      }
      const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 1e-2f, bc1 = 0.1f,
                  bc2 = 0.001f, gs = lp == TG_F32 ? 1.0f : 0.25f;
      ok("tg_cuda_adamw_multi", "",
         tg_cuda_adamw_multi(NP, w[0], (const float *const *)g, m[0], v[0], low[0], numel, fl,
                             lp, lr, b1, b2, eps, wd, bc1, bc2, gs, NULL));
      for (int i = 0; i < NP; i++) {
        if (lp == TG_F32) {
          ok("tg_cuda_adamw", "", tg_cuda_adamw(numel[i], w[1][i], g[i], m[1][i], v[1][i], lr,
                                                 b1, b2, eps, wd, bc1, bc2, gs, NULL));
          tg_cpu_adamw(numel[i], w[2][i], g[i], m[2][i], v[2][i], lr, b1, b2, eps, wd, bc1,
                       bc2, gs);
        } else {
          ok("tg_cuda_adamw_amp", "",
             tg_cuda_adamw_amp(numel[i], w[1][i], g[i], m[1][i], v[1][i], fl, lp, low[1][i], lr,
                               b1, b2, eps, wd, bc1, bc2, gs, NULL));
          tg_cpu_adamw_amp(numel[i], w[2][i], g[i], m[2][i], v[2][i], fl, lp, low[2][i], lr,
                           b1, b2, eps, wd, bc1, bc2, gs);
        }
        compare("tg_cuda_adamw_multi", "w (per-tensor launch)", w[0][i], w[1][i], numel[i], EXACT);
        compare("tg_cuda_adamw_multi", "m (per-tensor launch)", m[0][i], m[1][i], numel[i], EXACT);
        compare("tg_cuda_adamw_multi", "v (per-tensor launch)", v[0][i], v[1][i], numel[i], EXACT);
        compare("tg_cuda_adamw_multi", "w (CPU)", w[0][i], w[2][i], numel[i], skip ? EXACT : kTolEw);
        if (low[0][i])
          compare16("tg_cuda_adamw_multi", "w_low (per-tensor launch)", lp, low[0][i], low[1][i],
                    numel[i]);
        for (int s = 0; s < 3; s++) {
          free(w[s][i]); free(m[s][i]); free(v[s][i]); free(low[s][i]);
        }
        free(g[i]);
      }
    }
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "adamw_multi",
     .doc = "AdamW of up to 12 parameters in one task (f32, or mixed precision with the "
            "overflow flag and 16-bit copies), the bits of a task per parameter",
     .buffers = "per parameter w (RW), grad (R), m (RW), v (RW), w_low (W, optional); "
                "flag (R, mixed precision)",
     .covers = "tg_adamw_multi_cl tg_adamw_multi_insert tg_cuda_adamw_multi",
     .kernels = "",
     .run = {[OPS_CPU] = adamw_multi_cpu, [OPS_CUDA] = pair_adamw_multi,
             [OPS_DEVICE] = pair_adamw_multi, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_adamw_multi)},
     .why_not = {[OPS_REF] = "no CPU kernel of its own: it runs tg_cpu_adamw or "
                             "tg_cpu_adamw_amp per parameter (rows adamw, adamw_amp)",
                 [OPS_LOWP] = "the codelet takes its 16-bit copies itself (no adapter)",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
