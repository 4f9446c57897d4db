/*
 * The training-step core (include/taskgrad/optim.h): the update that the
 * MLP and the GPT once each carried a copy of.
 *
 * The submission order is part of the contract: deterministic mode promises
 * bitwise-identical results, and the loss scaler's decision for step k+1
 * must see step k's checks.  So the checks all go first, then the optimizer
 * tasks, both in registration order, and only then does the host wait for
 * the overflow flag.  This file calls only insert wrappers and tensor
 * functions (layer 4).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph_common.h"
#include "reduce.h"
#include "shard.h"
#include "taskgrad/optim.h"
#include "taskgrad/parallel.h"

tg_optimizer_config tg_optimizer_default(tg_optimizer_kind kind) {
  tg_optimizer_config o = {.kind = kind, .lr = 1e-3f, .momentum = 0.9f, .beta1 = 0.9f,
                           .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
  if (kind == TG_OPT_SGD) {
    o.lr = 0.05f;
    o.weight_decay = 0.0f;
  }
  return o;
}

int tg_amp_config_check(const tg_amp_config *amp, const char *model) {
  if ((unsigned)amp->precision > TG_PREC_FP16)
    return tg_fail(EINVAL, "%s: unknown precision %d", model, (int)amp->precision);
  if (amp->loss_scaling && !tg_precision_lowp(amp->precision))
    return tg_fail(EINVAL, "%s: loss scaling is for bf16 and fp16 training, not %s", model,
                   tg_precision_name(amp->precision));
  return 0;
}

int tg_optim_init(tg_optim *o, const tg_optimizer_config *opt, const tg_amp_config *amp,
                  int nranks, const char *model) {
  memset(o, 0, sizeof *o);
  TG_TRY(tg_amp_config_check(amp, model));
  o->opt = *opt;
  o->nranks = nranks;
  o->lowp = tg_precision_lowp(amp->precision);
  if (o->lowp && opt->kind != TG_OPT_ADAMW)
    return tg_fail(EINVAL, "%s: %s training needs the AdamW optimizer (its mixed-precision "
                   "step keeps fp32 master weights)", model, tg_precision_name(amp->precision));
  return tg_loss_scaler_init(&o->scaler, amp->loss_scaling,
                             amp->loss_scale > 0 ? amp->loss_scale : TG_LOSS_SCALE_DEFAULT,
                             amp->loss_scale_window > 0 ? amp->loss_scale_window
                                                        : TG_LOSS_SCALE_WINDOW);
}

int tg_optim_add(tg_optim *o, const tg_param *p) {
  if (o->nparams == o->cap) {
    int cap = o->cap ? 2 * o->cap : 32;
    tg_param *grown = realloc(o->params, (size_t)cap * sizeof *grown);
    if (!grown) return tg_fail(ENOMEM, "out of memory for the parameter set");
    o->params = grown;
    o->cap = cap;
  }
  o->params[o->nparams] = *p;
  o->params[o->nparams++].blocks = NULL;
  return 0;
}

/* The parameter's tensors in block order: value, grad, state1, state2, lowp */
#define TG_PARAM_TENSORS 5
static tg_tensor *tg_param_tensor(const tg_param *p, int t) {
  tg_tensor *ts[TG_PARAM_TENSORS] = {p->value, p->grad, p->state1, p->state2, p->lowp};
  return ts[t] && ts[t]->handle ? ts[t] : NULL;
}

/* How many row blocks p is updated in: 0 (one task) unless it is large,
 * several workers exist, and its gradient is not a pending STARPU_REDUX
 * target (StarPU 1.3 cannot partition one: see reduce.h).  Never on
 * devices: StarPU 1.3 keeps a partition plan's coherency on the tensor's
 * home node, so the blocks sent the parameter, its gradient and its moments
 * through host memory and back every step (GPT-2 124M's wte with one
 * simulated H100 and 15 CPU workers: bench/results/2026-11-27-fusion.md);
 * each block's update is the whole's on its rows, so the bits are the
 * same. */
static int tg_param_nblocks(const tg_optim *o, const tg_param *p) {
  if (p->shard) return 0; /* its blocks are the shards' */
  /* a view of a packed layer (tensor.h) cannot be partitioned: its
   * whole is the layer's one buffer */
  if (tg_tensor_view_of(p->value->handle, NULL)) return 0;
  int devices = tg_ncuda_workers() + tg_nopencl_workers();
  if (devices > 0 && !o->on_cpu) return 0;
  int workers = tg_ncpu_workers() + devices;
  int n = workers < 8 ? workers : 8;
  /* each CPU worker streams its share at its memory bandwidth: offloaded,
   * and on a CPU-only node, where 8 cores alone left the update of GPT-2's
   * wte as the tail of a 64-core step (bench/results/2026-11-26-tiles.md) */
  if (o->on_cpu || devices == 0)
    n = tg_ncpu_workers() < TG_MAX_SPLIT ? tg_ncpu_workers() : TG_MAX_SPLIT;
  if (n > p->value->rows) n = p->value->rows;
  if (tg_tensor_numel(p->value) < TG_OPTIM_BLOCK_MIN || n < 2) return 0;
  return tg_sum_in_place() || tg_deterministic() || o->on_cpu ? n : 0;
}

