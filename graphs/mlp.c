/*
 * MLP training step as a StarPU task graph.
 *
 * Per micro-batch i with r_i rows (shapes for layer l: in = widths[l],
 * out = widths[l+1]):
 *   forward   Z_l (r_i, out) = H_{l-1} W_l^T + b_l ;  H_l = act(Z_l)
 *             (one fused linear task per layer)
 *             softmax_xent(Z_L) -> dZ_L, loss (REDUX) ; accuracy (REDUX)
 *   backward  dW_l += dZ_l^T H_{l-1}  (REDUX)        ; db_l += colsum(dZ_l)
 *             dZ_{l-1} = (dZ_l W_l) * act'(Z_{l-1})  (one fused task)
 * Activations are temporaries with no home node, released (unregistered
 * asynchronously) right after the last task that reads them is submitted,
 * so StarPU frees them as soon as that task has run.  This file calls only
 * insert wrappers and tensor functions (layer 3 of taskgrad).
 *
 * Tiled (cfg.tiles = N > 1, see mlp.h), layer l runs as N blocks j of its
 * output features, on row blocks W_j (out_j, in) and column blocks b_j:
 *   forward   Z_l[:, j] = H_{l-1} W_j^T + b_j ; H_l[:, j] = act(...)
 *   backward  dW_j += dZ_l[:, j]^T H_{l-1} ; db_j += colsum(dZ_l[:, j])
 *             G (r_i, in) = sum_j dZ_l[:, j] W_j   (GEMMs chained in j order)
 *             dZ_{l-1} = G * act'(Z_{l-1})
 * The parameters, gradients and optimizer state carry partition plans
 * (tensor.h) made once at creation: a step partitions them (W read-only,
 * gradients for writing) and joins them again at its end, so that readers
 * outside the step see whole tensors.  Z, H and dZ must be whole for one
 * layer and split for the next, and StarPU 1.3 cannot plan a partition of a
 * temporary (its blocks' data is lost), so tiled activations are pinned host
 * tensors with column plans, kept per (micro-batch, rows) and reused by the
 * following steps; StarPU's sequential consistency orders a step's writes
 * after the previous step's reads.  The data gradient's sum G is an
 * ordinary temporary.  The gradient blocks are summed over the micro-batches
 * with reduce.h's fixed-order leaves, never STARPU_REDUX (StarPU 1.3 cannot
 * reduce the blocks of a partition plan), so a tiled step is always
 * bitwise reproducible.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "graph_common.h"
#include "reduce.h"
#include "rng.h"
#include "taskgrad/dist.h"
#include "taskgrad/mlp.h"

/* A step's sums (reduce.h): parameter gradients (per tile; [l][0] untiled),
 * loss, correct count. */
typedef struct tg_mlp_sums {
  tg_sum dw[TG_MLP_MAX_LAYERS][TG_MAX_SPLIT], db[TG_MLP_MAX_LAYERS][TG_MAX_SPLIT];
  tg_sum loss, correct;
} tg_mlp_sums;

/* Activation buffers of one micro-batch slot in tiled mode: host tensors
 * (temporaries cannot be partitioned) with column-block plans. */
typedef struct tg_mlp_acts {
  int micro, rows;                       /* what they serve: micro-batch, rows */
  unsigned long last_use;                /* for eviction */
  tg_tensor Z[TG_MLP_MAX_LAYERS];        /* (rows, widths[l+1]) pre-activations */
  tg_tensor H[TG_MLP_MAX_LAYERS];        /* (rows, widths[l+1]) activations, l < L-1 */
  tg_tensor dZ[TG_MLP_MAX_LAYERS];       /* (rows, widths[l+1]) gradients of Z */
  tg_split Zs[TG_MLP_MAX_LAYERS], Hs[TG_MLP_MAX_LAYERS], dZs[TG_MLP_MAX_LAYERS];
} tg_mlp_acts;

/* Buffer sets kept per micro-batch index (a training batch, its epoch's
 * last partial batch and the evaluation batches differ in rows); beyond it
 * the least recently used set of that index is freed. */
#define TG_MLP_ACTS_PER_MICRO 4

struct tg_mlp_tiling {
  int n;                                 /* tiles */
  /* parameters, gradients and optimizer state: W-shaped tensors by rows,
   * b-shaped by columns */
  tg_split w[TG_MLP_MAX_LAYERS], b[TG_MLP_MAX_LAYERS];
  tg_split dw[TG_MLP_MAX_LAYERS], db[TG_MLP_MAX_LAYERS];
  tg_split s1w[TG_MLP_MAX_LAYERS], s1b[TG_MLP_MAX_LAYERS];
  tg_split s2w[TG_MLP_MAX_LAYERS], s2b[TG_MLP_MAX_LAYERS];
  /* the gradient blocks as tensors (views: never released), for tg_sum */
  tg_tensor dwv[TG_MLP_MAX_LAYERS][TG_MAX_SPLIT]; /* (out_j, in) */
  tg_tensor dbv[TG_MLP_MAX_LAYERS][TG_MAX_SPLIT]; /* (1, out_j) */
  tg_mlp_acts **acts;                    /* [nacts] */
  int nacts, cap;
  unsigned long uses;
};

tg_optimizer_config tg_optimizer_default(tg_optimizer_kind kind) {
  tg_optimizer_config o = {kind, 1e-3f, 0.9f, 0.9f, 0.999f, 1e-8f, 0.01f};
  if (kind == TG_OPT_SGD) {
    o.lr = 0.05f;
    o.weight_decay = 0.0f;
  }
  return o;
}

