/*
 * What every taskgrad codelet shares.
 *
 * TG_CODELET(op, cpu_fn, cuda_fn) declares, in one line per operation, the
 * history-based perfmodel "taskgrad_<op>" and the public codelet tg_<op>_cl.
 * (In the SimGrid build, TG_PERFMODEL makes it a per-arch model that reads
 * that history and falls back to a roofline: codelets/sim_cost.c.)
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
#include <cublasLt.h>
#define TG_CUDA_IMPL(fn) .cuda_funcs = {fn}, .cuda_flags = {STARPU_CUDA_ASYNC},
#elif defined(TG_SIMGRID)
/* SimGrid build (TG_SIMGRID, issue 13): StarPU simulates the CUDA workers.
 * Every codelet gets a real CUDA function that does nothing: StarPU times
 * tasks from the perfmodel instead of running them, but calls a reduction
 * method's function directly (a placeholder pointer would crash or hang). */
void tg_sim_cuda_body(void *buffers[], void *cl_arg);
/* STARPU_CUDA_ASYNC as in the CUDA build: StarPU then simulates the
 * worker's pipeline of queued tasks (STARPU_CUDA_PIPELINE) instead of a
 * stream synchronisation after every task */
#define TG_CUDA_IMPL(fn) .cuda_funcs = {tg_sim_cuda_body}, .cuda_flags = {STARPU_CUDA_ASYNC},
#else
#define TG_CUDA_IMPL(fn)
#endif

#ifdef TG_SIMGRID
/* Simulated cost of a task on an arch (codelets/sim_cost.c): the calibrated
 * history of `hist` (taskgrad_<op>, from a real machine) when it has the
 * task's footprint, otherwise a roofline on the task's flops and bytes. */
double tg_sim_cost(struct starpu_perfmodel *hist, struct starpu_task *task,
                   struct starpu_perfmodel_arch *arch, unsigned nimpl);
/* The calibrated history's mean for the task (counted as a hit), or -1 */
double tg_sim_history(struct starpu_perfmodel *hist, struct starpu_task *task,
                      struct starpu_perfmodel_arch *arch, unsigned nimpl);
