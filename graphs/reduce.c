/*
 * Micro-batch sums for the graph builders (see reduce.h).  Only insert
 * wrappers and tensor functions here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reduce.h"
#include "shard.h"
#include "taskgrad/parallel.h"

static int tg_sum_start(tg_sum *s, tg_tensor *target, int persistent, int nmicro,
                        int allreduce, tg_sum_order ordered, int lazy) {
  memset(s, 0, sizeof *s);
  s->target = target;
  s->persistent = persistent;
  s->nmicro = nmicro;
  s->allreduce = allreduce && tg_dist_size() > 1;
  s->mode = ordered == TG_SUM_IN_PLACE || tg_sum_in_place() ? TG_COMMUTE : TG_REDUCE;
  int leaves = ordered == TG_SUM_LEAVES || tg_deterministic() || (persistent && s->allreduce);
  if (lazy) { /* one flag per handle that contributions go to */
    s->started = calloc(leaves ? (size_t)nmicro : 1, 1);
    if (!s->started) return tg_fail(ENOMEM, "reduction: out of memory");
  } else if (!persistent) {
    TG_TRY(tg_fill_insert(target->handle, 0.0f, NULL));
  }
  if (!leaves) return 0;
  s->mode = TG_ACCUMULATE;
  s->leaves = calloc((size_t)nmicro, sizeof *s->leaves);
  if (!s->leaves) return tg_fail(ENOMEM, "reduction: out of memory for %d leaves", nmicro);
  for (int i = 0; i < nmicro; i++) {
    if (i == 0 && !persistent) {
      s->leaves[0] = *target; /* zero (or, lazy, zeroed later): the first leaf */
      continue;
    }
    TG_TRY(tg_tensor_temp(&s->leaves[i], target->rows, target->cols, TG_F32));
    if (!lazy) TG_TRY(tg_fill_insert(s->leaves[i].handle, 0.0f, NULL));
  }
  return 0;
}

/* the handle index micro-batch `micro` adds into */
static int tg_sum_slot(const tg_sum *s, int micro) {
  if (s->scatter) return tg_dp_device(s->scatter->dp, micro);
  if (s->shard) return tg_dp_slot(s->shard->dp, micro);
  return s->leaves ? micro : 0;
}

static int tg_sum_nslots(const tg_sum *s) {
  if (s->scatter) return s->scatter->dp->ndev;
  if (s->shard) return s->shard->dp->nslots;
  return s->leaves ? s->nmicro : 1;
}

/* lazy sums: the zeros of a handle nothing has written yet this step (a
 * sharded slot's on its device) */
static int tg_sum_zero_slot(tg_sum *s, int slot) {
  if (!s->started || s->started[slot]) return 0;
  s->started[slot] = 1;
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = TG_F32};
  if (s->shard) {
    const tg_dp *dp = s->shard->dp;
    o.worker = dp->worker[tg_dp_slot_device(dp, slot)];
  }
  if (s->scatter) o.worker = s->scatter->dp->worker[slot];
  return tg_fill_insert(s->leaves ? s->leaves[slot].handle : s->target->handle, 0.0f, &o);
}

int tg_sum_take(tg_sum *s, int micro, int can_overwrite, tg_accum *mode) {
  *mode = s->mode;
  if (!s->started) return 0;
  int slot = tg_sum_slot(s, micro);
  if (!s->started[slot] && can_overwrite) {
    s->started[slot] = 1;
    *mode = TG_OVERWRITE;
    return 0;
  }
  return tg_sum_zero_slot(s, slot);
}

/* one memory node, or one GPU that every contribution runs on (the CPU
 * workers only take tasks without a CUDA version, and no other device
 * exists: tg_dp_count_devices counts device memory nodes): contributions
 * add in place, no reduction buffers; several: STARPU_REDUX, each node
 * reducing its own workers'.  With one GPU and CPU workers, REDUX sent the
 * partial gradients to the host and back every step (GPT-2 124M bf16, 15
 * CPU workers: bench/results/2026-11-27-fusion.md). */
int tg_sum_in_place(void) {
  return starpu_memory_nodes_get_count() == 1 ||
         (tg_cuda_tasks_stay_on_gpus() && tg_dp_count_devices() == 1);
}

