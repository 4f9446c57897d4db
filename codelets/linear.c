/*
 * Fused linear layer codelets (GEMM + epilogue in one task):
 *   tg_linear_fwd:      Z = X W^T + b;  H = act(Z)
 *   tg_linear_bwd_data: dX = (dZ W) * act'(Zprev)
 * One task per layer and micro-batch instead of three, and the epilogue
 * works on cache-hot data (see kernels/cpu/linear.c).  The buffers depend on
 * the activation: with TG_ACT_NONE there is no H (forward) or Zprev
 * (backward), so the number of buffers varies per task.
 *
 * Column tiles of both (graphs/gpt_tiles.c, --tiles):
 *   tg_linear_fwd_tile:       Zj = X W[c0 : c0+m]^T + b[c0 : c0+m];  Hj = act(Zj)
 *   tg_linear_bwd_data_tile:  dXj = (dZ W[:, c0 : c0+m]) * act'(Zprev[:, c0 : c0+m])
 * where Zj, Hj and dXj (rows, m) are column blocks of the layer's output
 * (a column plan, tensor.h) and c0 is the block's first column.  The inputs
 * are read whole and the tile's part is found by offset, so no weight is
 * ever partitioned: a step's tiles of one layer read the same W at once, in
 * StarPU's shared read mode, and the optimizer writes it whole after.  A
 * whole layer is the tile c0 = 0, m = out (forward) or in (backward): the
 * same functions run both, under two codelets so that their perfmodel
 * histories stay apart.  A tile's elements are the whole layer's dot
 * products; whether the BLAS rounds a column block as it rounds the whole
 * depends on its kernels' edges (tests/test_tiles.sh says what it
 * measured).  Times: bench/results/2026-11-26-tiles.md.
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

typedef struct tg_linear_args {
  uint32_t shape; /* the activation: the offset does not change the cost */
  int act;
  int c0; /* first column of the tile (0: the whole layer) */
} tg_linear_args;

/* element i of buffer buf's first row, whatever its element size */
static void *tg_at(void *buf, size_t i) {
  return (char *)STARPU_MATRIX_GET_PTR(buf) + i * STARPU_MATRIX_GET_ELEMSIZE(buf);
}
#define TG_FAT(buf, i) ((float *)tg_at((buf), (i)))


/* The CPU functions run under tg_lowp_cpu_keep (TG_CODELET_NATIVE, mask
 * kKeep: X or dZ, and W): on a CPU with native bf16 GEMMs those two arrive
 * in bf16, the other buffers as f32 views, and the buffer after the last
 * is the workspace tg_cpu_gemm_lowp may widen in. */
static const unsigned kKeep = 1u << 0 | 1u << 1;

/* forward buffers: X (rows, in), W (out, in), b (1, out), Zj (rows, m) [, Hj] */
static void tg_linear_fwd_cpu(void *buffers[], void *cl_arg) {
  const tg_linear_args *a = cl_arg;
  int has_h = a->act != TG_ACT_NONE;
  size_t w0 = (size_t)a->c0 * TG_LD(buffers[1]);
  if (tg_is16(buffers[0])) {
    tg_cpu_linear_fwd_lowp(
        TG_BF16, TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_COLS(buffers[3]),
        TG_HPTR(buffers[0]), TG_LD(buffers[0]), (const uint16_t *)tg_at(buffers[1], w0),
        TG_LD(buffers[1]), TG_FAT(buffers[2], a->c0), a->act, TG_PTR(buffers[3]),
        TG_LD(buffers[3]), has_h ? TG_PTR(buffers[4]) : NULL, has_h ? TG_LD(buffers[4]) : 0,
        TG_VPTR(buffers[has_h ? 5 : 4]));
    return;
  }
  tg_cpu_linear_fwd(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_COLS(buffers[3]),
                    TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_FAT(buffers[1], w0),
                    TG_LD(buffers[1]), TG_FAT(buffers[2], a->c0), a->act, TG_PTR(buffers[3]),
                    TG_LD(buffers[3]), has_h ? TG_PTR(buffers[4]) : NULL,
                    has_h ? TG_LD(buffers[4]) : 0);
}

