/*
 * Token and position embedding codelets (GPT-2): the forward gathers rows
 * of wte and wpe; the backward scatter-adds into their gradients, in a fixed
 * row order on the CPU and without float atomics on CUDA, so it is
 * deterministic.  Micro-batches reduce dwte/dwpe with STARPU_REDUX.
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"

typedef struct tg_embed_args {
  uint32_t shape;
  int T;
} tg_embed_args;

/* fwd buffers: tokens, wte, wpe, X */
static void tg_embedding_fwd_cpu(void *buffers[], void *cl_arg) {
  const tg_embed_args *a = cl_arg;
  tg_cpu_embedding_fwd(TG_ROWS(buffers[0]), a->T, TG_COLS(buffers[1]), TG_IPTR(buffers[0]),
                       TG_PTR(buffers[1]), TG_PTR(buffers[2]), TG_PTR(buffers[3]),
                       TG_LD(buffers[3]));
}

/* bwd buffers: tokens, dX, dwte, dwpe */
static void tg_embedding_bwd_cpu(void *buffers[], void *cl_arg) {
  const tg_embed_args *a = cl_arg;
  tg_cpu_embedding_bwd(TG_ROWS(buffers[0]), a->T, TG_COLS(buffers[1]), TG_IPTR(buffers[0]),
                       TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]),
                       TG_PTR(buffers[3]));
}

#ifdef TG_HAVE_CUDA
static void tg_embedding_fwd_cuda(void *buffers[], void *cl_arg) {
  const tg_embed_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_embedding_fwd(
      TG_ROWS(buffers[0]), a->T, TG_COLS(buffers[1]), TG_IPTR(buffers[0]), TG_PTR(buffers[1]),
      TG_PTR(buffers[2]), TG_PTR(buffers[3]), TG_LD(buffers[3]), starpu_cuda_get_local_stream()));
}

static void tg_embedding_bwd_cuda(void *buffers[], void *cl_arg) {
  const tg_embed_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_embedding_bwd(
      TG_ROWS(buffers[0]), a->T, TG_COLS(buffers[1]), TG_IPTR(buffers[0]), TG_PTR(buffers[1]),
      TG_LD(buffers[1]), TG_PTR(buffers[2]), TG_PTR(buffers[3]), starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(embedding_fwd, tg_embedding_fwd_cpu, tg_embedding_fwd_cuda);
TG_CODELET(embedding_bwd, tg_embedding_bwd_cpu, tg_embedding_bwd_cuda);

/* tokens (n, 1) int32 with n a multiple of T; wte (Vp, C); wpe (maxT, C), T <= maxT */
static int tg_embed_check(const char *op, int T, starpu_data_handle_t tokens,
                          starpu_data_handle_t wte, starpu_data_handle_t wpe, int *n,
                          int *C) {
  int one, vp, maxt, wc;
  char what[64];
  snprintf(what, sizeof what, "%s: tokens", op);
  TG_TRY(tg_shape(tokens, what, n, &one));
  TG_TRY(tg_expect(tokens, op, "tokens", *n, 1, sizeof(int32_t)));
  snprintf(what, sizeof what, "%s: wte", op);
  TG_TRY(tg_shape(wte, what, &vp, C));
  snprintf(what, sizeof what, "%s: wpe", op);
  TG_TRY(tg_shape(wpe, what, &maxt, &wc));
  if (wc != *C) return tg_fail(EINVAL, "%s: wte has %d columns, wpe %d", op, *C, wc);
  TG_TRY(tg_expect_contiguous(wte, op, "the token table"));
  TG_TRY(tg_expect_contiguous(wpe, op, "the position table"));
  if (T < 1 || T > maxt || *n % T)
    return tg_fail(EINVAL, "%s: T = %d must be in [1, %d] and divide the %d token rows", op,
                   T, maxt, *n);
  return 0;
}

int tg_embedding_fwd_insert(int T, starpu_data_handle_t tokens, starpu_data_handle_t wte,
                            starpu_data_handle_t wpe, starpu_data_handle_t X,
                            const tg_task_opts *opts) {
  int n, C;
  TG_TRY(tg_embed_check("tg_embedding_fwd", T, tokens, wte, wpe, &n, &C));
  TG_TRY(tg_expect(X, "tg_embedding_fwd", "X", n, C, TG_FLOAT_SLOT));
  tg_embed_args args = {.shape = 0, .T = T};
  starpu_data_handle_t h[4] = {tokens, wte, wpe, X};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_R, STARPU_R, STARPU_W};
  return tg_submit(&tg_embedding_fwd_cl, 4, h, md, &args, sizeof args, (double)n * C, opts);
}

int tg_embedding_bwd_insert(int T, starpu_data_handle_t tokens, starpu_data_handle_t dX,
                            starpu_data_handle_t dwte, starpu_data_handle_t dwpe,
                            tg_accum accum, const tg_task_opts *opts) {
  int n, C;
  TG_TRY(tg_embed_check("tg_embedding_bwd", T, tokens, dwte, dwpe, &n, &C));
  TG_TRY(tg_expect(dX, "tg_embedding_bwd", "dX", n, C, TG_FLOAT_SLOT));
  if (accum == TG_OVERWRITE)
    return tg_fail(EINVAL, "tg_embedding_bwd: gradients accumulate (TG_ACCUMULATE, TG_REDUCE or TG_COMMUTE)");
  tg_embed_args args = {.shape = 0, .T = T};
  starpu_data_handle_t h[4] = {tokens, dX, dwte, dwpe};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_R, tg_accum_mode(accum),
                                        tg_accum_mode(accum)};
  return tg_submit(&tg_embedding_bwd_cl, 4, h, md, &args, sizeof args, 2.0 * n * C, opts);
}
