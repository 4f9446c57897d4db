/*
 * What every taskgrad codelet shares.
 *
 * TG_CODELET(op, cpu_fn, cuda_fn) declares, in one line per operation, the
 * history-based perfmodel "taskgrad_<op>" and the public codelet tg_<op>_cl.
 * Codelets take STARPU_VARIABLE_NBUFFERS so that each task chooses its own
 * access modes (an output may be W, RW or REDUX depending on the arguments).
 *
 * Every cl_arg struct starts with a uint32_t `shape` key holding the hash of
 * the arguments that change the cost (transposes, shapes of non-buffer
 * arguments), never the values that do not (learning rates, alpha): the
 * perfmodel footprint combines it with the buffers' footprint, so a history
 * entry stands for one kind of work.
 */
#ifndef TASKGRAD_CODELET_COMMON_H
#define TASKGRAD_CODELET_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

#include "check.h"
#include "taskgrad/codelets.h"

#ifdef TG_HAVE_CUDA
#include <starpu_cublas_v2.h>
#include "taskgrad/kernels_cuda.h"
#define TG_CUDA_IMPL(fn) .cuda_funcs = {fn}, .cuda_flags = {STARPU_CUDA_ASYNC},
#else
#define TG_CUDA_IMPL(fn)
#endif

uint32_t tg_footprint(struct starpu_task *task);

#define TG_CODELET(op, cpu_fn, cuda_fn)                                     \
  static struct starpu_perfmodel tg_##op##_model = {                        \
      .type = STARPU_HISTORY_BASED,                                         \
      .symbol = "taskgrad_" #op,                                            \
      .footprint = tg_footprint,                                            \
  };                                                                        \
  struct starpu_codelet tg_##op##_cl = {                                    \
      .cpu_funcs = {cpu_fn},                                                \
      .cpu_funcs_name = {#cpu_fn},                                          \
      TG_CUDA_IMPL(cuda_fn)                                                 \
      .nbuffers = STARPU_VARIABLE_NBUFFERS,                                 \
      .model = &tg_##op##_model,                                            \
      .name = "tg_" #op,                                                    \
  }

/* Submits one task of cl on nbuf buffers.  args (argsize bytes, starting with
 * the uint32_t shape key) is copied and freed by StarPU.  flops feeds
 * StarPU's GFlop/s statistics. */
int tg_submit(struct starpu_codelet *cl, int nbuf,
              const starpu_data_handle_t *handles,
              const enum starpu_data_access_mode *modes, const void *args,
              size_t argsize, double flops, const tg_task_opts *opts);

/* A STARPU_SCRATCH workspace of at least `bytes` bytes: one handle per
 * size, registered on first use (no home node: StarPU allocates it on each
 * worker that runs a task with it) and unregistered at tg_shutdown(). */
starpu_data_handle_t tg_scratch(size_t bytes);
#define TG_VPTR(buf) ((float *)STARPU_VECTOR_GET_PTR(buf))

/* The output mode for an accumulation choice. */
enum starpu_data_access_mode tg_accum_mode(tg_accum accum);

/* Shape of a matrix handle in row-major terms; -EINVAL if not a matrix. */
int tg_shape(starpu_data_handle_t h, const char *what, int *rows, int *cols);
/* -EINVAL unless h is a (rows, cols) matrix with elements of elemsize bytes. */
int tg_expect(starpu_data_handle_t h, const char *op, const char *what,
              int rows, int cols, size_t elemsize);

/* -EINVAL unless h's rows are contiguous (ld == cols): for kernels that
 * index a table by row with no leading dimension (wte, wpe). */
int tg_expect_contiguous(starpu_data_handle_t h, const char *op, const char *what);

/* Unpacking a matrix buffer inside a codelet. */
#define TG_PTR(buf) ((float *)STARPU_MATRIX_GET_PTR(buf))
#define TG_IPTR(buf) ((int32_t *)STARPU_MATRIX_GET_PTR(buf))
#define TG_ROWS(buf) ((int)STARPU_MATRIX_GET_NY(buf))
#define TG_COLS(buf) ((int)STARPU_MATRIX_GET_NX(buf))
#define TG_LD(buf) ((int)STARPU_MATRIX_GET_LD(buf))

static inline uint32_t tg_hash_ints(const int *v, int n) {
  uint32_t h = 0x7461736bu; /* "task" */
  for (int i = 0; i < n; i++) h = starpu_hash_crc32c_be((uint32_t)v[i], h);
  return h;
}

#endif
