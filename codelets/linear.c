/*
 * Fused linear layer codelets (GEMM + epilogue in one task):
 *   tg_linear_fwd:      Z = X W^T + b;  H = act(Z)
 *   tg_linear_bwd_data: dX = (dZ W) * act'(Zprev)
 * One task per layer and micro-batch instead of three, and the epilogue
 * works on cache-hot data (see kernels/cpu/linear.c).  The buffers depend on
 * the activation: with TG_ACT_NONE there is no H (forward) or Zprev
 * (backward), so the number of buffers varies per task.
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

typedef struct tg_linear_args {
  uint32_t shape;
  int act;
} tg_linear_args;

/* forward buffers: X, W, b, Z [, H] */
static void tg_linear_fwd_cpu(void *buffers[], void *cl_arg) {
  const tg_linear_args *a = cl_arg;
  int has_h = a->act != TG_ACT_NONE;
  tg_cpu_linear_fwd(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_ROWS(buffers[1]),
                    TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
                    TG_LD(buffers[1]), TG_PTR(buffers[2]), a->act, TG_PTR(buffers[3]),
                    TG_LD(buffers[3]), has_h ? TG_PTR(buffers[4]) : NULL,
                    has_h ? TG_LD(buffers[4]) : 0);
}

/* backward buffers: dZ, W, dX [, Zprev] */
static void tg_linear_bwd_data_cpu(void *buffers[], void *cl_arg) {
  const tg_linear_args *a = cl_arg;
  int has_z = a->act != TG_ACT_NONE;
  tg_cpu_linear_bwd_data(TG_ROWS(buffers[0]), TG_COLS(buffers[1]), TG_ROWS(buffers[1]),
                         TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
                         TG_LD(buffers[1]), a->act, has_z ? TG_PTR(buffers[3]) : NULL,
                         has_z ? TG_LD(buffers[3]) : 0, TG_PTR(buffers[2]),
                         TG_LD(buffers[2]));
}

#ifdef TG_HAVE_CUDA
static void tg_linear_check(cudaError_t e, cublasStatus_t s, const char *op) {
  if (s != CUBLAS_STATUS_SUCCESS) TG_FATAL("%s: cuBLAS GEMM failed: status %d", op, (int)s);
  if (e != cudaSuccess) TG_FATAL("%s: CUDA launch failed: %s", op, cudaGetErrorString(e));
}

static void tg_linear_fwd_cuda(void *buffers[], void *cl_arg) {
  const tg_linear_args *a = cl_arg;
  int has_h = a->act != TG_ACT_NONE;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_linear_fwd(
      starpu_cublas_get_local_handle(), TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
      TG_ROWS(buffers[1]), TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
      TG_LD(buffers[1]), TG_PTR(buffers[2]), a->act, TG_PTR(buffers[3]), TG_LD(buffers[3]),
      has_h ? TG_PTR(buffers[4]) : NULL, has_h ? TG_LD(buffers[4]) : 0,
      starpu_cuda_get_local_stream(), &s);
  tg_linear_check(e, s, "tg_linear_fwd");
}

static void tg_linear_bwd_data_cuda(void *buffers[], void *cl_arg) {
  const tg_linear_args *a = cl_arg;
  int has_z = a->act != TG_ACT_NONE;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_linear_bwd_data(
      starpu_cublas_get_local_handle(), TG_ROWS(buffers[0]), TG_COLS(buffers[1]),
      TG_ROWS(buffers[1]), TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
      TG_LD(buffers[1]), a->act, has_z ? TG_PTR(buffers[3]) : NULL,
      has_z ? TG_LD(buffers[3]) : 0, TG_PTR(buffers[2]), TG_LD(buffers[2]),
      starpu_cuda_get_local_stream(), &s);
  tg_linear_check(e, s, "tg_linear_bwd_data");
}

/* 1 when buffer i is a 2-byte matrix */
static int tg_is16(void *buf) { return STARPU_MATRIX_GET_ELEMSIZE(buf) == 2; }

/* Tasks with 16-bit X and W go to the tensor cores (linear_lowp.cu); the
 * workspace ws has room for the f32 result when Z is 16-bit. */
static int tg_linear_fwd_cuda_native(void *buffers[], void *cl_arg, tg_dtype lowp, float *ws) {
  const tg_linear_args *a = cl_arg;
  if (!tg_is16(buffers[0]) || !tg_is16(buffers[1])) return 1;
  int has_h = a->act != TG_ACT_NONE;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_linear_fwd_lowp(
      starpu_cublas_get_local_handle(), lowp, TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
      TG_ROWS(buffers[1]), TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]),
      TG_LD(buffers[1]), (void *)STARPU_MATRIX_GET_PTR(buffers[2]), tg_is16(buffers[2]),
      a->act, (void *)STARPU_MATRIX_GET_PTR(buffers[3]), TG_LD(buffers[3]),
      tg_is16(buffers[3]), has_h ? (void *)STARPU_MATRIX_GET_PTR(buffers[4]) : NULL,
      has_h ? TG_LD(buffers[4]) : 0, has_h && tg_is16(buffers[4]), ws,
      starpu_cuda_get_local_stream(), &s);
  tg_linear_check(e, s, "tg_linear_fwd");
  return 0;
}

static int tg_linear_bwd_data_cuda_native(void *buffers[], void *cl_arg, tg_dtype lowp,
                                          float *ws) {
  const tg_linear_args *a = cl_arg;
  if (!tg_is16(buffers[0]) || !tg_is16(buffers[1])) return 1;
  int has_z = a->act != TG_ACT_NONE;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_linear_bwd_data_lowp(
      starpu_cublas_get_local_handle(), lowp, TG_ROWS(buffers[0]), TG_COLS(buffers[1]),
      TG_ROWS(buffers[1]), TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]),
      TG_LD(buffers[1]), a->act, has_z ? (void *)STARPU_MATRIX_GET_PTR(buffers[3]) : NULL,
      has_z ? TG_LD(buffers[3]) : 0, has_z && tg_is16(buffers[3]),
      (void *)STARPU_MATRIX_GET_PTR(buffers[2]), TG_LD(buffers[2]), tg_is16(buffers[2]), ws,
      starpu_cuda_get_local_stream(), &s);
  tg_linear_check(e, s, "tg_linear_bwd_data");
  return 0;
}
#endif

TG_CODELET_NATIVE_CUDA(linear_fwd, tg_linear_fwd_cpu, tg_linear_fwd_cuda,
                       tg_linear_fwd_cuda_native);
TG_CODELET_NATIVE_CUDA(linear_bwd_data, tg_linear_bwd_data_cpu, tg_linear_bwd_data_cuda,
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
  tg_linear_args args = {.shape = (uint32_t)act, .act = (int)act};
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
  tg_linear_args args = {.shape = (uint32_t)act, .act = (int)act};
  starpu_data_handle_t h[4] = {dZ, W, dX, Zprev};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_R, STARPU_W, STARPU_R};
  return tg_submit(&tg_linear_bwd_data_cl, n, h, md, &args, sizeof args,
                   2.0 * rows * out * in, opts);
}
