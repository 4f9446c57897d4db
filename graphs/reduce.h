/*
 * Summing a step's micro-batch contributions (graph builders, layer 4).
 *
 * A tg_sum stands for one accumulated tensor of a step: a parameter
 * gradient (zeroed at the start of the step) or a running total such as the
 * loss (persistent: the step's sum is added to what it holds).  The graph
 * passes tg_sum_handle(s, micro) and tg_sum_mode(s) to every task that
 * contributes, then calls tg_sum_finish once the last micro-batch is
 * submitted.  Three ways to sum, chosen by tg_sum_begin:
 *  - in place in any order (TG_COMMUTE, default when every worker shares
 *    one memory node: a CPU-only run): contributions add into the target
 *    one at a time, so the sum takes no memory beyond the target whatever
 *    the number of workers;
 *  - STARPU_REDUX into the target (default with accelerators: each memory
 *    node reduces its workers' contributions, any order);
 *  - deterministic (tg_deterministic()): micro-batch i accumulates (RW, in
 *    submission order) into its own leaf, leaf 0 being the zeroed gradient
 *    itself; the leaves are summed by a fixed midpoint tree of accumulate
 *    tasks, leaf[lo] += leaf[mid], whatever the workers or the scheduler;
 *  - distributed (more than one rank): the step's local sum is then summed
 *    over the ranks by tg_dist_allreduce (parallel.h), whose recursive doubling
 *    continues the same midpoint tree when every rank holds the same number
 *    of consecutive micro-batches.  Running totals use leaves here too, so
 *    that only the step's sum crosses the network.
 * Leaves other than the target are temporaries: allocated by StarPU where
 * the tasks run and freed after their tree node is added.
 *
 * Zeros.  An eager sum (tg_sum_begin) zeroes the gradient and the leaves
 * when it begins.  A lazy one (tg_sum_begin_lazy, the GPT's gradients)
 * lets the first contribution to each handle overwrite it (a weight
 * gradient GEMM with beta 0, a bias gradient) and writes zeros only before
 * a first contribution that can only add (LayerNorm, embedding).  GPT-2
 * 124M zeroed 0.5 GB of gradients in 150 fill tasks at the start of every
 * step; OpenBLAS's beta-0 path zeroes C itself, so the bytes written stay
 * about the same.  The step still got faster (before and after, and the
 * fills' share of the workers' time: bench/results/2026-11-24-cpu-perf.md,
 * issue 16's lazy zeros), presumably because it no longer
 * begins with that burst of tasks (not measured).  The bits are the same:
 * beta 0 and beta 1 over zeros differ at most in the sign of a zero sum, which
 * neither OpenBLAS's beta-0 path (zero, then add) nor the bias gradient
 * (a double sum started at +0) produces.
 */
#ifndef TASKGRAD_GRAPH_REDUCE_H
#define TASKGRAD_GRAPH_REDUCE_H

#include "taskgrad/codelets.h"
#include "taskgrad/tensor.h"
#include "shard.h"

#include <stddef.h>

typedef struct tg_sum {
  tg_tensor *target;   /* host tensor, REDUX-enabled */
  int persistent;      /* 1: running total, 0: zeroed each step */
  int allreduce;       /* 1: summed over the ranks after the micro-batches */
  int nmicro;
  tg_accum mode;       /* how micro-batches add: TG_ACCUMULATE (leaves),
                          TG_COMMUTE or TG_REDUCE (into the target) */
  tg_tensor *leaves;   /* [nmicro] or NULL; leaves[0] may alias target */
  unsigned char *started; /* lazy sums (tg_sum_begin_lazy): per handle
                             contributions go to (leaves, or the target),
                             1 once it holds a value this step; NULL: eager */
  struct tg_shard *shard; /* sharded (tg_sum_begin_sharded): the leaves are
                             a member's views of its slots, borrowed */
  tg_task_opts exchange;  /* sharded: priority and name of the exchange */
  char exchange_name[48];
  int finished;           /* sharded, reduce-scatter: tg_sum_finish has run */
  tg_dtype comm;          /* sharded: type of the messages between ranks */
  struct tg_scatter_leaves *scatter; /* reduce-scatter (tg_sum_begin_scatter):
                                        the device leaves, borrowed */
  tg_split *target_blocks;           /* reduce-scatter: the target's plan */
} tg_sum;

/* The leaves of a reduce-scatter sum: for each device of dp, one f32
 * buffer of the gradient's shape homed on it (not evictable; its plan's
 * switches then move nothing), with a plan of nb = min(devices, rows) row
 * blocks.  A set serves one gradient at a time: the graph reuses it for
 * another only after that one's tg_sum_finish is submitted. */
typedef struct tg_scatter_leaves {
  const tg_dp *dp;
  int nb;
  tg_tensor leaf[TG_DP_MAX_DEVICES];
  tg_split blocks[TG_DP_MAX_DEVICES];
} tg_scatter_leaves;
int tg_scatter_leaves_create(tg_scatter_leaves *sl, const tg_dp *dp, int rows, int cols);
void tg_scatter_leaves_destroy(tg_scatter_leaves *sl);

