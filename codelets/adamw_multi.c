/*
 * The multi-tensor AdamW codelet (tg_adamw_multi_insert,
 * precision_codelets.h): one task updates up to TG_ADAMW_MULTI_MAX
 * parameters.  Buffers, per parameter: w (RW), grad (R), m (RW), v (RW) and,
 * when it has one, its 16-bit copy w_low (W); then the overflow flag (R) in
 * mixed precision.
 *
 * Design note
 * -----------
 * - Why: a one-GPU step is launch-bound.  In StarPU's SimGrid model each
 *   task costs its GPU's driver about 10 us besides its kernel, and one
 *   AdamW task per parameter tensor (148 for GPT-2 124M) left 1.7 ms of
 *   gaps in a 27.7 ms step (bench/results/2026-11-26-adamw-multi.md); the
 *   sharded mode already updates a whole bucket block in one task.
 * - Same bits as one task per tensor: the CPU entry calls tg_cpu_adamw or
 *   tg_cpu_adamw_amp on each tensor, the CUDA entry launches one kernel
 *   over all of them whose per-element update is tg_cuda_adamw's and
 *   tg_cuda_adamw_amp's (kernels/cuda/adamw.cuh).
 * - Submitted natively (no low-precision adapter): the 16-bit copies are
 *   the codelet's own buffers.  cl_arg: the shape key (count, type, which
 *   copies), the count, the 16-bit type, a bit per parameter with a copy,
 *   and AdamW's scalars.
 */
#include <errno.h>
#include <stdio.h>

#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_codelets.h"
#include "taskgrad/precision_kernels.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

typedef struct tg_adamw_multi_args {
  uint32_t shape;
  int n, lowp;
  unsigned lowmask; /* bit i: parameter i has a 16-bit copy */
  tg_adamw_scalars s;
} tg_adamw_multi_args;

/* the task's pointers, parameter by parameter */
typedef struct tg_adamw_multi_bufs {
  float *w[TG_ADAMW_MULTI_MAX], *g[TG_ADAMW_MULTI_MAX], *m[TG_ADAMW_MULTI_MAX],
      *v[TG_ADAMW_MULTI_MAX];
  uint16_t *low[TG_ADAMW_MULTI_MAX];
  size_t numel[TG_ADAMW_MULTI_MAX];
  const float *flag;
} tg_adamw_multi_bufs;

static void tg_adamw_multi_unpack(void *buffers[], const tg_adamw_multi_args *a,
                                  tg_adamw_multi_bufs *b) {
  int k = 0;
  for (int i = 0; i < a->n; i++) {
    b->numel[i] = (size_t)TG_ROWS(buffers[k]) * (size_t)TG_COLS(buffers[k]);
    b->w[i] = TG_PTR(buffers[k++]);
    b->g[i] = TG_PTR(buffers[k++]);
    b->m[i] = TG_PTR(buffers[k++]);
    b->v[i] = TG_PTR(buffers[k++]);
    b->low[i] = a->lowmask >> i & 1u ? TG_HPTR(buffers[k++]) : NULL;
  }
  b->flag = a->lowp != TG_F32 ? TG_PTR(buffers[k]) : NULL;
}

static void tg_adamw_multi_cpu(void *buffers[], void *cl_arg) {
  const tg_adamw_multi_args *a = cl_arg;
  const tg_adamw_scalars *s = &a->s;
  tg_adamw_multi_bufs b;
  tg_adamw_multi_unpack(buffers, a, &b);
  for (int i = 0; i < a->n; i++) {
    if (b.flag)
      tg_cpu_adamw_amp(b.numel[i], b.w[i], b.g[i], b.m[i], b.v[i], b.flag, (tg_dtype)a->lowp,
                       b.low[i], s->lr, s->beta1, s->beta2, s->eps, s->weight_decay, s->bc1,
                       s->bc2, s->grad_scale);
    else
      tg_cpu_adamw(b.numel[i], b.w[i], b.g[i], b.m[i], b.v[i], s->lr, s->beta1, s->beta2,
                   s->eps, s->weight_decay, s->bc1, s->bc2, s->grad_scale);
  }
}

