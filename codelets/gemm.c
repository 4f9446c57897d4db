/*
 * GEMM codelet: C = alpha op(A) op(B) + beta C on row-major matrices.
 *
 * The access mode of C follows the arguments: W when C is overwritten, RW
 * when beta != 0 accumulates into it, REDUX when micro-batches add their
 * contributions to a gradient (each worker adds into its own zeroed copy, so
 * beta is 1 there, and StarPU merges the copies).  CPU: OpenBLAS sgemm;
 * CUDA: cuBLAS on the worker's stream through StarPU's per-worker handle.
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"

typedef struct tg_gemm_args {
  uint32_t shape;
  int transa, transb;
  float alpha, beta;
} tg_gemm_args;

/* m, n, k from the buffers: A is (m, k) or (k, m) when transposed */
static void tg_gemm_dims(void *buffers[], const tg_gemm_args *a, int *m, int *n,
                         int *k) {
  *m = TG_ROWS(buffers[2]);
  *n = TG_COLS(buffers[2]);
  *k = a->transa ? TG_ROWS(buffers[0]) : TG_COLS(buffers[0]);
}

static void tg_gemm_cpu(void *buffers[], void *cl_arg) {
  const tg_gemm_args *a = cl_arg;
  int m, n, k;
  tg_gemm_dims(buffers, a, &m, &n, &k);
  tg_cpu_gemm(a->transa, a->transb, m, n, k, a->alpha, TG_PTR(buffers[0]),
              TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]), a->beta,
              TG_PTR(buffers[2]), TG_LD(buffers[2]));
}

#ifdef TG_HAVE_CUDA
static void tg_gemm_cuda(void *buffers[], void *cl_arg) {
  const tg_gemm_args *a = cl_arg;
  int m, n, k;
  tg_gemm_dims(buffers, a, &m, &n, &k);
  TG_CUBLAS_CHECK(tg_cuda_gemm(starpu_cublas_get_local_handle(), a->transa,
                               a->transb, m, n, k, a->alpha, TG_PTR(buffers[0]),
                               TG_LD(buffers[0]), TG_PTR(buffers[1]),
                               TG_LD(buffers[1]), a->beta, TG_PTR(buffers[2]),
                               TG_LD(buffers[2])));
}
#endif

TG_CODELET(gemm, tg_gemm_cpu, tg_gemm_cuda);

int tg_gemm_shapes(const char *op, int transa, int transb, starpu_data_handle_t A,
                   size_t a_size, starpu_data_handle_t B, size_t b_size,
                   starpu_data_handle_t C, size_t c_size, int *m, int *n, int *k) {
  int ar, ac, br, bc;
  char what[64];
  snprintf(what, sizeof what, "%s: A", op);
  TG_TRY(tg_shape_any(A, what, &ar, &ac));
  snprintf(what, sizeof what, "%s: B", op);
  TG_TRY(tg_shape_any(B, what, &br, &bc));
  int am = transa ? ac : ar, ak = transa ? ar : ac;
  int bk = transb ? bc : br, bn = transb ? br : bc;
  if (ak != bk)
    return tg_fail(EINVAL, "%s: inner dimensions differ: op(A) is (%d, %d), op(B) is (%d, %d)",
                   op, am, ak, bk, bn);
  snprintf(what, sizeof what, "%s: C", op);
  TG_TRY(tg_shape_any(C, what, m, n));
  if (*m != am || *n != bn)
    return tg_fail(EINVAL, "%s: C is (%d, %d), op(A) op(B) is (%d, %d)", op, *m, *n, am, bn);
  TG_TRY(tg_expect(A, op, "A", ar, ac, a_size));
  TG_TRY(tg_expect(B, op, "B", br, bc, b_size));
  TG_TRY(tg_expect(C, op, "C", *m, *n, c_size));
  *k = ak;
  return 0;
}

int tg_gemm_insert(int transa, int transb, float alpha, starpu_data_handle_t A,
                   starpu_data_handle_t B, float beta, starpu_data_handle_t C,
                   tg_accum accum, const tg_task_opts *opts) {
  int m, n, k;
  TG_TRY(tg_gemm_shapes("tg_gemm", transa, transb, A, TG_FLOAT_SLOT, B, TG_FLOAT_SLOT, C,
                        TG_FLOAT_SLOT, &m, &n, &k));
  tg_gemm_args args = {
      .shape = 0, .transa = transa != 0, .transb = transb != 0, .alpha = alpha, .beta = beta};
  if (accum == TG_OVERWRITE) args.beta = 0.0f;
  if (accum == TG_REDUCE || accum == TG_COMMUTE) args.beta = 1.0f;
  int key[2] = {args.transa, args.transb};
  args.shape = tg_hash_ints(key, 2);
  starpu_data_handle_t h[3] = {A, B, C};
  enum starpu_data_access_mode md[3] = {STARPU_R, STARPU_R, tg_accum_mode(accum)};
  return tg_submit(&tg_gemm_cl, 3, h, md, &args, sizeof args, 2.0 * m * n * k, opts);
}
