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
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "graph_common.h"
#include "reduce.h"
#include "taskgrad/dist.h"
#include "taskgrad/mlp.h"

/* A step's sums (reduce.h): parameter gradients, loss, correct count. */
typedef struct tg_mlp_sums {
  tg_sum dw[TG_MLP_MAX_LAYERS], db[TG_MLP_MAX_LAYERS];
  tg_sum loss, correct;
} tg_mlp_sums;

tg_optimizer_config tg_optimizer_default(tg_optimizer_kind kind) {
  tg_optimizer_config o = {kind, 1e-3f, 0.9f, 0.9f, 0.999f, 1e-8f, 0.01f};
  if (kind == TG_OPT_SGD) {
    o.lr = 0.05f;
    o.weight_decay = 0.0f;
  }
  return o;
}

/* splitmix64: a small, well-mixed, reproducible generator for initialisation */
static uint64_t tg_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
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
  return 0;
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
  return 0;
}

void tg_mlp_destroy(tg_mlp *m) {
  for (int l = 0; l < TG_MLP_MAX_LAYERS; l++) {
    tg_tensor *all[] = {&m->w[l], &m->b[l], &m->dw[l], &m->db[l],
                        &m->state1_w[l], &m->state1_b[l], &m->state2_w[l],
                        &m->state2_b[l]};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tg_tensor_free(all[k]);
  }
  tg_tensor_free(&m->loss);
  tg_tensor_free(&m->correct);
}

/* Forward of one micro-batch.  Z[l] and H[l] (l < L-1) are left registered
 * for the backward; returns the logits in Z[L-1]. */
/* critical-path ranks (graph_common.h) */
#define TG_MLP_RANKS(L) (3 * (L) + 1)

static int tg_mlp_forward_micro(tg_mlp *m, starpu_data_handle_t x, int rows,
                                tg_tensor *Z, tg_tensor *H, int micro) {
  const tg_mlp_config *c = &m->cfg;
  int L = c->nlayers;
  tg_gopts g;
  starpu_data_handle_t in = x;
  for (int l = 0; l < c->nlayers; l++) {
    int last = l + 1 == c->nlayers;
    TG_TRY(tg_tensor_temp(&Z[l], rows, c->widths[l + 1], TG_F32));
    if (!last) TG_TRY(tg_tensor_temp(&H[l], rows, c->widths[l + 1], TG_F32));
    TG_TRY(tg_linear_fwd_insert(in, m->w[l].handle, m->b[l].handle,
                                last ? TG_ACT_NONE : c->act, Z[l].handle,
                                last ? NULL : H[l].handle,
                                tg_gopt(&g, 3 * L - l, TG_MLP_RANKS(L), "L%d.m%d.fwd", l, micro)));
    if (!last) in = H[l].handle;
  }
  return 0;
}

