/*
 * LayerNorm codelets (eps 1e-5, llm.c semantics).  The forward keeps the
 * per-row mean and reciprocal standard deviation, (n, 1) each, for the
 * backward.  The backward accumulates into dX (the residual stream's
 * gradient, which already holds the skip path), and into dw and db or,
 * with TG_OVERWRITE, writes them (a micro-batch's first contribution, with
 * no fill task before it); the CUDA version
 * reduces dw/db deterministically through a STARPU_SCRATCH workspace.
 */
#include <string.h>

#include "codelet_common.h"
#include "scratch_sizes.h" /* kernels/cuda, plain C, every build */
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

typedef struct tg_ln_args {
  uint32_t shape;
  int overwrite; /* backward: dw, db written (TG_OVERWRITE), not accumulated */
} tg_ln_args;

/* fwd buffers: X, w, b, Y, mean, rstd */
static void tg_layernorm_fwd_cpu(void *buffers[], void *cl_arg) {
  tg_cpu_layernorm_fwd(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                       TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_PTR(buffers[2]),
                       TG_PTR(buffers[3]), TG_LD(buffers[3]), TG_PTR(buffers[4]),
                       TG_PTR(buffers[5]));
}

/* bwd buffers: dY, X, w, mean, rstd, dX, dw, db, scratch.  Overwriting,
 * dw and db start from zeros here, so the bits are those of a fill task
 * followed by the accumulating kernel, without the task. */
static void tg_layernorm_bwd_cpu(void *buffers[], void *cl_arg) {
  const tg_ln_args *a = cl_arg;
  if (a->overwrite) {
    memset(TG_PTR(buffers[6]), 0, sizeof(float) * (size_t)TG_COLS(buffers[6]));
    memset(TG_PTR(buffers[7]), 0, sizeof(float) * (size_t)TG_COLS(buffers[7]));
  }
  tg_cpu_layernorm_bwd(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                       TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]),
                       TG_PTR(buffers[2]), TG_PTR(buffers[3]), TG_PTR(buffers[4]),
                       TG_PTR(buffers[5]), TG_LD(buffers[5]), TG_PTR(buffers[6]),
                       TG_PTR(buffers[7]));
}

#ifdef TG_HAVE_CUDA
static void tg_layernorm_fwd_cuda(void *buffers[], void *cl_arg) {
  TG_CUDA_CHECK(tg_cuda_layernorm_fwd(
      TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]), TG_LD(buffers[0]),
      TG_PTR(buffers[1]), TG_PTR(buffers[2]), TG_PTR(buffers[3]), TG_LD(buffers[3]),
      TG_PTR(buffers[4]), TG_PTR(buffers[5]), starpu_cuda_get_local_stream()));
}

static void tg_layernorm_bwd_cuda(void *buffers[], void *cl_arg) {
  const tg_ln_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_layernorm_bwd(
      TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]), TG_LD(buffers[0]),
      TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]), TG_PTR(buffers[3]),
      TG_PTR(buffers[4]), TG_PTR(buffers[5]), TG_LD(buffers[5]), TG_PTR(buffers[6]),
      TG_PTR(buffers[7]), !a->overwrite, TG_VPTR(buffers[8]), starpu_cuda_get_local_stream()));
}
#endif

/* The residual add fused with the LayerNorm after it (a transformer
 * block's x + attention before ln2, x2 + MLP before the next ln1 or lnf):
 * one task instead of two, and the sum read back from cache.  buffers: A,
 * B, w, b, Y (= A + B), Z, mean, rstd.  sum_type: the 16-bit type of Y in
 * mixed precision, whose values the LayerNorm must see (the adapter rounds
 * Y only after the task), else TG_F32. */
typedef struct tg_res_ln_args {
  uint32_t shape;
  int sum_type;
} tg_res_ln_args;

static void tg_residual_layernorm_fwd_cpu(void *buffers[], void *cl_arg) {
  const tg_res_ln_args *a = cl_arg;
  tg_cpu_residual_layernorm_fwd(
      (tg_dtype)a->sum_type, TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
      TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[4]),
      TG_LD(buffers[4]), TG_PTR(buffers[2]), TG_PTR(buffers[3]), TG_PTR(buffers[5]),
      TG_LD(buffers[5]), TG_PTR(buffers[6]), TG_PTR(buffers[7]));
}

