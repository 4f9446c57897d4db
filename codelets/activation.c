/*
 * Activation codelets (ReLU, GELU with the tanh approximation), forward and
 * backward.  One codelet per direction, with the activation as an argument
 * (it is part of the perfmodel key: GELU costs more than ReLU).
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"

typedef struct tg_act_args {
  uint32_t shape;
  int act;
} tg_act_args;

static void tg_act_fwd_cpu(void *buffers[], void *cl_arg) {
  const tg_act_args *a = cl_arg;
  void (*f)(int, int, const float *, int, float *, int) =
      a->act == TG_ACT_GELU ? tg_cpu_gelu_fwd : tg_cpu_relu_fwd;
  f(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]), TG_LD(buffers[0]),
    TG_PTR(buffers[1]), TG_LD(buffers[1]));
}

static void tg_act_bwd_cpu(void *buffers[], void *cl_arg) {
  const tg_act_args *a = cl_arg;
  void (*f)(int, int, const float *, int, const float *, int, float *, int) =
      a->act == TG_ACT_GELU ? tg_cpu_gelu_bwd : tg_cpu_relu_bwd;
  f(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]), TG_LD(buffers[0]),
    TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]), TG_LD(buffers[2]));
}

#ifdef TG_HAVE_CUDA
static void tg_act_fwd_cuda(void *buffers[], void *cl_arg) {
  const tg_act_args *a = cl_arg;
  cudaError_t (*f)(int, int, const float *, int, float *, int, cudaStream_t) =
      a->act == TG_ACT_GELU ? tg_cuda_gelu_fwd : tg_cuda_relu_fwd;
  TG_CUDA_CHECK(f(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                  TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]),
                  starpu_cuda_get_local_stream()));
}

static void tg_act_bwd_cuda(void *buffers[], void *cl_arg) {
  const tg_act_args *a = cl_arg;
  cudaError_t (*f)(int, int, const float *, int, const float *, int, float *, int,
                   cudaStream_t) = a->act == TG_ACT_GELU ? tg_cuda_gelu_bwd : tg_cuda_relu_bwd;
  TG_CUDA_CHECK(f(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                  TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]),
                  TG_PTR(buffers[2]), TG_LD(buffers[2]), starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(act_fwd, tg_act_fwd_cpu, tg_act_fwd_cuda);
TG_CODELET(act_bwd, tg_act_bwd_cpu, tg_act_bwd_cuda);

static int tg_act_check(tg_activation act, const char *op) {
  if (act != TG_ACT_RELU && act != TG_ACT_GELU)
    return tg_fail(EINVAL, "%s: unknown activation %d", op, (int)act);
  return 0;
}

int tg_act_fwd_insert(tg_activation act, starpu_data_handle_t X,
                      starpu_data_handle_t Y, const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_act_check(act, "tg_act_fwd"));
  TG_TRY(tg_shape(X, "tg_act_fwd: X", &rows, &cols));
  TG_TRY(tg_expect(Y, "tg_act_fwd", "Y", rows, cols, TG_FLOAT_SLOT));
  tg_act_args args = {.shape = (uint32_t)act, .act = (int)act};
  starpu_data_handle_t h[2] = {X, Y};
  enum starpu_data_access_mode md[2] = {STARPU_R, STARPU_W};
  return tg_submit(&tg_act_fwd_cl, 2, h, md, &args, sizeof args,
                   (double)rows * cols, opts);
}

int tg_act_bwd_insert(tg_activation act, starpu_data_handle_t X,
                      starpu_data_handle_t dY, starpu_data_handle_t dX,
                      const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_act_check(act, "tg_act_bwd"));
  TG_TRY(tg_shape(X, "tg_act_bwd: X", &rows, &cols));
  TG_TRY(tg_expect(dY, "tg_act_bwd", "dY", rows, cols, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(dX, "tg_act_bwd", "dX", rows, cols, TG_FLOAT_SLOT));
  tg_act_args args = {.shape = (uint32_t)act, .act = (int)act};
  starpu_data_handle_t h[3] = {X, dY, dX};
  enum starpu_data_access_mode md[3] = {STARPU_R, STARPU_R, STARPU_W};
  return tg_submit(&tg_act_bwd_cl, 3, h, md, &args, sizeof args,
                   (double)rows * cols, opts);
}