#define TG_PERFMODEL(op, fp)                                                \
  static struct starpu_perfmodel tg_##op##_hist = {                         \
      .type = STARPU_HISTORY_BASED, .symbol = "taskgrad_" #op, .footprint = fp}; \
  static double tg_##op##_cost(struct starpu_task *t, struct starpu_perfmodel_arch *a, \
                               unsigned impl) {                             \
    return tg_sim_cost(&tg_##op##_hist, t, a, impl);                        \
  }                                                                         \
  static struct starpu_perfmodel tg_##op##_model = {                        \
      .type = STARPU_PER_ARCH, .arch_cost_function = tg_##op##_cost}
#else
/* The history-based perfmodel "taskgrad_<op>" (fp: its footprint function,
 * NULL for StarPU's default). */
#define TG_PERFMODEL(op, fp)                                                \
  static struct starpu_perfmodel tg_##op##_model = {                        \
      .type = STARPU_HISTORY_BASED, .symbol = "taskgrad_" #op, .footprint = fp}
#endif

uint32_t tg_footprint(struct starpu_task *task);
/* The bytes a tile task really reads and writes, for the simulator's
 * roofline: a tile reads its block of the whole weight or wte handle it is
 * given (codelets/linear.c, lm_classifier_tile.c), which counting
 * the handles would overstate by the tile count.  -1 for any other task. */
double tg_tile_task_bytes(struct starpu_task *task);
double tg_linear_tile_bytes(struct starpu_task *task); /* its linear part */
/* An attention task's 16-bit tensor-core path, for the simulator's
 * roofline: TG_BF16_GEMM for the gemm kind's (attention_gemm_lowp.cu: the
 * full T x T products, twice the declared causal flops), TG_BF16_FLASH for
 * the flash kind's (attention_flash_lowp.cu), TG_BF16_CUDNN for the cudnn
 * kind's (cuDNN's fused attention, its own expected rate), else 0: CUDA
 * cores (codelets/attention.c). */
enum { TG_BF16_FLASH = 1, TG_BF16_GEMM = 2, TG_BF16_CUDNN = 3 };
int tg_attention_on_tensor_cores(const struct starpu_task *task);
/* The memory traffic of a gemm-kind attention task's (NH, T, T) scores in
 * its scratch, which the buffers' sizes do not show (0 for other tasks) */
double tg_attention_scratch_traffic(const struct starpu_task *task);
/* The bytes a fused weight-gradient task reads again after its GEMM (its
 * column sums of dZ, a second kernel: codelets/linear_weight.c), which the
 * roofline adds to the GEMM's time instead of overlapping them; 0 for other
 * tasks.  And whether it multiplies 16-bit operands. */
double tg_linear_bwd_weight_serial_bytes(const struct starpu_task *task);
int tg_linear_bwd_weight_is_lowp(const struct starpu_task *task);
/* the same for the whole fused backward (codelets/linear_bwd.c) */
double tg_linear_bwd_serial_bytes(const struct starpu_task *task);
int tg_linear_bwd_is_lowp(const struct starpu_task *task);
/* The same for the classifier's (chunk, V) logits block and, fused, its
 * per-chunk passes over dwte (codelets/lm_classifier.c) */
double tg_lm_classifier_scratch_traffic(const struct starpu_task *task);

/* Every codelet's functions run through the low-precision adapter
 * (codelets/lowp_adapter.c): a task submitted with 2-byte buffers and
 * opts->lowp gets f32 views of them; any other task calls fn directly. */
void tg_lowp_cpu(void *buffers[], void *cl_arg, void (*fn)(void *[], void *));
/* tg_lowp_cpu for a CPU function that multiplies bf16 operands itself
 * (tg_cpu_gemm_bf16, where the CPU has AVX512-BF16 and the native path is
 * on; otherwise exactly tg_lowp_cpu): the 2-byte buffers in the mask keep
 * (bit i: buffer i; inputs or outputs, which fn then writes in 16 bits) reach
 * fn as they are, and fn's workspace buffer (index nbuf) is the room their
 * f32 copies would have taken, for its own scratch and tg_cpu_gemm_lowp's
 * widening should oneDNN decline a shape.  All of the mask or none: when
 * one of them is not 2-byte, none is kept. */
void tg_lowp_cpu_keep(void *buffers[], void *cl_arg, void (*fn)(void *[], void *),
                      unsigned keep);
/* tg_lowp_cpu_keep for a CPU function that reads and writes its 16-bit
 * buffers itself whatever the CPU (bf16 and fp16: widening and rounding
 * blocks as it goes, the chunked attention kernels) */
void tg_lowp_cpu_keep16(void *buffers[], void *cl_arg, void (*fn)(void *[], void *),
                        unsigned keep);
#ifdef TG_HAVE_CUDA
void tg_lowp_cuda(void *buffers[], void *cl_arg, void (*fn)(void *[], void *));
#define TG_CUDA_ENTRY(op, fn)                                               \
  static void tg_##op##_cuda_entry(void *b[], void *a) { tg_lowp_cuda(b, a, fn); }
/* A CUDA function that takes 16-bit buffers itself (on the tensor cores):
 * for a task with 2-byte buffers, native(buffers, cl_arg, lowp, ws) gets the
 * task's own buffers and the adapter's f32 workspace ws (room for an f32
 * copy of every 2-byte buffer); it returns 0 when it ran the task, nonzero
 * to have the adapter run fn on f32 copies instead. */
typedef int (*tg_lowp_native_fn)(void *buffers[], void *cl_arg, tg_dtype lowp, float *ws);
void tg_lowp_cuda_native(void *buffers[], void *cl_arg, void (*fn)(void *[], void *),
                         tg_lowp_native_fn native);
#define TG_CUDA_ENTRY_NATIVE(op, fn, native)                                \
  static void tg_##op##_cuda_entry(void *b[], void *a) {                    \
    tg_lowp_cuda_native(b, a, fn, native);                                  \
  }
#else
#define TG_CUDA_ENTRY_NATIVE(op, fn, native)
#define TG_CUDA_ENTRY(op, fn)
#endif

/* OpenCL (codelets/opencl_adapter.c): the CPU function on mapped device
 * buffers, for the emulated accelerators (PoCL devices as memory nodes).
 * TG_OPENCL_ENTRY(name, cpu) defines tg_<name>_opencl_entry calling cpu. */
#ifdef STARPU_USE_OPENCL
void tg_opencl_call(void *buffers[], void *cl_arg, void (*cpu_fn)(void *[], void *),
                    const struct starpu_codelet *cl);
#define TG_OPENCL_ENTRY(name, cpu)                                          \
  static void tg_##name##_opencl_entry(void *b[], void *a) {                \
    tg_opencl_call(b, a, cpu, &tg_##name##_cl);                             \
  }