#ifdef TG_HAVE_CUDA
static void tg_residual_layernorm_fwd_cuda(void *buffers[], void *cl_arg) {
  const tg_res_ln_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_residual_layernorm_fwd(
      (tg_dtype)a->sum_type, TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
      TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[4]),
      TG_LD(buffers[4]), TG_PTR(buffers[2]), TG_PTR(buffers[3]), TG_PTR(buffers[5]),
      TG_LD(buffers[5]), TG_PTR(buffers[6]), TG_PTR(buffers[7]),
      starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(layernorm_fwd, tg_layernorm_fwd_cpu, tg_layernorm_fwd_cuda);
TG_CODELET(residual_layernorm_fwd, tg_residual_layernorm_fwd_cpu,
           tg_residual_layernorm_fwd_cuda);
TG_CODELET(layernorm_bwd, tg_layernorm_bwd_cpu, tg_layernorm_bwd_cuda);

static int tg_ln_check(const char *op, starpu_data_handle_t X, starpu_data_handle_t w,
                       starpu_data_handle_t mean, starpu_data_handle_t rstd, int *n, int *C) {
  char what[64];
  snprintf(what, sizeof what, "%s: X", op);
  TG_TRY(tg_shape(X, what, n, C));
  TG_TRY(tg_expect(w, op, "w", 1, *C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(mean, op, "mean", *n, 1, TG_FLOAT_SLOT));
  return tg_expect(rstd, op, "rstd", *n, 1, TG_FLOAT_SLOT);
}

int tg_layernorm_fwd_insert(starpu_data_handle_t X, starpu_data_handle_t w,
                            starpu_data_handle_t b, starpu_data_handle_t Y,
                            starpu_data_handle_t mean, starpu_data_handle_t rstd,
                            const tg_task_opts *opts) {
  int n, C;
  TG_TRY(tg_ln_check("tg_layernorm_fwd", X, w, mean, rstd, &n, &C));
  TG_TRY(tg_expect(b, "tg_layernorm_fwd", "b", 1, C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(Y, "tg_layernorm_fwd", "Y", n, C, TG_FLOAT_SLOT));
  tg_ln_args args = {0};
  starpu_data_handle_t h[6] = {X, w, b, Y, mean, rstd};
  enum starpu_data_access_mode md[6] = {STARPU_R, STARPU_R, STARPU_R,
                                        STARPU_W, STARPU_W, STARPU_W};
  return tg_submit(&tg_layernorm_fwd_cl, 6, h, md, &args, sizeof args, 8.0 * n * C, opts);
}

int tg_residual_layernorm_fwd_insert(starpu_data_handle_t A, starpu_data_handle_t B,
                                     starpu_data_handle_t w, starpu_data_handle_t b,
                                     starpu_data_handle_t Y, starpu_data_handle_t Z,
                                     starpu_data_handle_t mean, starpu_data_handle_t rstd,
                                     const tg_task_opts *opts) {
  static const char op[] = "tg_residual_layernorm_fwd";
  int n, C;
  TG_TRY(tg_shape(A, "tg_residual_layernorm_fwd: A", &n, &C));
  TG_TRY(tg_expect(B, op, "B", n, C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(Y, op, "Y", n, C, TG_FLOAT_SLOT));
  TG_TRY(tg_ln_check(op, Y, w, mean, rstd, &n, &C));
  TG_TRY(tg_expect(b, op, "b", 1, C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(Z, op, "Z", n, C, TG_FLOAT_SLOT));
  if (Y == A || Y == B || Z == Y)
    return tg_fail(EINVAL, "%s: Y must be a tensor of its own (not A, B or Z)", op);
  /* a 2-byte Y holds opts->lowp's values (tg_submit refuses it without) */
  tg_res_ln_args args = {.shape = 0, .sum_type = TG_F32};
  if (starpu_matrix_get_elemsize(Y) == 2 && opts) args.sum_type = opts->lowp;
  args.shape = (uint32_t)args.sum_type;
  starpu_data_handle_t h[8] = {A, B, w, b, Y, Z, mean, rstd};
  enum starpu_data_access_mode md[8] = {STARPU_R, STARPU_R, STARPU_R, STARPU_R,
                                        STARPU_W, STARPU_W, STARPU_W, STARPU_W};
  return tg_submit(&tg_residual_layernorm_fwd_cl, 8, h, md, &args, sizeof args, 9.0 * n * C,
                   opts);
}

int tg_layernorm_bwd_check(const char *op, starpu_data_handle_t dY, starpu_data_handle_t X,
                           starpu_data_handle_t w, starpu_data_handle_t mean,
                           starpu_data_handle_t rstd, starpu_data_handle_t dX,
                           starpu_data_handle_t dw, starpu_data_handle_t db, int *n, int *C) {
  TG_TRY(tg_ln_check(op, X, w, mean, rstd, n, C));
  TG_TRY(tg_expect(dY, op, "dY", *n, *C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(dX, op, "dX", *n, *C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(dw, op, "dw", 1, *C, TG_FLOAT_SLOT));
  return tg_expect(db, op, "db", 1, *C, TG_FLOAT_SLOT);
}

int tg_layernorm_bwd_insert(starpu_data_handle_t dY, starpu_data_handle_t X,
                            starpu_data_handle_t w, starpu_data_handle_t mean,
                            starpu_data_handle_t rstd, starpu_data_handle_t dX,
                            starpu_data_handle_t dw, starpu_data_handle_t db,
                            tg_accum accum, const tg_task_opts *opts) {
  int n, C;
  TG_TRY(tg_layernorm_bwd_check("tg_layernorm_bwd", dY, X, w, mean, rstd, dX, dw, db, &n, &C));
  size_t scratch = 1;
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID)
  /* the CUDA kernel's, in the SimGrid build too (scratch_sizes.h) */
  scratch = tg_ln_bwd_scratch_floats(n, C);
#endif
  tg_ln_args args = {.shape = 0, .overwrite = accum == TG_OVERWRITE};
  starpu_data_handle_t h[9] = {dY, X, w, mean, rstd, dX, dw, db,
                               tg_scratch(scratch * sizeof(float))};
  enum starpu_data_access_mode md[9] = {STARPU_R,  STARPU_R, STARPU_R,
                                        STARPU_R,  STARPU_R, STARPU_RW,
                                        tg_accum_mode(accum), tg_accum_mode(accum),
                                        STARPU_SCRATCH};
  return tg_submit(&tg_layernorm_bwd_cl, 9, h, md, &args, sizeof args, 12.0 * n * C, opts);
}