/* Plans the blocks of p on first use (the tensors have their values then). */
static int tg_param_blocks(const tg_optim *o, tg_param *p, int *nblocks) {
  *nblocks = 0;
  if (!p->blocks) {
    int n = tg_param_nblocks(o, p);
    if (!n) return 0;
    p->blocks = calloc(TG_PARAM_TENSORS, sizeof *p->blocks);
    if (!p->blocks) return tg_fail(ENOMEM, "out of memory for the blocks of %s", p->name);
    for (int t = 0; t < TG_PARAM_TENSORS; t++)
      if (tg_param_tensor(p, t)) TG_TRY(tg_split_plan(tg_param_tensor(p, t), n, &p->blocks[t]));
  }
  *nblocks = p->blocks[0].n;
  return 0;
}

/* Makes p's blocks current (the gradient read-only, the rest written) or,
 * with join, the wholes again. */
static void tg_param_blocks_switch(tg_param *p, int join) {
  for (int t = 0; t < TG_PARAM_TENSORS; t++) {
    tg_tensor *x = tg_param_tensor(p, t);
    if (!x) continue;
    if (join) tg_split_join(x, &p->blocks[t]);
    else if (t == 1) tg_split_readonly(x, &p->blocks[t]);
    else tg_split_write(x, &p->blocks[t]);
  }
}

/* Block j's handle of p's tensor t, or the whole's (j < 0), or NULL */
static starpu_data_handle_t tg_param_handle(const tg_param *p, int t, int j) {
  tg_tensor *x = tg_param_tensor(p, t);
  if (!x) return NULL;
  return j < 0 ? x->handle : p->blocks[t].parts[j];
}

/* A sharded parameter's 16-bit blocks from its master blocks, each on its
 * owner, then the replicas from them (16-bit or f32). */
static int tg_shard_refresh(const tg_optim *o, const tg_param *p) {
  tg_shard *sh = p->shard;
  tg_gopts g;
  for (int j = 0; j < sh->nb && o->lowp; j++) {
    if (!tg_shard_lowp_block(sh, j)) continue;
    tg_task_opts opts = *tg_gopt(&g, p->rank, o->nranks, "%s.lowp%d", p->name, j);
    opts.worker = tg_shard_worker(sh, j);
    TG_TRY(tg_convert_insert(o->lowp, tg_shard_block(sh, sh->value, j),
                             tg_shard_lowp_block(sh, j), &opts));
  }
  return tg_shard_gather(sh, tg_gopt(&g, p->rank, o->nranks, "%s.gather", p->name));
}

int tg_optim_refresh_lowp(tg_optim *o) {
  for (int k = 0; k < o->nparams; k++) {
    const tg_param *p = &o->params[k];
    if (p->shard) {
      TG_TRY(tg_shard_refresh(o, p));
      continue;
    }
    if (p->lowp && p->lowp->handle)
      TG_TRY(tg_convert_insert(o->lowp, p->value->handle, p->lowp->handle, NULL));
  }
  return 0;
}

int tg_optim_start(tg_optim *o) {
  int sharded = o->nparams > 0 && o->params[0].shard;
  if (!o->lowp) return sharded ? tg_optim_refresh_lowp(o) : 0;
  TG_TRY(tg_tensor_alloc(&o->overflow, 1, 1, TG_F32));
  TG_TRY(tg_fill_insert(o->overflow.handle, 0.0f, NULL));
  return tg_optim_refresh_lowp(o);
}

int tg_optim_submit_task(const tg_optim *o, float lr, starpu_data_handle_t value,
                         starpu_data_handle_t grad, starpu_data_handle_t state1,
                         starpu_data_handle_t state2, const tg_task_opts *opts) {
  const tg_optimizer_config *c = &o->opt;
  if (c->kind == TG_OPT_SGD) {
    tg_sgd_hyper h = {.lr = lr, .momentum = c->momentum, .weight_decay = c->weight_decay,
                      .grad_scale = 1.0f};
    return tg_sgd_insert(value, grad, state1, &h, opts);
  }
  tg_adamw_hyper h = {.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
                      .weight_decay = c->weight_decay, .grad_scale = 1.0f, .step = o->step};
  return tg_adamw_insert(value, grad, state1, state2, &h, opts);
}