static void tg_fill_uniform(float *x, size_t n, float bound, uint64_t *s) {
  for (size_t i = 0; i < n; i++) {
    double u = (double)(tg_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
    x[i] = (float)((2.0 * u - 1.0) * bound);
  }
}

static int tg_mlp_check_config(const tg_mlp_config *cfg) {
  if (cfg->nlayers < 1 || cfg->nlayers > TG_MLP_MAX_LAYERS)
    return tg_fail(EINVAL, "MLP: number of layers %d is not in [1, %d]", cfg->nlayers,
                   TG_MLP_MAX_LAYERS);
  for (int l = 0; l <= cfg->nlayers; l++)
    if (cfg->widths[l] < 1)
      return tg_fail(EINVAL, "MLP: layer width %d is %d; widths must be positive", l,
                     cfg->widths[l]);
  if (cfg->act != TG_ACT_RELU && cfg->act != TG_ACT_GELU)
    return tg_fail(EINVAL, "MLP: unknown activation %d", (int)cfg->act);
  if (cfg->tiles < 0 || cfg->tiles > TG_MAX_SPLIT)
    return tg_fail(EINVAL, "MLP: %d tiles is not in [1, %d]", cfg->tiles, TG_MAX_SPLIT);
  for (int l = 1; l <= cfg->nlayers; l++)
    if (cfg->tiles > cfg->widths[l])
      return tg_fail(EINVAL, "MLP: %d tiles exceed the %d output features of layer %d",
                     cfg->tiles, cfg->widths[l], l - 1);
  if ((unsigned)cfg->precision > TG_PREC_FP16)
    return tg_fail(EINVAL, "MLP: unknown precision %d", (int)cfg->precision);
  if (tg_precision_lowp(cfg->precision) && cfg->tiles > 1)
    return tg_fail(EINVAL, "MLP: %s training is not available with tiles (%d)",
                   tg_precision_name(cfg->precision), cfg->tiles);
  if (cfg->loss_scaling && !tg_precision_lowp(cfg->precision))
    return tg_fail(EINVAL, "MLP: loss scaling is for bf16 and fp16 training, not %s",
                   tg_precision_name(cfg->precision));
  return 0;
}

/* ---- tiled mode: partitions and activation buffers ------------------------ */

static void tg_mlp_acts_free(tg_mlp_acts *A, int L) {
  for (int l = 0; l < L; l++) {
    tg_split_free(&A->Z[l], &A->Zs[l]);
    tg_split_free(&A->H[l], &A->Hs[l]);
    tg_split_free(&A->dZ[l], &A->dZs[l]);
    tg_tensor_free(&A->Z[l]);
    tg_tensor_free(&A->H[l]);
    tg_tensor_free(&A->dZ[l]);
  }
  free(A);
}

static int tg_mlp_acts_alloc(const tg_mlp *m, int micro, int rows, tg_mlp_acts **out) {
  const tg_mlp_config *c = &m->cfg;
  int L = c->nlayers, N = m->tiling->n, rc = 0;
  tg_mlp_acts *A = calloc(1, sizeof *A);
  if (!A) return tg_fail(ENOMEM, "MLP: out of memory for activation buffers");
  A->micro = micro;
  A->rows = rows;
  for (int l = 0; l < L && rc == 0; l++) {
    int out = c->widths[l + 1];
    rc = tg_tensor_alloc(&A->Z[l], rows, out, TG_F32);
    if (rc == 0) rc = tg_split_plan_cols(&A->Z[l], N, &A->Zs[l]);
    if (rc == 0) rc = tg_tensor_alloc(&A->dZ[l], rows, out, TG_F32);
    if (rc == 0) rc = tg_split_plan_cols(&A->dZ[l], N, &A->dZs[l]);
    if (rc == 0 && l + 1 < L) rc = tg_tensor_alloc(&A->H[l], rows, out, TG_F32);
    if (rc == 0 && l + 1 < L) rc = tg_split_plan_cols(&A->H[l], N, &A->Hs[l]);
  }
  if (rc < 0) {
    tg_mlp_acts_free(A, L);
    return rc;
  }
  *out = A;
  return 0;
}

/* The activation buffers for micro-batch `micro` of `rows` rows: a kept set
 * when one fits, else a new one (freeing that index's least recently used
 * set when it has TG_MLP_ACTS_PER_MICRO; freeing waits for its tasks). */
static int tg_mlp_acts_get(tg_mlp *m, int micro, int rows, tg_mlp_acts **out) {
  tg_mlp_tiling *T = m->tiling;
  int same = 0, lru = -1;
  for (int k = 0; k < T->nacts; k++) {
    tg_mlp_acts *A = T->acts[k];
    if (A->micro != micro) continue;
    if (A->rows == rows) {
      A->last_use = ++T->uses;
      *out = A;
      return 0;
    }
    same++;
    if (lru < 0 || A->last_use < T->acts[lru]->last_use) lru = k;
  }
  tg_mlp_acts *A = NULL;
  TG_TRY(tg_mlp_acts_alloc(m, micro, rows, &A));
  A->last_use = ++T->uses;
  if (same >= TG_MLP_ACTS_PER_MICRO) {
    tg_mlp_acts_free(T->acts[lru], m->cfg.nlayers);
    T->acts[lru] = A;
  } else {
    if (T->nacts == T->cap) {
      int cap = T->cap ? 2 * T->cap : 16;
      tg_mlp_acts **p = realloc(T->acts, (size_t)cap * sizeof *p);
      if (!p) {
        tg_mlp_acts_free(A, m->cfg.nlayers);
        return tg_fail(ENOMEM, "MLP: out of memory for activation buffers");
      }
      T->acts = p;
      T->cap = cap;
    }
    T->acts[T->nacts++] = A;
  }
  *out = A;
  return 0;
}

static void tg_mlp_tiling_free(tg_mlp *m) {
  tg_mlp_tiling *T = m->tiling;
  if (!T) return;
  for (int k = 0; k < T->nacts; k++) tg_mlp_acts_free(T->acts[k], m->cfg.nlayers);
  free(T->acts);
  for (int l = 0; l < m->cfg.nlayers; l++) {
    tg_split_free(&m->w[l], &T->w[l]);
    tg_split_free(&m->b[l], &T->b[l]);
    tg_split_free(&m->dw[l], &T->dw[l]);
    tg_split_free(&m->db[l], &T->db[l]);
    tg_split_free(&m->state1_w[l], &T->s1w[l]);
    tg_split_free(&m->state1_b[l], &T->s1b[l]);
    tg_split_free(&m->state2_w[l], &T->s2w[l]);
    tg_split_free(&m->state2_b[l], &T->s2b[l]);
  }
  free(T);
  m->tiling = NULL;
}

/* A block of a planned split as a tensor (a view: never released). */
static tg_tensor tg_mlp_block_view(const tg_split *s, int j) {
  tg_tensor v = {0};
  v.handle = s->parts[j];
  v.rows = (int)starpu_matrix_get_ny(v.handle);
  v.cols = (int)starpu_matrix_get_nx(v.handle);
  v.dtype = TG_F32;
  return v;
}

static int tg_mlp_tiling_create(tg_mlp *m) {
  int N = m->cfg.tiles;
  tg_mlp_tiling *T = calloc(1, sizeof *T);
  if (!T) return tg_fail(ENOMEM, "MLP: out of memory for the tiling");
  m->tiling = T;
  T->n = N;
  for (int l = 0; l < m->cfg.nlayers; l++) {
    TG_TRY(tg_split_plan(&m->w[l], N, &T->w[l]));
    TG_TRY(tg_split_plan_cols(&m->b[l], N, &T->b[l]));
    TG_TRY(tg_split_plan(&m->dw[l], N, &T->dw[l]));
    TG_TRY(tg_split_plan_cols(&m->db[l], N, &T->db[l]));
    TG_TRY(tg_split_plan(&m->state1_w[l], N, &T->s1w[l]));
    TG_TRY(tg_split_plan_cols(&m->state1_b[l], N, &T->s1b[l]));
    if (m->opt.kind != TG_OPT_SGD) {
      TG_TRY(tg_split_plan(&m->state2_w[l], N, &T->s2w[l]));
      TG_TRY(tg_split_plan_cols(&m->state2_b[l], N, &T->s2b[l]));
    }
    for (int j = 0; j < N; j++) {
      T->dwv[l][j] = tg_mlp_block_view(&T->dw[l], j);
      T->dbv[l][j] = tg_mlp_block_view(&T->db[l], j);
    }
  }
  return 0;
}

/* Mixed precision: the 16-bit type of activations (TG_F32: none). */
#define MLP_LOWP(m) tg_precision_lowp((m)->cfg.precision)

/* Mixed precision: 16-bit weight copies from the initial weights, the
 * overflow flag, the loss scaler. */
static int tg_mlp_lowp_create(tg_mlp *m) {
  tg_dtype lowp = MLP_LOWP(m);
  const tg_mlp_config *c = &m->cfg;
  TG_TRY(tg_loss_scaler_init(&m->scaler, c->loss_scaling,
                             c->loss_scale > 0 ? c->loss_scale : TG_LOSS_SCALE_DEFAULT,
                             c->loss_scale_window > 0 ? c->loss_scale_window
                                                      : TG_LOSS_SCALE_WINDOW));
  if (!lowp) return 0;
  if (m->opt.kind != TG_OPT_ADAMW)
    return tg_fail(EINVAL, "MLP: %s training needs the AdamW optimizer (its mixed-precision "
                   "step keeps fp32 master weights)", tg_precision_name(c->precision));
  for (int l = 0; l < c->nlayers; l++) {
    TG_TRY(tg_tensor_alloc(&m->wl[l], c->widths[l + 1], c->widths[l], lowp));
    TG_TRY(tg_convert_insert(lowp, m->w[l].handle, m->wl[l].handle, NULL));
  }
  TG_TRY(tg_tensor_alloc(&m->overflow, 1, 1, TG_F32));
  return tg_fill_insert(m->overflow.handle, 0.0f, NULL);
}

int tg_mlp_create(tg_mlp *m, const tg_mlp_config *cfg,
                  const tg_optimizer_config *opt, uint64_t seed) {
  memset(m, 0, sizeof *m);
  TG_TRY(tg_mlp_check_config(cfg));
  m->cfg = *cfg;
  m->opt = *opt;
  uint64_t s = seed;
  for (int l = 0; l < cfg->nlayers; l++) {
    int in = cfg->widths[l], out = cfg->widths[l + 1];
    tg_tensor *pairs[][2] = {{&m->w[l], &m->b[l]},
                             {&m->dw[l], &m->db[l]},
                             {&m->state1_w[l], &m->state1_b[l]},
                             {&m->state2_w[l], &m->state2_b[l]}};
    for (int k = 0; k < 4; k++) {
      if (k == 3 && opt->kind == TG_OPT_SGD) break;
      int rc = tg_tensor_alloc(pairs[k][0], out, in, TG_F32);
      if (rc == 0) rc = tg_tensor_alloc(pairs[k][1], 1, out, TG_F32);
      if (rc < 0) {
        tg_mlp_destroy(m);
        return rc;
      }
    }
    /* nn.Linear: kaiming_uniform(a = sqrt(5)) is U(+-1/sqrt(in)), bias likewise.
     * No task has touched these host buffers yet, so writing them is safe. */
    float bound = 1.0f / sqrtf((float)in);
    tg_fill_uniform(m->w[l].host, tg_tensor_numel(&m->w[l]), bound, &s);
    tg_fill_uniform(m->b[l].host, tg_tensor_numel(&m->b[l]), bound, &s);
    tg_tensor_enable_reduction(&m->dw[l]);
    tg_tensor_enable_reduction(&m->db[l]);
  }
  int rc = tg_tensor_alloc(&m->loss, 1, 1, TG_F32);
  if (rc == 0) rc = tg_tensor_alloc(&m->correct, 1, 1, TG_F32);
  if (rc < 0) {
    tg_mlp_destroy(m);
    return rc;
  }
  tg_tensor_enable_reduction(&m->loss);
  tg_tensor_enable_reduction(&m->correct);
  if ((rc = tg_mlp_lowp_create(m)) < 0) {
    tg_mlp_destroy(m);
    return rc;
  }
  if (cfg->tiles > 1 && (rc = tg_mlp_tiling_create(m)) < 0) {
    tg_mlp_destroy(m);
    return rc;
  }
  return 0;
}

void tg_mlp_destroy(tg_mlp *m) {
  tg_mlp_tiling_free(m); /* the plans go before the tensors they split */
  for (int l = 0; l < TG_MLP_MAX_LAYERS; l++) {
    tg_tensor *all[] = {&m->w[l], &m->b[l], &m->dw[l], &m->db[l],
                        &m->state1_w[l], &m->state1_b[l], &m->state2_w[l],
                        &m->state2_b[l], &m->wl[l]};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tg_tensor_free(all[k]);
  }
  tg_tensor_free(&m->overflow);
  tg_tensor_free(&m->loss);
  tg_tensor_free(&m->correct);
}

/* Forward of one micro-batch.  Z[l] and H[l] (l < L-1) are left registered
 * for the backward; returns the logits in Z[L-1]. */
/* critical-path ranks (graph_common.h) */
#define TG_MLP_RANKS(L) (3 * (L) + 1)

/* Every task of the untiled graph names the 16-bit type of its 2-byte
 * buffers (mixed precision; TG_F32 otherwise). */
#define MOPT(...) tg_gopt_lowp(&g, MLP_LOWP(m), __VA_ARGS__)

/* An activation temporary: 16-bit in mixed precision. */
static int tg_mlp_act_temp(const tg_mlp *m, tg_tensor *t, int rows, int cols) {
  return tg_tensor_temp(t, rows, cols, MLP_LOWP(m)); /* TG_F32 unless 16-bit */
}

/* The weight the GEMMs read: its 16-bit copy in mixed precision. */
static starpu_data_handle_t tg_mlp_wg(const tg_mlp *m, int l) {
  return m->wl[l].handle ? m->wl[l].handle : m->w[l].handle;
}

/* x: the micro-batch's input (f32); in mixed precision *xl receives its
 * 16-bit copy (released by the backward, or by the caller). */
static int tg_mlp_forward_micro(tg_mlp *m, starpu_data_handle_t x, int rows,
                                tg_tensor *Z, tg_tensor *H, tg_tensor *xl, int micro) {
  const tg_mlp_config *c = &m->cfg;
  int L = c->nlayers;
  tg_gopts g;
  starpu_data_handle_t in = x;
  if (MLP_LOWP(m)) {
    TG_TRY(tg_mlp_act_temp(m, xl, rows, c->widths[0]));
    TG_TRY(tg_convert_insert(MLP_LOWP(m), x, xl->handle,
                             MOPT(3 * L, TG_MLP_RANKS(L), "m%d.cast", micro)));
    in = xl->handle;
  }
  for (int l = 0; l < c->nlayers; l++) {
    int last = l + 1 == c->nlayers;
    TG_TRY(tg_mlp_act_temp(m, &Z[l], rows, c->widths[l + 1]));
    if (!last) TG_TRY(tg_mlp_act_temp(m, &H[l], rows, c->widths[l + 1]));
    TG_TRY(tg_linear_fwd_insert(in, tg_mlp_wg(m, l), m->b[l].handle,
                                last ? TG_ACT_NONE : c->act, Z[l].handle,
                                last ? NULL : H[l].handle,
                                MOPT(3 * L - l, TG_MLP_RANKS(L), "L%d.m%d.fwd", l, micro)));
    if (!last) in = H[l].handle;
  }
  return 0;
}

/* A weight gradient dW (+)= dY^T X: through the 16-bit GEMM codelet when
 * both are 16-bit, else the f32 one (its adapter widens a 16-bit side). */
static int tg_mlp_wgrad(const tg_mlp *m, starpu_data_handle_t dY, starpu_data_handle_t X,
                        starpu_data_handle_t dW, tg_accum mode, const tg_task_opts *o) {
  if (MLP_LOWP(m) && starpu_matrix_get_elemsize(dY) == 2 && starpu_matrix_get_elemsize(X) == 2)
    return tg_gemm_lowp_insert(MLP_LOWP(m), 1, 0, 1.0f, dY, X, 1.0f, dW, mode, o);
  return tg_gemm_insert(1, 0, 1.0f, dY, X, 1.0f, dW, mode, o);
}

static int tg_mlp_backward_micro(tg_mlp *m, tg_mlp_sums *S, starpu_data_handle_t x, int rows,
                                 tg_tensor *Z, tg_tensor *H, tg_tensor *dZ, int micro) {
  const tg_mlp_config *c = &m->cfg;
  int L = c->nlayers, R = TG_MLP_RANKS(L);
  tg_gopts g;
  tg_tensor cur = *dZ; /* gradient of the current layer's pre-activation */
  for (int l = c->nlayers - 1; l >= 0; l--) {
    starpu_data_handle_t in = l > 0 ? H[l - 1].handle : x;
    TG_TRY(tg_mlp_wgrad(m, cur.handle, in, tg_sum_handle(&S->dw[l][0], micro),
                        tg_sum_mode(&S->dw[l][0]), MOPT(L - l, R, "L%d.m%d.dW", l, micro)));
    TG_TRY(tg_bias_grad_insert(cur.handle, tg_sum_handle(&S->db[l][0], micro),
                               tg_sum_mode(&S->db[l][0]),
                               MOPT(L - l, R, "L%d.m%d.db", l, micro)));
    if (l == 0) break;
    tg_tensor dprev;
    TG_TRY(tg_mlp_act_temp(m, &dprev, rows, c->widths[l]));
    TG_TRY(tg_linear_bwd_data_insert(cur.handle, tg_mlp_wg(m, l), c->act,
                                     Z[l - 1].handle, dprev.handle,
                                     MOPT(L + l, R, "L%d.m%d.bwd", l, micro)));
    tg_tensor_release(&cur);
    tg_tensor_release(&H[l - 1]);
    tg_tensor_release(&Z[l - 1]);
    cur = dprev;
  }
  tg_tensor_release(&cur);
  *dZ = cur;
  return 0;
}

/* Tiled forward of one micro-batch into A: layer l as N tasks, each writing
 * its column block of Z_l (and H_l); Z_l and H_l are whole again for the
 * next layer.  Leaves the logits in A->Z[L-1]. */
static int tg_mlp_forward_tiled(tg_mlp *m, tg_mlp_acts *A, starpu_data_handle_t x,
                                int micro) {
  const tg_mlp_config *c = &m->cfg;
  tg_mlp_tiling *T = m->tiling;
  int L = c->nlayers;
  tg_gopts g = {0};
  starpu_data_handle_t in = x; /* (rows, widths[l]) */
  for (int l = 0; l < L; l++) {
    int last = l + 1 == L;
    tg_split_write(&A->Z[l], &A->Zs[l]);
    if (!last) tg_split_write(&A->H[l], &A->Hs[l]);
    for (int j = 0; j < T->n; j++)
      TG_TRY(tg_linear_fwd_insert(in, T->w[l].parts[j], T->b[l].parts[j],
                                  last ? TG_ACT_NONE : c->act, A->Zs[l].parts[j],
                                  last ? NULL : A->Hs[l].parts[j],
                                  tg_gopt(&g, 3 * L - l, TG_MLP_RANKS(L), "L%d.m%d.fwd%d", l,
                                          micro, j)));
    tg_split_join(&A->Z[l], &A->Zs[l]);
    if (!last) {
      tg_split_join(&A->H[l], &A->Hs[l]);
      in = A->H[l].handle;
    }
  }
  return 0;
}

/* Tiled backward of one micro-batch whose logits' gradient is in A->dZ[L-1]. */
static int tg_mlp_backward_tiled(tg_mlp *m, tg_mlp_sums *S, tg_mlp_acts *A,
                                 starpu_data_handle_t x, int rows, int micro) {
  const tg_mlp_config *c = &m->cfg;
  tg_mlp_tiling *T = m->tiling;
  int L = c->nlayers, R = TG_MLP_RANKS(L);
  tg_gopts g = {0};
  for (int l = L - 1; l >= 0; l--) {
    starpu_data_handle_t in = l > 0 ? A->H[l - 1].handle : x; /* (rows, widths[l]) */
    tg_split_readonly(&A->dZ[l], &A->dZs[l]);
    for (int j = 0; j < T->n; j++) {
      starpu_data_handle_t dz = A->dZs[l].parts[j]; /* (rows, out_j) */
      TG_TRY(tg_gemm_insert(1, 0, 1.0f, dz, in, 1.0f, tg_sum_handle(&S->dw[l][j], micro),
                            tg_sum_mode(&S->dw[l][j]),
                            tg_gopt(&g, L - l, R, "L%d.m%d.dW%d", l, micro, j)));
      TG_TRY(tg_bias_grad_insert(dz, tg_sum_handle(&S->db[l][j], micro),
                                 tg_sum_mode(&S->db[l][j]),
                                 tg_gopt(&g, L - l, R, "L%d.m%d.db%d", l, micro, j)));
    }
    if (l > 0) {
      /* G = sum_j dZ[:, j] W_j, in block order (the first block writes) */
      tg_tensor G; /* (rows, widths[l]) */
      TG_TRY(tg_tensor_temp(&G, rows, c->widths[l], TG_F32));
      int rc = 0;
      for (int j = 0; j < T->n && rc == 0; j++)
        rc = tg_gemm_insert(0, 0, 1.0f, A->dZs[l].parts[j], T->w[l].parts[j],
                            j ? 1.0f : 0.0f, G.handle, j ? TG_ACCUMULATE : TG_OVERWRITE,
                            tg_gopt(&g, L + l, R, "L%d.m%d.bwd%d", l, micro, j));
      if (rc == 0)
        rc = tg_act_bwd_insert(c->act, A->Z[l - 1].handle, G.handle, A->dZ[l - 1].handle,
                               tg_gopt(&g, L + l, R, "L%d.m%d.act_bwd", l, micro));
      tg_tensor_release(&G);
      TG_TRY(rc);
    }
    tg_split_join(&A->dZ[l], &A->dZs[l]);
  }
  return 0;
}

/* Partitions the parameters (read-only) and, for a training pass, the
 * gradients (for writing) before a tiled pass; join = 1 joins them after. */
static void tg_mlp_tiled_params(tg_mlp *m, int backward, int join) {
  tg_mlp_tiling *T = m->tiling;
  for (int l = 0; l < m->cfg.nlayers; l++) {
    if (join) {
      tg_split_join(&m->w[l], &T->w[l]);
      tg_split_join(&m->b[l], &T->b[l]);
      tg_split_join(&m->dw[l], &T->dw[l]);
      tg_split_join(&m->db[l], &T->db[l]);
      continue;
    }
    tg_split_readonly(&m->w[l], &T->w[l]);
    tg_split_readonly(&m->b[l], &T->b[l]);
    if (backward) {
      tg_split_write(&m->dw[l], &T->dw[l]);
      tg_split_write(&m->db[l], &T->db[l]);
    }
  }
}

static int tg_mlp_check_batch(const tg_mlp *m, const tg_batch *batch) {
  if (batch->nmicro < 1 || batch->rows < 1)
    return tg_fail(EINVAL, "MLP: empty batch");
  int total = 0;
  for (int i = 0; i < batch->nmicro; i++) {
    if (!batch->x[i] || !batch->y[i])
      return tg_fail(EINVAL, "MLP: micro-batch %d has no data handle", i);
    int r = (int)starpu_matrix_get_ny(batch->x[i]);
    int c = (int)starpu_matrix_get_nx(batch->x[i]);
    if (c != m->cfg.widths[0])
      return tg_fail(EINVAL, "MLP: inputs have %d features, the model expects %d", c,
                     m->cfg.widths[0]);
    total += r;
  }
  if (total != batch->rows)
    return tg_fail(EINVAL, "MLP: micro-batches hold %d rows, the batch says %d", total,
                   batch->rows);
  return 0;
}

/* Submits the micro-batches of one batch into the sums S. */
static int tg_mlp_micros(tg_mlp *m, tg_mlp_sums *S, const tg_batch *batch, int backward,
                         float scale) {
  const tg_mlp_config *c = &m->cfg;
  for (int i = 0; i < batch->nmicro; i++) {
    int rows = (int)starpu_matrix_get_ny(batch->x[i]);
    if (m->tiling) {
      tg_mlp_acts *A = NULL;
      tg_gopts g = {0};
      int L = c->nlayers;
      TG_TRY(tg_mlp_acts_get(m, i, rows, &A));
      TG_TRY(tg_mlp_forward_tiled(m, A, batch->x[i], i));
      starpu_data_handle_t logits = A->Z[L - 1].handle; /* (rows, classes) */
      TG_TRY(tg_softmax_xent_insert(logits, batch->y[i], scale, A->dZ[L - 1].handle,
                                    tg_sum_handle(&S->loss, i), tg_sum_mode(&S->loss),
                                    tg_gopt(&g, 2 * L, TG_MLP_RANKS(L), "m%d.xent", i)));
      TG_TRY(tg_accuracy_insert(logits, batch->y[i], tg_sum_handle(&S->correct, i),
                                tg_sum_mode(&S->correct), NULL));
      if (backward) TG_TRY(tg_mlp_backward_tiled(m, S, A, batch->x[i], rows, i));
      continue;
    }
    tg_tensor Z[TG_MLP_MAX_LAYERS] = {0}, H[TG_MLP_MAX_LAYERS] = {0}, dlogits, xl = {0};
    TG_TRY(tg_mlp_forward_micro(m, batch->x[i], rows, Z, H, &xl, i));
    tg_tensor *logits = &Z[c->nlayers - 1];
    /* the logits' gradient stays f32 (classes wide): scaled by the loss
     * scale before anything 16-bit holds it */
    TG_TRY(tg_tensor_temp(&dlogits, rows, c->widths[c->nlayers], TG_F32));
    tg_gopts g;
    int L = c->nlayers;
    TG_TRY(tg_softmax_xent_insert(logits->handle, batch->y[i], scale, dlogits.handle,
                                  tg_sum_handle(&S->loss, i), tg_sum_mode(&S->loss),
                                  MOPT(2 * L, TG_MLP_RANKS(L), "m%d.xent", i)));
    TG_TRY(tg_accuracy_insert(logits->handle, batch->y[i], tg_sum_handle(&S->correct, i),
                              tg_sum_mode(&S->correct), MOPT(2 * L, TG_MLP_RANKS(L), "m%d.acc", i)));
    if (backward && m->scaler.enabled)
      TG_TRY(tg_scale_insert(dlogits.handle, m->scaler.scale,
                             MOPT(2 * L, TG_MLP_RANKS(L), "m%d.scale", i)));
    tg_tensor_release(logits);
    starpu_data_handle_t x = xl.handle ? xl.handle : batch->x[i];
    if (backward) {
      TG_TRY(tg_mlp_backward_micro(m, S, x, rows, Z, H, &dlogits, i));
    } else {
      tg_tensor_release(&dlogits);
      for (int l = 0; l < c->nlayers; l++) {
        tg_tensor_release(&Z[l]);
        tg_tensor_release(&H[l]);
      }
    }
    tg_tensor_release(&xl);
  }
  return 0;
}

/* One batch: training (backward) steps are summed over the ranks too, each
 * rank holding an equal share of the global batch; evaluation is local. */
static int tg_mlp_run(tg_mlp *m, const tg_batch *batch, int backward) {
  TG_TRY(tg_mlp_check_batch(m, batch));
  const tg_mlp_config *c = &m->cfg;
  int M = batch->nmicro, ranks = backward ? tg_dist_size() : 1;
  tg_mlp_sums *S = calloc(1, sizeof *S);
  if (!S) return tg_fail(ENOMEM, "MLP: out of memory");
  int rc = 0, N = m->tiling ? m->tiling->n : 1;
  if (m->tiling) tg_mlp_tiled_params(m, backward, 0);
  for (int l = 0; l < c->nlayers && backward && rc == 0; l++)
    for (int j = 0; j < N && rc == 0; j++) {
      tg_tensor *dw = m->tiling ? &m->tiling->dwv[l][j] : &m->dw[l];
      tg_tensor *db = m->tiling ? &m->tiling->dbv[l][j] : &m->db[l];
      /* blocks of a plan cannot be STARPU_REDUX targets (reduce.h) */
      int (*begin)(tg_sum *, tg_tensor *, int, int, int) =
          m->tiling ? tg_sum_begin_ordered : tg_sum_begin;
      rc = begin(&S->dw[l][j], dw, 0, M, 1);
      if (rc == 0) rc = begin(&S->db[l][j], db, 0, M, 1);
    }
  if (rc == 0) rc = tg_sum_begin(&S->loss, &m->loss, 1, M, backward);
  if (rc == 0) rc = tg_sum_begin(&S->correct, &m->correct, 1, M, backward);
  if (rc == 0) rc = tg_mlp_micros(m, S, batch, backward, 1.0f / ((float)batch->rows * ranks));
  /* finish every sum begun, even after an error, so no leaf is left behind */
  tg_sum *all[] = {&S->loss, &S->correct};
  for (int l = 0; l < c->nlayers && backward; l++)
    for (int j = 0; j < N; j++) {
      int r1 = tg_sum_finish(&S->dw[l][j]), r2 = tg_sum_finish(&S->db[l][j]);
      if (rc == 0) rc = r1 < 0 ? r1 : r2;
    }
  if (m->tiling) tg_mlp_tiled_params(m, backward, 1);
  for (int k = 0; k < 2; k++) {
    int r = tg_sum_finish(all[k]);
    if (rc == 0) rc = r;
  }
  free(S);
  TG_TRY(rc);
  m->metric_batches++;
  m->metric_samples += batch->rows * ranks;
  return 0;
}

int tg_mlp_forward_backward(tg_mlp *m, const tg_batch *batch) {
  return tg_mlp_run(m, batch, 1);
}

int tg_mlp_evaluate(tg_mlp *m, const tg_batch *batch) { return tg_mlp_run(m, batch, 0); }

/* One optimizer task on a parameter, its gradient and state (s2 unused by
 * SGD). */
static int tg_mlp_opt_insert(const tg_mlp *m, starpu_data_handle_t p, starpu_data_handle_t grad,
                             starpu_data_handle_t s1, starpu_data_handle_t s2,
                             const tg_task_opts *ow) {
  const tg_optimizer_config *o = &m->opt;
  if (o->kind == TG_OPT_SGD) {
    tg_sgd_hyper h = {o->lr, o->momentum, o->weight_decay, 1.0f};
    return tg_sgd_insert(p, grad, s1, &h, ow);
  }
  tg_adamw_hyper h = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, 1.0f, m->step};
  return tg_adamw_insert(p, grad, s1, s2, &h, ow);
}

