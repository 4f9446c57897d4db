/*
 * Rows linear_fwd_tile and linear_bwd_data_tile (codelets/linear.c):
 * column tiles [c0, c0 + m) of the fused linear layer, which read the whole
 * inputs at the tile's offset.  Sizes leave unequal tiles (70 columns in 3:
 * 24, 23, 23; 29 in 3: 10, 10, 9).
 *  cpu       tiles written through a column plan of one output, assembled,
 *            against the untiled kernel on the whole: within 1e-6 relative
 *            (the BLAS may round a column block of a GEMM differently; the
 *            case prints when the bits differ); a tile outside the layer
 *            and a tile of the wrong rows are refused; then the pair cases;
 *  pair      a middle tile (c0 5, 11 columns), every activation: the second
 *            worker (cuda, device, cpu) against a CPU worker; and 16-bit X,
 *            W, Z, H (bf16, fp16) through the adapter, or on a GPU the
 *            tensor cores at a 2-byte offset, within half an ulp.
 */
#include "pair.h"
#include "precision_testlib.h"
#include "taskgrad/taskgrad.h"
#include "ref_util.h"

/* ---- cpu: assembled tiles against the whole -------------------------------------- */

static double rel_f32(const float *got, const float *ref, size_t n, int *same) {
  double num = 0, den = 0;
  *same = memcmp(got, ref, n * sizeof *got) == 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - ref[i];
    num += d * d;
    den += (double)ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void tiles_against_whole(int fwd, int act) {
  const int rows = 33, in = 29, out = 70, N = 3;
  tg_rng rng = {.s = 77u + (unsigned)act};
  tg_tensor X, W, B, Z, H, Zp;
  int cols = fwd ? out : in; /* the tiled output's columns */
  if (tg_tensor_alloc(&X, rows, fwd ? in : out, TG_F32) ||
      tg_tensor_alloc(&W, out, in, TG_F32) || tg_tensor_alloc(&B, 1, out, TG_F32) ||
      tg_tensor_alloc(&Z, rows, cols, TG_F32) || tg_tensor_alloc(&H, rows, cols, TG_F32) ||
      tg_tensor_alloc(&Zp, rows, in, TG_F32)) {
    CHECK(0, "allocation: %s", tg_last_error());
    return;
  }
  tg_rng_fill(&rng, X.host, tg_tensor_numel(&X), 1.0f);
  tg_rng_fill(&rng, W.host, tg_tensor_numel(&W), 0.5f);
  tg_rng_fill(&rng, B.host, tg_tensor_numel(&B), 0.5f);
  tg_rng_fill(&rng, Zp.host, tg_tensor_numel(&Zp), 2.0f);
  size_t n = (size_t)rows * cols;
  float *zk = malloc(sizeof(float) * n), *hk = malloc(sizeof(float) * n);
  float *zc = malloc(sizeof(float) * n), *hc = malloc(sizeof(float) * n);
  int has_h = fwd && act != TG_ACT_NONE;
  if (fwd)
    tg_cpu_linear_fwd(rows, in, out, X.host, in, W.host, in, B.host, act, zk, out,
                      has_h ? hk : NULL, out);
  else
    tg_cpu_linear_bwd_data(rows, in, out, X.host, out, W.host, in, act,
                           act == TG_ACT_NONE ? NULL : Zp.host, in, zk, in);
  tg_split zs = {0}, hs = {0};
  CHECK(tg_split_plan_cols(&Z, N, &zs) == 0 && tg_split_plan_cols(&H, N, &hs) == 0,
        "column plans: %s", tg_last_error());
  tg_split_write(&Z, &zs);
  if (has_h) tg_split_write(&H, &hs);
  for (int j = 0; j < N; j++) {
    int c0 = tg_split_start(cols, N, j, NULL);
    int rc = fwd ? tg_linear_fwd_tile_insert(c0, X.handle, W.handle, B.handle, act,
                                             zs.parts[j], has_h ? hs.parts[j] : NULL, NULL)
                 : tg_linear_bwd_data_tile_insert(c0, X.handle, W.handle, act, Zp.handle,
                                                  zs.parts[j], NULL);
    CHECK(rc == 0, "tile %d insert: %s", j, tg_last_error());
  }
  tg_split_join(&Z, &zs);
  if (has_h) tg_split_join(&H, &hs);
  tg_tensor_read(&Z, zc);
  int same;
  char what[96];
  snprintf(what, sizeof what, "%s act=%d, %d tiles assembled against the whole",
           fwd ? "linear_fwd_tile" : "linear_bwd_data_tile", act, N);
  CHECK_REL(rel_f32(zc, zk, n, &same), 1e-6, what);
  if (!same) printf("note %s: not bitwise equal (the BLAS rounds a block differently)\n", what);
  if (has_h) {
    tg_tensor_read(&H, hc);
    CHECK_REL(rel_f32(hc, hk, n, &same), 1e-6, "its activation");
  }
  /* refusals: a tile past the layer's last column, a tile of the wrong rows */
  tg_split_write(&Z, &zs);
  int last = tg_split_start(cols, N, N - 1, NULL);
  if (fwd)
    CHECK_REFUSED(tg_linear_fwd_tile_insert(last + 1, X.handle, W.handle, B.handle,
                                            TG_ACT_NONE, zs.parts[N - 1], NULL, NULL),
                  "tg_linear_fwd_tile", "a tile past the last column");
  else
    CHECK_REFUSED(tg_linear_bwd_data_tile_insert(-1, X.handle, W.handle, TG_ACT_NONE, NULL,
                                                 zs.parts[0], NULL),
                  "tg_linear_bwd_data_tile", "a negative first column");
  tg_split_join(&Z, &zs);
  if (fwd)
    CHECK_REFUSED(tg_linear_fwd_tile_insert(0, X.handle, W.handle, B.handle, TG_ACT_NONE,
                                            B.handle, NULL, NULL),
                  "tg_linear_fwd_tile", "a tile of 1 row for 33");
  tg_split_free(&Z, &zs);
  tg_split_free(&H, &hs);
  free(zk); free(hk); free(zc); free(hc);
  tg_tensor *all[] = {&X, &W, &B, &Z, &H, &Zp};
  for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
}

/* ---- pair: cpu, cuda, device -------------------------------------------------------- */

enum { TILE_C0 = 5, TILE_M = 11 };

/* h[0] = X or dZ, h[1] = W, h[2] = b or Zprev */
static int fwd_tile_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const hctx *c = v;
  int none = c->act == TG_ACT_NONE;
  return tg_linear_fwd_tile_insert(TILE_C0, c->h[0], c->h[1], c->h[2], (tg_activation)c->act,
                                   out[0].handle, none ? NULL : out[1].handle, o);
}