/* Loss scaling: clears the overflow flag, then one check per gradient
 * that sets it on a non-finite value (the optimizer tasks read it). */
static int tg_optim_check_grads(tg_optim *o) {
  if (!o->scaler.enabled) return 0;
  TG_TRY(tg_fill_insert(o->overflow.handle, 0.0f, NULL));
  tg_gopts g;
  for (int k = 0; k < o->nparams; k++) {
    const tg_param *p = &o->params[k];
    for (int j = 0; p->shard && j < p->shard->nb; j++) {
      tg_task_opts opts = *tg_gopt(&g, 0, o->nranks, "%s.check%d", p->name, j);
      opts.worker = tg_shard_worker(p->shard, j);
      TG_TRY(tg_nonfinite_insert(tg_shard_block(p->shard, p->grad, j), o->overflow.handle,
                                 &opts));
    }
    if (p->shard) continue;
    TG_TRY(tg_nonfinite_insert(p->grad->handle, o->overflow.handle,
                               tg_gopt(&g, 0, o->nranks, "%s.check", p->name)));
  }
  return 0;
}

/* One optimizer task on block j of p (the wholes when j < 0).  Mixed
 * precision (amp given): AdamW on the f32 master weights, unscaling the
 * gradients (1 / scale, a power of two: exact) and skipped on the device
 * when the flag is set, refreshing the 16-bit copy. */
static int tg_param_submit(const tg_optim *o, float lr, const tg_adamw_hyper *amp,
                           const tg_param *p, int j, const tg_task_opts *opts) {
  if (amp)
    return tg_adamw_amp_insert(o->lowp, tg_param_handle(p, 0, j), tg_param_handle(p, 1, j),
                               tg_param_handle(p, 2, j), tg_param_handle(p, 3, j),
                               tg_param_handle(p, 4, j), o->overflow.handle, amp, opts);
  return tg_optim_submit_task(o, lr, tg_param_handle(p, 0, j), tg_param_handle(p, 1, j),
                              tg_param_handle(p, 2, j), tg_param_handle(p, 3, j), opts);
}

/* A sharded parameter: one optimizer task per block on the block's owner,
 * then the all-gather of the updated blocks into the replicas. */
static int tg_shard_update(const tg_optim *o, float lr, const tg_adamw_hyper *amp,
                           const tg_param *p) {
  tg_shard *sh = p->shard;
  tg_gopts g;
  for (int j = 0; j < sh->nb; j++) {
    tg_task_opts opts = *tg_gopt(&g, p->rank, o->nranks, "%s.opt%d", p->name, j);
    opts.worker = tg_shard_worker(sh, j);
    starpu_data_handle_t w = tg_shard_block(sh, sh->value, j), gr = tg_shard_block(sh, sh->grad, j),
                         m = tg_shard_block(sh, sh->m, j), v = tg_shard_block(sh, sh->v, j);
    if (amp)
      TG_TRY(tg_adamw_amp_insert(o->lowp, w, gr, m, v, tg_shard_lowp_block(sh, j),
                                 o->overflow.handle, amp, &opts));
    else
      TG_TRY(tg_optim_submit_task(o, lr, w, gr, m, v, &opts));
  }
  return tg_shard_gather(sh, tg_gopt(&g, p->rank, o->nranks, "%s.gather", p->name));
}

/* AdamW of whole (unsharded, unblocked) parameters in groups of up to
 * TG_ADAMW_MULTI_MAX, one task each (the same bits as a task per
 * parameter): a one-GPU step is launch-bound (codelets/adamw_multi.c).  A
 * group holds parameters of one critical-path rank, whose gradients are
 * final together (a GPT layer's 12): grouping consecutive registrations
 * (one kind of parameter over every layer) would make each task wait for
 * the end of the backward pass. */
typedef struct tg_adamw_group {
  starpu_data_handle_t w[TG_ADAMW_MULTI_MAX], g[TG_ADAMW_MULTI_MAX], m[TG_ADAMW_MULTI_MAX],
      v[TG_ADAMW_MULTI_MAX], low[TG_ADAMW_MULTI_MAX];
  const tg_param *first;
  int n, order; /* order: the first member's registration index */
} tg_adamw_group;

/* h: the step's AdamW hyperparameters (mixed precision when o->lowp is a
 * 16-bit type: the overflow flag and the 16-bit copies too) */
