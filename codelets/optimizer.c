/*
 * Optimizer codelets: SGD with momentum and AdamW, one task per parameter
 * tensor, updating the weights and their state in place.  The tensors must be
 * contiguous (ld == cols), which parameters registered by tg_tensor_alloc
 * are; the kernels then see n = rows * cols flat values.  The AdamW bias
 * corrections are computed here from the step, so the task arguments carry
 * only numbers.
 */
#include <math.h>

#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"

typedef struct tg_sgd_args {
  uint32_t shape;
  tg_sgd_hyper h;
} tg_sgd_args;

typedef struct tg_adamw_args {
  uint32_t shape;
  tg_adamw_scalars s;
} tg_adamw_args;

static size_t tg_numel(void *buf) {
  return (size_t)TG_ROWS(buf) * (size_t)TG_COLS(buf);
}

static void tg_sgd_cpu(void *buffers[], void *cl_arg) {
  const tg_sgd_args *a = cl_arg;
  tg_cpu_sgd(tg_numel(buffers[0]), TG_PTR(buffers[0]), TG_PTR(buffers[1]),
             TG_PTR(buffers[2]), a->h.lr, a->h.momentum, a->h.weight_decay,
             a->h.grad_scale);
}

static void tg_adamw_cpu(void *buffers[], void *cl_arg) {
  const tg_adamw_args *a = cl_arg;
  tg_cpu_adamw(tg_numel(buffers[0]), TG_PTR(buffers[0]), TG_PTR(buffers[1]),
               TG_PTR(buffers[2]), TG_PTR(buffers[3]), a->s.lr, a->s.beta1, a->s.beta2,
               a->s.eps, a->s.weight_decay, a->s.bc1, a->s.bc2, a->s.grad_scale);
}

#ifdef TG_HAVE_CUDA
static void tg_sgd_cuda(void *buffers[], void *cl_arg) {
  const tg_sgd_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_sgd(tg_numel(buffers[0]), TG_PTR(buffers[0]),
                            TG_PTR(buffers[1]), TG_PTR(buffers[2]), a->h.lr,
                            a->h.momentum, a->h.weight_decay, a->h.grad_scale,
                            starpu_cuda_get_local_stream()));
}

static void tg_adamw_cuda(void *buffers[], void *cl_arg) {
  const tg_adamw_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_adamw(tg_numel(buffers[0]), TG_PTR(buffers[0]),
                              TG_PTR(buffers[1]), TG_PTR(buffers[2]),
                              TG_PTR(buffers[3]), a->s.lr, a->s.beta1, a->s.beta2,
                              a->s.eps, a->s.weight_decay, a->s.bc1, a->s.bc2,
                              a->s.grad_scale,
                              starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(sgd, tg_sgd_cpu, tg_sgd_cuda);
TG_CODELET(adamw, tg_adamw_cpu, tg_adamw_cuda);

/* every buffer (rows, cols), contiguous, float */
int tg_param_check(const char *op, const char *const *names,
                          const starpu_data_handle_t *h, int n) {
  int rows, cols;
  char what[64];
  snprintf(what, sizeof what, "%s: %s", op, names[0]);
  TG_TRY(tg_shape(h[0], what, &rows, &cols));
  for (int i = 0; i < n; i++) {
    TG_TRY(tg_expect(h[i], op, names[i], rows, cols, sizeof(float)));
    TG_TRY(tg_expect_contiguous(h[i], op, names[i]));
  }
  return 0;
}

int tg_sgd_insert(starpu_data_handle_t w, starpu_data_handle_t grad,
                  starpu_data_handle_t vel, const tg_sgd_hyper *h,
                  const tg_task_opts *opts) {
  static const char *const names[3] = {"w", "grad", "vel"};
  starpu_data_handle_t hd[3] = {w, grad, vel};
  TG_TRY(tg_param_check("tg_sgd", names, hd, 3));
  tg_sgd_args args = {.shape = 0, .h = *h};
  enum starpu_data_access_mode md[3] = {STARPU_RW, STARPU_R, STARPU_RW};
  double n = (double)starpu_matrix_get_nx(w) * starpu_matrix_get_ny(w);
  return tg_submit(&tg_sgd_cl, 3, hd, md, &args, sizeof args, 4.0 * n, opts);
}

tg_adamw_scalars tg_adamw_scalars_of(const tg_adamw_hyper *h) {
  tg_adamw_scalars s = {.lr = h->lr,
                        .beta1 = h->beta1,
                        .beta2 = h->beta2,
                        .eps = h->eps,
                        .weight_decay = h->weight_decay,
                        .bc1 = (float)(1.0 - pow(h->beta1, h->step)),
                        .bc2 = (float)(1.0 - pow(h->beta2, h->step)),
                        .grad_scale = h->grad_scale};
  return s;
}

int tg_adamw_insert(starpu_data_handle_t w, starpu_data_handle_t grad,
                    starpu_data_handle_t m, starpu_data_handle_t v,
                    const tg_adamw_hyper *h, const tg_task_opts *opts) {
  static const char *const names[4] = {"w", "grad", "m", "v"};
  starpu_data_handle_t hd[4] = {w, grad, m, v};
  TG_TRY(tg_param_check("tg_adamw", names, hd, 4));
  if (h->step < 1) return tg_fail(EINVAL, "tg_adamw: step must be >= 1 (got %d)", h->step);
  tg_adamw_args args = {.shape = 0, .s = tg_adamw_scalars_of(h)};
  enum starpu_data_access_mode md[4] = {STARPU_RW, STARPU_R, STARPU_RW, STARPU_RW};
  double n = (double)starpu_matrix_get_nx(w) * starpu_matrix_get_ny(w);
  return tg_submit(&tg_adamw_cl, 4, hd, md, &args, sizeof args, 12.0 * n, opts);
}