/* backward buffers: dZ (rows, out), W (out, in), dXj (rows, m) [, Zprev (rows, in)] */
static void tg_linear_bwd_data_cpu(void *buffers[], void *cl_arg) {
  const tg_linear_args *a = cl_arg;
  int has_z = a->act != TG_ACT_NONE;
  if (tg_is16(buffers[0])) {
    tg_cpu_linear_bwd_data_lowp(
        TG_BF16, TG_ROWS(buffers[0]), TG_COLS(buffers[2]), TG_ROWS(buffers[1]),
        TG_HPTR(buffers[0]), TG_LD(buffers[0]), (const uint16_t *)tg_at(buffers[1], a->c0),
        TG_LD(buffers[1]), a->act, has_z ? TG_FAT(buffers[3], a->c0) : NULL,
        has_z ? TG_LD(buffers[3]) : 0, TG_PTR(buffers[2]), TG_LD(buffers[2]),
        TG_VPTR(buffers[has_z ? 4 : 3]));
    return;
  }
  tg_cpu_linear_bwd_data(TG_ROWS(buffers[0]), TG_COLS(buffers[2]), TG_ROWS(buffers[1]),
                         TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_FAT(buffers[1], a->c0),
                         TG_LD(buffers[1]), a->act,
                         has_z ? TG_FAT(buffers[3], a->c0) : NULL,
                         has_z ? TG_LD(buffers[3]) : 0, TG_PTR(buffers[2]),
                         TG_LD(buffers[2]));
}

#ifdef TG_HAVE_CUDA
static void tg_linear_fwd_cuda(void *buffers[], void *cl_arg) {
  const tg_linear_args *a = cl_arg;
  int has_h = a->act != TG_ACT_NONE;
  size_t w0 = (size_t)a->c0 * TG_LD(buffers[1]);
  cublasStatus_t s;
  cudaError_t e = tg_cuda_linear_fwd(
      starpu_cublas_get_local_handle(), TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
      TG_COLS(buffers[3]), TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_FAT(buffers[1], w0),
      TG_LD(buffers[1]), TG_FAT(buffers[2], a->c0), a->act, TG_PTR(buffers[3]),
      TG_LD(buffers[3]), has_h ? TG_PTR(buffers[4]) : NULL, has_h ? TG_LD(buffers[4]) : 0,
      starpu_cuda_get_local_stream(), &s);
  tg_cuda_launch_check(e, s, "tg_linear_fwd");
}

static void tg_linear_bwd_data_cuda(void *buffers[], void *cl_arg) {
  const tg_linear_args *a = cl_arg;
  int has_z = a->act != TG_ACT_NONE;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_linear_bwd_data(
      starpu_cublas_get_local_handle(), TG_ROWS(buffers[0]), TG_COLS(buffers[2]),
      TG_ROWS(buffers[1]), TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_FAT(buffers[1], a->c0),
      TG_LD(buffers[1]), a->act, has_z ? TG_FAT(buffers[3], a->c0) : NULL,
      has_z ? TG_LD(buffers[3]) : 0, TG_PTR(buffers[2]), TG_LD(buffers[2]),
      starpu_cuda_get_local_stream(), &s);
  tg_cuda_launch_check(e, s, "tg_linear_bwd_data");
}

/* the bytes of the adapter's workspace (a vector buffer) */
static size_t tg_ws_bytes(void *buf) {
  return (size_t)STARPU_VECTOR_GET_NX(buf) * STARPU_VECTOR_GET_ELEMSIZE(buf);
}

/* cuBLASLt (gemm_lt.c: one GEMM, the bias and GELU in its epilogue, Z and
 * H written once) when the bias, Z and H are 16-bit too; 0 when it ran,
 * 1 to take the cuBLAS path (no handle, or a problem it hands back) */
static int tg_linear_fwd_cuda_lt(void *buffers[], const tg_linear_args *a, tg_dtype lowp,
                                 int has_h) {
  cublasLtHandle_t lt = tg_cublaslt_handle();
  if (!lt || !tg_is16(buffers[2]) || !tg_is16(buffers[3]) || (has_h && !tg_is16(buffers[4])))
    return 1;
  void *ws = buffers[has_h ? 5 : 4];
  size_t w0 = (size_t)a->c0 * TG_LD(buffers[1]);
  return !tg_lt_ran(
      tg_cuda_linear_fwd_lt(lt, lowp, TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                            TG_COLS(buffers[3]), TG_HPTR(buffers[0]), TG_LD(buffers[0]),
                            TG_HPTR(buffers[1]) + w0, TG_LD(buffers[1]),
                            TG_HPTR(buffers[2]) + a->c0, a->act, TG_HPTR(buffers[3]),
                            TG_LD(buffers[3]), has_h ? TG_HPTR(buffers[4]) : NULL,
                            has_h ? TG_LD(buffers[4]) : 0, TG_VPTR(ws), tg_ws_bytes(ws),
                            starpu_cuda_get_local_stream()),
      "tg_linear_fwd");
}

/* 16-bit X and W: cuBLASLt where it can, else the tensor cores through
 * cublasGemmEx and an epilogue kernel (linear_lowp.cu), as the untiled
 * codelet */
