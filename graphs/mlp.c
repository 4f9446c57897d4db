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
 * so StarPU frees them as soon as that task has run.  The update is the
 * shared training-step core's (optim.h).  This file calls only insert
 * wrappers and tensor functions (layer 4 of taskgrad).
 *
 * The tiled graph (cfg.tiles > 1) is in mlp_tiled.c; this file holds the
 * untiled one and the entry points, which dispatch to either (mlp.c ->
 * mlp_tiled.c through mlp_tiled.h, never back; mlp_internal.h holds what
 * both graphs share).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "graph_common.h"
#include "mlp_internal.h"
#include "mlp_tiled.h"
#include "taskgrad/parallel.h"
#include "taskgrad/rng.h"

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
  TG_TRY(tg_amp_config_check(&cfg->amp, "MLP"));
  if (tg_precision_lowp(cfg->amp.precision) && cfg->tiles > 1)
    return tg_fail(EINVAL, "MLP: %s training is not available with tiles (%d)",
                   tg_precision_name(cfg->amp.precision), cfg->tiles);
  return 0;
}

/* Registers w[l] and b[l] of every layer with the optimizer, in the order
 * of their tasks (layer by layer, weight then bias), and in mixed precision
 * allocates the weights' 16-bit copies that the GEMMs read. */
static int tg_mlp_register_params(tg_mlp *m) {
  const tg_mlp_config *c = &m->cfg;
  int L = c->nlayers, sgd = m->optim.opt.kind == TG_OPT_SGD;
  for (int l = 0; l < L; l++) {
    if (MLP_LOWP(m))
      TG_TRY(tg_tensor_alloc(&m->wl[l], c->widths[l + 1], c->widths[l], MLP_LOWP(m)));
    tg_param w = {.value = &m->w[l], .grad = &m->dw[l], .state1 = &m->state1_w[l],
                  .state2 = sgd ? NULL : &m->state2_w[l], .lowp = &m->wl[l], .rank = L - l};
    tg_param b = {.value = &m->b[l], .grad = &m->db[l], .state1 = &m->state1_b[l],
                  .state2 = sgd ? NULL : &m->state2_b[l], .lowp = NULL, .rank = L - l};
    snprintf(w.name, sizeof w.name, "L%d", l);
    snprintf(b.name, sizeof b.name, "L%d", l);
    TG_TRY(tg_optim_add(&m->optim, &w));
    TG_TRY(tg_optim_add(&m->optim, &b));
  }
  return tg_optim_start(&m->optim);
}

int tg_mlp_create(tg_mlp *m, const tg_mlp_config *cfg,
                  const tg_optimizer_config *opt, uint64_t seed) {
  memset(m, 0, sizeof *m);
  TG_TRY(tg_mlp_check_config(cfg));
  m->cfg = *cfg;
  TG_TRY(tg_optim_init(&m->optim, opt, &cfg->amp, TG_MLP_RANKS(cfg->nlayers), "MLP"));
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
  if ((rc = tg_mlp_register_params(m)) < 0) {
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
  tg_optim_destroy(&m->optim);
  for (int l = 0; l < TG_MLP_MAX_LAYERS; l++) {
    tg_tensor *all[] = {&m->w[l], &m->b[l], &m->dw[l], &m->db[l],
                        &m->state1_w[l], &m->state1_b[l], &m->state2_w[l],
                        &m->state2_b[l], &m->wl[l]};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tg_tensor_free(all[k]);
  }
  tg_tensor_free(&m->loss);
  tg_tensor_free(&m->correct);
}

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

/* Forward of one micro-batch.  Z[l] and H[l] (l < L-1) are left registered
 * for the backward; returns the logits in Z[L-1].
 * x: the micro-batch's input (f32); in mixed precision *xl receives its
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
      TG_TRY(tg_mlp_micro_tiled(m, S, batch, i, rows, backward, scale));
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
    if (backward && m->optim.scaler.enabled)
      TG_TRY(tg_scale_insert(dlogits.handle, m->optim.scaler.scale,
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
  int rc = 0, N = m->tiling ? tg_mlp_tiled_n(m) : 1;
  if (m->tiling) tg_mlp_tiled_params(m, backward, 0);
  for (int l = 0; l < c->nlayers && backward && rc == 0; l++)
    for (int j = 0; j < N && rc == 0; j++) {
      tg_tensor *dw = m->tiling ? tg_mlp_tiled_dw(m, l, j) : &m->dw[l];
      tg_tensor *db = m->tiling ? tg_mlp_tiled_db(m, l, j) : &m->db[l];
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


int tg_mlp_update(tg_mlp *m) {
  if (!m->tiling) return tg_optim_update(&m->optim, m->optim.opt.lr);
  m->optim.step++;
  return tg_mlp_update_tiled(m);
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
  if (s2 && m->optim.opt.kind == TG_OPT_SGD)
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
  m->optim.step = step;
  /* the GEMMs of mixed precision read the 16-bit copies of the weights */
  if (params) TG_TRY(tg_optim_refresh_lowp(&m->optim));
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
  return sizeof(float) * (act * (size_t)rows + grads * tg_sum_buffers(nworkers));
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
