/*
 * The weight gradients of a linear layer in one task (the backward's
 * bias-gradient epilogue):
 *   tg_linear_bwd_weight:  dW (+)= dZ^T X;  db (+)= column sums of dZ
 * for Z = X W^T + b.  dZ (rows, out) and X (rows, in) are the activations'
 * type, f32 or 16-bit (then fp32 accumulation, as tg_gemm_lowp); dW (out,
 * in) and db (1, out) are f32 gradients that both take the same
 * accumulation mode (a parameter's weight and bias sums are alike).  One
 * task where the graph had two: a task costs a GPU some 19 us besides its
 * kernels (bench/results/2026-11-27-h100-native-bf16.md), and the step's
 * four linear layers a block made 96 such pairs at GPT-2 124M.
 *
 * The two products are the kernels of the codelets they replace, one after
 * the other (the GEMM, then the column sums, which read dZ again: the
 * simulator counts that pass, tg_linear_bwd_weight_serial_bytes), so the
 * bits are those of tg_gemm / tg_gemm_lowp followed by tg_bias_grad.  The
 * 16-bit buffers reach the functions as they are (no low-precision
 * adapter): the column sums widen dZ as they read it.
 */
#include "codelet_common.h"
#include "gemm_lowp_pad.h"
#include "scratch_sizes.h" /* kernels/cuda, plain C, every build */
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision.h"
#include "taskgrad/precision_kernels.h"

typedef struct tg_linear_weight_args {
  uint32_t shape;
  int lowp; /* TG_F32: f32 dZ and X; else their 16-bit type */
  float beta;
} tg_linear_weight_args;

/* buffers: dZ (rows, out), X (rows, in), dW (out, in), db (1, out), scratch */
static void tg_linear_weight_dims(void *buffers[], int *rows, int *in, int *out) {
  *rows = TG_ROWS(buffers[0]);
  *out = TG_COLS(buffers[0]);
  *in = TG_COLS(buffers[1]);
}

static void tg_linear_bwd_weight_cpu(void *buffers[], void *cl_arg) {
  const tg_linear_weight_args *a = cl_arg;
  int rows, in, out;
  tg_linear_weight_dims(buffers, &rows, &in, &out);
  if (a->lowp == TG_F32) {
    tg_cpu_gemm(1, 0, out, in, rows, 1.0f, TG_PTR(buffers[0]), TG_LD(buffers[0]),
                TG_PTR(buffers[1]), TG_LD(buffers[1]), a->beta, TG_PTR(buffers[2]),
                TG_LD(buffers[2]));
    tg_cpu_bias_grad(rows, out, TG_PTR(buffers[0]), TG_LD(buffers[0]), a->beta,
                     TG_PTR(buffers[3]));
    return;
  }
  tg_cpu_gemm_lowp((tg_dtype)a->lowp, 1, 0, out, in, rows, 1.0f, TG_HPTR(buffers[0]),
                   TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_LD(buffers[1]), a->beta,
                   TG_F32, TG_PTR(buffers[2]), TG_LD(buffers[2]), TG_VPTR(buffers[4]));
  tg_cpu_bias_grad_lowp((tg_dtype)a->lowp, rows, out, TG_HPTR(buffers[0]), TG_LD(buffers[0]),
                        a->beta, TG_PTR(buffers[3]));
}

#ifdef TG_HAVE_CUDA
static void tg_linear_bwd_weight_cuda(void *buffers[], void *cl_arg) {
  const tg_linear_weight_args *a = cl_arg;
  int rows, in, out;
  tg_linear_weight_dims(buffers, &rows, &in, &out);
  cublasHandle_t h = starpu_cublas_get_local_handle();
  cudaStream_t stream = starpu_cuda_get_local_stream();
  const size_t wsn =
      (size_t)STARPU_VECTOR_GET_NX(buffers[4]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[4]);
  if (a->lowp == TG_F32) {
    TG_CUBLAS_CHECK(tg_cuda_gemm(h, 1, 0, out, in, rows, 1.0f, TG_PTR(buffers[0]),
                                 TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]),
                                 a->beta, TG_PTR(buffers[2]), TG_LD(buffers[2])));
    TG_CUDA_CHECK(tg_cuda_bias_grad(rows, out, TG_PTR(buffers[0]), TG_LD(buffers[0]), a->beta,
                                    TG_PTR(buffers[3]), TG_VPTR(buffers[4]), wsn, stream));
    return;
  }
  TG_CUBLAS_CHECK(tg_cuda_gemm_lowp_aligned(
      h, (tg_dtype)a->lowp, 1, 0, out, in, rows, 1.0f, TG_HPTR(buffers[0]), TG_LD(buffers[0]),
      TG_HPTR(buffers[1]), TG_LD(buffers[1]), a->beta, TG_F32, TG_PTR(buffers[2]),
      TG_LD(buffers[2]), (uint16_t *)TG_VPTR(buffers[4])));
  /* after the GEMM on the same stream: the scratch is free again */
  TG_CUDA_CHECK(tg_cuda_bias_grad_lowp((tg_dtype)a->lowp, rows, out, TG_HPTR(buffers[0]),
                                       TG_LD(buffers[0]), a->beta, TG_PTR(buffers[3]),
                                       TG_VPTR(buffers[4]), wsn, stream));
}
#endif

