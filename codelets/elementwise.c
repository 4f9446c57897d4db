/*
 * Elementwise codelets: fill, accumulate (dst += src) and scale.
 *
 * tg_fill_zero_cl and tg_accumulate_cl double as the init and merge methods
 * of StarPU reductions (tg_tensor_enable_reduction): StarPU calls them with a
 * fixed number of buffers and no arguments, so they have their own codelets
 * with fixed modes; the zero fill reads no argument.
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"

typedef struct tg_scalar_args {
  uint32_t shape;
  float value;
} tg_scalar_args;

static void tg_fill_cpu(void *buffers[], void *cl_arg) {
  const tg_scalar_args *a = cl_arg;
  tg_cpu_fill(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
              TG_LD(buffers[0]), a->value);
}
static void tg_fill_zero_cpu(void *buffers[], void *cl_arg) {
  tg_cpu_fill(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
              TG_LD(buffers[0]), 0.0f);
}
static void tg_accumulate_cpu(void *buffers[], void *cl_arg) {
  tg_cpu_accumulate(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                    TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]));
}
static void tg_scale_cpu(void *buffers[], void *cl_arg) {
  const tg_scalar_args *a = cl_arg;
  tg_cpu_scale(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
               TG_LD(buffers[0]), a->value);
}

#ifdef TG_HAVE_CUDA
static void tg_fill_cuda(void *buffers[], void *cl_arg) {
  const tg_scalar_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_fill(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                             TG_PTR(buffers[0]), TG_LD(buffers[0]), a->value,
                             starpu_cuda_get_local_stream()));
}
static void tg_fill_zero_cuda(void *buffers[], void *cl_arg) {
  TG_CUDA_CHECK(tg_cuda_fill(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                             TG_PTR(buffers[0]), TG_LD(buffers[0]), 0.0f,
                             starpu_cuda_get_local_stream()));
}
static void tg_accumulate_cuda(void *buffers[], void *cl_arg) {
  TG_CUDA_CHECK(tg_cuda_accumulate(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                                   TG_PTR(buffers[0]), TG_LD(buffers[0]),
                                   TG_PTR(buffers[1]), TG_LD(buffers[1]),
                                   starpu_cuda_get_local_stream()));
}
static void tg_scale_cuda(void *buffers[], void *cl_arg) {
  const tg_scalar_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_scale(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                              TG_PTR(buffers[0]), TG_LD(buffers[0]), a->value,
                              starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(fill, tg_fill_cpu, tg_fill_cuda);
TG_CODELET(scale, tg_scale_cpu, tg_scale_cuda);

/* Reduction methods: fixed buffers and modes, as StarPU requires. */
TG_OPENCL_ENTRY(fill_zero, tg_fill_zero_cpu)
TG_OPENCL_ENTRY(accumulate, tg_accumulate_cpu)
TG_PERFMODEL(fill_zero, NULL);
struct starpu_codelet tg_fill_zero_cl = {
    .cpu_funcs = {tg_fill_zero_cpu},
    .cpu_funcs_name = {"tg_fill_zero_cpu"},
    TG_CUDA_IMPL(tg_fill_zero_cuda)
    TG_OPENCL_IMPL(fill_zero)
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &tg_fill_zero_model,
    .name = "tg_fill_zero",
};
TG_PERFMODEL(accumulate, NULL);
struct starpu_codelet tg_accumulate_cl = {
    .cpu_funcs = {tg_accumulate_cpu},
    .cpu_funcs_name = {"tg_accumulate_cpu"},
    TG_CUDA_IMPL(tg_accumulate_cuda)
    TG_OPENCL_IMPL(accumulate)
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R}, /* StarPU 1.3 requires exactly RW here */
    .model = &tg_accumulate_model,
    .name = "tg_accumulate",
};
#if TG_STARPU_AT_LEAST(1, 4)
/* StarPU 1.4 wants a reduction's merge method to be RW|COMMUTE, and adds
 * COMMUTE to the codelet itself when it is missing, after which a plain RW
 * tg_accumulate task fails StarPU's mode check.  So the merge has its own
 * codelet, and tg_accumulate_insert tasks keep plain RW: they run in
 * submission order, which fixed-order sums rely on. */
TG_OPENCL_ENTRY(accumulate_redux, tg_accumulate_cpu)
struct starpu_codelet tg_accumulate_redux_cl = {
    .cpu_funcs = {tg_accumulate_cpu},
    .cpu_funcs_name = {"tg_accumulate_cpu"},
    TG_CUDA_IMPL(tg_accumulate_cuda)
    TG_OPENCL_IMPL(accumulate_redux)
    .nbuffers = 2,
    .modes = {STARPU_RW | STARPU_COMMUTE, STARPU_R},
    .model = &tg_accumulate_model,
    .name = "tg_accumulate_redux",
};
#endif

int tg_fill_insert(starpu_data_handle_t X, float value, const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_shape(X, "tg_fill: X", &rows, &cols));
  tg_scalar_args args = {.shape = 0, .value = value};
  enum starpu_data_access_mode md[1] = {STARPU_W};
  return tg_submit(&tg_fill_cl, 1, &X, md, &args, sizeof args, (double)rows * cols, opts);
}

int tg_accumulate_insert(starpu_data_handle_t dst, starpu_data_handle_t src,
                         const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_shape(dst, "tg_accumulate: dst", &rows, &cols));
  TG_TRY(tg_expect(src, "tg_accumulate", "src", rows, cols, sizeof(float)));
  tg_scalar_args args = {.shape = 0, .value = 0.0f};
  starpu_data_handle_t h[2] = {dst, src};
  enum starpu_data_access_mode md[2] = {STARPU_RW, STARPU_R};
  return tg_submit(&tg_accumulate_cl, 2, h, md, &args, sizeof args,
                   (double)rows * cols, opts);
}

int tg_scale_insert(starpu_data_handle_t X, float alpha, const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_shape(X, "tg_scale: X", &rows, &cols));
  tg_scalar_args args = {.shape = 0, .value = alpha};
  enum starpu_data_access_mode md[1] = {STARPU_RW};
  return tg_submit(&tg_scale_cl, 1, &X, md, &args, sizeof args, (double)rows * cols, opts);
}
