/*
 * The tiled MLP graph (cfg.tiles = N > 1, see mlp.h): layer l runs as N
 * blocks j of its output features, on row blocks W_j (out_j, in) and column
 * blocks b_j:
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
 * bitwise reproducible.  The untiled graph and the entry points, which
 * dispatch here (mlp_tiled.h), are in mlp.c; this file calls nothing of it.
 */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "graph_common.h"
#include "mlp_tiled.h"

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

/* m->tiling: the partition plans and the activation buffers */
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

/* Buffer sets kept per micro-batch index (a training batch, its epoch's
 * last partial batch and the evaluation batches differ in rows); beyond it
 * the least recently used set of that index is freed. */
#define TG_MLP_ACTS_PER_MICRO 4

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

void tg_mlp_tiling_free(tg_mlp *m) {
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
  starpu_data_handle_t h = s->parts[j];
  return (tg_tensor){.handle = h,
                     .rows = (int)starpu_matrix_get_ny(h),
                     .cols = (int)starpu_matrix_get_nx(h),
                     .dtype = TG_F32};
}

int tg_mlp_tiling_create(tg_mlp *m) {
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
    if (m->optim.opt.kind != TG_OPT_SGD) {
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
void tg_mlp_tiled_params(tg_mlp *m, int backward, int join) {
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

/* Forward, loss, accuracy and backward of one micro-batch in its kept
 * activation buffers. */
int tg_mlp_micro_tiled(tg_mlp *m, tg_mlp_sums *S, const tg_batch *batch, int micro, int rows,
                       int backward, float scale) {
  int L = m->cfg.nlayers;
  tg_mlp_acts *A = NULL;
  tg_gopts g = {0};
  TG_TRY(tg_mlp_acts_get(m, micro, rows, &A));
  TG_TRY(tg_mlp_forward_tiled(m, A, batch->x[micro], micro));
  starpu_data_handle_t logits = A->Z[L - 1].handle; /* (rows, classes) */
  TG_TRY(tg_softmax_xent_insert(logits, batch->y[micro], scale, A->dZ[L - 1].handle,
                                tg_sum_handle(&S->loss, micro), tg_sum_mode(&S->loss),
                                tg_gopt(&g, 2 * L, TG_MLP_RANKS(L), "m%d.xent", micro)));
  TG_TRY(tg_accuracy_insert(logits, batch->y[micro], tg_sum_handle(&S->correct, micro),
                            tg_sum_mode(&S->correct), NULL));
  if (backward) TG_TRY(tg_mlp_backward_tiled(m, S, A, batch->x[micro], rows, micro));
  return 0;
}

/* One optimizer task per block of each parameter tensor, between a
 * partition of the parameter, its gradient and state and their join. */
int tg_mlp_update_tiled(tg_mlp *m) {
  tg_mlp_tiling *T = m->tiling;
  int L = m->cfg.nlayers, sgd = m->optim.opt.kind == TG_OPT_SGD, rc = 0;
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
        rc = tg_optim_submit_task(&m->optim, m->optim.opt.lr, ss[k][0]->parts[j],
                                  ss[k][1]->parts[j], ss[k][2]->parts[j],
                                  sgd ? NULL : ss[k][3]->parts[j],
                                  tg_gopt(&g, L - l, TG_MLP_RANKS(L), "L%d.opt%d", l, j));
      for (int t = 0; t < nt; t++) tg_split_join(ts[k][t], ss[k][t]);
    }
  }
  return rc;
}

int tg_mlp_tiled_n(const tg_mlp *m) { return m->tiling->n; }
tg_tensor *tg_mlp_tiled_dw(tg_mlp *m, int l, int j) { return &m->tiling->dwv[l][j]; }
tg_tensor *tg_mlp_tiled_db(tg_mlp *m, int l, int j) { return &m->tiling->dbv[l][j]; }
