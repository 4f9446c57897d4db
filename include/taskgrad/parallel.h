/*
 * taskgrad distributed training: data parallelism over MPI ranks through
 * StarPU-MPI, and the deterministic-reduction switch.
 *
 * Every rank holds a full replica of the parameters and runs the same
 * training graph on its share of each global batch.  After the local
 * micro-batch reduction, tg_dist_allreduce() sums a gradient over the ranks
 * with a recursive-doubling tree of StarPU-MPI transfers and accumulate
 * tasks: at level k, rank r exchanges its partial sum with rank r ^ 2^k and
 * adds the two.  IEEE addition is commutative, so both partners compute the
 * same bits; every rank ends with bitwise-identical gradients, hence
 * identical parameters after the (deterministic, elementwise) optimizer.
 * Nothing waits on the host: transfers and tasks are ordered by StarPU's
 * data dependencies.  Any number of ranks: above the largest power of two
 * P, rank P + i first adds its sum into rank i and gets the result back.
 *
 * The tree adds aligned blocks of ranks, so when rank r holds the global
 * micro-batches r*k .. r*k+k-1 and the graphs reduce micro-batches with the
 * same midpoint tree (tg_deterministic()), the sum has one fixed shape for
 * any number of ranks and workers: results are bitwise reproducible.
 *
 * Built without MPI (no starpumpi-1.3 or MPI found), every rank query says
 * "one process" and tg_init refuses tg_runtime_config.mpi.
 *
 * Layer: parallel (parallel/), above the codelets (the all-reduce submits
 * accumulate tasks, the REDUX setup names the codelets) and below the
 * graphs.  Starting StarPU-MPI and the rank queries belong to the base
 * (runtime.h, included here).
 */
#ifndef TASKGRAD_PARALLEL_H
#define TASKGRAD_PARALLEL_H

#include <starpu.h>

#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sums the float matrix h over all ranks, in place, asynchronously (see
 * above); every rank must call it for the same handles in the same order.
 * A no-op with one rank. */
int tg_dist_allreduce(starpu_data_handle_t h);
/* tg_dist_allreduce with messages in comm: TG_F32 (the same), or TG_BF16 /
 * TG_F16, half the bytes: at each level both partners round their partial
 * sum to comm and add the two rounded values in f32, so they still get the
 * same bits. */
int tg_dist_allreduce_comm(starpu_data_handle_t h, tg_dtype comm);
/* A float (n, 1) block's sum over the ranks in pieces, with buffers kept
 * from step to step (parallel/halving.c): reduce-scatter by recursive
 * halving, then all-gather by recursive doubling, so that each rank sends
 * and receives 2 (P - 1) / P of the block (P: the largest power of two
 * <= the ranks) instead of log2(P) blocks; the same bits as
 * tg_dist_allreduce_comm.  Init once per block (after tg_init; a no-op
 * with one rank), then tg_dist_plan_allreduce each step, every rank for the
 * same blocks in the same order; its adding and converting tasks run as
 * opts says (NULL: anywhere).  Blocks too small to cut into P pieces go
 * through tg_dist_allreduce_comm.  Free before the block is unregistered. */
#define TG_DIST_PLAN_MAX_PIECES 64
#define TG_DIST_PLAN_MAX_LEVELS 6 /* log2(TG_DIST_PLAN_MAX_PIECES) */
typedef struct tg_dist_plan {
  tg_tensor block;                              /* the block (not owned) */
  tg_tensor sum;                                /* the sum in the comm type, cut in pieces */
  tg_split pieces;                              /* plan of sum's P pieces (the all-gather's) */
  tg_dtype comm;                                /* message type */
  int P, levels;                                /* pieces, log2(P); P 0: the tree */
  int folded;                                   /* a rank above P */
  tg_tensor send[TG_DIST_PLAN_MAX_LEVELS];      /* level k's message: the half given (comm) */
  tg_tensor recv[TG_DIST_PLAN_MAX_LEVELS];      /* level k's: the partner's half (comm) */
  tg_tensor kept[TG_DIST_PLAN_MAX_LEVELS];      /* after level k: the half kept (f32) */
  tg_tensor fold_recv, fold_sum, fold_wire;     /* ranks above P */
} tg_dist_plan;
struct tg_task_opts;
int tg_dist_plan_init(tg_dist_plan *p, starpu_data_handle_t block, tg_dtype comm);
int tg_dist_plan_allreduce(tg_dist_plan *p, const struct tg_task_opts *opts);
void tg_dist_plan_free(tg_dist_plan *p);
/* Makes every rank's h equal to rank 0's (parameters at the start):
 * registers h with StarPU-MPI (owner rank 0) and transfers it.
 * Asynchronous; a no-op with one rank. */
int tg_dist_broadcast(starpu_data_handle_t h);
/* Synchronous agreement: returns 1 when every rank passes ok != 0, else 0
 * (e.g. "no rank was asked to stop": ranks receive a signal at different
 * moments but must stop after the same step). */
int tg_dist_all_ok(int ok);
/* Ends every rank of the job with `status` (a rank that fails mid-run). */
void tg_dist_abort(int status) __attribute__((__noreturn__));

/* 1 when gradients are reduced in a fixed order (tg_runtime_config
 * .deterministic or TG_DETERMINISTIC=1 in the environment; changed by
 * tg_set_deterministic, runtime.h). */
int tg_deterministic(void);

/* Enable StarPU reductions (STARPU_REDUX) on a float tensor: contributions
 * start from zero (fill codelet) and are merged by the accumulate codelet
 * (parallel/reduction.c). */
void tg_tensor_enable_reduction(tg_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
