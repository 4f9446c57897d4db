/*
 * The training-step core (include/taskgrad/optim.h): the update that the
 * MLP and the GPT once each carried a copy of.
 *
 * The submission order is part of the contract: deterministic mode promises
 * bitwise-identical results, and the loss scaler's decision for step k+1
 * must see step k's checks.  So the checks all go first, then the optimizer
 * tasks, both in registration order, and only then does the host wait for
 * the overflow flag.  This file calls only insert wrappers and tensor
 * functions (layer 3).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph_common.h"
#include "taskgrad/optim.h"

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
  o->params[o->nparams++] = *p;
  return 0;
}

int tg_optim_refresh_lowp(tg_optim *o) {
  for (int k = 0; k < o->nparams; k++) {
    const tg_param *p = &o->params[k];
    if (p->lowp && p->lowp->handle)
      TG_TRY(tg_convert_insert(o->lowp, p->value->handle, p->lowp->handle, NULL));
  }
  return 0;
}

int tg_optim_start(tg_optim *o) {
  if (!o->lowp) return 0;
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
    TG_TRY(tg_nonfinite_insert(p->grad->handle, o->overflow.handle,
                               tg_gopt(&g, 0, o->nranks, "%s.check", p->name)));
  }
  return 0;
}

/* Mixed precision: AdamW on the f32 master weights, unscaling the
 * gradients (1 / scale, a power of two: exact) and skipped on the device
 * when the flag is set, refreshing the 16-bit copies. */
static int tg_optim_update_lowp(tg_optim *o, float lr) {
  TG_TRY(tg_optim_check_grads(o));
  const tg_optimizer_config *c = &o->opt;
  tg_adamw_hyper h = {.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
                      .weight_decay = c->weight_decay, .grad_scale = 1.0f / o->scaler.scale,
                      .step = o->step};
  tg_gopts g;
  for (int k = 0; k < o->nparams; k++) {
    const tg_param *p = &o->params[k];
    TG_TRY(tg_adamw_amp_insert(o->lowp, p->value->handle, p->grad->handle, p->state1->handle,
                               p->state2->handle, p->lowp ? p->lowp->handle : NULL,
                               o->overflow.handle, &h,
                               tg_gopt(&g, p->rank, o->nranks, "%s.opt", p->name)));
  }
  return 0;
}

int tg_optim_update(tg_optim *o, float lr) {
  o->step++;
  if (o->lowp) {
    TG_TRY(tg_optim_update_lowp(o, lr));
  } else {
    tg_gopts g;
    for (int k = 0; k < o->nparams; k++) {
      const tg_param *p = &o->params[k];
      TG_TRY(tg_optim_submit_task(o, lr, p->value->handle, p->grad->handle, p->state1->handle,
                                  p->state2 ? p->state2->handle : NULL,
                                  tg_gopt(&g, p->rank, o->nranks, "%s.opt", p->name)));
    }
  }
  int skipped = tg_loss_scaler_after_step(&o->scaler, &o->overflow);
  TG_TRY(skipped);
  o->step -= skipped; /* a skipped step leaves AdamW's count as it was */
  return 0;
}

void tg_optim_destroy(tg_optim *o) {
  tg_tensor_free(&o->overflow);
  free(o->params);
  o->params = NULL;
  o->nparams = o->cap = 0;
}
