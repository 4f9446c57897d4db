/*
 * A linear layer's whole backward in one task:
 *   tg_linear_bwd:  dX = (dZ W) * act'(Zprev);  dW (+)= dZ^T X;
 *                   db (+)= column sums of dZ
 * for Z = X W^T + b (H = act(Z) the next layer's input, Zprev the Z of the
 * layer before when act is not TG_ACT_NONE).  The three tasks of
 * tg_linear_bwd_data and tg_linear_bwd_weight in one, for a GPU where the
 * backward is one chain on one stream: a task costs it some 19 us besides
 * its kernels (bench/results/2026-11-27-h100-native-bf16.md), and nothing
 * runs beside it.  On CPU workers the graph keeps them apart, so that the
 * weight gradient overlaps the next layer's backward.
 *
 * The kernels are those of the codelets it fuses, one after the other, on
 * the same values, so the bits are theirs: f32, or with dZ, W, X, Zprev and
 * dX in the activations' 16-bit type, submitted without the low-precision
 * adapter and doing what it would have done for tg_linear_bwd_data (the
 * CPU keeps dZ and W in bf16 where it multiplies bf16 natively, and widens
 * every 16-bit buffer otherwise; dX is computed in f32 and rounded once).
 *
 * buffers: dZ (rows, out), W (out, in), X (rows, in), dX (rows, in) W, dW
 * (out, in) and db (1, out) by accum, [Zprev (rows, in) with an
 * activation], scratch.
 *
 * tg_linear_layernorm_bwd_insert adds the backward of the LayerNorm whose
 * output X is (no activation), after the linear one in the same task: a
 * transformer block's fc and qkv layers, whose input gradient only that
 * LayerNorm reads.  Buffers after the scratch: the LayerNorm's input LX
 * (rows, in), weight (1, in), mean and rstd (rows, 1), the residual
 * stream's gradient dR (rows, in) RW, dw and db (1, in) by their own accum.
 * Its kernel is tg_layernorm_bwd's, with the low-precision adapter's
 * conversions done here: dX, LX, dR (and a 16-bit weight) widened exactly
 * into the scratch, dR rounded back once; the scratch the linear part used
 * is free again by then (one stream, or one CPU thread).
 */
#include <string.h>

#include "codelet_common.h"
#include "gemm_lowp_pad.h"
#include "scratch_sizes.h" /* kernels/cuda, plain C, every build */
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision.h"
#include "taskgrad/precision_kernels.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

typedef struct tg_linear_bwd_args {
  uint32_t shape;
  int act;
  int lowp; /* TG_F32, or the 16-bit type of dZ, W, X, Zprev and dX */
  float beta;
  int ln;           /* a LayerNorm backward follows (buffers LX..LDB) */
  int ln_overwrite; /* its dw, db written, not accumulated */
} tg_linear_bwd_args;

enum { DZ, WT, XIN, DX, DW, DB, ZPREV };
/* the LayerNorm's buffers, after the scratch (no activation: at ZPREV) */
enum { LX = ZPREV + 1, LW, LMEAN, LRSTD, LDR, LDW, LDB, LN_NBUF };

typedef struct tg_lb_dims {
  int rows, in, out, has_z;
  void *scratch;
} tg_lb_dims;

static tg_lb_dims tg_lb_unpack(void *buffers[], const tg_linear_bwd_args *a) {
  tg_lb_dims d = {.rows = TG_ROWS(buffers[DZ]), .out = TG_COLS(buffers[DZ]),
                  .in = TG_COLS(buffers[WT]), .has_z = a->act != TG_ACT_NONE};
  d.scratch = TG_VPTR(buffers[d.has_z ? ZPREV + 1 : ZPREV]);
  return d;
}

/* the CPU's f32 scratch: Zprev, dX, then (widened path) dZ and W, then the
 * GEMMs' work */
