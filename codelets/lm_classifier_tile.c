/*
 * The tied classifier in vocabulary tiles (kernels/cpu/lm_classifier_tile.c
 * has the passes and their numerics): with the linear layers tiled
 * (graphs/gpt_tiles.c), a micro-batch's classifier becomes
 *   tg_lm_logits_tile     per tile: logits and the tile's softmax stats,
 *                         into column blocks of the (n, Vp) dlogits and of
 *                         an (n, 2 tiles) stats matrix;
 *   tg_lm_softmax_combine once: lse (n, 2) and the loss;
 *   tg_lm_dlogits_tile    per tile, in place: dlogits;
 * then the dlnf tiles (tg_linear_bwd_data_tile with W = wte) and the dwte
 * increments (tg_lm_classifier_dwte) as before.  Each tile task reads its
 * rows of wte only (by offset, the whole wte handle read-shared), where the
 * split classifier's one task per micro-batch did both GEMMs of the whole
 * vocabulary: on 64 cores it was a quarter of a micro-batch's critical
 * path (bench/results/2026-11-26-tiles.md).  f32 only.
 */
#include <math.h>

#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"

typedef struct tg_lmt_args {
  uint32_t shape;
  int V, v0, ntiles;
  float scale; /* the loss's (combine) or the gradient's (dlogits) factor */
} tg_lmt_args;

/* buffers: lnf (n, C), wte (Vp, C), logits (n, m), stats (n, 2) */
static void tg_lm_logits_tile_cpu(void *buffers[], void *cl_arg) {
  const tg_lmt_args *a = cl_arg;
  tg_cpu_lm_logits_tile(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), a->V, a->v0,
                        TG_COLS(buffers[2]), TG_PTR(buffers[0]), TG_LD(buffers[0]),
                        TG_PTR(buffers[1]), TG_PTR(buffers[2]), TG_LD(buffers[2]),
                        TG_PTR(buffers[3]), TG_LD(buffers[3]));
}

/* buffers: stats (n, 2 ntiles), logits (n, Vp), targets (n, 1), lse (n, 2), loss (1, 1) */
static void tg_lm_softmax_combine_cpu(void *buffers[], void *cl_arg) {
  const tg_lmt_args *a = cl_arg;
  tg_cpu_lm_softmax_combine(TG_ROWS(buffers[0]), a->V, a->ntiles, TG_PTR(buffers[0]),
                            TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]),
                            TG_IPTR(buffers[2]), a->scale, TG_PTR(buffers[3]),
                            TG_LD(buffers[3]), TG_PTR(buffers[4]));
}

/* buffers: lse (n, 2), targets (n, 1), dl (n, m) */
static void tg_lm_dlogits_tile_cpu(void *buffers[], void *cl_arg) {
  const tg_lmt_args *a = cl_arg;
  tg_cpu_lm_dlogits_tile(TG_ROWS(buffers[2]), a->V, a->v0, TG_COLS(buffers[2]),
                         TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_IPTR(buffers[1]), a->scale,
                         TG_PTR(buffers[2]), TG_LD(buffers[2]));
}

#ifdef TG_HAVE_CUDA
static void tg_lm_logits_tile_cuda(void *buffers[], void *cl_arg) {
  const tg_lmt_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_lm_logits_tile(
      starpu_cublas_get_local_handle(), TG_ROWS(buffers[0]), TG_COLS(buffers[0]), a->V, a->v0,
      TG_COLS(buffers[2]), TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
      TG_PTR(buffers[2]), TG_LD(buffers[2]), TG_PTR(buffers[3]), TG_LD(buffers[3]),
      starpu_cuda_get_local_stream()));
}

static void tg_lm_softmax_combine_cuda(void *buffers[], void *cl_arg) {
  const tg_lmt_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_lm_softmax_combine(
      TG_ROWS(buffers[0]), a->V, a->ntiles, TG_PTR(buffers[0]), TG_LD(buffers[0]),
      TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_IPTR(buffers[2]), a->scale,
      TG_PTR(buffers[3]), TG_LD(buffers[3]), TG_PTR(buffers[4]),
      starpu_cuda_get_local_stream()));
}