size_t tg_sum_buffers(int nworkers) {
  int w = nworkers > 0 ? nworkers : 1;
  /* deterministic leaves: bounded by the workers as StarPU's copies were */
  return tg_deterministic() || !tg_sum_in_place() ? (size_t)w : 0;
}

int tg_sum_begin(tg_sum *s, tg_tensor *target, int persistent, int nmicro, int allreduce) {
  return tg_sum_start(s, target, persistent, nmicro, allreduce, TG_SUM_ANY, 0);
}

int tg_sum_begin_ordered(tg_sum *s, tg_tensor *target, int persistent, int nmicro,
                         int allreduce) {
  return tg_sum_start(s, target, persistent, nmicro, allreduce, TG_SUM_LEAVES, 0);
}

int tg_sum_begin_lazy(tg_sum *s, tg_tensor *target, int nmicro, int allreduce,
                      tg_sum_order order) {
  return tg_sum_start(s, target, 0, nmicro, allreduce, order, 1);
}

/* the name and priority of a sum's exchange tasks, the name copied */
static void tg_sum_exchange_opts(tg_sum *s, const tg_task_opts *exchange) {
  s->exchange = *exchange;
  if (exchange->name) {
    snprintf(s->exchange_name, sizeof s->exchange_name, "%s", exchange->name);
    s->exchange.name = s->exchange_name;
  }
}

int tg_sum_begin_sharded(tg_sum *s, tg_shard *shard, int member, int nmicro, int allreduce,
                         tg_dtype comm, const tg_task_opts *exchange) {
  memset(s, 0, sizeof *s);
  s->target = shard->grad;
  s->nmicro = nmicro;
  s->allreduce = allreduce && tg_dist_size() > 1;
  s->mode = TG_ACCUMULATE;
  s->shard = shard;
  s->comm = comm;
  s->leaves = tg_shard_member_slots(shard, member);
  tg_sum_exchange_opts(s, exchange);
  s->started = calloc((size_t)shard->dp->nslots, 1);
  if (!s->started) return tg_fail(ENOMEM, "reduction: out of memory");
  tg_shard_open(shard);
  return 0;
}

int tg_scatter_leaves_create(tg_scatter_leaves *sl, const tg_dp *dp, int rows, int cols) {
  memset(sl, 0, sizeof *sl);
  sl->dp = dp;
  sl->nb = dp->ndev < rows ? dp->ndev : rows;
  for (int d = 0; d < dp->ndev; d++) {
    TG_TRY(tg_tensor_alloc_on_node(&sl->leaf[d], rows, cols, TG_F32, dp->node[d]));
    TG_TRY(tg_split_plan(&sl->leaf[d], sl->nb, &sl->blocks[d]));
  }
  return 0;
}

void tg_scatter_leaves_destroy(tg_scatter_leaves *sl) {
  for (int d = 0; sl->dp && d < sl->dp->ndev; d++) {
    tg_split_free(&sl->leaf[d], &sl->blocks[d]);
    tg_tensor_free(&sl->leaf[d]);
  }
  memset(sl, 0, sizeof *sl);
}

int tg_sum_begin_scatter(tg_sum *s, tg_tensor *target, tg_split *target_blocks,
                         tg_scatter_leaves *sl, int allreduce, const tg_task_opts *exchange) {
  memset(s, 0, sizeof *s);
  if (sl->leaf[0].rows != target->rows || sl->leaf[0].cols != target->cols)
    return tg_fail(EINVAL, "reduce-scatter: leaves of (%d, %d) for a (%d, %d) gradient",
                   sl->leaf[0].rows, sl->leaf[0].cols, target->rows, target->cols);
  if (!target_blocks->n) TG_TRY(tg_split_plan(target, sl->nb, target_blocks));
  if (target_blocks->n != sl->nb)
    return tg_fail(EINVAL, "reduce-scatter: a plan of %d blocks for %d", target_blocks->n, sl->nb);
  s->target = target;
  s->target_blocks = target_blocks;
  s->nmicro = sl->dp->nmicro;
  s->allreduce = allreduce && tg_dist_size() > 1;
  s->mode = TG_ACCUMULATE;
  s->scatter = sl;
  s->leaves = sl->leaf;
  tg_sum_exchange_opts(s, exchange);
  s->started = calloc((size_t)sl->dp->ndev, 1);
  if (!s->started) return tg_fail(ENOMEM, "reduction: out of memory");
  return 0;
}