/* Tiled: one optimizer task per block of each parameter tensor, between a
 * partition of the parameter, its gradient and state and their join. */
static int tg_mlp_update_tiled(tg_mlp *m) {
  tg_mlp_tiling *T = m->tiling;
  int L = m->cfg.nlayers, sgd = m->opt.kind == TG_OPT_SGD, rc = 0;
  tg_gopts g = {0};
  for (int l = 0; l < L && rc == 0; l++) {
    /* the weight's pieces, then the bias's: {tensor, split} */
    tg_tensor *ts[2][4] = {{&m->w[l], &m->dw[l], &m->state1_w[l], &m->state2_w[l]},
                           {&m->b[l], &m->db[l], &m->state1_b[l], &m->state2_b[l]}};
    tg_split *ss[2][4] = {{&T->w[l], &T->dw[l], &T->s1w[l], &T->s2w[l]},
                          {&T->b[l], &T->db[l], &T->s1b[l], &T->s2b[l]}};
    for (int k = 0; k < 2 && rc == 0; k++) {
      int nt = sgd ? 3 : 4;
      for (int t = 0; t < nt; t++) {
        if (t == 1) tg_split_readonly(ts[k][t], ss[k][t]);
        else tg_split_write(ts[k][t], ss[k][t]);
      }
      for (int j = 0; j < T->n && rc == 0; j++)
        rc = tg_mlp_opt_insert(m, ss[k][0]->parts[j], ss[k][1]->parts[j], ss[k][2]->parts[j],
                               sgd ? NULL : ss[k][3]->parts[j],
                               tg_gopt(&g, L - l, TG_MLP_RANKS(L), "L%d.opt%d", l, j));
      for (int t = 0; t < nt; t++) tg_split_join(ts[k][t], ss[k][t]);
    }
  }
  return rc;
}