static size_t tg_lb_cpu_floats(int rows, int in, int out, int has_z) {
  size_t w1 = tg_cpu_gemm_lowp_work_floats(rows, in, out);
  size_t w2 = tg_cpu_gemm_lowp_work_floats(out, in, rows);
  return (size_t)rows * in * (has_z ? 2 : 1) + (size_t)rows * out + (size_t)out * in +
         (w1 > w2 ? w1 : w2);
}

static void tg_lb_widen(tg_dtype lowp, void *buf, float *dst) {
  tg_cpu_from_lowp(lowp, TG_ROWS(buf), TG_COLS(buf), TG_HPTR(buf), TG_LD(buf), dst,
                   TG_COLS(buf));
}

/* The f32 view of a LayerNorm buffer: as it is, or a 16-bit one's room at
 * *ws (ld = cols, 16-float aligned as the adapter's), advancing *ws. */
typedef struct tg_lb_view {
  float *p;
  int ld, lowp;
  void *buf;
} tg_lb_view;

static tg_lb_view tg_lb_view_of(void *buf, float **ws) {
  tg_lb_view v = {.p = TG_PTR(buf), .ld = TG_LD(buf), .lowp = 0, .buf = buf};
  if (!tg_is16(buf)) return v;
  size_t n = (size_t)TG_ROWS(buf) * TG_COLS(buf);
  v.p = *ws;
  v.ld = TG_COLS(buf);
  v.lowp = 1;
  *ws += (n + 15) / 16 * 16;
  return v;
}

/* the views of dY (the linear part's dX), LX, w, dR at scratch ws;
 * returns the scratch after their copies */
static float *tg_lb_ln_views(void *buffers[], float *ws, tg_lb_view v[4]) {
  void *bufs[4] = {buffers[DX], buffers[LX], buffers[LW], buffers[LDR]};
  for (int i = 0; i < 4; i++) v[i] = tg_lb_view_of(bufs[i], &ws);
  return ws;
}

/* scratch floats of the LayerNorm part: the 16-bit buffers' f32 copies,
 * then the CUDA kernel's reduction space (every build's CUDA worker size) */
static size_t tg_lb_ln_floats(starpu_data_handle_t h[4], int n, int C) {
  size_t floats = 0;
  for (int i = 0; i < 4; i++)
    if (starpu_matrix_get_elemsize(h[i]) == 2) {
      size_t e = (size_t)starpu_matrix_get_nx(h[i]) * starpu_matrix_get_ny(h[i]);
      floats += (e + 15) / 16 * 16;
    }
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID)
  floats += tg_ln_bwd_scratch_floats(n, C);
#else
  (void)n;
  (void)C;
#endif
  return floats;
}

static void tg_lb_ln_cpu(void *buffers[], const tg_linear_bwd_args *a, float *ws) {
  tg_dtype lowp = (tg_dtype)a->lowp;
  tg_lb_view v[4];
  tg_lb_ln_views(buffers, ws, v);
  for (int i = 0; i < 4; i++) /* dY, X, w read, dR read and written */
    if (v[i].lowp) tg_lb_widen(lowp, v[i].buf, v[i].p);
  int n = TG_ROWS(buffers[DX]), C = TG_COLS(buffers[DX]);
  float *dw = TG_PTR(buffers[LDW]), *db = TG_PTR(buffers[LDB]);
  if (a->ln_overwrite) { /* zeros, then the adding kernel: tg_layernorm_bwd's bits */
    memset(dw, 0, sizeof(float) * (size_t)C);
    memset(db, 0, sizeof(float) * (size_t)C);
  }
  tg_cpu_layernorm_bwd(n, C, v[0].p, v[0].ld, v[1].p, v[1].ld, v[2].p, TG_PTR(buffers[LMEAN]),
                       TG_PTR(buffers[LRSTD]), v[3].p, v[3].ld, dw, db);
  if (v[3].lowp)
    tg_cpu_to_lowp(lowp, n, C, v[3].p, v[3].ld, TG_HPTR(buffers[LDR]), TG_LD(buffers[LDR]));
}

