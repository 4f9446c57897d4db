/*
 * Row linear_bwd (codelets/linear_bwd.c): a linear layer's whole backward
 * in one task, the fusion of the rows linear_bwd_data and
 * linear_bwd_weight that the GPT's backward uses on CUDA workers.  Its
 * kernels are theirs, so its checks are against them, bit for bit:
 *  cpu       f32, GELU and no activation, overwritten and accumulated
 *            gradients: dX, dW, db equal to tg_linear_bwd_data then
 *            tg_linear_bwd_weight on the same worker; then the pair cases;
 *  pair      f32 (dX, dW, db), rows 33 and 64, GELU;
 *  lowp      bf16 and fp16 dZ, W, X, Zprev, dX, GELU and none, overwritten
 *            and accumulated: equal to the two codelets through the
 *            low-precision adapter, with the CPU's native bf16 GEMMs on
 *            and off (the adapter keeps dZ and W in bf16 in one case and
 *            widens them in the other; the fused task must do the same),
 *            with 1 and 2 CPU workers; mixed element types and 16-bit
 *            buffers without opts.lowp refused;
 *  cuda-emu  its cuBLASLt weight launcher (dW and db in one GEMM, the bias
 *            gradient in the epilogue), against the CPU's 16-bit GEMM and
 *            bias gradient (tolerances at the case); the other launchers
 *            it runs are in the linear_bwd_data, gemm_lowp and bias rows.
 *
 * Row linear_layernorm_bwd: the same task with the backward of the
 * LayerNorm that fed the layer after it (tg_linear_layernorm_bwd_insert,
 * the GPT's fc and qkv layers on CUDA workers).  Against tg_linear_bwd then
 * tg_layernorm_bwd, bit for bit: dX, dW, db, the residual gradient dR and
 * the LayerNorm's dw, db, both overwritten and accumulated, in f32 (cpu)
 * and bf16/fp16 (lowp, native bf16 GEMMs on and off: the LayerNorm part
 * does the adapter's conversions itself); the CPU against the CUDA worker
 * or an emulated device within TOL (pair: their kernels round apart);
 * LayerNorm buffers of the wrong shape or type refused.
 */

#include <math.h>

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"
#include "taskgrad/precision_kernels.h"

typedef struct lb_case {
  int rows, out, in;
  tg_activation act;
  tg_accum accum;
} lb_case;

/* The fused task and the two it replaces on tensors of type t (TG_F32 or
 * 16-bit) with opts o; returns 1 when dX, dW and db agree bit for bit. */
