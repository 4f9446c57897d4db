/*
 * taskgrad layer 4: the training-step core that every model shares.
 *
 * A model owns its tensors (parameters, gradients, optimizer state, 16-bit
 * weight copies) and lays them out as its graph needs; it registers each
 * parameter tensor with its companions in a tg_optim, in the order the
 * optimizer tasks are to be submitted.  tg_optim then holds what does not
 * depend on the model: the optimizer's hyper-parameters and step count, the
 * mixed-precision type, and the dynamic loss scaler with its overflow flag,
 * and submits the update:
 *   mixed precision with loss scaling: one non-finite check per gradient
 *     into the overflow flag, in registration order;
 *   one optimizer task per parameter (AdamW, SGD, or in mixed precision
 *     AdamW on the f32 master weights that skips itself when the flag is set
 *     and refreshes the 16-bit copy), in registration order;
 *   then the host reads the flag for the next step's loss scale, and a
 *     skipped step leaves AdamW's step count as it was.
 * Task names are "<param name>.check" and "<param name>.opt", so a model
 * chooses how its tasks show in traces; priorities come from each
 * parameter's critical-path rank (graphs/graph_common.h).
 */
#ifndef TASKGRAD_OPTIM_H
#define TASKGRAD_OPTIM_H

#include "taskgrad/codelets.h"
#include "taskgrad/precision.h"
#include "taskgrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tg_optimizer_kind { TG_OPT_ADAMW = 0, TG_OPT_SGD = 1 } tg_optimizer_kind;

typedef struct tg_optimizer_config {
  tg_optimizer_kind kind;
  float lr;
  float momentum;              /* SGD */
  float beta1, beta2, eps;     /* AdamW */
  float weight_decay;
} tg_optimizer_config;

/* AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01;
 * SGD: lr 0.05, momentum 0.9, weight decay 0. */
tg_optimizer_config tg_optimizer_default(tg_optimizer_kind kind);

/* Mixed-precision training (precision.h).  With bf16 or fp16 a model keeps
 * its activations, their gradients and the GEMMs' weight operands 16-bit,
 * and master weights, optimizer state and weight gradients f32.
 * A zeroed struct is plain fp32 training. */
typedef struct tg_amp_config {
  tg_precision precision;      /* default TG_PREC_FP32 */
  int loss_scaling;            /* dynamic loss scaling on (fp16's usual) */
  float loss_scale;            /* initial scale (0: TG_LOSS_SCALE_DEFAULT) */
  int loss_scale_window;       /* clean steps before it doubles
                                  (0: TG_LOSS_SCALE_WINDOW) */
} tg_amp_config;

/* -EINVAL with a message starting "<model>: " for an unknown precision or
 * loss scaling without a 16-bit precision. */
int tg_amp_config_check(const tg_amp_config *amp, const char *model);

/* One parameter tensor and its companions (the model's tensors; the set
 * only points at them). */
typedef struct tg_param {
  tg_tensor *value;            /* f32 (master) weights */
  tg_tensor *grad;             /* f32 gradient */
  tg_tensor *state1;           /* AdamW m, or SGD velocity */
  tg_tensor *state2;           /* AdamW v; NULL for SGD */
  tg_tensor *lowp;             /* mixed precision: its 16-bit copy, or NULL */
  char name[32];               /* task names: "<name>.opt", "<name>.check" */
  int rank;                    /* critical-path rank of its optimizer task */
  /* set by the core, NULL at registration: a large parameter's row blocks
   * (value, grad, state1, state2, lowp), one optimizer task each */
  tg_split *blocks;
  /* sharded data parallelism (graphs/shard.h), or NULL: updated per row
   * block on each block's owner device, then gathered into the replicas */
  struct tg_shard *shard;
} tg_param;

/* Parameters of at least this many elements are updated in row blocks, one
 * task per worker (at most 8 with devices, 64 on CPUs alone), so that the
 * workers share the update that
 * ends the step (GPT-2's token embedding: 38.6 M values, the last gradient
 * to be final).  Element-wise optimizers: the same bits as one task. */
#define TG_OPTIM_BLOCK_MIN (1 << 22)

typedef struct tg_optim {
  tg_optimizer_config opt;
  int step;                    /* optimizer steps taken */
  tg_dtype lowp;               /* 16-bit type of mixed precision, or TG_F32 */
  tg_loss_scaler scaler;
  tg_tensor overflow;          /* mixed precision: (1, 1), the step's
                                  gradients overflowed */
  int nranks;                  /* critical-path ranks of the model's step */
  tg_param *params;            /* [nparams], in submission order */
  int nparams, cap;
  /* offload (set before tg_optim_start): every optimizer task on the CPU
   * workers, next to the host-backed master weights and moments, large
   * parameters in row blocks, one per CPU worker (at most TG_MAX_SPLIT).
   * Only the gradients go to the host and the (16-bit) weights back; the
   * model must not sum gradients with STARPU_REDUX (StarPU 1.3 cannot
   * partition a pending reduction): reduce.h's leaves */
  int on_cpu;
  /* 1: a step's updates are submitted as one fusion group (tg_fuse_begin,
   * codelets.h: fused tasks of up to 64 buffers), for parameters that are
   * views of a few packs (a GPT's packed layers, on one GPU: a task per
   * layer cost StarPU's driver time for each); 0: a task per group */
  int fuse_updates;
} tg_optim;

/* Checks amp and the optimizer (mixed precision needs AdamW: its 16-bit
 * step keeps f32 master weights) and starts the loss scaler; `model` names
 * the model in messages.  No tensor yet: see tg_optim_start. */
int tg_optim_init(tg_optim *o, const tg_optimizer_config *opt, const tg_amp_config *amp,
                  int nranks, const char *model);
/* Registers a parameter (copied); its optimizer task is submitted after
 * those registered before it. */
int tg_optim_add(tg_optim *o, const tg_param *p);
/* After the parameters are registered and their values set: mixed
 * precision's overflow flag, and the 16-bit copies from the weights. */
int tg_optim_start(tg_optim *o);
/* Refreshes the 16-bit copies from the f32 weights (after these were
 * written from outside, e.g. a resumed checkpoint). */
int tg_optim_refresh_lowp(tg_optim *o);
/* One optimization step with learning rate lr: see the note above. */
int tg_optim_update(tg_optim *o, float lr);
/* One optimizer task (AdamW or SGD per o->opt, step o->step) on the given
 * handles: for models that update blocks of a parameter themselves. */
int tg_optim_submit_task(const tg_optim *o, float lr, starpu_data_handle_t value,
                         starpu_data_handle_t grad, starpu_data_handle_t state1,
                         starpu_data_handle_t state2, const tg_task_opts *opts);
/* Frees the flag, the block plans and the registry (not the model's
 * tensors): call it before the tensors are freed. */
void tg_optim_destroy(tg_optim *o);

#ifdef __cplusplus
}
#endif
#endif