static void tg_linear_bwd_cpu_part(void *buffers[], const tg_linear_bwd_args *a);

static void tg_linear_bwd_cpu(void *buffers[], void *cl_arg) {
  const tg_linear_bwd_args *a = cl_arg;
  tg_linear_bwd_cpu_part(buffers, a);
  if (a->ln) tg_lb_ln_cpu(buffers, a, tg_lb_unpack(buffers, a).scratch);
}

static void tg_linear_bwd_cpu_part(void *buffers[], const tg_linear_bwd_args *a) {
  tg_lb_dims d = tg_lb_unpack(buffers, a);
  int rows = d.rows, in = d.in, out = d.out;
  if (a->lowp == TG_F32) {
    tg_cpu_linear_bwd_data(rows, in, out, TG_PTR(buffers[DZ]), TG_LD(buffers[DZ]),
                           TG_PTR(buffers[WT]), TG_LD(buffers[WT]), a->act,
                           d.has_z ? TG_PTR(buffers[ZPREV]) : NULL,
                           d.has_z ? TG_LD(buffers[ZPREV]) : 0, TG_PTR(buffers[DX]),
                           TG_LD(buffers[DX]));
    tg_cpu_gemm(1, 0, out, in, rows, 1.0f, TG_PTR(buffers[DZ]), TG_LD(buffers[DZ]),
                TG_PTR(buffers[XIN]), TG_LD(buffers[XIN]), a->beta, TG_PTR(buffers[DW]),
                TG_LD(buffers[DW]));
    tg_cpu_bias_grad(rows, out, TG_PTR(buffers[DZ]), TG_LD(buffers[DZ]), a->beta,
                     TG_PTR(buffers[DB]));
    return;
  }
  tg_dtype lowp = (tg_dtype)a->lowp;
  float *zp = d.scratch, *dx = zp + (d.has_z ? (size_t)rows * in : 0);
  float *dz = dx + (size_t)rows * in, *w = dz + (size_t)rows * out, *work = w + (size_t)out * in;
  if (d.has_z) tg_lb_widen(lowp, buffers[ZPREV], zp);
  if (lowp == TG_BF16 && tg_cpu_gemm_bf16_native()) { /* as tg_lowp_cpu_keep keeps them */
    tg_cpu_linear_bwd_data_lowp(lowp, rows, in, out, TG_HPTR(buffers[DZ]), TG_LD(buffers[DZ]),
                                TG_HPTR(buffers[WT]), TG_LD(buffers[WT]), a->act,
                                d.has_z ? zp : NULL, in, dx, in, work);
  } else { /* as the adapter widens them */
    tg_lb_widen(lowp, buffers[DZ], dz);
    tg_lb_widen(lowp, buffers[WT], w);
    tg_cpu_linear_bwd_data(rows, in, out, dz, out, w, in, a->act, d.has_z ? zp : NULL, in, dx,
                           in);
  }
  tg_cpu_to_lowp(lowp, rows, in, dx, in, TG_HPTR(buffers[DX]), TG_LD(buffers[DX]));
  tg_cpu_gemm_lowp(lowp, 1, 0, out, in, rows, 1.0f, TG_HPTR(buffers[DZ]), TG_LD(buffers[DZ]),
                   TG_HPTR(buffers[XIN]), TG_LD(buffers[XIN]), a->beta, TG_F32,
                   TG_PTR(buffers[DW]), TG_LD(buffers[DW]), work);
  tg_cpu_bias_grad_lowp(lowp, rows, out, TG_HPTR(buffers[DZ]), TG_LD(buffers[DZ]), a->beta,
                        TG_PTR(buffers[DB]));
}