/* After tg_init: 1 when the sums of tg_sum_begin add in place in any order
 * (TG_COMMUTE: every worker shares one memory node), 0 when they use
 * STARPU_REDUX. */
int tg_sum_in_place(void);
/* After tg_init: how many gradient-sized buffers StarPU allocates for one
 * sum with `nworkers` workers, at most (the memory estimates of the graphs):
 * none in place, one per worker with STARPU_REDUX or deterministic leaves. */
size_t tg_sum_buffers(int nworkers);

/* Starts the step's sum of `target` over nmicro micro-batches; allreduce:
 * also over the ranks (training steps; evaluation passes are local). */
int tg_sum_begin(tg_sum *s, tg_tensor *target, int persistent, int nmicro, int allreduce);
/* The same, always with leaves and the fixed tree (deterministic or not):
 * for targets that are blocks of a partition plan (tensor.h), which StarPU
 * 1.3 cannot reduce with STARPU_REDUX: the reduction tasks it submits when
 * the blocks are joined access them while inactive, and its automatic
 * partitioning then re-partitions the whole behind the graph's back. */
int tg_sum_begin_ordered(tg_sum *s, tg_tensor *target, int persistent, int nmicro,
                         int allreduce);
/* How a lazy sum adds (tg_sum_begin_lazy): as tg_sum_begin; with leaves
 * and the fixed tree always, as tg_sum_begin_ordered; or in place in any
 * order (TG_COMMUTE) even across memory nodes, unless deterministic (then
 * leaves): one copy of the target, which StarPU moves from one worker's
 * node to the next, where per-micro-batch leaves would each take a
 * target's size on their device (models whose gradients outgrow the
 * devices: the offloaded optimizer with micro-batches pinned to devices). */
typedef enum { TG_SUM_ANY, TG_SUM_LEAVES, TG_SUM_IN_PLACE } tg_sum_order;
/* The same for a gradient (not persistent) whose zeros are deferred: the
 * first contribution to each handle may overwrite it instead (a GEMM with
 * beta 0, a bias gradient), which saves the fill task.
 * Every contribution must then get its mode from tg_sum_take, just before
 * it is submitted. */
int tg_sum_begin_lazy(tg_sum *s, tg_tensor *target, int nmicro, int allreduce,
                      tg_sum_order order);
/* The access mode of micro-batch `micro`'s next contribution: TG_OVERWRITE
 * when it is the first to its handle and can_overwrite, else the sum's mode
 * (tg_sum_mode), after submitting the zeros of the handle if nothing wrote
 * it yet.  For eager sums, always tg_sum_mode. */
int tg_sum_take(tg_sum *s, int micro, int can_overwrite, tg_accum *mode);
/* A lazy sum of member `member` of a sharded bucket (graphs/shard.h):
 * micro-batch i adds into its slot's view (its device's, or its own when
 * deterministic) in submission order; once every member's tg_sum_finish
 * has run, the bucket's slots are reduce-scattered into the gradient's
 * blocks on their owners (then over the ranks, block by block).
 * Contributions must run on their micro-batch's device (tg_dp_device).
 * `exchange` names the exchange's tasks and gives their priority. */
int tg_sum_begin_sharded(tg_sum *s, struct tg_shard *shard, int member, int nmicro,
                         int allreduce, tg_dtype comm, const tg_task_opts *exchange);
/* A lazy sum across the devices of micro-batches pinned to them (dp):
 * micro-batch i adds into its device's leaf (the first contribution on each
 * device overwrites it, the others add in submission order); tg_sum_finish
 * then reduce-scatters: block j of the target, the sum of every leaf's
 * block j in the midpoint tree of tg_sum_tree_insert (devices in order), is
 * computed on device j mod devices, and joining the target's plan
 * (target_blocks: nb row blocks, planned here on first use, freed by the
 * caller before the target) brings each block to the target's home from
 * its own device.  Against one copy passed from device to device
 * (TG_SUM_IN_PLACE), each device sends and receives (devices - 1) / devices
 * of a gradient over its own link, all at once, and the host receives a
 * block from each device instead of the whole from one.  With one
 * micro-batch per device, the bits of the deterministic leaves' tree.
 * allreduce: then over the ranks, as tg_sum_begin.  `exchange` names the
 * reduction's tasks and gives their priority. */
int tg_sum_begin_scatter(tg_sum *s, tg_tensor *target, tg_split *target_blocks,
                         tg_scatter_leaves *sl, int allreduce,
                         const tg_task_opts *exchange);
starpu_data_handle_t tg_sum_handle(const tg_sum *s, int micro);
/* TG_COMMUTE, TG_REDUCE or TG_ACCUMULATE (leaves) */
tg_accum tg_sum_mode(const tg_sum *s);
/* Submits the tree, the all-reduce and the final add; frees the leaves. */
int tg_sum_finish(tg_sum *s);

#endif
