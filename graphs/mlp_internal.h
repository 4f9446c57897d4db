/*
 * What the MLP's untiled graph (mlp.c) and its tiled one (mlp_tiled.c)
 * share: the step's sums, the critical-path ranks and the tiled mode's
 * entry points.  Private to graphs/.
 */
#ifndef TASKGRAD_GRAPHS_MLP_INTERNAL_H
#define TASKGRAD_GRAPHS_MLP_INTERNAL_H

#include "reduce.h"
#include "taskgrad/mlp.h"

/* A step's sums (reduce.h): parameter gradients (per tile; [l][0] untiled),
 * loss, correct count. */
typedef struct tg_mlp_sums {
  tg_sum dw[TG_MLP_MAX_LAYERS][TG_MAX_SPLIT], db[TG_MLP_MAX_LAYERS][TG_MAX_SPLIT];
  tg_sum loss, correct;
} tg_mlp_sums;

/* critical-path ranks (graph_common.h) */
#define TG_MLP_RANKS(L) (3 * (L) + 1)

/* Mixed precision: the 16-bit type of activations (TG_F32: none). */
#define MLP_LOWP(m) tg_precision_lowp((m)->cfg.amp.precision)

typedef struct tg_mlp_acts tg_mlp_acts;

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

#endif