#ifdef TG_HAVE_CUDA
static void tg_lb_ln_cuda(void *buffers[], const tg_linear_bwd_args *a, float *ws,
                          cudaStream_t stream) {
  tg_dtype lowp = (tg_dtype)a->lowp;
  tg_lb_view v[4];
  float *kscratch = tg_lb_ln_views(buffers, ws, v);
  for (int i = 0; i < 4; i++)
    if (v[i].lowp) {
      void *b = v[i].buf;
      TG_CUDA_CHECK(tg_cuda_from_lowp(lowp, TG_ROWS(b), TG_COLS(b), TG_HPTR(b), TG_LD(b), v[i].p,
                                      v[i].ld, stream));
    }
  int n = TG_ROWS(buffers[DX]), C = TG_COLS(buffers[DX]);
  TG_CUDA_CHECK(tg_cuda_layernorm_bwd(n, C, v[0].p, v[0].ld, v[1].p, v[1].ld, v[2].p,
                                      TG_PTR(buffers[LMEAN]), TG_PTR(buffers[LRSTD]), v[3].p,
                                      v[3].ld, TG_PTR(buffers[LDW]), TG_PTR(buffers[LDB]),
                                      !a->ln_overwrite, kscratch, stream));
  if (v[3].lowp)
    TG_CUDA_CHECK(tg_cuda_to_lowp(lowp, n, C, v[3].p, v[3].ld, TG_HPTR(buffers[LDR]),
                                  TG_LD(buffers[LDR]), stream));
}

static void tg_linear_bwd_cuda_part(void *buffers[], const tg_linear_bwd_args *a);

static void tg_linear_bwd_cuda(void *buffers[], void *cl_arg) {
  const tg_linear_bwd_args *a = cl_arg;
  tg_linear_bwd_cuda_part(buffers, a);
  if (a->ln)
    tg_lb_ln_cuda(buffers, a, tg_lb_unpack(buffers, a).scratch, starpu_cuda_get_local_stream());
}