static int tg_linear_fwd_cuda_native(void *buffers[], void *cl_arg, tg_dtype lowp,
                                          float *ws) {
  const tg_linear_args *a = cl_arg;
  if (!tg_is16(buffers[0]) || !tg_is16(buffers[1])) return 1;
  int has_h = a->act != TG_ACT_NONE;
  if (tg_linear_fwd_cuda_lt(buffers, a, lowp, has_h) == 0) return 0;
  size_t w0 = (size_t)a->c0 * TG_LD(buffers[1]);
  cublasStatus_t s;
  cudaError_t e = tg_cuda_linear_fwd_lowp(
      starpu_cublas_get_local_handle(), lowp, TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
      TG_COLS(buffers[3]), TG_HPTR(buffers[0]), TG_LD(buffers[0]),
      (const uint16_t *)tg_at(buffers[1], w0), TG_LD(buffers[1]), tg_at(buffers[2], a->c0),
      tg_is16(buffers[2]), a->act, (void *)STARPU_MATRIX_GET_PTR(buffers[3]),
      TG_LD(buffers[3]), tg_is16(buffers[3]),
      has_h ? (void *)STARPU_MATRIX_GET_PTR(buffers[4]) : NULL, has_h ? TG_LD(buffers[4]) : 0,
      has_h && tg_is16(buffers[4]), ws, starpu_cuda_get_local_stream(), &s);
  tg_cuda_launch_check(e, s, "tg_linear_fwd");
  return 0;
}

static int tg_linear_bwd_data_cuda_native(void *buffers[], void *cl_arg, tg_dtype lowp,
                                               float *ws) {
  const tg_linear_args *a = cl_arg;
  if (!tg_is16(buffers[0]) || !tg_is16(buffers[1])) return 1;
  int has_z = a->act != TG_ACT_NONE;
  /* cuBLASLt (the dGELU in the GEMM's epilogue) when dX and Zprev are 16-bit */
  cublasLtHandle_t lt = tg_cublaslt_handle();
  void *wsb = buffers[has_z ? 4 : 3];
  if (lt && tg_is16(buffers[2]) && (!has_z || tg_is16(buffers[3])) &&
      tg_lt_ran(tg_cuda_linear_bwd_data_lt(
                    lt, lowp, TG_ROWS(buffers[0]), TG_COLS(buffers[2]), TG_ROWS(buffers[1]),
                    TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]) + a->c0,
                    TG_LD(buffers[1]), a->act, has_z ? TG_HPTR(buffers[3]) + a->c0 : NULL,
                    has_z ? TG_LD(buffers[3]) : 0, TG_HPTR(buffers[2]), TG_LD(buffers[2]),
                    TG_VPTR(wsb), tg_ws_bytes(wsb), starpu_cuda_get_local_stream()),
                "tg_linear_bwd_data"))
    return 0;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_linear_bwd_data_lowp(
      starpu_cublas_get_local_handle(), lowp, TG_ROWS(buffers[0]), TG_COLS(buffers[2]),
      TG_ROWS(buffers[1]), TG_HPTR(buffers[0]), TG_LD(buffers[0]),
      (const uint16_t *)tg_at(buffers[1], (size_t)a->c0), TG_LD(buffers[1]), a->act,
      has_z ? tg_at(buffers[3], (size_t)a->c0) : NULL, has_z ? TG_LD(buffers[3]) : 0,
      has_z && tg_is16(buffers[3]), (void *)STARPU_MATRIX_GET_PTR(buffers[2]),
      TG_LD(buffers[2]), tg_is16(buffers[2]), ws, starpu_cuda_get_local_stream(), &s);
  tg_cuda_launch_check(e, s, "tg_linear_bwd_data");
  return 0;
}
#endif

TG_CODELET_NATIVE(linear_fwd, tg_linear_fwd_cpu, kKeep, tg_linear_fwd_cuda,
                  tg_linear_fwd_cuda_native);
TG_CODELET_NATIVE(linear_bwd_data, tg_linear_bwd_data_cpu, kKeep, tg_linear_bwd_data_cuda,
                  tg_linear_bwd_data_cuda_native);
TG_CODELET_NATIVE(linear_fwd_tile, tg_linear_fwd_cpu, kKeep, tg_linear_fwd_cuda,
                  tg_linear_fwd_cuda_native);
TG_CODELET_NATIVE(linear_bwd_data_tile, tg_linear_bwd_data_cpu, kKeep, tg_linear_bwd_data_cuda,
                  tg_linear_bwd_data_cuda_native);

