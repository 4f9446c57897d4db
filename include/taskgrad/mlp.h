/*
 * taskgrad layer 4: the multi-layer perceptron training step as a task graph.
 *
 * Layer l maps widths[l] features to widths[l+1] (PyTorch's nn.Linear
 * convention: y = x W^T + b with W (out, in)), followed by the activation on
 * every layer but the last, whose outputs are the class logits.
 *
 * tg_mlp_step() submits a whole training step for one batch, split into the
 * batch's micro-batches: each micro-batch runs forward and backward as its
 * own tasks, parameter gradients are accumulated with STARPU_REDUX (so
 * micro-batches run concurrently on different workers), then one optimizer
 * task per parameter tensor runs.  Nothing waits on the host: the loss and
 * the number of correct predictions accumulate in (1, 1) tensors that
 * tg_mlp_metrics() reads when the caller asks.
 *
 * Tiling (tg_mlp_config.tiles = N > 1) splits every layer's output features
 * into N blocks, so that one big layer can span several workers or GPUs:
 * W (out, in), its gradient and optimizer state are partitioned into N row
 * blocks W_j (out_j, in), b into N column blocks, and each layer runs as N
 * tasks per micro-batch: forward Z[:, j] = X W_j^T + b_j (H likewise);
 * weight gradients dW_j += dZ[:, j]^T X per block; the data gradient
 * dX = (sum_j dZ[:, j] W_j) * act'(Zprev), the blocks' products added in
 * block order.  Blocks have out / N features, the first out % N one more.
 * Each block computes its slice of the untiled forward and weight gradient;
 * only the data gradient adds its terms in a different order, so a tiled
 * step agrees with the untiled one to rounding, not bitwise.  The gradient
 * blocks always merge over the micro-batches in the deterministic mode's
 * fixed order (parallel.h; StarPU 1.3 cannot STARPU_REDUX the blocks of a
 * partition), so tiled steps are bitwise reproducible.
 */
#ifndef TASKGRAD_MLP_H
#define TASKGRAD_MLP_H

#include <stdint.h>

#include "taskgrad/codelets.h"
#include "taskgrad/data.h"
#include "taskgrad/optim.h"
#include "taskgrad/precision.h"
#include "taskgrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TG_MLP_MAX_LAYERS 16

typedef struct tg_mlp_config {
  int nlayers;                          /* number of linear layers, >= 1 */
  int widths[TG_MLP_MAX_LAYERS + 1];    /* widths[0] inputs .. widths[nlayers] classes */
  tg_activation act;
  int tiles;                            /* output-feature blocks per layer: 0 or 1
                                           untiled (default), else 2 .. TG_MAX_SPLIT
                                           and at most every widths[l + 1] */
  /* mixed precision (optim.h; untiled, AdamW): with bf16 or fp16 the
   * activations, their gradients, the inputs and the weights' copies read
   * by the GEMMs are 16-bit; parameters, AdamW state, weight gradients,
   * logits' gradients, loss and accuracy f32.  Zeroed: fp32. */
  tg_amp_config amp;
} tg_mlp_config;

/* Tiled mode's partitions and per-micro-batch activation buffers
 * (graphs/mlp_tiled.c). */
typedef struct tg_mlp_tiling tg_mlp_tiling;

typedef struct tg_mlp {
  tg_mlp_config cfg;
  /* the optimizer, its step count and the loss scaler; its parameter set
   * holds w[0], b[0], w[1], b[1], ... (tiled: updated block by block) */
  tg_optim optim;
  tg_tensor w[TG_MLP_MAX_LAYERS];        /* (widths[l+1], widths[l]) */
  tg_tensor b[TG_MLP_MAX_LAYERS];        /* (1, widths[l+1]) */
  tg_tensor dw[TG_MLP_MAX_LAYERS];       /* like w, REDUX-enabled */
  tg_tensor db[TG_MLP_MAX_LAYERS];       /* like b, REDUX-enabled */
  tg_tensor state1_w[TG_MLP_MAX_LAYERS]; /* AdamW m or SGD velocity */
  tg_tensor state1_b[TG_MLP_MAX_LAYERS];
  tg_tensor state2_w[TG_MLP_MAX_LAYERS]; /* AdamW v (unused by SGD) */
  tg_tensor state2_b[TG_MLP_MAX_LAYERS];
  tg_tensor loss;                        /* (1, 1) sum of batch-mean losses */
  tg_tensor correct;                     /* (1, 1) correct predictions */
  int metric_batches;                    /* batches accumulated in loss */
  int metric_samples;                    /* samples accumulated in correct */
  tg_mlp_tiling *tiling;                 /* NULL unless cfg.tiles > 1 */
  tg_tensor wl[TG_MLP_MAX_LAYERS];       /* mixed precision: 16-bit copies of w */
} tg_mlp;