/* Mixed precision: non-finite checks of every gradient into the overflow
 * flag (loss scaling only), then AdamW on the fp32 master weights, skipped
 * on the device when the flag is set, refreshing the 16-bit copies; the
 * host reads the flag afterwards for the next step's scale. */
static int tg_mlp_update_lowp(tg_mlp *m) {
  int L = m->cfg.nlayers;
  tg_dtype lowp = MLP_LOWP(m);
  tg_gopts g;
  if (m->scaler.enabled) {
    TG_TRY(tg_fill_insert(m->overflow.handle, 0.0f, NULL));
    for (int l = 0; l < L; l++) {
      TG_TRY(tg_nonfinite_insert(m->dw[l].handle, m->overflow.handle,
                                 tg_gopt(&g, 0, TG_MLP_RANKS(L), "L%d.check", l)));
      TG_TRY(tg_nonfinite_insert(m->db[l].handle, m->overflow.handle,
                                 tg_gopt(&g, 0, TG_MLP_RANKS(L), "L%d.check", l)));
    }
  }
  const tg_optimizer_config *o = &m->opt;
  tg_adamw_hyper h = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay,
                      1.0f / m->scaler.scale, m->step};
  for (int l = 0; l < L; l++) {
    const tg_task_opts *ow = tg_gopt(&g, L - l, TG_MLP_RANKS(L), "L%d.opt", l);
    TG_TRY(tg_adamw_amp_insert(lowp, m->w[l].handle, m->dw[l].handle, m->state1_w[l].handle,
                               m->state2_w[l].handle, m->wl[l].handle, m->overflow.handle,
                               &h, ow));
    TG_TRY(tg_adamw_amp_insert(lowp, m->b[l].handle, m->db[l].handle, m->state1_b[l].handle,
                               m->state2_b[l].handle, NULL, m->overflow.handle, &h, ow));
  }
  int skipped = tg_loss_scaler_after_step(&m->scaler, &m->overflow);
  TG_TRY(skipped);
  m->step -= skipped; /* a skipped step leaves AdamW's count as it was */
  return 0;
}