static void tg_lm_dlogits_tile_cuda(void *buffers[], void *cl_arg) {
  const tg_lmt_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_lm_dlogits_tile(
      TG_ROWS(buffers[2]), a->V, a->v0, TG_COLS(buffers[2]), TG_PTR(buffers[0]),
      TG_LD(buffers[0]), TG_IPTR(buffers[1]), a->scale, TG_PTR(buffers[2]), TG_LD(buffers[2]),
      starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(lm_logits_tile, tg_lm_logits_tile_cpu, tg_lm_logits_tile_cuda);
TG_CODELET(lm_softmax_combine, tg_lm_softmax_combine_cpu, tg_lm_softmax_combine_cuda);
TG_CODELET(lm_dlogits_tile, tg_lm_dlogits_tile_cpu, tg_lm_dlogits_tile_cuda);

int tg_lm_logits_tile_insert(int V, int v0, starpu_data_handle_t lnf, starpu_data_handle_t wte,
                             starpu_data_handle_t logits, starpu_data_handle_t stats,
                             const tg_task_opts *opts) {
  const char *op = "tg_lm_logits_tile";
  int n, C, vp, wc, ln, m;
  TG_TRY(tg_shape(lnf, "tg_lm_logits_tile: lnf", &n, &C));
  TG_TRY(tg_shape(wte, "tg_lm_logits_tile: wte", &vp, &wc));
  if (wc != C) return tg_fail(EINVAL, "%s: lnf has %d columns, wte %d", op, C, wc);
  TG_TRY(tg_expect_contiguous(wte, op, "wte"));
  TG_TRY(tg_expect(lnf, op, "lnf", n, C, sizeof(float)));
  TG_TRY(tg_expect(wte, op, "wte", vp, C, sizeof(float)));
  if (V < 1 || V > vp) return tg_fail(EINVAL, "%s: V = %d not in [1, %d]", op, V, vp);
  TG_TRY(tg_shape(logits, "tg_lm_logits_tile: logits", &ln, &m));
  TG_TRY(tg_expect(logits, op, "logits", n, m, sizeof(float)));
  if (v0 < 0 || m > vp - v0)
    return tg_fail(EINVAL, "%s: tile columns [%d, %d) outside wte's %d rows", op, v0, v0 + m,
                   vp);
  TG_TRY(tg_expect(stats, op, "stats", n, 2, sizeof(float)));
  tg_lmt_args args = {.shape = (uint32_t)V, .V = V, .v0 = v0, .ntiles = 1, .scale = 1.0f};
  starpu_data_handle_t h[4] = {lnf, wte, logits, stats};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_R, STARPU_W, STARPU_W};
  return tg_submit(&tg_lm_logits_tile_cl, 4, h, md, &args, sizeof args,
                   2.0 * n * (double)m * C, opts);
}

int tg_lm_softmax_combine_insert(int V, float scale, starpu_data_handle_t stats,
                                 starpu_data_handle_t logits, starpu_data_handle_t targets,
                                 starpu_data_handle_t lse, starpu_data_handle_t loss,
                                 tg_accum loss_accum, const tg_task_opts *opts) {
  const char *op = "tg_lm_softmax_combine";
  int n, s2, ln, vp;
  TG_TRY(tg_shape(stats, "tg_lm_softmax_combine: stats", &n, &s2));
  if (s2 < 2 || s2 % 2)
    return tg_fail(EINVAL, "%s: stats has %d columns, wants 2 per tile", op, s2);
  TG_TRY(tg_expect(stats, op, "stats", n, s2, sizeof(float)));
  TG_TRY(tg_shape(logits, "tg_lm_softmax_combine: logits", &ln, &vp));
  TG_TRY(tg_expect(logits, op, "logits", n, vp, sizeof(float)));
  if (V < 1 || V > vp) return tg_fail(EINVAL, "%s: V = %d not in [1, %d]", op, V, vp);
  TG_TRY(tg_expect(targets, op, "targets", n, 1, sizeof(int32_t)));
  TG_TRY(tg_expect(lse, op, "lse", n, 2, sizeof(float)));
  TG_TRY(tg_expect(loss, op, "loss", 1, 1, sizeof(float)));
  if (loss_accum == TG_OVERWRITE)
    return tg_fail(EINVAL, "%s: the loss is an accumulator (TG_ACCUMULATE, TG_REDUCE or "
                   "TG_COMMUTE)", op);
  tg_lmt_args args = {.shape = (uint32_t)(s2 / 2), .V = V, .v0 = 0, .ntiles = s2 / 2,
                      .scale = scale};
  starpu_data_handle_t h[5] = {stats, logits, targets, lse, loss};
  enum starpu_data_access_mode md[5] = {STARPU_R, STARPU_R, STARPU_R, STARPU_W,
                                        tg_accum_mode(loss_accum)};
  return tg_submit(&tg_lm_softmax_combine_cl, 5, h, md, &args, sizeof args, 0.0, opts);
}

int tg_lm_dlogits_tile_insert(int V, int v0, float alpha, starpu_data_handle_t lse,
                              starpu_data_handle_t targets, starpu_data_handle_t dl,
                              const tg_task_opts *opts) {
  const char *op = "tg_lm_dlogits_tile";
  int n, m, l2;
  TG_TRY(tg_shape(dl, "tg_lm_dlogits_tile: dl", &n, &m));
  TG_TRY(tg_expect(dl, op, "dl", n, m, sizeof(float)));
  TG_TRY(tg_shape(lse, "tg_lm_dlogits_tile: lse", &n, &l2));
  TG_TRY(tg_expect(lse, op, "lse", n, 2, sizeof(float)));
  TG_TRY(tg_expect(targets, op, "targets", n, 1, sizeof(int32_t)));
  if (V < 1 || v0 < 0)
    return tg_fail(EINVAL, "%s: V = %d and first column %d must be positive", op, V, v0);
  if (!isfinite(alpha)) return tg_fail(EINVAL, "%s: the factor %g is not finite", op, alpha);
  tg_lmt_args args = {.shape = (uint32_t)V, .V = V, .v0 = v0, .ntiles = 1, .scale = alpha};
  starpu_data_handle_t h[3] = {lse, targets, dl};
  enum starpu_data_access_mode md[3] = {STARPU_R, STARPU_R, STARPU_RW};
  return tg_submit(&tg_lm_dlogits_tile_cl, 3, h, md, &args, sizeof args, 0.0, opts);
}

/* the bytes a tile task touches (codelet_common.h): the logits tile reads
 * its m rows of wte only */
double tg_tile_task_bytes(struct starpu_task *t) {
  if (t->cl == &tg_lm_logits_tile_cl) { /* lnf, wte[v0:v0+m], logits, stats */
    starpu_data_handle_t lnf = STARPU_TASK_GET_HANDLE(t, 0), lg = STARPU_TASK_GET_HANDLE(t, 2);
    double C = starpu_matrix_get_nx(lnf), m = starpu_matrix_get_nx(lg);
    return (double)starpu_data_get_size(lnf) + m * C * sizeof(float) +
           (double)starpu_data_get_size(lg) +
           (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(t, 3));
  }
  return tg_linear_tile_bytes(t);
}