/* the end of a sum over device slots (sharded, reduce-scatter): the slots
 * no contribution reached zeroed, the sum marked finished */
static int tg_sum_close_slots(tg_sum *s) {
  int rc = 0;
  for (int k = 0; k < tg_sum_nslots(s) && rc == 0; k++) rc = tg_sum_zero_slot(s, k);
  free(s->started);
  s->started = NULL;
  s->finished = 1;
  return rc;
}

/* The reduce-scatter (tg_sum_begin_scatter): the leaves' blocks readable
 * on their devices, the target's writable, block j summed on device j mod
 * devices, then both joined (the target's at its home, each block from its
 * device; the leaves' where they are, moving nothing). */
static int tg_sum_finish_scatter(tg_sum *s) {
  int rc = tg_sum_close_slots(s);
  TG_TRY(rc);
  tg_scatter_leaves *sl = s->scatter;
  int ndev = sl->dp->ndev;
  for (int d = 0; d < ndev; d++) tg_split_readonly(&sl->leaf[d], &sl->blocks[d]);
  tg_split_write(s->target, s->target_blocks);
  for (int j = 0; j < sl->nb && rc == 0; j++) {
    starpu_data_handle_t in[TG_DP_MAX_DEVICES];
    for (int d = 0; d < ndev; d++) in[d] = sl->blocks[d].parts[j];
    tg_task_opts o = s->exchange;
    o.worker = sl->dp->worker[j % ndev];
    rc = tg_sum_tree_insert(ndev, in, s->target_blocks->parts[j], &o);
  }
  tg_split_join(s->target, s->target_blocks);
  for (int d = 0; d < ndev; d++) tg_split_join(&sl->leaf[d], &sl->blocks[d]);
  if (rc == 0 && s->allreduce) rc = tg_dist_allreduce(s->target->handle);
  return rc;
}

starpu_data_handle_t tg_sum_handle(const tg_sum *s, int micro) {
  return s->leaves ? s->leaves[tg_sum_slot(s, micro)].handle : s->target->handle;
}

/* the sharded sum's end: the member's untouched slots zeroed; after the
 * bucket's last member, its exchange (shard.h) */
static int tg_sum_finish_sharded(tg_sum *s) {
  int rc = tg_sum_close_slots(s);
  if (rc == 0) rc = tg_shard_member_done(s->shard, &s->exchange, s->allreduce, s->comm);
  return rc < 0 ? rc : 0;
}

tg_accum tg_sum_mode(const tg_sum *s) { return s->mode; }

/* leaves[lo] = sum of leaves[lo .. hi-1], split at the midpoint */
static int tg_sum_tree(tg_sum *s, int lo, int hi) {
  if (hi - lo < 2) return 0;
  int mid = lo + (hi - lo) / 2;
  TG_TRY(tg_sum_tree(s, lo, mid));
  TG_TRY(tg_sum_tree(s, mid, hi));
  TG_TRY(tg_accumulate_insert(s->leaves[lo].handle, s->leaves[mid].handle, NULL));
  tg_tensor_release(&s->leaves[mid]);
  return 0;
}

int tg_sum_finish(tg_sum *s) {
  if (s->scatter) return s->finished ? 0 : tg_sum_finish_scatter(s);
  if (s->shard) return s->finished ? 0 : tg_sum_finish_sharded(s);
  int rc = 0;
  /* lazy: a handle no contribution reached is still zeroed */
  for (int i = 0; s->started && i < tg_sum_nslots(s) && rc == 0; i++)
    rc = tg_sum_zero_slot(s, i);
  free(s->started);
  s->started = NULL;
  if (!s->leaves) {
    if (rc == 0 && s->allreduce) rc = tg_dist_allreduce(s->target->handle);
    return rc;
  }
  if (rc == 0) rc = tg_sum_tree(s, 0, s->nmicro);
  if (rc == 0 && s->allreduce) rc = tg_dist_allreduce(s->leaves[0].handle);
  if (rc == 0 && s->persistent) rc = tg_accumulate_insert(s->target->handle, s->leaves[0].handle, NULL);
  if (s->persistent) tg_tensor_release(&s->leaves[0]);
  for (int i = 1; i < s->nmicro; i++) tg_tensor_release(&s->leaves[i]); /* on error */
  free(s->leaves);
  s->leaves = NULL;
  return rc;
}