static int tg_adamw_group_flush(const tg_optim *o, const tg_adamw_hyper *h, tg_adamw_group *gr) {
  if (!gr->n) return 0;
  int amp = o->lowp != TG_F32;
  tg_gopts g;
  tg_gopt(&g, gr->first->rank, o->nranks, "%s.opt+%d", gr->first->name, gr->n - 1);
  g.opts.cpu_only = o->on_cpu;
  const tg_task_opts *opts = &g.opts;
  int rc = tg_adamw_multi_insert(o->lowp, gr->n, gr->w, gr->g, gr->m, gr->v,
                                 amp ? gr->low : NULL, amp ? o->overflow.handle : NULL, h,
                                 opts);
  gr->n = 0;
  return rc;
}

static int tg_adamw_group_add(const tg_optim *o, const tg_adamw_hyper *h, tg_adamw_group *gr,
                              const tg_param *p, int order) {
  if (!gr->n) {
    gr->first = p;
    gr->order = order;
  }
  gr->w[gr->n] = p->value->handle;
  gr->g[gr->n] = p->grad->handle;
  gr->m[gr->n] = p->state1->handle;
  gr->v[gr->n] = p->state2->handle;
  gr->low[gr->n] = p->lowp ? p->lowp->handle : NULL;
  if (++gr->n == TG_ADAMW_MULTI_MAX) return tg_adamw_group_flush(o, h, gr);
  return 0;
}

/* the groups still open, in their first members' registration order */
static int tg_adamw_groups_flush(const tg_optim *o, const tg_adamw_hyper *h,
                                 tg_adamw_group *groups, int ngroups) {
  for (;;) {
    tg_adamw_group *next = NULL;
    for (int r = 0; r < ngroups; r++)
      if (groups[r].n && (!next || groups[r].order < next->order)) next = &groups[r];
    if (!next) return 0;
    TG_TRY(tg_adamw_group_flush(o, h, next));
  }
}

int tg_optim_update(tg_optim *o, float lr) {
  o->step++;
  const tg_optimizer_config *c = &o->opt;
  tg_adamw_hyper amp = {.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
                        .weight_decay = c->weight_decay, .grad_scale = 1.0f, .step = o->step};
  if (o->lowp) {
    TG_TRY(tg_optim_check_grads(o));
    amp.grad_scale = 1.0f / o->scaler.scale;
  }
  tg_gopts g;
  /* one open group per rank in [0, nranks], those outside in the last */
  int ngroups = (o->nranks > 0 ? o->nranks : 0) + 2;
  tg_adamw_group *groups = calloc((size_t)ngroups, sizeof *groups);
  if (!groups) return tg_fail(ENOMEM, "optimizer: out of memory for the AdamW groups");
  const tg_adamw_hyper *ampp = o->lowp ? &amp : NULL;
  int rc = o->fuse_updates ? tg_fuse_begin() : 0;
  for (int k = 0; k < o->nparams && !rc; k++) {
    tg_param *p = &o->params[k];
    if (p->shard) {
      rc = tg_shard_update(o, lr, ampp, p);
      continue;
    }
    int n;
    if ((rc = tg_param_blocks(o, p, &n))) break;
    if (!n && c->kind == TG_OPT_ADAMW) {
      int r = p->rank >= 0 && p->rank < ngroups - 1 ? p->rank : ngroups - 1;
      rc = tg_adamw_group_add(o, &amp, &groups[r], p, k); /* amp: the step's hyperparameters */
      continue;
    }
    if (n) tg_param_blocks_switch(p, 0);
    for (int j = n ? 0 : -1; j < n && !rc; j++) {
      tg_gopt(&g, p->rank, o->nranks, n ? "%s.opt%d" : "%s.opt", p->name, j);
      g.opts.cpu_only = o->on_cpu;
      rc = tg_param_submit(o, lr, ampp, p, j, &g.opts);
    }
    if (n) tg_param_blocks_switch(p, 1);
  }
  if (!rc) rc = tg_adamw_groups_flush(o, &amp, groups, ngroups);
  if (o->fuse_updates) {
    int end = tg_fuse_end(rc == 0);
    if (!rc) rc = end;
  }
  free(groups);
  TG_TRY(rc);
  int skipped = tg_loss_scaler_after_step(&o->scaler, &o->overflow);
  TG_TRY(skipped);
  o->step -= skipped; /* a skipped step leaves AdamW's count as it was */
  return 0;
}

void tg_optim_destroy(tg_optim *o) {
  for (int k = 0; k < o->nparams; k++) {
    tg_param *p = &o->params[k];
    if (!p->blocks) continue;
    for (int t = 0; t < TG_PARAM_TENSORS; t++)
      if (tg_param_tensor(p, t)) tg_split_free(tg_param_tensor(p, t), &p->blocks[t]);
    free(p->blocks);
    p->blocks = NULL;
  }
  tg_tensor_free(&o->overflow);
  free(o->params);
  o->params = NULL;
  o->nparams = o->cap = 0;
}