/* Allocates parameters (PyTorch's nn.Linear initialisation, uniform in
 * +-1/sqrt(fan_in), from a seeded generator), gradients and optimizer state.
 * Call after tg_init().  The initial parameters do not depend on cfg.tiles.
 * Tiled, every entry point below leaves the parameters, gradients and state
 * whole (joined) when its tasks have run, so tg_tensor_read() on them works
 * as untiled; the activations are then pinned host buffers kept per
 * micro-batch and shape (StarPU 1.3 cannot partition a temporary). */
int tg_mlp_create(tg_mlp *m, const tg_mlp_config *cfg,
                  const tg_optimizer_config *opt, uint64_t seed);
void tg_mlp_destroy(tg_mlp *m);

/* Zeroes the gradients, then forward and backward of every micro-batch:
 * after it, dw/db hold the gradients of the batch-mean loss. */
int tg_mlp_forward_backward(tg_mlp *m, const tg_batch *batch);
/* One optimizer task per parameter tensor. */
int tg_mlp_update(tg_mlp *m);
/* forward_backward + update. */
int tg_mlp_step(tg_mlp *m, const tg_batch *batch);
/* Forward only: accumulates the loss and the correct count. */
int tg_mlp_evaluate(tg_mlp *m, const tg_batch *batch);

/* Reads (waiting for the tasks that produce them) the mean loss per batch and
 * the accuracy over the batches since the last reset; reset != 0 starts a new
 * accumulation (asynchronously). */
int tg_mlp_metrics(tg_mlp *m, double *mean_loss, double *accuracy, int reset);

/* ---- checkpoint support (cli/train_mlp.c, src/mlp_checkpoint.c) ----------
 * The state arrays are flat, layer by layer W (out, in) then b (out), as
 * in tg_mlp_checkpoint.  Tiled, the tensors are whole between entry
 * points, so these read and write them as untiled. */
/* Copies out (waiting for the tasks that write them) the f32 parameters and
 * the optimizer state (s1: AdamW m or SGD velocity; s2: AdamW v); any
 * pointer may be NULL, s2 must be for SGD. */
int tg_mlp_read_state(tg_mlp *m, float *params, float *s1, float *s2);
/* The reverse, and the optimizer step count; refreshes the 16-bit weight
 * copies of mixed precision from the new parameters. */
int tg_mlp_write_state(tg_mlp *m, const float *params, const float *s1, const float *s2,
                       int step);
/* The running accumulation of tg_mlp_metrics, raw: the sum of the batches'
 * mean losses, the correct predictions, and the batches and samples they
 * cover, so that an epoch interrupted by a checkpoint reports the same
 * figures when resumed. */
int tg_mlp_read_metric_sums(tg_mlp *m, float *loss_sum, float *correct_sum);
int tg_mlp_write_metric_sums(tg_mlp *m, float loss_sum, float correct_sum, int batches,
                             int samples);

/* The most tiles cfg's layers allow: the fewest output features of a layer
 * (the classes included), at most TG_MAX_SPLIT. */
int tg_mlp_max_tiles(const tg_mlp_config *cfg);

/* Bytes StarPU itself allocates (and counts against STARPU_LIMIT_*_MEM)
 * during a step on `rows` samples with `nworkers` workers, at most: every
 * micro-batch's activations and their gradients in flight at once, plus one
 * reduction copy of the gradients per worker when gradients are reduced with
 * STARPU_REDUX or deterministic leaves (none when they add in place: CPU
 * workers only).  Call it after tg_init.  The parameters, optimizer
 * state and batches are the application's pinned memory, not counted.
 * StarPU 1.3 waits forever for memory that a limit below this never frees,
 * so callers refuse such a limit up front. */
size_t tg_mlp_managed_bytes(const tg_mlp_config *cfg, int rows, int nworkers);

/* Floating-point operations of one training step on `rows` samples
 * (GEMMs only: 6 per weight per sample). */
double tg_mlp_step_flops(const tg_mlp_config *cfg, int rows);

#ifdef __cplusplus
}
#endif
#endif