static void tg_linear_bwd_cuda_part(void *buffers[], const tg_linear_bwd_args *a) {
  tg_lb_dims d = tg_lb_unpack(buffers, a);
  int rows = d.rows, in = d.in, out = d.out;
  cublasHandle_t h = starpu_cublas_get_local_handle();
  cudaStream_t stream = starpu_cuda_get_local_stream();
  cublasStatus_t s;
  if (a->lowp == TG_F32) {
    cudaError_t e = tg_cuda_linear_bwd_data(
        h, rows, in, out, TG_PTR(buffers[DZ]), TG_LD(buffers[DZ]), TG_PTR(buffers[WT]),
        TG_LD(buffers[WT]), a->act, d.has_z ? TG_PTR(buffers[ZPREV]) : NULL,
        d.has_z ? TG_LD(buffers[ZPREV]) : 0, TG_PTR(buffers[DX]), TG_LD(buffers[DX]), stream,
        &s);
    tg_cuda_launch_check(e, s, "tg_linear_bwd");
    TG_CUBLAS_CHECK(tg_cuda_gemm(h, 1, 0, out, in, rows, 1.0f, TG_PTR(buffers[DZ]),
                                 TG_LD(buffers[DZ]), TG_PTR(buffers[XIN]), TG_LD(buffers[XIN]),
                                 a->beta, TG_PTR(buffers[DW]), TG_LD(buffers[DW])));
    void *ws = buffers[d.has_z ? ZPREV + 1 : ZPREV];
    TG_CUDA_CHECK(tg_cuda_bias_grad(
        rows, out, TG_PTR(buffers[DZ]), TG_LD(buffers[DZ]), a->beta, TG_PTR(buffers[DB]),
        d.scratch, (size_t)STARPU_VECTOR_GET_NX(ws) * STARPU_VECTOR_GET_ELEMSIZE(ws), stream));
    return;
  }
  tg_dtype lowp = (tg_dtype)a->lowp;
  float *g = d.scratch; /* dZ W in f32 before dX's epilogue, then the padding */
  /* cuBLASLt where it takes the problem (gemm_lt.c): dX with the dGELU in
   * its epilogue; dW with db in its epilogue when db is overwritten
   * (cuBLASLt writes the bias gradient, it cannot add to it); the scratch
   * is its workspace.  Each part falls back on its own. */
  cublasLtHandle_t lt = tg_cublaslt_handle();
  void *wsb = buffers[d.has_z ? ZPREV + 1 : ZPREV];
  const size_t wsn = (size_t)STARPU_VECTOR_GET_NX(wsb) * STARPU_VECTOR_GET_ELEMSIZE(wsb);
  int lt_dx = lt && tg_lt_ran(tg_cuda_linear_bwd_data_lt(
                                  lt, lowp, rows, in, out, TG_HPTR(buffers[DZ]),
                                  TG_LD(buffers[DZ]), TG_HPTR(buffers[WT]), TG_LD(buffers[WT]),
                                  a->act, d.has_z ? TG_HPTR(buffers[ZPREV]) : NULL,
                                  d.has_z ? TG_LD(buffers[ZPREV]) : 0, TG_HPTR(buffers[DX]),
                                  TG_LD(buffers[DX]), g, wsn, stream),
                              "tg_linear_bwd");
  if (!lt_dx) {
    cudaError_t e = tg_cuda_linear_bwd_data_lowp(
        h, lowp, rows, in, out, TG_HPTR(buffers[DZ]), TG_LD(buffers[DZ]), TG_HPTR(buffers[WT]),
        TG_LD(buffers[WT]), a->act, d.has_z ? (void *)TG_HPTR(buffers[ZPREV]) : NULL,
        d.has_z ? TG_LD(buffers[ZPREV]) : 0, d.has_z, (void *)TG_HPTR(buffers[DX]),
        TG_LD(buffers[DX]), 1, g, stream, &s);
    tg_cuda_launch_check(e, s, "tg_linear_bwd");
  }
  float *db = a->beta == 0.0f ? TG_PTR(buffers[DB]) : NULL;
  int lt_dw = lt && tg_lt_ran(tg_cuda_linear_bwd_weight_lt(
                                  lt, lowp, rows, in, out, TG_HPTR(buffers[DZ]),
                                  TG_LD(buffers[DZ]), TG_HPTR(buffers[XIN]), TG_LD(buffers[XIN]),
                                  a->beta, TG_PTR(buffers[DW]), TG_LD(buffers[DW]), db, g, wsn,
                                  stream),
                              "tg_linear_bwd");
  if (!lt_dw)
    TG_CUBLAS_CHECK(tg_cuda_gemm_lowp_aligned(
        h, lowp, 1, 0, out, in, rows, 1.0f, TG_HPTR(buffers[DZ]), TG_LD(buffers[DZ]),
        TG_HPTR(buffers[XIN]), TG_LD(buffers[XIN]), a->beta, TG_F32, TG_PTR(buffers[DW]),
        TG_LD(buffers[DW]), (uint16_t *)(g + (size_t)rows * in)));
  if (!lt_dw || !db)
    TG_CUDA_CHECK(tg_cuda_bias_grad_lowp(lowp, rows, out, TG_HPTR(buffers[DZ]),
                                         TG_LD(buffers[DZ]), a->beta, TG_PTR(buffers[DB]), g,
                                         wsn, stream)); /* g: free after the GEMMs */
}
#endif

TG_CODELET_ENTRIES(linear_bwd, tg_linear_bwd_cpu, tg_linear_bwd_cuda);

/* The LayerNorm part's checks: tg_layernorm_bwd_insert's shapes with dY =
 * the linear part's dX (rows, in); the statistics and weight gradients f32
 * (this task widens only dY, x, w and dR), x and dR of dZ's element type */
