/*
 * Mixed-precision codelets: f32 <-> bf16 / fp16 conversion, the non-finite
 * check of a gradient into an overflow flag, and the AMP AdamW step (see
 * precision.h for the scheme).
 *
 * Element types: StarPU handles carry only the element size, and bf16 and
 * fp16 are both 2 bytes, so every wrapper takes the 16-bit type explicitly
 * and stores it in the task arguments; the sizes are still checked (an f32
 * tensor passed where a 16-bit one is expected is refused).
 *
 * The flag is a (1, 1) f32 tensor: tg_fill_insert(flag, 0) before a step's
 * checks, then one tg_nonfinite_insert per gradient (RW, so they serialise
 * on the flag, each costing one read of its gradient), then the AMP AdamW
 * tasks read it (R) and skip their update when it is set.  Nothing waits on
 * the host.
 */
#include <math.h>

#include "codelet_common.h"
#include "taskgrad/precision_codelets.h"
#include "taskgrad/precision_kernels.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

int tg_expect_lowp(const char *op, int lowp) {
  if (lowp != TG_BF16 && lowp != TG_F16)
    return tg_fail(EINVAL, "%s: the 16-bit type must be TG_BF16 or TG_F16 (got %d)", op,
                   lowp);
  return 0;
}

static size_t tg_numel(void *buf) {
  return (size_t)TG_ROWS(buf) * (size_t)TG_COLS(buf);
}

/* ---- conversion: buffers src (R), dst (W) ------------------------------------ */

typedef struct tg_convert_args {
  uint32_t shape;
  int lowp, narrow; /* narrow: f32 -> lowp; otherwise lowp -> f32 */
} tg_convert_args;

static void tg_convert_cpu(void *buffers[], void *cl_arg) {
  const tg_convert_args *a = cl_arg;
  int rows = TG_ROWS(buffers[0]), cols = TG_COLS(buffers[0]);
  if (a->narrow)
    tg_cpu_to_lowp((tg_dtype)a->lowp, rows, cols, TG_PTR(buffers[0]), TG_LD(buffers[0]),
                   TG_HPTR(buffers[1]), TG_LD(buffers[1]));
  else
    tg_cpu_from_lowp((tg_dtype)a->lowp, rows, cols, TG_HPTR(buffers[0]),
                     TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]));
}

/* ---- non-finite check: buffers grad (R), flag (RW) ---------------------------- */

static void tg_nonfinite_cpu(void *buffers[], void *cl_arg) {
  tg_cpu_nonfinite_check(TG_PTR(buffers[0]), tg_numel(buffers[0]), TG_PTR(buffers[1]));
}

/* ---- AMP AdamW: buffers w, grad, m, v, flag [, w_low] ------------------------- */

typedef struct tg_adamw_amp_args {
  uint32_t shape;
  int lowp, has_low;
  tg_adamw_scalars s;
} tg_adamw_amp_args;

static void tg_adamw_amp_cpu(void *buffers[], void *cl_arg) {
  const tg_adamw_amp_args *a = cl_arg;
  tg_cpu_adamw_amp(tg_numel(buffers[0]), TG_PTR(buffers[0]), TG_PTR(buffers[1]),
                   TG_PTR(buffers[2]), TG_PTR(buffers[3]), TG_PTR(buffers[4]),
                   (tg_dtype)a->lowp, a->has_low ? TG_HPTR(buffers[5]) : NULL, a->s.lr,
                   a->s.beta1, a->s.beta2, a->s.eps, a->s.weight_decay, a->s.bc1, a->s.bc2,
                   a->s.grad_scale);
}

#ifdef TG_HAVE_CUDA
static void tg_convert_cuda(void *buffers[], void *cl_arg) {
  const tg_convert_args *a = cl_arg;
  int rows = TG_ROWS(buffers[0]), cols = TG_COLS(buffers[0]);
  if (a->narrow)
    TG_CUDA_CHECK(tg_cuda_to_lowp((tg_dtype)a->lowp, rows, cols, TG_PTR(buffers[0]),
                                  TG_LD(buffers[0]), TG_HPTR(buffers[1]),
                                  TG_LD(buffers[1]), starpu_cuda_get_local_stream()));
  else
    TG_CUDA_CHECK(tg_cuda_from_lowp((tg_dtype)a->lowp, rows, cols, TG_HPTR(buffers[0]),
                                    TG_LD(buffers[0]), TG_PTR(buffers[1]),
                                    TG_LD(buffers[1]), starpu_cuda_get_local_stream()));
}

static void tg_nonfinite_cuda(void *buffers[], void *cl_arg) {
  TG_CUDA_CHECK(tg_cuda_nonfinite_check(TG_PTR(buffers[0]), tg_numel(buffers[0]),
                                        TG_PTR(buffers[1]),
                                        starpu_cuda_get_local_stream()));
}