int tg_mlp_update(tg_mlp *m) {
  m->step++;
  if (m->tiling) return tg_mlp_update_tiled(m);
  if (MLP_LOWP(m)) return tg_mlp_update_lowp(m);
  int L = m->cfg.nlayers;
  tg_gopts g;
  for (int l = 0; l < L; l++) {
    const tg_task_opts *ow = tg_gopt(&g, L - l, TG_MLP_RANKS(L), "L%d.opt", l);
    TG_TRY(tg_mlp_opt_insert(m, m->w[l].handle, m->dw[l].handle, m->state1_w[l].handle,
                             m->state2_w[l].handle, ow));
    TG_TRY(tg_mlp_opt_insert(m, m->b[l].handle, m->db[l].handle, m->state1_b[l].handle,
                             m->state2_b[l].handle, ow));
  }
  return 0;
}

int tg_mlp_step(tg_mlp *m, const tg_batch *batch) {
  TG_TRY(tg_mlp_forward_backward(m, batch));
  return tg_mlp_update(m);
}

int tg_mlp_metrics(tg_mlp *m, double *mean_loss, double *accuracy, int reset) {
  float loss = 0, correct = 0;
  TG_TRY(tg_tensor_read(&m->loss, &loss));
  TG_TRY(tg_tensor_read(&m->correct, &correct));
  if (mean_loss) *mean_loss = m->metric_batches ? loss / m->metric_batches : 0.0;
  if (accuracy) *accuracy = m->metric_samples ? correct / m->metric_samples : 0.0;
  if (reset) {
    TG_TRY(tg_fill_insert(m->loss.handle, 0.0f, NULL));
    TG_TRY(tg_fill_insert(m->correct.handle, 0.0f, NULL));
    m->metric_batches = 0;
    m->metric_samples = 0;
  }
  return 0;
}