static int bwd_tile_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const hctx *c = v;
  return tg_linear_bwd_data_tile_insert(TILE_C0, c->h[0], c->h[1], (tg_activation)c->act,
                                        c->act == TG_ACT_NONE ? NULL : c->h[2],
                                        out[0].handle, o);
}

static void pair_tiles(void) {
  const int rows = 37, in = 29, out = 23;
  int fwd = ops_row_is("linear_fwd_tile");
  for (int act = 0; act < 3; act++) {
    float *x = rnd((size_t)rows * (fwd ? in : out), 1.0f), *w = rnd((size_t)out * in, 0.5f);
    float *b = rnd(fwd ? (size_t)out : (size_t)rows * in, fwd ? 0.5f : 2.0f);
    tg_tensor X, W, B;
    new_tensor(&X, rows, fwd ? in : out, x);
    new_tensor(&W, out, in, w);
    new_tensor(&B, fwd ? 1 : rows, fwd ? out : in, b);
    hctx c = {.h = {X.handle, W.handle, B.handle}, .accum = TG_OVERWRITE, .act = act};
    outspec o[2] = {
        {.name = fwd ? "Zj" : "dXj", .rows = rows, .cols = TILE_M, .init = NULL, .tol = TOL},
        {.name = "Hj", .rows = rows, .cols = TILE_M, .init = NULL, .tol = TOL}};
    char what[96];
    snprintf(what, sizeof what, "%s act=%d, columns [%d, %d)", fwd ? "linear_fwd_tile"
             : "linear_bwd_data_tile", act, TILE_C0, TILE_C0 + TILE_M);
    run_pair(what, fwd ? fwd_tile_submit : bwd_tile_submit, &c,
             fwd && act != TG_ACT_NONE ? 2 : 1, o, NULL, NULL);
    free(x); free(w); free(b);
    tg_tensor_free(&X); tg_tensor_free(&W); tg_tensor_free(&B);
  }
}

typedef struct tile16_ctx {
  tg_dtype t;
  starpu_data_handle_t X, W, b;
} tile16_ctx;

