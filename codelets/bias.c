/*
 * Bias codelets: broadcast-add of a (1, cols) bias over the rows of Y, and
 * its gradient, the column sums of dY (accumulated, or reduced across
 * micro-batches with STARPU_REDUX).
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"
#include "scratch_sizes.h" /* kernels/cuda, plain C, every build */

typedef struct tg_bias_args {
  uint32_t shape;
  float beta;
} tg_bias_args;

static void tg_bias_add_cpu(void *buffers[], void *cl_arg) {
  tg_cpu_bias_add(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                  TG_LD(buffers[0]), TG_PTR(buffers[1]));
}

static void tg_bias_grad_cpu(void *buffers[], void *cl_arg) {
  const tg_bias_args *a = cl_arg;
  tg_cpu_bias_grad(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                   TG_LD(buffers[0]), a->beta, TG_PTR(buffers[1]));
}

#ifdef TG_HAVE_CUDA
static void tg_bias_add_cuda(void *buffers[], void *cl_arg) {
  TG_CUDA_CHECK(tg_cuda_bias_add(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                                 TG_PTR(buffers[0]), TG_LD(buffers[0]),
                                 TG_PTR(buffers[1]), starpu_cuda_get_local_stream()));
}

static void tg_bias_grad_cuda(void *buffers[], void *cl_arg) {
  const tg_bias_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_bias_grad(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                                  TG_PTR(buffers[0]), TG_LD(buffers[0]), a->beta,
                                  TG_PTR(buffers[1]), TG_VPTR(buffers[2]),
                                  (size_t)STARPU_VECTOR_GET_NX(buffers[2]) *
                                      STARPU_VECTOR_GET_ELEMSIZE(buffers[2]),
                                  starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(bias_add, tg_bias_add_cpu, tg_bias_add_cuda);
TG_CODELET(bias_grad, tg_bias_grad_cpu, tg_bias_grad_cuda);

int tg_bias_add_insert(starpu_data_handle_t Y, starpu_data_handle_t b,
                       const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_shape(Y, "tg_bias_add: Y", &rows, &cols));
  TG_TRY(tg_expect(b, "tg_bias_add", "b", 1, cols, TG_FLOAT_SLOT));
  tg_bias_args args = {.shape = 0, .beta = 0.0f};
  starpu_data_handle_t h[2] = {Y, b};
  enum starpu_data_access_mode md[2] = {STARPU_RW, STARPU_R};
  return tg_submit(&tg_bias_add_cl, 2, h, md, &args, sizeof args,
                   (double)rows * cols, opts);
}

int tg_bias_grad_insert(starpu_data_handle_t dY, starpu_data_handle_t db,
                        tg_accum accum, const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_shape(dY, "tg_bias_grad: dY", &rows, &cols));
  TG_TRY(tg_expect(db, "tg_bias_grad", "db", 1, cols, TG_FLOAT_SLOT));
  tg_bias_args args = {.shape = 0, .beta = accum == TG_OVERWRITE ? 0.0f : 1.0f};
  size_t scratch = 1;
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID)
  /* the CUDA kernel's row-split partials, in the SimGrid build too */
  if (tg_bias_grad_scratch_floats(rows, cols) > scratch)
    scratch = tg_bias_grad_scratch_floats(rows, cols);
#endif
  starpu_data_handle_t h[3] = {dY, db, tg_scratch(scratch * sizeof(float))};
  enum starpu_data_access_mode md[3] = {STARPU_R, tg_accum_mode(accum), STARPU_SCRATCH};
  return tg_submit(&tg_bias_grad_cl, 3, h, md, &args, sizeof args,
                   (double)rows * cols, opts);
}