static int tg_lb_ln_check(const char *op, const tg_layernorm_bwd_part *ln,
                          starpu_data_handle_t dX, size_t esize) {
  int n, C;
  TG_TRY(tg_layernorm_bwd_check(op, dX, ln->x, ln->w, ln->mean, ln->rstd, ln->dres, ln->dw,
                                ln->db, &n, &C));
  starpu_data_handle_t f32[] = {ln->mean, ln->rstd, ln->dw, ln->db};
  for (int i = 0; i < 4; i++)
    if (starpu_matrix_get_elemsize(f32[i]) != sizeof(float))
      return tg_fail(EINVAL, "%s: the LayerNorm's mean, rstd, dw and db must be f32", op);
  if (starpu_matrix_get_elemsize(ln->x) != esize || starpu_matrix_get_elemsize(ln->dres) != esize)
    return tg_fail(EINVAL, "%s: the LayerNorm's input and the residual gradient must have the "
                   "element type of dZ", op);
  return 0;
}

static int tg_lb_insert(const char *op, starpu_data_handle_t dZ, starpu_data_handle_t W,
                        tg_activation act, starpu_data_handle_t Zprev, starpu_data_handle_t X,
                        starpu_data_handle_t dX, starpu_data_handle_t dW,
                        starpu_data_handle_t db, tg_accum accum,
                        const tg_layernorm_bwd_part *ln, const tg_task_opts *opts);

int tg_linear_bwd_insert(starpu_data_handle_t dZ, starpu_data_handle_t W, tg_activation act,
                         starpu_data_handle_t Zprev, starpu_data_handle_t X,
                         starpu_data_handle_t dX, starpu_data_handle_t dW,
                         starpu_data_handle_t db, tg_accum accum, const tg_task_opts *opts) {
  return tg_lb_insert("tg_linear_bwd", dZ, W, act, Zprev, X, dX, dW, db, accum, NULL, opts);
}

int tg_linear_layernorm_bwd_insert(starpu_data_handle_t dZ, starpu_data_handle_t W,
                                   starpu_data_handle_t X, starpu_data_handle_t dX,
                                   starpu_data_handle_t dW, starpu_data_handle_t db,
                                   tg_accum accum, const tg_layernorm_bwd_part *ln,
                                   const tg_task_opts *opts) {
  static const char op[] = "tg_linear_layernorm_bwd";
  if (!ln) return tg_fail(EINVAL, "%s: no LayerNorm", op);
  return tg_lb_insert(op, dZ, W, TG_ACT_NONE, NULL, X, dX, dW, db, accum, ln, opts);
}

