/*
 * Residual add codelet: Y = A + B, the skip connections of a transformer
 * block.  Y may be A or B itself (in place, one RW buffer).
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"

typedef struct tg_residual_args {
  uint32_t shape;
} tg_residual_args;

/* buffers: A, B, Y */
static void tg_residual_cpu(void *buffers[], void *cl_arg) {
  tg_cpu_residual_fwd(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                      TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]),
                      TG_PTR(buffers[2]), TG_LD(buffers[2]));
}

#ifdef TG_HAVE_CUDA
static void tg_residual_cuda(void *buffers[], void *cl_arg) {
  TG_CUDA_CHECK(tg_cuda_residual_fwd(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                                     TG_PTR(buffers[0]), TG_LD(buffers[0]),
                                     TG_PTR(buffers[1]), TG_LD(buffers[1]),
                                     TG_PTR(buffers[2]), TG_LD(buffers[2]),
                                     starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(residual, tg_residual_cpu, tg_residual_cuda);

int tg_residual_insert(starpu_data_handle_t A, starpu_data_handle_t B,
                       starpu_data_handle_t Y, const tg_task_opts *opts) {
  int n, C;
  TG_TRY(tg_shape(A, "tg_residual: A", &n, &C));
  TG_TRY(tg_expect(B, "tg_residual", "B", n, C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(Y, "tg_residual", "Y", n, C, TG_FLOAT_SLOT));
  tg_residual_args args = {0};
  starpu_data_handle_t h[3] = {A, B, Y};
  /* StarPU merges a handle given twice; in place, Y is also an input */
  enum starpu_data_access_mode md[3] = {STARPU_R, STARPU_R,
                                        (Y == A || Y == B) ? STARPU_RW : STARPU_W};
  return tg_submit(&tg_residual_cl, 3, h, md, &args, sizeof args, (double)n * C, opts);
}
