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
 */
#include "codelet_common.h"
#include "gemm_lowp_pad.h"
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
} tg_linear_bwd_args;

enum { DZ, WT, XIN, DX, DW, DB, ZPREV };

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

static void tg_linear_bwd_cpu(void *buffers[], void *cl_arg) {
  const tg_linear_bwd_args *a = cl_arg;
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
static void tg_linear_bwd_cuda(void *buffers[], void *cl_arg) {
  const tg_linear_bwd_args *a = cl_arg;
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
    TG_CUDA_CHECK(tg_cuda_bias_grad(rows, out, TG_PTR(buffers[DZ]), TG_LD(buffers[DZ]), a->beta,
                                    TG_PTR(buffers[DB]), stream));
    return;
  }
  tg_dtype lowp = (tg_dtype)a->lowp;
  float *g = d.scratch; /* dZ W in f32 before dX's epilogue, then the padding */
  cudaError_t e = tg_cuda_linear_bwd_data_lowp(
      h, lowp, rows, in, out, TG_HPTR(buffers[DZ]), TG_LD(buffers[DZ]), TG_HPTR(buffers[WT]),
      TG_LD(buffers[WT]), a->act, d.has_z ? (void *)TG_HPTR(buffers[ZPREV]) : NULL,
      d.has_z ? TG_LD(buffers[ZPREV]) : 0, d.has_z, (void *)TG_HPTR(buffers[DX]),
      TG_LD(buffers[DX]), 1, g, stream, &s);
  tg_cuda_launch_check(e, s, "tg_linear_bwd");
  TG_CUBLAS_CHECK(tg_cuda_gemm_lowp_aligned(
      h, lowp, 1, 0, out, in, rows, 1.0f, TG_HPTR(buffers[DZ]), TG_LD(buffers[DZ]),
      TG_HPTR(buffers[XIN]), TG_LD(buffers[XIN]), a->beta, TG_F32, TG_PTR(buffers[DW]),
      TG_LD(buffers[DW]), (uint16_t *)(g + (size_t)rows * in)));
  TG_CUDA_CHECK(tg_cuda_bias_grad_lowp(lowp, rows, out, TG_HPTR(buffers[DZ]), TG_LD(buffers[DZ]),
                                       a->beta, TG_PTR(buffers[DB]), stream));
}
#endif

TG_CODELET_ENTRIES(linear_bwd, tg_linear_bwd_cpu, tg_linear_bwd_cuda);

int tg_linear_bwd_insert(starpu_data_handle_t dZ, starpu_data_handle_t W, tg_activation act,
                         starpu_data_handle_t Zprev, starpu_data_handle_t X,
                         starpu_data_handle_t dX, starpu_data_handle_t dW,
                         starpu_data_handle_t db, tg_accum accum, const tg_task_opts *opts) {
  static const char op[] = "tg_linear_bwd";
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
  tg_linear_bwd_args args = {.shape = 0, .act = (int)act, .lowp = TG_F32,
                             .beta = accum == TG_OVERWRITE ? 0.0f : 1.0f};
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
  int key[2] = {args.act, args.lowp};
  args.shape = tg_hash_ints(key, 2);
  starpu_data_handle_t h[8] = {dZ, W, X, dX, dW, db};
  enum starpu_data_access_mode md[8] = {STARPU_R, STARPU_R, STARPU_R, STARPU_W,
                                        tg_accum_mode(accum), tg_accum_mode(accum)};
  int n = 6;
  if (has_z) {
    h[n] = Zprev;
    md[n++] = STARPU_R;
  }
  h[n] = tg_scratch(work);
  md[n++] = STARPU_SCRATCH;
  return tg_submit_native(&tg_linear_bwd_cl, n, h, md, &args, sizeof args,
                          4.0 * rows * out * in, opts);
}

int tg_linear_bwd_is_lowp(const struct starpu_task *t) {
  return t->cl == &tg_linear_bwd_cl &&
         starpu_matrix_get_elemsize(STARPU_TASK_GET_HANDLE(t, DZ)) == 2;
}

double tg_linear_bwd_serial_bytes(const struct starpu_task *t) {
  if (t->cl != &tg_linear_bwd_cl) return 0;
  return (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(t, DZ));
}