static int tg_linear_act_check(tg_activation act, const char *op) {
  if (act != TG_ACT_RELU && act != TG_ACT_GELU && act != TG_ACT_NONE)
    return tg_fail(EINVAL, "%s: unknown activation %d", op, (int)act);
  return 0;
}

int tg_linear_fwd_insert(starpu_data_handle_t X, starpu_data_handle_t W,
                         starpu_data_handle_t b, tg_activation act,
                         starpu_data_handle_t Z, starpu_data_handle_t H,
                         const tg_task_opts *opts) {
  int rows, in, out, win;
  TG_TRY(tg_linear_act_check(act, "tg_linear_fwd"));
  TG_TRY(tg_shape(X, "tg_linear_fwd: X", &rows, &in));
  TG_TRY(tg_shape(W, "tg_linear_fwd: W", &out, &win));
  if (win != in)
    return tg_fail(EINVAL, "tg_linear_fwd: X has %d features, W is (%d, %d)", in, out, win);
  TG_TRY(tg_expect(b, "tg_linear_fwd", "b", 1, out, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(Z, "tg_linear_fwd", "Z", rows, out, TG_FLOAT_SLOT));
  int n = 4;
  if (act != TG_ACT_NONE) {
    TG_TRY(tg_expect(H, "tg_linear_fwd", "H", rows, out, TG_FLOAT_SLOT));
    n = 5;
  }
  tg_linear_args args = {.shape = (uint32_t)act, .act = (int)act, .c0 = 0};
  starpu_data_handle_t h[5] = {X, W, b, Z, H};
  enum starpu_data_access_mode md[5] = {STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W};
  return tg_submit(&tg_linear_fwd_cl, n, h, md, &args, sizeof args,
                   2.0 * rows * out * in, opts);
}

int tg_linear_bwd_data_insert(starpu_data_handle_t dZ, starpu_data_handle_t W,
                              tg_activation act, starpu_data_handle_t Zprev,
                              starpu_data_handle_t dX, const tg_task_opts *opts) {
  int rows, in, out, zout;
  TG_TRY(tg_linear_act_check(act, "tg_linear_bwd_data"));
  TG_TRY(tg_shape(W, "tg_linear_bwd_data: W", &out, &in));
  TG_TRY(tg_shape(dZ, "tg_linear_bwd_data: dZ", &rows, &zout));
  if (zout != out)
    return tg_fail(EINVAL, "tg_linear_bwd_data: dZ has %d columns, W is (%d, %d)", zout,
                   out, in);
  TG_TRY(tg_expect(dX, "tg_linear_bwd_data", "dX", rows, in, TG_FLOAT_SLOT));
  int n = 3;
  if (act != TG_ACT_NONE) {
    TG_TRY(tg_expect(Zprev, "tg_linear_bwd_data", "Zprev", rows, in, TG_FLOAT_SLOT));
    n = 4;
  }
  tg_linear_args args = {.shape = (uint32_t)act, .act = (int)act, .c0 = 0};
  starpu_data_handle_t h[4] = {dZ, W, dX, Zprev};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_R, STARPU_W, STARPU_R};
  return tg_submit(&tg_linear_bwd_data_cl, n, h, md, &args, sizeof args,
                   2.0 * rows * out * in, opts);
}

/* ---- column tiles -------------------------------------------------------------- */

/* -EINVAL unless the tile [c0, c0 + m) lies within extent */
static int tg_tile_range(const char *op, int c0, int m, int extent, const char *what) {
  if (c0 < 0 || m < 1 || c0 > extent - m)
    return tg_fail(EINVAL, "%s: tile columns [%d, %d) outside %s's %d", op, c0, c0 + m, what,
                   extent);
  return 0;
}

int tg_linear_fwd_tile_insert(int c0, starpu_data_handle_t X, starpu_data_handle_t W,
                              starpu_data_handle_t b, tg_activation act,
                              starpu_data_handle_t Zj, starpu_data_handle_t Hj,
                              const tg_task_opts *opts) {
  const char *op = "tg_linear_fwd_tile";
  int rows, in, out, win, zr, m;
  TG_TRY(tg_linear_act_check(act, op));
  TG_TRY(tg_shape(X, "tg_linear_fwd_tile: X", &rows, &in));
  TG_TRY(tg_shape(W, "tg_linear_fwd_tile: W", &out, &win));
  if (win != in)
    return tg_fail(EINVAL, "%s: X has %d features, W is (%d, %d)", op, in, out, win);
  TG_TRY(tg_expect(b, op, "b", 1, out, TG_FLOAT_SLOT));
  TG_TRY(tg_shape(Zj, "tg_linear_fwd_tile: Zj", &zr, &m));
  TG_TRY(tg_expect(Zj, op, "Zj", rows, m, TG_FLOAT_SLOT));
  TG_TRY(tg_tile_range(op, c0, m, out, "W"));
  int n = 4;
  if (act != TG_ACT_NONE) {
    TG_TRY(tg_expect(Hj, op, "Hj", rows, m, TG_FLOAT_SLOT));
    n = 5;
  }
  tg_linear_args args = {.shape = (uint32_t)act, .act = (int)act, .c0 = c0};
  starpu_data_handle_t h[5] = {X, W, b, Zj, Hj};
  enum starpu_data_access_mode md[5] = {STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W};
  return tg_submit(&tg_linear_fwd_tile_cl, n, h, md, &args, sizeof args,
                   2.0 * rows * m * in, opts);
}