static int tg_mlp_backward_micro(tg_mlp *m, tg_mlp_sums *S, starpu_data_handle_t x, int rows,
                                 tg_tensor *Z, tg_tensor *H, tg_tensor *dZ, int micro) {
  const tg_mlp_config *c = &m->cfg;
  int L = c->nlayers, R = TG_MLP_RANKS(L);
  tg_gopts g;
  tg_tensor cur = *dZ; /* gradient of the current layer's pre-activation */
  for (int l = c->nlayers - 1; l >= 0; l--) {
    starpu_data_handle_t in = l > 0 ? H[l - 1].handle : x;
    TG_TRY(tg_gemm_insert(1, 0, 1.0f, cur.handle, in, 1.0f, tg_sum_handle(&S->dw[l], micro),
                          tg_sum_mode(&S->dw[l]), tg_gopt(&g, L - l, R, "L%d.m%d.dW", l, micro)));
    TG_TRY(tg_bias_grad_insert(cur.handle, tg_sum_handle(&S->db[l], micro),
                               tg_sum_mode(&S->db[l]),
                               tg_gopt(&g, L - l, R, "L%d.m%d.db", l, micro)));
    if (l == 0) break;
    tg_tensor dprev;
    TG_TRY(tg_tensor_temp(&dprev, rows, c->widths[l], TG_F32));
    TG_TRY(tg_linear_bwd_data_insert(cur.handle, m->w[l].handle, c->act,
                                     Z[l - 1].handle, dprev.handle,
                                     tg_gopt(&g, L + l, R, "L%d.m%d.bwd", l, micro)));
    tg_tensor_release(&cur);
    tg_tensor_release(&H[l - 1]);
    tg_tensor_release(&Z[l - 1]);
    cur = dprev;
  }
  tg_tensor_release(&cur);
  *dZ = cur;
  return 0;
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
    tg_tensor Z[TG_MLP_MAX_LAYERS] = {0}, H[TG_MLP_MAX_LAYERS] = {0}, dlogits;
    TG_TRY(tg_mlp_forward_micro(m, batch->x[i], rows, Z, H, i));
    tg_tensor *logits = &Z[c->nlayers - 1];
    TG_TRY(tg_tensor_temp(&dlogits, rows, c->widths[c->nlayers], TG_F32));
    tg_gopts g;
    int L = c->nlayers;
    TG_TRY(tg_softmax_xent_insert(logits->handle, batch->y[i], scale, dlogits.handle,
                                  tg_sum_handle(&S->loss, i), tg_sum_mode(&S->loss),
                                  tg_gopt(&g, 2 * L, TG_MLP_RANKS(L), "m%d.xent", i)));
    TG_TRY(tg_accuracy_insert(logits->handle, batch->y[i], tg_sum_handle(&S->correct, i),
                              tg_sum_mode(&S->correct), NULL));
    tg_tensor_release(logits);
    if (backward) {
      TG_TRY(tg_mlp_backward_micro(m, S, batch->x[i], rows, Z, H, &dlogits, i));
    } else {
      tg_tensor_release(&dlogits);
      for (int l = 0; l < c->nlayers; l++) {
        tg_tensor_release(&Z[l]);
        tg_tensor_release(&H[l]);
      }
    }
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
  int rc = 0;
  for (int l = 0; l < c->nlayers && backward && rc == 0; l++) {
    rc = tg_sum_begin(&S->dw[l], &m->dw[l], 0, M, 1);
    if (rc == 0) rc = tg_sum_begin(&S->db[l], &m->db[l], 0, M, 1);
  }
  if (rc == 0) rc = tg_sum_begin(&S->loss, &m->loss, 1, M, backward);
  if (rc == 0) rc = tg_sum_begin(&S->correct, &m->correct, 1, M, backward);
  if (rc == 0) rc = tg_mlp_micros(m, S, batch, backward, 1.0f / ((float)batch->rows * ranks));
  /* finish every sum begun, even after an error, so no leaf is left behind */
  tg_sum *all[] = {&S->loss, &S->correct};
  for (int l = 0; l < c->nlayers && backward; l++) {
    int r1 = tg_sum_finish(&S->dw[l]), r2 = tg_sum_finish(&S->db[l]);
    if (rc == 0) rc = r1 < 0 ? r1 : r2;
  }
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

int tg_mlp_update(tg_mlp *m) {
  m->step++;
  const tg_optimizer_config *o = &m->opt;
  int L = m->cfg.nlayers;
  tg_gopts g;
  for (int l = 0; l < L; l++) {
    const tg_task_opts *ow = tg_gopt(&g, L - l, TG_MLP_RANKS(L), "L%d.opt", l);
    if (o->kind == TG_OPT_SGD) {
      tg_sgd_hyper h = {o->lr, o->momentum, o->weight_decay, 1.0f};
      TG_TRY(tg_sgd_insert(m->w[l].handle, m->dw[l].handle, m->state1_w[l].handle, &h, ow));
      TG_TRY(tg_sgd_insert(m->b[l].handle, m->db[l].handle, m->state1_b[l].handle, &h, ow));
    } else {
      tg_adamw_hyper h = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, 1.0f, m->step};
      TG_TRY(tg_adamw_insert(m->w[l].handle, m->dw[l].handle, m->state1_w[l].handle,
                             m->state2_w[l].handle, &h, ow));
      TG_TRY(tg_adamw_insert(m->b[l].handle, m->db[l].handle, m->state1_b[l].handle,
                             m->state2_b[l].handle, &h, ow));
    }
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

double tg_mlp_step_flops(const tg_mlp_config *cfg, int rows) {
  double weights = 0;
  for (int l = 0; l < cfg->nlayers; l++)
    weights += (double)cfg->widths[l] * cfg->widths[l + 1];
  return 6.0 * weights * rows;
}