TG_CODELET_ENTRIES(linear_bwd_weight, tg_linear_bwd_weight_cpu, tg_linear_bwd_weight_cuda);

int tg_linear_bwd_weight_insert(starpu_data_handle_t dZ, starpu_data_handle_t X,
                                starpu_data_handle_t dW, starpu_data_handle_t db,
                                tg_accum accum, const tg_task_opts *opts) {
  static const char op[] = "tg_linear_bwd_weight";
  int rows, in, out, xr;
  TG_TRY(tg_shape(dZ, "tg_linear_bwd_weight: dZ", &rows, &out));
  TG_TRY(tg_shape(X, "tg_linear_bwd_weight: X", &xr, &in));
  if (xr != rows)
    return tg_fail(EINVAL, "%s: dZ has %d rows, X has %d", op, rows, xr);
  size_t esize = starpu_matrix_get_elemsize(dZ);
  if (starpu_matrix_get_elemsize(X) != esize)
    return tg_fail(EINVAL, "%s: dZ and X have elements of %zu and %zu bytes", op, esize,
                   (size_t)starpu_matrix_get_elemsize(X));
  TG_TRY(tg_expect(dW, op, "dW", out, in, sizeof(float)));
  TG_TRY(tg_expect(db, op, "db", 1, out, sizeof(float)));
  tg_linear_weight_args args = {.shape = 0, .lowp = TG_F32,
                                .beta = accum == TG_OVERWRITE ? 0.0f : 1.0f};
  size_t work = sizeof(float);
  if (esize == 2) {
    if (!opts) return tg_fail(EINVAL, "%s: 2-byte dZ and X without opts.lowp", op);
    TG_TRY(tg_expect_lowp(op, (int)opts->lowp));
    args.lowp = (int)opts->lowp;
    /* as tg_gemm_lowp: the CPU widens tiles in the scratch, the GPU pads k
     * to a multiple of 8 there when it is not one */
    size_t w = sizeof(float) * tg_cpu_gemm_lowp_work_floats(out, in, rows);
    size_t pad = sizeof(uint16_t) * tg_gemm_lowp_pad_elems(out, in, rows);
    work = w > pad ? w : pad;
  }
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID)
  /* the bias gradient's partials (bias.cu), after the GEMM */
  if (sizeof(float) * tg_bias_grad_scratch_floats(rows, out) > work)
    work = sizeof(float) * tg_bias_grad_scratch_floats(rows, out);
#endif
  args.shape = (uint32_t)args.lowp;
  starpu_data_handle_t h[5] = {dZ, X, dW, db, tg_scratch(work)};
  enum starpu_data_access_mode md[5] = {STARPU_R, STARPU_R, tg_accum_mode(accum),
                                        tg_accum_mode(accum), STARPU_SCRATCH};
  return tg_submit_native(&tg_linear_bwd_weight_cl, 5, h, md, &args, sizeof args,
                          2.0 * rows * out * in, opts);
}

double tg_linear_bwd_weight_serial_bytes(const struct starpu_task *t) {
  if (t->cl != &tg_linear_bwd_weight_cl) return 0;
  return (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(t, 0));
}

int tg_linear_bwd_weight_is_lowp(const struct starpu_task *t) {
  return t->cl == &tg_linear_bwd_weight_cl &&
         starpu_matrix_get_elemsize(STARPU_TASK_GET_HANDLE(t, 0)) == 2;
}