int tg_linear_bwd_data_tile_insert(int c0, starpu_data_handle_t dZ, starpu_data_handle_t W,
                                   tg_activation act, starpu_data_handle_t Zprev,
                                   starpu_data_handle_t dXj, const tg_task_opts *opts) {
  const char *op = "tg_linear_bwd_data_tile";
  int rows, in, out, zout, xr, m;
  TG_TRY(tg_linear_act_check(act, op));
  TG_TRY(tg_shape(W, "tg_linear_bwd_data_tile: W", &out, &in));
  TG_TRY(tg_shape(dZ, "tg_linear_bwd_data_tile: dZ", &rows, &zout));
  if (zout != out)
    return tg_fail(EINVAL, "%s: dZ has %d columns, W is (%d, %d)", op, zout, out, in);
  TG_TRY(tg_shape(dXj, "tg_linear_bwd_data_tile: dXj", &xr, &m));
  TG_TRY(tg_expect(dXj, op, "dXj", rows, m, TG_FLOAT_SLOT));
  TG_TRY(tg_tile_range(op, c0, m, in, "W"));
  int n = 3;
  if (act != TG_ACT_NONE) {
    TG_TRY(tg_expect(Zprev, op, "Zprev", rows, in, TG_FLOAT_SLOT));
    n = 4;
  }
  tg_linear_args args = {.shape = (uint32_t)act, .act = (int)act, .c0 = c0};
  starpu_data_handle_t h[4] = {dZ, W, dXj, Zprev};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_R, STARPU_W, STARPU_R};
  return tg_submit(&tg_linear_bwd_data_tile_cl, n, h, md, &args, sizeof args,
                   2.0 * rows * out * m, opts);
}

/* ---- the bytes a tile touches (simulator) --------------------------------------- */

static double tg_bytes_of(struct starpu_task *t, int i) {
  return (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(t, i));
}

static double tg_elem_of(struct starpu_task *t, int i) {
  return (double)starpu_matrix_get_elemsize(STARPU_TASK_GET_HANDLE(t, i));
}

double tg_linear_tile_bytes(struct starpu_task *t) {
  if (t->cl == &tg_linear_fwd_tile_cl) { /* X, W[c0:c0+m], b[c0:c0+m], Zj [, Hj] */
    starpu_data_handle_t X = STARPU_TASK_GET_HANDLE(t, 0), Z = STARPU_TASK_GET_HANDLE(t, 3);
    double in = starpu_matrix_get_nx(X), m = starpu_matrix_get_nx(Z);
    double b = tg_bytes_of(t, 0) + m * in * tg_elem_of(t, 1) + m * tg_elem_of(t, 2);
    for (unsigned i = 3; i < STARPU_TASK_GET_NBUFFERS(t); i++) /* not the adapter's scratch */
      if (!(STARPU_TASK_GET_MODE(t, i) & STARPU_SCRATCH)) b += tg_bytes_of(t, i);
    return b;
  }
  if (t->cl == &tg_linear_bwd_data_tile_cl) { /* dZ, W[:, c0:c0+m], dXj [, Zprev[:, c0:c0+m]] */
    starpu_data_handle_t dZ = STARPU_TASK_GET_HANDLE(t, 0), dX = STARPU_TASK_GET_HANDLE(t, 2);
    double out = starpu_matrix_get_nx(dZ), m = starpu_matrix_get_nx(dX);
    double rows = starpu_matrix_get_ny(dX);
    double b = tg_bytes_of(t, 0) + out * m * tg_elem_of(t, 1) + tg_bytes_of(t, 2);
    if (STARPU_TASK_GET_NBUFFERS(t) > 3 && !(STARPU_TASK_GET_MODE(t, 3) & STARPU_SCRATCH))
      b += rows * m * tg_elem_of(t, 3);
    return b;
  }
  return -1;
}