#ifdef TG_HAVE_CUDA
static void tg_adamw_multi_cuda(void *buffers[], void *cl_arg) {
  const tg_adamw_multi_args *a = cl_arg;
  const tg_adamw_scalars *s = &a->s;
  tg_adamw_multi_bufs b;
  tg_adamw_multi_unpack(buffers, a, &b);
  TG_CUDA_CHECK(tg_cuda_adamw_multi(a->n, b.w, (const float *const *)b.g, b.m, b.v, b.low,
                                    b.numel, b.flag, (tg_dtype)a->lowp, s->lr, s->beta1,
                                    s->beta2, s->eps, s->weight_decay, s->bc1, s->bc2,
                                    s->grad_scale, starpu_cuda_get_local_stream()));
}
#endif

/* Not TG_CODELET: no low-precision adapter around it. */
TG_CODELET_ENTRIES(adamw_multi, tg_adamw_multi_cpu, tg_adamw_multi_cuda);

int tg_adamw_multi_insert(tg_dtype lowp, int n, const starpu_data_handle_t *w,
                          const starpu_data_handle_t *grad, const starpu_data_handle_t *m,
                          const starpu_data_handle_t *v, const starpu_data_handle_t *w_low,
                          starpu_data_handle_t flag, const tg_adamw_hyper *h,
                          const tg_task_opts *opts) {
  static const char op[] = "tg_adamw_multi";
  static const char *const names[4] = {"w", "grad", "m", "v"};
  if (n < 1 || n > TG_ADAMW_MULTI_MAX)
    return tg_fail(EINVAL, "%s: %d parameters, expected 1 to %d", op, n, TG_ADAMW_MULTI_MAX);
  if (!w || !grad || !m || !v) return tg_fail(EINVAL, "%s: missing parameter arrays", op);
  if (lowp != TG_F32) {
    TG_TRY(tg_expect_lowp(op, lowp));
    if (!flag) return tg_fail(EINVAL, "%s: %s training needs the overflow flag", op,
                              tg_dtype_name(lowp));
    TG_TRY(tg_expect(flag, op, "flag", 1, 1, sizeof(float)));
  } else if (flag || w_low) {
    return tg_fail(EINVAL, "%s: f32 training has no overflow flag and no 16-bit copies", op);
  }
  if (h->step < 1) return tg_fail(EINVAL, "%s: step must be >= 1 (got %d)", op, h->step);
  starpu_data_handle_t hd[5 * TG_ADAMW_MULTI_MAX + 1];
  enum starpu_data_access_mode md[5 * TG_ADAMW_MULTI_MAX + 1];
  tg_adamw_multi_args args = {.n = n, .lowp = lowp, .s = tg_adamw_scalars_of(h)};
  int nb = 0;
  double numel = 0;
  for (int i = 0; i < n; i++) {
    starpu_data_handle_t p[4] = {w[i], grad[i], m[i], v[i]};
    char what[4][32];
    const char *nm[4];
    for (int t = 0; t < 4; t++) {
      snprintf(what[t], sizeof what[t], "%s[%d]", names[t], i);
      nm[t] = what[t];
    }
    TG_TRY(tg_param_check(op, nm, p, 4));
    int rows = (int)starpu_matrix_get_ny(w[i]), cols = (int)starpu_matrix_get_nx(w[i]);
    numel += (double)rows * cols;
    static const enum starpu_data_access_mode pm[4] = {STARPU_RW, STARPU_R, STARPU_RW,
                                                       STARPU_RW};
    for (int t = 0; t < 4; t++) {
      hd[nb] = p[t];
      md[nb++] = pm[t];
    }
    if (w_low && w_low[i]) {
      TG_TRY(tg_expect(w_low[i], op, "w_low", rows, cols, 2));
      TG_TRY(tg_expect_contiguous(w_low[i], op, "w_low"));
      args.lowmask |= 1u << i;
      hd[nb] = w_low[i];
      md[nb++] = STARPU_W;
    }
  }
  for (int i = 0; i < nb; i++)
    for (int k = 0; k < i; k++)
      if (hd[i] == hd[k])
        return tg_fail(EINVAL, "%s: a tensor passed twice (buffers %d and %d)", op, k, i);
  if (flag) {
    hd[nb] = flag;
    md[nb++] = STARPU_R;
  }
  int key[3] = {n, lowp, (int)args.lowmask};
  args.shape = tg_hash_ints(key, 3);
  return tg_submit_native(&tg_adamw_multi_cl, nb, hd, md, &args, sizeof args, 12.0 * numel,
                          opts);
}
