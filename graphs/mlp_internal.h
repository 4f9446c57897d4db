/*
 * What the MLP's untiled graph (mlp.c) and its tiled one (mlp_tiled.c)
 * share: the step's sums, the critical-path ranks, the 16-bit type.  Types
 * and macros only: the tiled graph's functions are in mlp_tiled.h, and
 * mlp_tiled.c calls nothing of mlp.c (mlp.c -> mlp_tiled.c, one way).
 * Private to graphs/.
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

#endif