static int lb_compare(const lb_case *k, tg_dtype t, const tg_task_opts *o) {
  tg_rng rng = {.s = 77 + (uint64_t)k->rows * 131 + (uint64_t)k->act};
  int has_z = k->act != TG_ACT_NONE;
  float *dz = rounded_rand(&rng, t, k->rows, k->out, 1.0f);
  float *w = rounded_rand(&rng, t, k->out, k->in, 0.5f);
  float *x = rounded_rand(&rng, t, k->rows, k->in, 1.0f);
  float *zp = rounded_rand(&rng, t, k->rows, k->in, 2.0f);
  float *dw0 = tg_rand_mat(&rng, k->out, k->in, k->in, 1.0f, 0.0f);
  float *db0 = tg_rand_mat(&rng, 1, k->out, k->out, 1.0f, 0.0f);
  tg_tensor DZ, Wt, X, ZP, DX, DX2, dW, db, dW2, db2;
  if (t == TG_F32) {
    new_f32(&DZ, k->rows, k->out, dz);
    new_f32(&Wt, k->out, k->in, w);
    new_f32(&X, k->rows, k->in, x);
    new_f32(&ZP, k->rows, k->in, zp);
    new_f32(&DX, k->rows, k->in, NULL);
    new_f32(&DX2, k->rows, k->in, NULL);
  } else {
    new_low(&DZ, t, k->rows, k->out, dz);
    new_low(&Wt, t, k->out, k->in, w);
    new_low(&X, t, k->rows, k->in, x);
    new_low(&ZP, t, k->rows, k->in, zp);
    CHECK(tg_tensor_alloc(&DX, k->rows, k->in, t) == 0 &&
              tg_tensor_alloc(&DX2, k->rows, k->in, t) == 0,
          "alloc");
  }
  new_f32(&dW, k->out, k->in, dw0);
  new_f32(&db, 1, k->out, db0);
  new_f32(&dW2, k->out, k->in, dw0);
  new_f32(&db2, 1, k->out, db0);
  starpu_data_handle_t z = has_z ? ZP.handle : NULL;
  CHECK(tg_linear_bwd_insert(DZ.handle, Wt.handle, k->act, z, X.handle, DX.handle, dW.handle,
                             db.handle, k->accum, o) == 0,
        "fused: %s", tg_last_error());
  CHECK(tg_linear_bwd_data_insert(DZ.handle, Wt.handle, k->act, z, DX2.handle, o) == 0,
        "bwd_data: %s", tg_last_error());
  CHECK(tg_linear_bwd_weight_insert(DZ.handle, X.handle, dW2.handle, db2.handle, k->accum, o) ==
            0,
        "bwd_weight: %s", tg_last_error());
  const tg_tensor *got[] = {&DX, &dW, &db}, *want[] = {&DX2, &dW2, &db2};
  int same = 1;
  for (int i = 0; i < 3; i++) {
    tg_dtype dt = i == 0 ? t : TG_F32;
    float *a = read_as_f32(got[i], dt), *b = read_as_f32(want[i], dt);
    same &= same_bits(a, b, (size_t)got[i]->rows * got[i]->cols);
    free(a);
    free(b);
  }
  tg_tensor *all[] = {&DZ, &Wt, &X, &ZP, &DX, &DX2, &dW, &db, &dW2, &db2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(dz); free(w); free(x); free(zp); free(dw0); free(db0);
  return same;
}

/* ---- linear_layernorm_bwd ------------------------------------------------------ */

/* The LayerNorm's tensors: input x (type t), weight (f32), statistics,
 * the residual gradient dR (type t) and dw, db, twice (fused, reference). */
typedef struct ln_set {
  tg_tensor x, w, mean, rstd, dr[2], dw[2], db[2];
} ln_set;

/* The statistics are x's own (float64, the kernels' eps): the CPU kernel
 * re-centres the normalised row by its mean, the CUDA kernel does not, so
 * statistics that are not x's (random ones) make them disagree by far more
 * than rounding, on inputs no forward can produce. */
static void ln_set_new(ln_set *L, tg_rng *rng, tg_dtype t, int rows, int C) {
  float *x = rounded_rand(rng, t, rows, C, 2.0f), *w = tg_rand_mat(rng, 1, C, C, 1.0f, 0.0f);
  float *mean = xmalloc(sizeof(float) * rows), *rstd = xmalloc(sizeof(float) * rows);
  for (int r = 0; r < rows; r++) {
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += x[(size_t)r * C + c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[(size_t)r * C + c] - m) * (x[(size_t)r * C + c] - m);
    mean[r] = (float)m;
    rstd[r] = (float)(1.0 / sqrt(v / C + 1e-5));
  }
  float *dr = rounded_rand(rng, t, rows, C, 1.0f), *dw = tg_rand_mat(rng, 1, C, C, 1.0f, 0.0f);
  float *db = tg_rand_mat(rng, 1, C, C, 1.0f, 0.0f);
  if (t == TG_F32) new_f32(&L->x, rows, C, x);
  else new_low(&L->x, t, rows, C, x);
  new_f32(&L->w, 1, C, w);
  new_f32(&L->mean, rows, 1, mean);
  new_f32(&L->rstd, rows, 1, rstd);
  for (int i = 0; i < 2; i++) {
    if (t == TG_F32) new_f32(&L->dr[i], rows, C, dr);
    else new_low(&L->dr[i], t, rows, C, dr);
    new_f32(&L->dw[i], 1, C, dw);
    new_f32(&L->db[i], 1, C, db);
  }
  free(x); free(w); free(mean); free(rstd); free(dr); free(dw); free(db);
}

static void ln_set_free(ln_set *L) {
  tg_tensor *all[] = {&L->x, &L->w, &L->mean, &L->rstd, &L->dr[0], &L->dr[1],
                      &L->dw[0], &L->dw[1], &L->db[0], &L->db[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
}

static tg_layernorm_bwd_part ln_part(const ln_set *L, int i, tg_accum accum) {
  return (tg_layernorm_bwd_part){.x = L->x.handle, .w = L->w.handle, .mean = L->mean.handle,
                                 .rstd = L->rstd.handle, .dres = L->dr[i].handle,
                                 .dw = L->dw[i].handle, .db = L->db[i].handle, .accum = accum};
}

/* The fused task against tg_linear_bwd then tg_layernorm_bwd; 1 when the
 * six outputs agree bit for bit. */
static int lnb_compare(int rows, int out, int in, tg_accum accum, tg_accum ln_accum, tg_dtype t,
                       const tg_task_opts *o) {
  tg_rng rng = {.s = 91 + (uint64_t)rows * 7 + (uint64_t)ln_accum};
  float *dz = rounded_rand(&rng, t, rows, out, 1.0f);
  float *w = rounded_rand(&rng, t, out, in, 0.5f);
  float *x = rounded_rand(&rng, t, rows, in, 1.0f);
  float *dw0 = tg_rand_mat(&rng, out, in, in, 1.0f, 0.0f);
  float *db0 = tg_rand_mat(&rng, 1, out, out, 1.0f, 0.0f);
  tg_tensor DZ, Wt, X, DX[2], dW[2], db[2];
  if (t == TG_F32) {
    new_f32(&DZ, rows, out, dz);
    new_f32(&Wt, out, in, w);
    new_f32(&X, rows, in, x);
  } else {
    new_low(&DZ, t, rows, out, dz);
    new_low(&Wt, t, out, in, w);
    new_low(&X, t, rows, in, x);
  }
  for (int i = 0; i < 2; i++) {
    CHECK(tg_tensor_alloc(&DX[i], rows, in, t) == 0, "alloc");
    new_f32(&dW[i], out, in, dw0);
    new_f32(&db[i], 1, out, db0);
  }
  ln_set L;
  ln_set_new(&L, &rng, t, rows, in);
  tg_layernorm_bwd_part p = ln_part(&L, 0, ln_accum);
  CHECK(tg_linear_layernorm_bwd_insert(DZ.handle, Wt.handle, X.handle, DX[0].handle,
                                       dW[0].handle, db[0].handle, accum, &p, o) == 0,
        "fused: %s", tg_last_error());
  CHECK(tg_linear_bwd_insert(DZ.handle, Wt.handle, TG_ACT_NONE, NULL, X.handle, DX[1].handle,
                             dW[1].handle, db[1].handle, accum, o) == 0,
        "linear_bwd: %s", tg_last_error());
  CHECK(tg_layernorm_bwd_insert(DX[1].handle, L.x.handle, L.w.handle, L.mean.handle,
                                L.rstd.handle, L.dr[1].handle, L.dw[1].handle, L.db[1].handle,
                                ln_accum, o) == 0,
        "layernorm_bwd: %s", tg_last_error());
  const tg_tensor *got[] = {&DX[0], &dW[0], &db[0], &L.dr[0], &L.dw[0], &L.db[0]};
  const tg_tensor *want[] = {&DX[1], &dW[1], &db[1], &L.dr[1], &L.dw[1], &L.db[1]};
  int same = 1;
  for (int i = 0; i < 6; i++) {
    tg_dtype dt = i == 0 || i == 3 ? t : TG_F32;
    float *a = read_as_f32(got[i], dt), *b = read_as_f32(want[i], dt);
    same &= same_bits(a, b, tg_tensor_numel(got[i]));
    free(a);
    free(b);
  }
  ln_set_free(&L);
  tg_tensor *all[] = {&DZ, &Wt, &X, &DX[0], &DX[1], &dW[0], &dW[1], &db[0], &db[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(dz); free(w); free(x); free(dw0); free(db0);
  return same;
}

/* rows, out, in, the linear and the LayerNorm accumulations */
static const struct { int rows, out, in; tg_accum accum, ln_accum; } kLnCases[] = {
    {37, 29, 45, TG_OVERWRITE, TG_OVERWRITE}, {37, 29, 45, TG_ACCUMULATE, TG_ACCUMULATE},
    {64, 257, 33, TG_OVERWRITE, TG_ACCUMULATE}, {1, 1, 1, TG_ACCUMULATE, TG_OVERWRITE}};
#define NLN (int)(sizeof kLnCases / sizeof kLnCases[0])

static void lnb_all(tg_dtype t, const tg_task_opts *o, const char *what) {
  for (int i = 0; i < NLN; i++)
    CHECK(lnb_compare(kLnCases[i].rows, kLnCases[i].out, kLnCases[i].in, kLnCases[i].accum,
                      kLnCases[i].ln_accum, t, o),
          "%s linear_layernorm_bwd %dx%dx%d (%s, LayerNorm %s)%s differs from linear_bwd then "
          "layernorm_bwd",
          tg_dtype_name(t), kLnCases[i].rows, kLnCases[i].out, kLnCases[i].in,
          accum_name(kLnCases[i].accum), accum_name(kLnCases[i].ln_accum), what);
}

typedef struct lnb_ctx {
  starpu_data_handle_t dz, w, x, dx, dW, db;
  const ln_set *L;
} lnb_ctx;

static int lnb_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const lnb_ctx *c = v;
  tg_layernorm_bwd_part p = ln_part(c->L, 0, TG_ACCUMULATE);
  p.dres = out[0].handle;
  p.dw = out[1].handle;
  p.db = out[2].handle;
  return tg_linear_layernorm_bwd_insert(c->dz, c->w, c->x, c->dx, c->dW, c->db, TG_OVERWRITE,
                                        &p, o);
}

static void pair_linear_layernorm_bwd(void) {
  int rows = 33, out = 17, in = 40;
  tg_rng rng = {.s = 5};
  ln_set L;
  ln_set_new(&L, &rng, TG_F32, rows, in);
  float *dz = rnd((size_t)rows * out, 1), *w = rnd((size_t)out * in, 1);
  float *x = rnd((size_t)rows * in, 1), *dr = rnd((size_t)rows * in, 1);
  float *dw0 = rnd(in, 1), *db0 = rnd(in, 1);
  tg_tensor DZ, Wt, X, DX, dW, db;
  new_tensor(&DZ, rows, out, dz);
  new_tensor(&Wt, out, in, w);
  new_tensor(&X, rows, in, x);
  new_tensor(&DX, rows, in, NULL);
  new_tensor(&dW, out, in, NULL);
  new_tensor(&db, 1, out, NULL);
  lnb_ctx c = {DZ.handle, Wt.handle, X.handle, DX.handle, dW.handle, db.handle, &L};
  outspec o[3] = {{.name = "dR", .rows = rows, .cols = in, .init = dr, .redux = 0, .tol = TOL},
                  {.name = "dw", .rows = 1, .cols = in, .init = dw0, .redux = 0, .tol = TOL},
                  {.name = "db", .rows = 1, .cols = in, .init = db0, .redux = 0, .tol = TOL}};
  run_pair("linear_layernorm_bwd 33x17x40", lnb_submit, &c, 3, o, NULL, NULL);
  ln_set_free(&L);
  tg_tensor *all[] = {&DZ, &Wt, &X, &DX, &dW, &db};
  for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
  free(dz); free(w); free(x); free(dr); free(dw0); free(db0);
}

/* On the CUDA worker: the pair, then the fused task against the two it
 * replaces, there, in every precision: the same kernels, so the same bits
 * (the pair's CPU side alone cannot tell the glue from the kernels). */
static void cuda_linear_layernorm_bwd(void) {
  pair_linear_layernorm_bwd();
  for (int t = -1; t < 2; t++) {
    tg_task_opts o = on_worker(g_cuda_worker);
    o.lowp = t < 0 ? TG_F32 : LOWP[t];
    lnb_all(o.lowp, &o, " on the CUDA worker");
  }
}

static void cpu_linear_layernorm_bwd(void) {
  tg_task_opts o = on_worker(g_cpu_worker);
  lnb_all(TG_F32, &o, "");
  pair_linear_layernorm_bwd();
  /* refusals: a LayerNorm of the wrong width, a 16-bit residual gradient
   * under f32 activations */
  tg_tensor a, w, x, dx, dW, db, x16;
  float *v = filled(64, 0.5f);
  new_f32(&a, 4, 4, v);
  new_f32(&w, 4, 4, v);
  new_f32(&x, 4, 4, v);
  new_f32(&dx, 4, 4, v);
  new_f32(&dW, 4, 4, v);
  new_f32(&db, 1, 4, v);
  new_low(&x16, TG_BF16, 4, 4, v);
  tg_rng rng = {.s = 3};
  ln_set L;
  ln_set_new(&L, &rng, TG_F32, 4, 4);
  tg_layernorm_bwd_part p = ln_part(&L, 0, TG_ACCUMULATE);
  p.w = dW.handle; /* (4, 4) */
  CHECK_REFUSED(tg_linear_layernorm_bwd_insert(a.handle, w.handle, x.handle, dx.handle,
                                               dW.handle, db.handle, TG_OVERWRITE, &p, &o),
                "tg_linear_layernorm_bwd", "a (4, 4) LayerNorm weight");
  p = ln_part(&L, 0, TG_ACCUMULATE);
  p.dres = x16.handle;
  CHECK_REFUSED(tg_linear_layernorm_bwd_insert(a.handle, w.handle, x.handle, dx.handle,
                                               dW.handle, db.handle, TG_OVERWRITE, &p, &o),
                "tg_linear_layernorm_bwd", "a bf16 residual gradient with f32 dZ");
  CHECK_REFUSED(tg_linear_layernorm_bwd_insert(a.handle, w.handle, x.handle, dx.handle,
                                               dW.handle, db.handle, TG_OVERWRITE, NULL, &o),
                "tg_linear_layernorm_bwd", "no LayerNorm");
  ln_set_free(&L);
  tg_tensor *all[] = {&a, &w, &x, &dx, &dW, &db, &x16};
  for (int i = 0; i < 7; i++) tg_tensor_free(all[i]);
  free(v);
}

static void linear_layernorm_bwd_lowp_body(void) {
  int native = tg_cpu_gemm_bf16_native();
  for (int nat = 0; nat < 2; nat++) {
    if (nat && !tg_cpu_gemm_bf16_supported()) continue;
    tg_cpu_gemm_bf16_set_native(nat);
    for (int t = 0; t < 2; t++) {
      tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = LOWP[t]};
      lnb_all(LOWP[t], &o, nat ? " (native bf16 on)" : " (native bf16 off)");
    }
  }
  tg_cpu_gemm_bf16_set_native(native);
}

static void linear_layernorm_bwd_lowp(void) {
  ops_run_worker_counts(linear_layernorm_bwd_lowp_body);
}

static const lb_case kCases[] = {
    {37, 29, 45, TG_ACT_GELU, TG_OVERWRITE}, {37, 29, 45, TG_ACT_NONE, TG_ACCUMULATE},
    {64, 257, 33, TG_ACT_GELU, TG_ACCUMULATE}, {1, 1, 1, TG_ACT_NONE, TG_OVERWRITE}};
#define NCASES (int)(sizeof kCases / sizeof kCases[0])

static const char *lb_name(const lb_case *k) {
  static char s[96];
  snprintf(s, sizeof s, "%dx%dx%d %s %s", k->rows, k->out, k->in,
           k->act == TG_ACT_GELU ? "gelu" : "none",
           k->accum == TG_OVERWRITE ? "overwritten" : "accumulated");
  return s;
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int lb_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_linear_bwd_insert(c->h[0], c->h[1], TG_ACT_GELU, c->h[3], c->h[2], out[0].handle,
                              out[1].handle, out[2].handle, c->accum, o);
}

static void pair_linear_bwd(void) {
  static const int shapes[][3] = {{33, 17, 40}, {64, 257, 33}}; /* rows, out, in */
  for (int s = 0; s < 2; s++) {
    int rows = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
    float *dz = rnd((size_t)rows * out, 1), *w = rnd((size_t)out * in, 1);
    float *x = rnd((size_t)rows * in, 1), *zp = rnd((size_t)rows * in, 2);
    float *dw0 = rnd((size_t)out * in, 1), *db0 = rnd(out, 1);
    tg_tensor DZ, Wt, X, ZP;
    new_tensor(&DZ, rows, out, dz);
    new_tensor(&Wt, out, in, w);
    new_tensor(&X, rows, in, x);
    new_tensor(&ZP, rows, in, zp);
    gctx c = {.h = {DZ.handle, Wt.handle, X.handle, ZP.handle}, .accum = TG_ACCUMULATE};
    outspec o[3] = {{.name = "dX", .rows = rows, .cols = in, .init = NULL, .redux = 0,
                     .tol = out >= 257 ? TOL_LARGE_K : TOL},
                    {.name = "dW", .rows = out, .cols = in, .init = dw0, .redux = 0, .tol = TOL},
                    {.name = "db", .rows = 1, .cols = out, .init = db0, .redux = 0, .tol = TOL}};
    char what[64];
    snprintf(what, sizeof what, "linear_bwd %dx%dx%d", rows, out, in);
    run_pair(what, lb_submit, &c, 3, o, NULL, NULL);
    free(dz); free(w); free(x); free(zp); free(dw0); free(db0);
    tg_tensor *all[] = {&DZ, &Wt, &X, &ZP};
    for (int i = 0; i < 4; i++) tg_tensor_free(all[i]);
  }
}

static void cpu_linear_bwd(void) {
  tg_task_opts o = on_worker(g_cpu_worker);
  for (int i = 0; i < NCASES; i++)
    CHECK(lb_compare(&kCases[i], TG_F32, &o),
          "f32 linear_bwd %s differs from linear_bwd_data then linear_bwd_weight",
          lb_name(&kCases[i]));
  pair_linear_bwd();
}

/* ---- lowp -------------------------------------------------------------------- */

static void linear_bwd_lowp_body(void) {
  int native = tg_cpu_gemm_bf16_native();
  for (int nat = 0; nat < 2; nat++) {
    if (nat && !tg_cpu_gemm_bf16_supported()) continue; /* said by gemm_lowp's row */
    tg_cpu_gemm_bf16_set_native(nat);
    for (int t = 0; t < 2; t++)
      for (int i = 0; i < NCASES; i++) {
        tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = LOWP[t]};
        CHECK(lb_compare(&kCases[i], LOWP[t], &o),
              "%s linear_bwd %s (native bf16 %s) differs from linear_bwd_data then "
              "linear_bwd_weight",
              tg_dtype_name(LOWP[t]), lb_name(&kCases[i]), nat ? "on" : "off");
      }
  }
  tg_cpu_gemm_bf16_set_native(native);
  /* refusals */
  tg_tensor a16, b32, w16, x16, dx16, dW, db;
  float *v = filled(64, 0.5f);
  new_low(&a16, TG_BF16, 4, 4, v);
  new_f32(&b32, 4, 4, v);
  new_low(&w16, TG_BF16, 4, 4, v);
  new_low(&x16, TG_BF16, 4, 4, v);
  new_low(&dx16, TG_BF16, 4, 4, v);
  new_f32(&dW, 4, 4, v);
  new_f32(&db, 1, 4, v);
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = TG_BF16};
  CHECK_REFUSED(tg_linear_bwd_insert(a16.handle, w16.handle, TG_ACT_NONE, NULL, b32.handle,
                                     dx16.handle, dW.handle, db.handle, TG_OVERWRITE, &o),
                "tg_linear_bwd", "an f32 X with 16-bit dZ");
  CHECK_REFUSED(tg_linear_bwd_insert(a16.handle, w16.handle, TG_ACT_NONE, NULL, x16.handle,
                                     dx16.handle, dW.handle, db.handle, TG_OVERWRITE, NULL),
                "tg_linear_bwd", "16-bit buffers without opts.lowp");
  tg_tensor *all[] = {&a16, &b32, &w16, &x16, &dx16, &dW, &db};
  for (int i = 0; i < 7; i++) tg_tensor_free(all[i]);
  free(v);
}

static void linear_bwd_lowp(void) { ops_run_worker_counts(linear_bwd_lowp_body); }

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

/* tg_cuda_linear_bwd_weight_lt (gemm_lt.c: dW and db in one cuBLASLt call,
 * the bias gradient its BGRADB epilogue, on the emulated cuBLASLt) against
 * tg_cpu_gemm_lowp and tg_cpu_bias_grad_lowp on the same 16-bit dZ and X:
 * dW f32 overwritten (beta 0 over NaN) and accumulated (beta 1), within
 * kTolRed (an f32 sum of k = rows <= 257 products in another order); db
 * f32, written (cuBLASLt has no beta for it), within kTolRed too (a sum of
 * rows values: the emulator's double sum rounded once, the GPU's f32 sums
 * in its own order); a NULL db runs the plain GEMM.  dW's padding must
 * survive. */
static void emu_linear_bwd_weight_lt(void) {
  cublasLtHandle_t lt;
  ok("tg_cuda_linear_bwd_weight_lt", "cublasLtCreate", cublasLtCreate(&lt));
  static const int shapes[][3] = {{7, 33, 257}, {257, 7, 33}, {33, 257, 7}, {1, 1, 1}};
  const size_t wbytes = 1 << 16;
  void *work = malloc(wbytes);
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < 4; s++)
      for (int beta = 0; beta < 2; beta++)
        for (int with_db = 0; with_db < 2; with_db++) {
          FULL_ONLY(s != 0 || d != 0);
          const tg_dtype t = g_lowp[d];
          const int rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
          float *dz = input(rows, out, out, 1.0f), *x = input(rows, in, in + 1, 1.0f);
          uint16_t *DZ = to16(t, dz, rows, out, out, 0), *X = to16(t, x, rows, in, in + 1, 0);
          float *dW[2], *db[2];
          outputs(dW, out, in, in + 1, beta);
          outputs(db, 1, out, out, 0);
          const int calls = tg_emu_lt_matmul_calls();
          ok("tg_cuda_linear_bwd_weight_lt", "",
             tg_cuda_linear_bwd_weight_lt(lt, t, rows, in, out, DZ, out, X, in, (float)beta,
                                          dW[0], in + 1, with_db ? db[0] : NULL, work, wbytes,
                                          NULL));
          const int want = with_db ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
          CHECK(tg_emu_lt_matmul_calls() == calls + 1 && tg_emu_lt_last_epilogue() == want,
                "tg_cuda_linear_bwd_weight_lt: %d matmuls, epilogue %d (want 1, %d)",
                tg_emu_lt_matmul_calls() - calls, tg_emu_lt_last_epilogue(), want);
          float *gw = fmalloc(tg_cpu_gemm_lowp_work_floats(out, in, rows));
          tg_cpu_gemm_lowp(t, 1, 0, out, in, rows, 1.0f, DZ, out, X, in, (float)beta, TG_F32,
                           dW[1], in + 1, gw);
          compare("tg_cuda_linear_bwd_weight_lt", "dW", dW[0], dW[1], (size_t)out * (in + 1),
                  kTolRed);
          if (with_db) {
            tg_cpu_bias_grad_lowp(t, rows, out, DZ, out, 0.0f, db[1]);
            compare("tg_cuda_linear_bwd_weight_lt", "db", db[0], db[1], (size_t)out, kTolRed);
          }
          free2(dW); free2(db); free(dz); free(x); free(DZ); free(X); free(gw);
        }
  free(work);
  cublasLtDestroy(lt);
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "linear_bwd",
     .doc = "a linear layer's backward in one task: linear_bwd_data, then linear_bwd_weight",
     .buffers = "dZ, W, X (R), dX (W), dW, db (W / RW / REDUX), [Zprev (R)], scratch",
     .covers = "tg_linear_bwd_cl tg_linear_bwd_insert tg_cuda_linear_bwd_weight_lt",
     .kernels = "",
     .run = {[OPS_CPU] = cpu_linear_bwd, [OPS_CUDA] = pair_linear_bwd,
             [OPS_DEVICE] = pair_linear_bwd, [OPS_LOWP] = linear_bwd_lowp,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_linear_bwd_weight_lt)},
     .why_not = {[OPS_REF] = "no kernel of its own: the linear_bwd_data and linear_bwd_weight "
                             "rows' kernels, checked there",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "linear_layernorm_bwd",
     .doc = "linear_bwd, then the backward of the LayerNorm that fed the layer, in one task",
     .buffers = "linear_bwd's (no activation), then the LayerNorm's x, w, mean, rstd (R), "
                "dR (RW), dw, db (W / RW / REDUX)",
     .covers = "tg_linear_layernorm_bwd_insert",
     .kernels = "",
     .run = {[OPS_CPU] = cpu_linear_layernorm_bwd, [OPS_CUDA] = cuda_linear_layernorm_bwd,
             [OPS_DEVICE] = pair_linear_layernorm_bwd, [OPS_LOWP] = linear_layernorm_bwd_lowp},
     .why_not = {[OPS_REF] = "no kernel of its own: the linear_bwd and layernorm_bwd rows' "
                             "kernels, checked there",
                 [OPS_CUDA_EMU] = "no launcher of its own: linear_bwd's, "
                                  "tg_cuda_layernorm_bwd and tg_cuda_to/from_lowp, each in its "
                                  "row"}},
};

OPS_ROWS(rows)
