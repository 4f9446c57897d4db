/*
 * Low-precision GEMM codelet: C = alpha op(A) op(B) + beta C with A and B in
 * bf16 or fp16, fp32 accumulation, C in f32 or in the same 16-bit type.
 *
 * The element types travel in the arguments (StarPU only knows that the
 * elements are 2 bytes).  Access modes follow tg_gemm_insert; a 16-bit C
 * cannot be a StarPU reduction (the REDUX init and merge codelets are f32),
 * so TG_REDUCE is refused for it.  The CPU implementation widens tiles of A
 * and B into a STARPU_SCRATCH workspace (bounded: three 256 x 256 float
 * tiles at most, see kernels/cpu/gemm_lowp.c); the CUDA one is cublasGemmEx
 * on the worker's handle and stream, which uses the scratch for copies of A
 * and B with the inner dimension zero-padded to a multiple of 8 when it is
 * not one (tensor-core alignment; the results are the unpadded ones).
 */
#include "codelet_common.h"
#include "gemm_lowp_pad.h"
#include "taskgrad/precision.h"

typedef struct tg_gemm_lowp_args {
  uint32_t shape;
  int lowp, c_dtype, transa, transb;
  float alpha, beta;
} tg_gemm_lowp_args;

/* buffers: A, B, C, scratch */
static void tg_gemm_lowp_dims(void *buffers[], const tg_gemm_lowp_args *a, int *m,
                              int *n, int *k) {
  *m = TG_ROWS(buffers[2]);
  *n = TG_COLS(buffers[2]);
  *k = a->transa ? TG_ROWS(buffers[0]) : TG_COLS(buffers[0]);
}

static void tg_gemm_lowp_cpu(void *buffers[], void *cl_arg) {
  const tg_gemm_lowp_args *a = cl_arg;
  int m, n, k;
  tg_gemm_lowp_dims(buffers, a, &m, &n, &k);
  tg_cpu_gemm_lowp((tg_dtype)a->lowp, a->transa, a->transb, m, n, k, a->alpha,
                   TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]),
                   TG_LD(buffers[1]), a->beta, (tg_dtype)a->c_dtype,
                   (void *)STARPU_MATRIX_GET_PTR(buffers[2]), TG_LD(buffers[2]),
                   TG_VPTR(buffers[3]));
}

#ifdef TG_HAVE_CUDA
static void tg_gemm_lowp_cuda(void *buffers[], void *cl_arg) {
  const tg_gemm_lowp_args *a = cl_arg;
  int m, n, k;
  tg_gemm_lowp_dims(buffers, a, &m, &n, &k);
  TG_CUBLAS_CHECK(tg_cuda_gemm_lowp_aligned(
      starpu_cublas_get_local_handle(), (tg_dtype)a->lowp, a->transa, a->transb, m,
      n, k, a->alpha, TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]),
      TG_LD(buffers[1]), a->beta, (tg_dtype)a->c_dtype,
      (void *)STARPU_MATRIX_GET_PTR(buffers[2]), TG_LD(buffers[2]),
      (uint16_t *)TG_VPTR(buffers[3])));
}
#endif

TG_CODELET(gemm_lowp, tg_gemm_lowp_cpu, tg_gemm_lowp_cuda);

int tg_gemm_lowp_insert(tg_dtype lowp, int transa, int transb, float alpha,
                        starpu_data_handle_t A, starpu_data_handle_t B,
                        float beta, starpu_data_handle_t C, tg_accum accum,
                        const tg_task_opts *opts) {
  static const char op[] = "tg_gemm_lowp";
  TG_TRY(tg_expect_lowp(op, lowp));
  if (!C) return tg_fail(EINVAL, "%s: missing data handle for C", op);
  /* C's type from its element size: 4 bytes f32, otherwise lowp (checked
   * to be 2 bytes by tg_gemm_shapes) */
  tg_dtype c_dtype = TG_F32;
  if (starpu_data_get_interface_id(C) == STARPU_MATRIX_INTERFACE_ID &&
      starpu_matrix_get_elemsize(C) != sizeof(float))
    c_dtype = lowp;
  int m, n, k;
  TG_TRY(tg_gemm_shapes(op, transa, transb, A, 2, B, 2, C, tg_dtype_size(c_dtype), &m,
                        &n, &k));
  if (accum == TG_REDUCE && c_dtype != TG_F32)
    return tg_fail(EINVAL, "%s: a %s C cannot be reduced (TG_REDUCE needs an f32 C)", op,
                   tg_dtype_name(lowp));
  tg_gemm_lowp_args args = {.shape = 0, .lowp = lowp, .c_dtype = c_dtype,
                            .transa = transa != 0, .transb = transb != 0,
                            .alpha = alpha, .beta = beta};
  if (accum == TG_OVERWRITE) args.beta = 0.0f;
  if (accum == TG_REDUCE || accum == TG_COMMUTE) args.beta = 1.0f;
  int key[4] = {lowp, c_dtype, args.transa, args.transb};
  args.shape = tg_hash_ints(key, 4);
  /* the CPU widens tiles into the scratch, the GPU pads k to a multiple of
   * 8 there when it is not one (tensor-core alignment) */
  size_t work = sizeof(float) * tg_cpu_gemm_lowp_work_floats(m, n, k);
  size_t pad = sizeof(uint16_t) * tg_gemm_lowp_pad_elems(m, n, k);
  if (pad > work) work = pad;
  starpu_data_handle_t h[4] = {A, B, C, tg_scratch(work)};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_R, tg_accum_mode(accum),
                                        STARPU_SCRATCH};
  return tg_submit_native(&tg_gemm_lowp_cl, 4, h, md, &args, sizeof args, 2.0 * m * n * k, opts);
}
