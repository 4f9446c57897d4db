/*
 * The tiled MLP graph's entry points (mlp_tiled.c), called by mlp.c's
 * dispatcher only (mlp.c -> mlp_tiled.c, never back).  The tiling's data
 * (m->tiling) is private to mlp_tiled.c.  Private to graphs/.
 */
#ifndef TASKGRAD_GRAPHS_MLP_TILED_H
#define TASKGRAD_GRAPHS_MLP_TILED_H

#include "mlp_internal.h"

/* Plans the partitions of m's parameters, gradients and state (m->tiling). */
int tg_mlp_tiling_create(tg_mlp *m);
/* Frees the plans and activation buffers; NULL tiling: nothing to do. */
void tg_mlp_tiling_free(tg_mlp *m);
/* Partitions the parameters (read-only) and, for a training pass, the
 * gradients (for writing) before a tiled pass; join = 1 joins them after. */
void tg_mlp_tiled_params(tg_mlp *m, int backward, int join);
/* Forward, loss and accuracy (and with backward, the backward) of
 * micro-batch `micro` of `rows` rows into the sums S. */
int tg_mlp_micro_tiled(tg_mlp *m, tg_mlp_sums *S, const tg_batch *batch, int micro, int rows,
                       int backward, float scale);
/* One optimizer task per block of each parameter tensor (step already
 * counted). */
int tg_mlp_update_tiled(tg_mlp *m);
/* The number of tiles (m->tiling set) and the gradient blocks of layer l's
 * tile j as tensors (views, never released), for the step's sums. */
int tg_mlp_tiled_n(const tg_mlp *m);
tg_tensor *tg_mlp_tiled_dw(tg_mlp *m, int l, int j);
tg_tensor *tg_mlp_tiled_db(tg_mlp *m, int l, int j);

#endif