static int tg_lb_insert(const char *op, starpu_data_handle_t dZ, starpu_data_handle_t W,
                        tg_activation act, starpu_data_handle_t Zprev, starpu_data_handle_t X,
                        starpu_data_handle_t dX, starpu_data_handle_t dW,
                        starpu_data_handle_t db, tg_accum accum,
                        const tg_layernorm_bwd_part *ln, const tg_task_opts *opts) {
  if (act != TG_ACT_RELU && act != TG_ACT_GELU && act != TG_ACT_NONE)
    return tg_fail(EINVAL, "%s: unknown activation %d", op, (int)act);
  int rows, in, out, zout;
  TG_TRY(tg_shape(W, "tg_linear_bwd: W", &out, &in));
  TG_TRY(tg_shape(dZ, "tg_linear_bwd: dZ", &rows, &zout));
  if (zout != out)
    return tg_fail(EINVAL, "%s: dZ has %d columns, W is (%d, %d)", op, zout, out, in);
  TG_TRY(tg_expect(X, op, "X", rows, in, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(dX, op, "dX", rows, in, TG_FLOAT_SLOT));
  int has_z = act != TG_ACT_NONE;
  if (has_z) TG_TRY(tg_expect(Zprev, op, "Zprev", rows, in, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(dW, op, "dW", out, in, sizeof(float)));
  TG_TRY(tg_expect(db, op, "db", 1, out, sizeof(float)));
  size_t esize = starpu_matrix_get_elemsize(dZ);
  starpu_data_handle_t same[] = {W, X, dX, has_z ? Zprev : dZ};
  for (int i = 0; i < 4; i++)
    if (starpu_matrix_get_elemsize(same[i]) != esize)
      return tg_fail(EINVAL, "%s: dZ, W, X, dX and Zprev must have one element type", op);
  if (ln) TG_TRY(tg_lb_ln_check(op, ln, dX, esize));
  tg_linear_bwd_args args = {.shape = 0, .act = (int)act, .lowp = TG_F32,
                             .beta = accum == TG_OVERWRITE ? 0.0f : 1.0f, .ln = ln != NULL,
                             .ln_overwrite = ln && ln->accum == TG_OVERWRITE};
  size_t work = sizeof(float);
  if (esize == 2) {
    if (!opts) return tg_fail(EINVAL, "%s: 2-byte buffers without opts.lowp", op);
    TG_TRY(tg_expect_lowp(op, (int)opts->lowp));
    args.lowp = (int)opts->lowp;
    size_t cpu = sizeof(float) * tg_lb_cpu_floats(rows, in, out, has_z);
    size_t gpu = sizeof(float) * (size_t)rows * in +
                 sizeof(uint16_t) * tg_gemm_lowp_pad_elems(out, in, rows);
    work = cpu > gpu ? cpu : gpu;
  }
  if (ln) {
    starpu_data_handle_t conv[4] = {dX, ln->x, ln->w, ln->dres};
    size_t lnw = sizeof(float) * tg_lb_ln_floats(conv, rows, in);
    if (lnw > work) work = lnw;
  }
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID)
  /* the bias gradient's partials (bias.cu), after the GEMMs */
  if (sizeof(float) * tg_bias_grad_scratch_floats(rows, out) > work)
    work = sizeof(float) * tg_bias_grad_scratch_floats(rows, out);
#endif
  int key[3] = {args.act, args.lowp, args.ln};
  args.shape = tg_hash_ints(key, 3);
  starpu_data_handle_t h[LN_NBUF] = {dZ, W, X, dX, dW, db};
  enum starpu_data_access_mode md[LN_NBUF] = {STARPU_R, STARPU_R, STARPU_R, STARPU_W,
                                              tg_accum_mode(accum), tg_accum_mode(accum)};
  int n = 6;
  if (has_z) {
    h[n] = Zprev;
    md[n++] = STARPU_R;
  }
  h[n] = tg_scratch(work);
  md[n++] = STARPU_SCRATCH;
  if (ln) { /* at LX.. (no activation) */
    starpu_data_handle_t lh[] = {ln->x, ln->w, ln->mean, ln->rstd, ln->dres, ln->dw, ln->db};
    enum starpu_data_access_mode lm[] = {STARPU_R,  STARPU_R,  STARPU_R,
                                         STARPU_R,  STARPU_RW, tg_accum_mode(ln->accum),
                                         tg_accum_mode(ln->accum)};
    for (int i = 0; i < 7; i++) {
      h[n] = lh[i];
      md[n++] = lm[i];
    }
  }
  return tg_submit_native(&tg_linear_bwd_cl, n, h, md, &args, sizeof args,
                          4.0 * rows * out * in + (ln ? 12.0 * rows * in : 0), opts);
}

int tg_linear_bwd_is_lowp(const struct starpu_task *t) {
  return t->cl == &tg_linear_bwd_cl &&
         starpu_matrix_get_elemsize(STARPU_TASK_GET_HANDLE(t, DZ)) == 2;
}

/* The bias gradient's second pass over dZ; with a LayerNorm part, that
 * kernel's traffic too (it follows the GEMMs): dY, its input, dR read and
 * written. */
double tg_linear_bwd_serial_bytes(const struct starpu_task *t) {
  if (t->cl != &tg_linear_bwd_cl) return 0;
  double bytes = (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(t, DZ));
  if (t->nbuffers == LN_NBUF)
    bytes += (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(t, DX)) +
             (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(t, LX)) +
             2.0 * (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(t, LDR));
  return bytes;
}