static int fwd_tile16_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const tile16_ctx *c = v;
  tg_task_opts lo = *o;
  lo.lowp = c->t;
  return tg_linear_fwd_tile_insert(TILE_C0, c->X, c->W, c->b, TG_ACT_GELU, out[0].handle,
                                   out[1].handle, &lo);
}

static int bwd_tile16_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const tile16_ctx *c = v; /* X: dZ, b: Zprev */
  tg_task_opts lo = *o;
  lo.lowp = c->t;
  return tg_linear_bwd_data_tile_insert(TILE_C0, c->X, c->W, TG_ACT_GELU, c->b, out[0].handle,
                                        &lo);
}

/* 16-bit buffers: the adapter's f32 views (cpu, device) or, on a GPU, the
 * tensor cores reading W, b and Zprev at a 2-byte offset */
static void pair_tiles16(void) {
  const int rows = 37, in = 29, out = 23;
  int fwd = ops_row_is("linear_fwd_tile");
  for (int d = 0; d < 2; d++) {
    tg_dtype t = LOWP[d];
    float *x = rnd((size_t)rows * (fwd ? in : out), 1), *w = rnd((size_t)out * in, 0.3f);
    float *b = rnd(fwd ? (size_t)out : (size_t)rows * in, fwd ? 0.1f : 2.0f);
    tg_tensor X, W, B;
    new_low(&X, t, rows, fwd ? in : out, x);
    new_low(&W, t, out, in, w);
    if (fwd) new_tensor(&B, 1, out, b);
    else new_low(&B, t, rows, in, b);
    tile16_ctx c = {.t = t, .X = X.handle, .W = W.handle, .b = B.handle};
    out16 o[2] = {
        {.name = fwd ? "Zj" : "dXj", .rows = rows, .cols = TILE_M, .dt = t, .init = NULL,
         .tol = half_ulp(t)},
        {.name = "Hj", .rows = rows, .cols = TILE_M, .dt = t, .init = NULL, .tol = half_ulp(t)}};
    char what[80];
    snprintf(what, sizeof what, "%s + GELU, %s buffers", fwd ? "linear_fwd_tile"
             : "linear_bwd_data_tile", tg_dtype_name(t));
    run_pair16(what, fwd ? fwd_tile16_submit : bwd_tile16_submit, &c, fwd ? 2 : 1, o);
    tg_tensor_free(&X); tg_tensor_free(&W); tg_tensor_free(&B);
    free(x); free(w); free(b);
  }
}

static void tile_pair(void) {
  pair_tiles();
  pair_tiles16();
}

static void tile_cpu(void) {
  int fwd = ops_row_is("linear_fwd_tile");
  for (int act = 0; act < 3; act++) tiles_against_whole(fwd, act);
  tile_pair();
}

#define TILE_WHY_NOT                                                                    \
  .why_not = {[OPS_REF] = "no kernel of its own: the linear rows' kernels, at an offset", \
              [OPS_CUDA_EMU] = "the linear rows' launchers; the offset is the codelet's, "   \
                               "checked by the cuda pair",                                 \
              [OPS_LOWP] = "its 16-bit buffers are in the pair cases"}

static const ops_row rows[] = {
    {.name = "linear_fwd_tile",
     .doc = "column tile of the fused linear forward `Zj = X W[c0:c0+m]^T + b[c0:c0+m]; Hj = act(Zj)`",
     .buffers = "X (R), W (R), b (R), Zj (W), Hj (W)",
     .covers = "tg_linear_fwd_tile_cl tg_linear_fwd_tile_insert",
     .kernels = "",
     .run = {[OPS_CPU] = tile_cpu, [OPS_CUDA] = tile_pair, [OPS_DEVICE] = tile_pair},
     TILE_WHY_NOT},
    {.name = "linear_bwd_data_tile",
     .doc = "column tile of the fused linear backward-data `dXj = (dZ W[:, c0:c0+m]) * act'(Zprev[:, c0:c0+m])`",
     .buffers = "dZ (R), W (R), dXj (W), Zprev (R)",
     .covers = "tg_linear_bwd_data_tile_cl tg_linear_bwd_data_tile_insert",
     .kernels = "",
     .run = {[OPS_CPU] = tile_cpu, [OPS_CUDA] = tile_pair, [OPS_DEVICE] = tile_pair},
     TILE_WHY_NOT},
};

OPS_ROWS(rows)