/* Copies between the flat state arrays and one family of tensors (w and b
 * of every layer, or their optimizer state): to the host when out != NULL,
 * from it otherwise. */
static int tg_mlp_copy_state(tg_mlp *m, tg_tensor *w, tg_tensor *b, float *out,
                             const float *in) {
  for (int l = 0; l < m->cfg.nlayers; l++) {
    tg_tensor *pair[2] = {&w[l], &b[l]};
    for (int k = 0; k < 2; k++) {
      if (out) TG_TRY(tg_tensor_read(pair[k], out));
      else TG_TRY(tg_tensor_write(pair[k], in));
      size_t n = tg_tensor_numel(pair[k]);
      if (out) out += n;
      else in += n;
    }
  }
  return 0;
}

static int tg_mlp_check_s2(const tg_mlp *m, const void *s2) {
  if (s2 && m->opt.kind == TG_OPT_SGD)
    return tg_fail(EINVAL, "MLP: SGD has no second optimizer state");
  return 0;
}

int tg_mlp_read_state(tg_mlp *m, float *params, float *s1, float *s2) {
  TG_TRY(tg_mlp_check_s2(m, s2));
  if (params) TG_TRY(tg_mlp_copy_state(m, m->w, m->b, params, NULL));
  if (s1) TG_TRY(tg_mlp_copy_state(m, m->state1_w, m->state1_b, s1, NULL));
  if (s2) TG_TRY(tg_mlp_copy_state(m, m->state2_w, m->state2_b, s2, NULL));
  return 0;
}