#define TG_OPENCL_IMPL(name) .opencl_funcs = {tg_##name##_opencl_entry},
#else
#define TG_OPENCL_ENTRY(name, cpu)
#define TG_OPENCL_IMPL(name)
#endif

/* The codelet tg_<op>_cl on its CPU and CUDA entry points as given (the
 * OpenCL entry calls cpu_entry), and its perfmodel.  TG_CODELET wraps the
 * functions in the low-precision adapter first; the codelets that take
 * 2-byte buffers as they are may use this directly (codelets/exchange.c). */
#define TG_CODELET_ENTRIES(op, cpu_entry, cuda_entry)                       \
  TG_OPENCL_ENTRY(op, cpu_entry)                                            \
  TG_PERFMODEL(op, tg_footprint);                                           \
  struct starpu_codelet tg_##op##_cl = {                                    \
      .cpu_funcs = {cpu_entry},                                             \
      .cpu_funcs_name = {#cpu_entry},                                       \
      TG_CUDA_IMPL(cuda_entry)                                              \
      TG_OPENCL_IMPL(op)                                                    \
      .nbuffers = STARPU_VARIABLE_NBUFFERS,                                 \
      .model = &tg_##op##_model,                                            \
      .name = "tg_" #op,                                                    \
  }

#define TG_CODELET(op, cpu_fn, cuda_fn)                                     \
  static void tg_##op##_cpu_entry(void *b[], void *a) { tg_lowp_cpu(b, a, cpu_fn); } \
  TG_CUDA_ENTRY(op, cuda_fn)                                                \
  TG_CODELET_ENTRIES(op, tg_##op##_cpu_entry, tg_##op##_cuda_entry)

/* TG_CODELET whose CPU function reads the bf16 inputs in keep itself
 * (tg_lowp_cpu_keep) and whose CUDA function has a native 16-bit twin */
#define TG_CODELET_NATIVE(op, cpu_fn, keep, cuda_fn, native)                \
  static void tg_##op##_cpu_entry(void *b[], void *a) {                     \
    tg_lowp_cpu_keep(b, a, cpu_fn, keep);                                   \
  }                                                                         \
  TG_CUDA_ENTRY_NATIVE(op, cuda_fn, native)                                 \
  TG_CODELET_ENTRIES(op, tg_##op##_cpu_entry, tg_##op##_cuda_entry)

/* TG_CODELET whose CPU function reads the 2-byte buffers in keep itself */
#define TG_CODELET_KEEP(op, cpu_fn, keep, cuda_fn)                          \
  static void tg_##op##_cpu_entry(void *b[], void *a) {                     \
    tg_lowp_cpu_keep(b, a, cpu_fn, keep);                                   \
  }                                                                         \
  TG_CUDA_ENTRY(op, cuda_fn)                                                \
  TG_CODELET_ENTRIES(op, tg_##op##_cpu_entry, tg_##op##_cuda_entry)

/* TG_CODELET whose CUDA function has a native 16-bit twin (above) */
#define TG_CODELET_NATIVE_CUDA(op, cpu_fn, cuda_fn, native)                 \
  static void tg_##op##_cpu_entry(void *b[], void *a) { tg_lowp_cpu(b, a, cpu_fn); } \
  TG_CUDA_ENTRY_NATIVE(op, cuda_fn, native)                                 \
  TG_CODELET_ENTRIES(op, tg_##op##_cpu_entry, tg_##op##_cuda_entry)

/* The most buffers a task that may run through the low-precision adapter
 * has (the LayerNorm backward: 9), plus room; tg_submit refuses more (the
 * adapter's arrays have this size). */
#define TG_MAX_BUFFERS 16
/* The most buffers of any taskgrad task: the exchange codelets' out and
 * TG_EXCHANGE_MAX inputs (codelets/exchange.c), submitted natively.  Above
 * STARPU_NMAXBUFS, tg_submit gives the task dyn_handles; the OpenCL
 * adapter's arrays have this size. */
#define TG_MAX_TASK_BUFFERS (TG_EXCHANGE_MAX + 1)

/* Submits one task of cl on nbuf buffers.  args (argsize bytes, starting with
 * the uint32_t shape key) is copied and freed by StarPU.  flops feeds
 * StarPU's GFlop/s statistics. */
int tg_submit(struct starpu_codelet *cl, int nbuf,
              const starpu_data_handle_t *handles,
              const enum starpu_data_access_mode *modes, const void *args,
              size_t argsize, double flops, const tg_task_opts *opts);
/* tg_submit for the codelets that take 2-byte buffers themselves (convert,
 * gemm_lowp, nonfinite, adamw_amp): no low-precision adapter. */
int tg_submit_native(struct starpu_codelet *cl, int nbuf,
                     const starpu_data_handle_t *handles,
                     const enum starpu_data_access_mode *modes, const void *args,
                     size_t argsize, double flops, const tg_task_opts *opts);

/* A task's n buffers (dyn_handles above STARPU_NMAXBUFS, which StarPU
 * frees with the task); -ENOMEM when they cannot be allocated. */
int tg_task_set_buffers(struct starpu_task *task, int n, const starpu_data_handle_t *h,
                        const enum starpu_data_access_mode *modes);
/* Submits a task tg_submit built (its hooks run first); on failure the
 * task is destroyed and the error set (codelets/submit.c). */
int tg_task_submit_built(struct starpu_task *task);
/* Every built task's way to StarPU (codelets/fuse.c): inside an open
 * fusion group (tg_fuse_begin) the group takes it, to be submitted at the
 * group's end alone or as a part of one fused task; a task that names a
 * view of a packed tensor (tg_tensor_pack) is submitted as a fused task of
 * its own, over the views' wholes; any other goes to
 * tg_task_submit_built. */
int tg_fuse_submit(struct starpu_task *task);
/* The running task as a codelet function sees it: the part a fused task is
 * running, else starpu_task_get_current().  Codelet functions read their
 * buffers' modes and count from it. */
struct starpu_task *tg_task_current(void);
void tg_task_current_set(struct starpu_task *part);

/* The adapter's side of submission (codelets/lowp_adapter.c): workspace
 * bytes for f32 copies of h's 2-byte matrices (0: none; -EINVAL when one is
 * a REDUX target or lowp names no 2-byte type), and the trailer that marks
 * an adapted task's arguments. */
int tg_lowp_plan(const char *op, int nbuf, const starpu_data_handle_t *h,
                 const enum starpu_data_access_mode *modes, int lowp, size_t *bytes);
size_t tg_lowp_trailer_size(void);
void tg_lowp_trailer_write(void *dst, int lowp, int nbuf);
/* TG_BF16 or TG_F16 for an adapted task (*nbuf: its buffers before the
 * workspace), 0 otherwise. */
int tg_lowp_of_task(const struct starpu_task *task, int *nbuf);

/* A STARPU_SCRATCH workspace of at least `bytes` bytes: one handle per
 * size, registered on first use (no home node: StarPU allocates it on each
 * worker that runs a task with it) and unregistered at tg_shutdown(). */
starpu_data_handle_t tg_scratch(size_t bytes);
/* The same from a separate pool: handles of different pools are never the
 * same, so a task may hold one from each (the low-precision adapter's
 * workspace, TG_SCRATCH_LOWP, next to a codelet's own scratch). */
#define TG_SCRATCH_LOWP 1
starpu_data_handle_t tg_scratch_pool(size_t bytes, int pool);
#define TG_VPTR(buf) ((float *)STARPU_VECTOR_GET_PTR(buf))

/* The output mode for an accumulation choice. */
enum starpu_data_access_mode tg_accum_mode(tg_accum accum);

/* Shape of a matrix handle in row-major terms; -EINVAL if not a matrix.
 * tg_shape is for float slots: 4-byte elements, or 2-byte ones (bf16, f16
 * storage that the adapter widens; tg_submit refuses them without
 * opts->lowp).  tg_shape_any takes any element size. */
int tg_shape(starpu_data_handle_t h, const char *what, int *rows, int *cols);
int tg_shape_any(starpu_data_handle_t h, const char *what, int *rows, int *cols);
/* -EINVAL unless h is a (rows, cols) matrix with elements of elemsize bytes;
 * elemsize TG_FLOAT_SLOT accepts what tg_shape accepts. */
#define TG_FLOAT_SLOT ((size_t)0)
int tg_expect(starpu_data_handle_t h, const char *op, const char *what,
              int rows, int cols, size_t elemsize);

/* -EINVAL unless h's rows are contiguous (ld == cols): for kernels that
 * index a table by row with no leading dimension (wte, wpe). */
int tg_expect_contiguous(starpu_data_handle_t h, const char *op, const char *what);

/* m, n, k of C(m, n) = op(A) op(B) after checking that the shapes agree and
 * that A, B, C have elements of a_size, b_size, c_size bytes; -EINVAL with a
 * message starting with `op` otherwise (codelets/gemm.c). */
int tg_gemm_shapes(const char *op, int transa, int transb, starpu_data_handle_t A,
                   size_t a_size, starpu_data_handle_t B, size_t b_size,
                   starpu_data_handle_t C, size_t c_size, int *m, int *n, int *k);

/* -EINVAL unless the n handles are float matrices of h[0]'s shape, all
 * contiguous (the optimizers' parameter, gradient and state tensors);
 * names[i] names h[i] in the message (codelets/optimizer.c). */
int tg_param_check(const char *op, const char *const *names,
                   const starpu_data_handle_t *h, int n);

/* AdamW's scalars as its kernels take them: the hyperparameters and the
 * bias corrections 1 - beta^step, computed in one place so that the f32
 * and the mixed-precision AdamW get the same float values
 * (codelets/optimizer.c). */
typedef struct tg_adamw_scalars {
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale;
} tg_adamw_scalars;
tg_adamw_scalars tg_adamw_scalars_of(const tg_adamw_hyper *h);

/* -EINVAL unless lowp is TG_BF16 or TG_F16 (codelets/precision.c). */
int tg_expect_lowp(const char *op, int lowp);
/* A LayerNorm backward's shapes under op's name (codelets/layernorm.c): X
 * (n, C) gives *n and *C; w (1, C), mean and rstd (n, 1), dY and dX (n, C),
 * dw and db (1, C); f32 or 16-bit elements (the adapter's). */
int tg_layernorm_bwd_check(const char *op, starpu_data_handle_t dY, starpu_data_handle_t X,
                           starpu_data_handle_t w, starpu_data_handle_t mean,
                           starpu_data_handle_t rstd, starpu_data_handle_t dX,
                           starpu_data_handle_t dw, starpu_data_handle_t db, int *n, int *C);

/* Unpacking a matrix buffer inside a codelet. */
#define TG_PTR(buf) ((float *)STARPU_MATRIX_GET_PTR(buf))
#define TG_IPTR(buf) ((int32_t *)STARPU_MATRIX_GET_PTR(buf))
#define TG_HPTR(buf) ((uint16_t *)STARPU_MATRIX_GET_PTR(buf)) /* bf16, f16 */
/* 1 when a matrix buffer holds 2-byte (bf16, fp16) elements */
static inline int tg_is16(void *buf) { return STARPU_MATRIX_GET_ELEMSIZE(buf) == 2; }
#ifdef TG_HAVE_CUDA
/* A launcher's two statuses (its cuBLAS call's, then the launch's): fatal,
 * naming the codelet, when either failed */
static inline void tg_cuda_launch_check(cudaError_t e, cublasStatus_t s, const char *op) {
  if (s != CUBLAS_STATUS_SUCCESS) TG_FATAL("%s: cuBLAS call failed: status %d", op, (int)s);
  if (e != cudaSuccess) TG_FATAL("%s: CUDA launch failed: %s", op, cudaGetErrorString(e));
}
/* This CUDA worker thread's cuBLASLt handle (codelets/cublaslt.c), or NULL:
 * no cuBLASLt (TG_CUBLASLT=0, or it failed to start); the caller then takes
 * its cuBLAS path */
cublasLtHandle_t tg_cublaslt_handle(void);
/* A cuBLASLt launcher's status (kernels/cuda/gemm_lt.c): 1 when it ran, 0
 * when it handed the problem back (NOT_SUPPORTED, nothing queued), fatal
 * otherwise */
static inline int tg_lt_ran(cublasStatus_t s, const char *op) {
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return 0;
  if (s != CUBLAS_STATUS_SUCCESS) TG_FATAL("%s: cuBLASLt call failed: status %d", op, (int)s);
  return 1;
}
#endif
#define TG_ROWS(buf) ((int)STARPU_MATRIX_GET_NY(buf))
#define TG_COLS(buf) ((int)STARPU_MATRIX_GET_NX(buf))
#define TG_LD(buf) ((int)STARPU_MATRIX_GET_LD(buf))

static inline uint32_t tg_hash_ints(const int *v, int n) {
  uint32_t h = 0x7461736bu; /* "task" */
  for (int i = 0; i < n; i++) h = starpu_hash_crc32c_be((uint32_t)v[i], h);
  return h;
}

#endif