static void tg_adamw_amp_cuda(void *buffers[], void *cl_arg) {
  const tg_adamw_amp_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_adamw_amp(
      tg_numel(buffers[0]), TG_PTR(buffers[0]), TG_PTR(buffers[1]), TG_PTR(buffers[2]),
      TG_PTR(buffers[3]), TG_PTR(buffers[4]), (tg_dtype)a->lowp,
      a->has_low ? TG_HPTR(buffers[5]) : NULL, a->s.lr, a->s.beta1, a->s.beta2, a->s.eps,
      a->s.weight_decay, a->s.bc1, a->s.bc2, a->s.grad_scale,
      starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(convert, tg_convert_cpu, tg_convert_cuda);
TG_CODELET(nonfinite, tg_nonfinite_cpu, tg_nonfinite_cuda);
TG_CODELET(adamw_amp, tg_adamw_amp_cpu, tg_adamw_amp_cuda);

/* ---- insert wrappers ----------------------------------------------------------- */

int tg_convert_insert(tg_dtype lowp, starpu_data_handle_t src, starpu_data_handle_t dst,
                      const tg_task_opts *opts) {
  static const char op[] = "tg_convert";
  int rows, cols, drows, dcols;
  TG_TRY(tg_expect_lowp(op, lowp));
  TG_TRY(tg_shape_any(src, "tg_convert: src", &rows, &cols));
  TG_TRY(tg_shape_any(dst, "tg_convert: dst", &drows, &dcols));
  size_t ss = starpu_matrix_get_elemsize(src), ds = starpu_matrix_get_elemsize(dst);
  int narrow = ss == sizeof(float) && ds == 2;
  if (!narrow && !(ss == 2 && ds == sizeof(float)))
    return tg_fail(EINVAL, "%s: converts f32 <-> %s, not %zu-byte to %zu-byte elements", op,
                   tg_dtype_name(lowp), ss, ds);
  TG_TRY(tg_expect(dst, op, "dst", rows, cols, ds)); /* src's shape */
  tg_convert_args args = {.shape = 0, .lowp = lowp, .narrow = narrow};
  int key[2] = {lowp, narrow};
  args.shape = tg_hash_ints(key, 2);
  starpu_data_handle_t h[2] = {src, dst};
  enum starpu_data_access_mode md[2] = {STARPU_R, STARPU_W};
  return tg_submit_native(&tg_convert_cl, 2, h, md, &args, sizeof args,
                          (double)rows * cols,
                   opts);
}

/* (1, 1) f32 */
static int tg_expect_flag(const char *op, starpu_data_handle_t flag) {
  return tg_expect(flag, op, "flag", 1, 1, sizeof(float));
}

int tg_nonfinite_insert(starpu_data_handle_t grad, starpu_data_handle_t flag,
                        const tg_task_opts *opts) {
  static const char *const names[1] = {"grad"};
  TG_TRY(tg_param_check("tg_nonfinite", names, &grad, 1));
  TG_TRY(tg_expect_flag("tg_nonfinite", flag));
  uint32_t shape = 0;
  starpu_data_handle_t h[2] = {grad, flag};
  enum starpu_data_access_mode md[2] = {STARPU_R, STARPU_RW};
  double n = (double)starpu_matrix_get_nx(grad) * starpu_matrix_get_ny(grad);
  return tg_submit_native(&tg_nonfinite_cl, 2, h, md, &shape, sizeof shape, n, opts);
}

int tg_adamw_amp_insert(tg_dtype lowp, starpu_data_handle_t w, starpu_data_handle_t grad,
                        starpu_data_handle_t m, starpu_data_handle_t v,
                        starpu_data_handle_t w_low, starpu_data_handle_t flag,
                        const tg_adamw_hyper *h, const tg_task_opts *opts) {
  static const char op[] = "tg_adamw_amp";
  static const char *const names[4] = {"w", "grad", "m", "v"};
  starpu_data_handle_t hd[6] = {w, grad, m, v, flag, w_low};
  TG_TRY(tg_expect_lowp(op, lowp));
  TG_TRY(tg_param_check(op, names, hd, 4));
  TG_TRY(tg_expect_flag(op, flag));
  int rows = (int)starpu_matrix_get_ny(w), cols = (int)starpu_matrix_get_nx(w);
  if (w_low) {
    TG_TRY(tg_expect(w_low, op, "w_low", rows, cols, 2));
    TG_TRY(tg_expect_contiguous(w_low, op, "w_low"));
  }
  if (h->step < 1) return tg_fail(EINVAL, "%s: step must be >= 1 (got %d)", op, h->step);
  /* the scalars of tg_adamw_insert (same float values) */
  tg_adamw_amp_args args = {.shape = 0,
                            .lowp = lowp,
                            .has_low = w_low != NULL,
                            .s = tg_adamw_scalars_of(h)};
  int key[2] = {lowp, args.has_low};
  args.shape = tg_hash_ints(key, 2);
  enum starpu_data_access_mode md[6] = {STARPU_RW, STARPU_R, STARPU_RW,
                                        STARPU_RW, STARPU_R,  STARPU_W};
  return tg_submit_native(&tg_adamw_amp_cl, w_low ? 6 : 5, hd, md, &args, sizeof args,
                   12.0 * rows * cols, opts);
}