int tg_mlp_write_state(tg_mlp *m, const float *params, const float *s1, const float *s2,
                       int step) {
  TG_TRY(tg_mlp_check_s2(m, s2));
  if (step < 0) return tg_fail(EINVAL, "MLP: optimizer step %d must be >= 0", step);
  if (params) TG_TRY(tg_mlp_copy_state(m, m->w, m->b, NULL, params));
  if (s1) TG_TRY(tg_mlp_copy_state(m, m->state1_w, m->state1_b, NULL, s1));
  if (s2) TG_TRY(tg_mlp_copy_state(m, m->state2_w, m->state2_b, NULL, s2));
  m->step = step;
  /* the GEMMs of mixed precision read the 16-bit copies of the weights */
  for (int l = 0; l < m->cfg.nlayers && params; l++)
    if (m->wl[l].handle)
      TG_TRY(tg_convert_insert(MLP_LOWP(m), m->w[l].handle, m->wl[l].handle, NULL));
  return 0;
}

int tg_mlp_read_metric_sums(tg_mlp *m, float *loss_sum, float *correct_sum) {
  TG_TRY(tg_tensor_read(&m->loss, loss_sum));
  return tg_tensor_read(&m->correct, correct_sum);
}

int tg_mlp_write_metric_sums(tg_mlp *m, float loss_sum, float correct_sum, int batches,
                             int samples) {
  TG_TRY(tg_tensor_write(&m->loss, &loss_sum));
  TG_TRY(tg_tensor_write(&m->correct, &correct_sum));
  m->metric_batches = batches;
  m->metric_samples = samples;
  return 0;
}

size_t tg_mlp_managed_bytes(const tg_mlp_config *cfg, int rows, int nworkers) {
  size_t act = 0, grads = 0;
  for (int l = 0; l < cfg->nlayers; l++) {
    size_t out = (size_t)cfg->widths[l + 1];
    act += 3 * out;                                  /* Z, H, dZ */
    grads += (size_t)cfg->widths[l] * out + out;     /* dW, db */
  }
  act += (size_t)cfg->widths[cfg->nlayers];          /* dlogits */
  return sizeof(float) * (act * (size_t)rows + grads * (size_t)(nworkers > 0 ? nworkers : 1));
}

int tg_mlp_max_tiles(const tg_mlp_config *cfg) {
  int n = TG_MAX_SPLIT;
  for (int l = 1; l <= cfg->nlayers && l <= TG_MLP_MAX_LAYERS; l++)
    if (cfg->widths[l] < n) n = cfg->widths[l];
  return n;
}

double tg_mlp_step_flops(const tg_mlp_config *cfg, int rows) {
  double weights = 0;
  for (int l = 0; l < cfg->nlayers; l++)
    weights += (double)cfg->widths[l] * cfg->widths[l + 1];
  return 6.0 * weights * rows;
}
