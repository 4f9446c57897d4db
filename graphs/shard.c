/*
 * Sharded data parallelism over a node's devices (see shard.h).  Only
 * insert wrappers, tensor functions and StarPU's worker queries here.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shard.h"
#include "taskgrad/parallel.h"

/* device d: the memory node of a CUDA or OpenCL worker, and its first worker */
int tg_dp_scan(int *worker, unsigned *node, int max) {
  int n = 0;
  unsigned nodes = starpu_memory_nodes_get_count();
  for (unsigned mn = 0; mn < nodes; mn++) {
    enum starpu_node_kind kind = starpu_node_get_kind(mn);
    if (kind != STARPU_CUDA_RAM && kind != STARPU_OPENCL_RAM) continue;
    for (unsigned w = 0; w < starpu_worker_get_count(); w++) {
      if (starpu_worker_get_memory_node(w) != mn) continue;
      if (n < max) {
        if (worker) worker[n] = (int)w;
        if (node) node[n] = mn;
      }
      n++;
      break;
    }
  }
  return n;
}

int tg_dp_count_devices(void) { return tg_dp_scan(NULL, NULL, 0); }

int tg_dp_init(tg_dp *dp, int nmicro, tg_dtype compute) {
  memset(dp, 0, sizeof *dp);
  int n = tg_dp_scan(dp->worker, dp->node, TG_DP_MAX_DEVICES);
  if (n < 2)
    return tg_fail(EINVAL, "sharded data parallelism needs at least 2 devices, StarPU has %d", n);
  if (n > TG_DP_MAX_DEVICES)
    return tg_fail(EINVAL, "sharded data parallelism: %d devices, at most %d", n,
                   TG_DP_MAX_DEVICES);
  if (nmicro < n)
    return tg_fail(EINVAL, "sharded data parallelism over %d devices needs at least one "
                   "micro-batch per device, not %d (--micro-batches)", n, nmicro);
  dp->ndev = n;
  dp->nmicro = nmicro;
  dp->nslots = tg_deterministic() ? nmicro : n;
  if (dp->nslots > TG_EXCHANGE_MAX)
    return tg_fail(EINVAL, "sharded data parallelism: %d gradient buffers to sum, at most %d",
                   dp->nslots, TG_EXCHANGE_MAX);
  dp->compute = compute;
  return 0;
}

/* contiguous runs of micro-batches per device, so that each device's share
 * of the deterministic tree's leaves is consecutive */
int tg_dp_device(const tg_dp *dp, int micro) { return micro * dp->ndev / dp->nmicro; }

int tg_dp_slot_device(const tg_dp *dp, int slot) {
  return dp->nslots == dp->ndev ? slot : tg_dp_device(dp, slot); /* per device, or per micro */
}

int tg_dp_slot(const tg_dp *dp, int micro) {
  return dp->nslots == dp->nmicro ? micro : tg_dp_device(dp, micro);
}

/* The flat tensors of a bucket: f32 masters on the host, split statically
 * into the owners' blocks. */
static int tg_shard_masters(tg_shard *sh, tg_tensor *const *values) {
  int n = (int)sh->numel;
  for (int t = 0; t < 4; t++) {
    TG_TRY(tg_tensor_alloc(&sh->master[t], n, 1, TG_F32));
    if (sh->nb > 1) TG_TRY(tg_tensor_split_static(&sh->master[t], sh->nb, &sh->master_s[t]));
  }
  sh->value = &sh->master[TG_SHARD_VALUE];
  sh->grad = &sh->master[TG_SHARD_GRAD];
  sh->m = &sh->master[TG_SHARD_M];
  sh->v = &sh->master[TG_SHARD_V];
  /* no task has touched the fresh buffers: plain copies are safe */
  for (int i = 0; i < sh->nmem; i++)
    memcpy((float *)sh->value->host + sh->start[i], values[i]->host,
           (size_t)sh->rows[i] * sh->cols[i] * sizeof(float));
  return 0;
}

/* A flat buffer homed on device d, with its plan of member views. */
static int tg_shard_flat(tg_shard *sh, tg_tensor *t, tg_split *views, tg_dtype dtype, int d) {
  TG_TRY(tg_tensor_alloc_on_node(t, (int)sh->numel, 1, dtype, sh->dp->node[d]));
  return tg_split_plan_views(t, sh->nmem, sh->rows, sh->cols, views);
}

static int tg_shard_slots(tg_shard *sh) {
  const tg_dp *dp = sh->dp;
  sh->slots = calloc((size_t)dp->nslots, sizeof *sh->slots);
  sh->slot_s = calloc((size_t)dp->nslots, sizeof *sh->slot_s);
  sh->slot_v = calloc((size_t)dp->nslots, sizeof *sh->slot_v);
  sh->views = calloc((size_t)dp->nslots * sh->nmem, sizeof *sh->views);
  if (!sh->slots || !sh->slot_s || !sh->slot_v || !sh->views)
    return tg_fail(ENOMEM, "sharding: out of memory");
  for (int k = 0; k < dp->nslots; k++) {
    TG_TRY(tg_shard_flat(sh, &sh->slots[k], &sh->slot_v[k], TG_F32, tg_dp_slot_device(dp, k)));
    if (sh->nb > 1) TG_TRY(tg_split_plan(&sh->slots[k], sh->nb, &sh->slot_s[k]));
    for (int i = 0; i < sh->nmem; i++) /* handles only: the plan owns them */
      sh->views[i * dp->nslots + k] = (tg_tensor){.handle = sh->slot_v[k].parts[i],
                                                  .rows = sh->rows[i], .cols = sh->cols[i],
                                                  .dtype = TG_F32};
  }
  return 0;
}

int tg_shard_create(tg_shard *sh, const tg_dp *dp, int nmem, tg_tensor *const *values,
                    int readers) {
  memset(sh, 0, sizeof *sh);
  sh->dp = dp;
  if (nmem < 1 || nmem > TG_SHARD_MAX_MEMBERS)
    return tg_fail(EINVAL, "sharding: a bucket of %d tensors (1 to %d)", nmem,
                   TG_SHARD_MAX_MEMBERS);
  sh->nmem = nmem;
  for (int i = 0; i < nmem; i++) {
    sh->rows[i] = values[i]->rows;
    sh->cols[i] = values[i]->cols;
    sh->start[i] = sh->numel;
    sh->numel += (size_t)values[i]->rows * (size_t)values[i]->cols;
  }
  if (sh->numel > INT_MAX)
    return tg_fail(EINVAL, "sharding: a bucket of %zu values (at most %d)", sh->numel, INT_MAX);
  sh->nb = sh->numel < (size_t)dp->ndev ? (int)sh->numel : dp->ndev;
  for (int j = 0; j < sh->nb; j++) sh->owner[j] = j;
  TG_TRY(tg_shard_masters(sh, values));
  TG_TRY(tg_shard_slots(sh));
  int lowp = dp->compute != TG_F32 && (readers & TG_SHARD_READ_COMPUTE);
  for (int d = 0; d < dp->ndev; d++) {
    TG_TRY(tg_shard_flat(sh, &sh->replica[d], &sh->replica_v[d], lowp ? dp->compute : TG_F32, d));
    if (lowp && (readers & TG_SHARD_READ_F32))
      TG_TRY(tg_shard_flat(sh, &sh->replica32[d], &sh->replica32_v[d], TG_F32, d));
  }
  for (int j = 0; lowp && j < sh->nb; j++) {
    int size;
    tg_split_start((int)sh->numel, sh->nb, j, &size);
    TG_TRY(tg_tensor_alloc_on_node(&sh->lowp_block[j], size, 1, dp->compute,
                                   dp->node[sh->owner[j]]));
  }
  return 0;
}

static void tg_shard_flat_free(tg_tensor *t, tg_split *s) {
  tg_split_free(t, s);
  tg_tensor_free(t);
}

void tg_shard_destroy(tg_shard *sh) {
  for (int k = 0; sh->slots && k < sh->dp->nslots; k++) {
    if (sh->slot_s) tg_split_free(&sh->slots[k], &sh->slot_s[k]);
    if (sh->slot_v) tg_split_free(&sh->slots[k], &sh->slot_v[k]);
    tg_tensor_free(&sh->slots[k]);
  }
  free(sh->slots);
  free(sh->slot_s);
  free(sh->slot_v);
  free(sh->views);
  sh->slots = sh->views = NULL;
  sh->slot_s = sh->slot_v = NULL;
  for (int d = 0; d < TG_DP_MAX_DEVICES; d++) {
    tg_shard_flat_free(&sh->replica[d], &sh->replica_v[d]);
    tg_shard_flat_free(&sh->replica32[d], &sh->replica32_v[d]);
    tg_tensor_free(&sh->lowp_block[d]);
  }
  for (int j = 0; sh->ar && j < sh->nb; j++) tg_dist_plan_free(&sh->ar[j]);
  free(sh->ar);
  sh->ar = NULL;
  for (int t = 0; t < 4; t++) {
    if (sh->nb > 1) tg_split_free(&sh->master[t], &sh->master_s[t]);
    tg_tensor_free(&sh->master[t]);
  }
  sh->nb = 0;
}

starpu_data_handle_t tg_shard_weight(const tg_shard *sh, int member, int dev, int f32) {
  if (f32 && sh->replica32[dev].handle) return sh->replica32_v[dev].parts[member];
  return sh->replica_v[dev].parts[member];
}

tg_tensor *tg_shard_member_slots(tg_shard *sh, int member) {
  return &sh->views[member * sh->dp->nslots];
}

void tg_shard_open(tg_shard *sh) {
  if (sh->open) return;
  for (int k = 0; k < sh->dp->nslots; k++) tg_split_write(&sh->slots[k], &sh->slot_v[k]);
  sh->open = 1;
  sh->finished = 0;
}

starpu_data_handle_t tg_shard_block(const tg_shard *sh, const tg_tensor *t, int j) {
  if (!t) return NULL;
  return sh->nb > 1 ? sh->master_s[t - sh->master].parts[j] : t->handle;
}

int tg_shard_worker(const tg_shard *sh, int j) { return sh->dp->worker[sh->owner[j]]; }

starpu_data_handle_t tg_shard_lowp_block(const tg_shard *sh, int j) {
  return sh->lowp_block[j].handle;
}

/* Priorities on a device's queue: StarPU 1.3 puts a pinned task of
 * priority > 0 at the front of its worker's queue, 0 at the back.  The
 * reduce-scatter's sums keep their rank (the caller's priority): at the
 * front they run as soon as their blocks are summable, and their AdamW
 * (optim.c) right after, which keeps the end of the step short; the
 * all-gather's copies go to the back, after the backward tasks, since the
 * next step needs them only at its start.  Measured against the other
 * choices on the simulated h100x8: bench/results/2026-11-25-shard.md. */
static tg_task_opts tg_shard_opts(const tg_task_opts *opts, int front) {
  tg_task_opts o = *opts;
  if (!front) o.priority = 0;
  return o;
}

static int tg_shard_reduce(tg_shard *sh, const tg_task_opts *opts) {
  const tg_dp *dp = sh->dp;
  starpu_data_handle_t in[TG_EXCHANGE_MAX];
  tg_task_opts o = tg_shard_opts(opts, 1);
  for (int k = 0; k < dp->nslots; k++) {
    tg_split_join(&sh->slots[k], &sh->slot_v[k]);
    if (sh->nb > 1) tg_split_readonly(&sh->slots[k], &sh->slot_s[k]);
  }
  for (int j = 0; j < sh->nb; j++) {
    for (int k = 0; k < dp->nslots; k++)
      in[k] = sh->nb > 1 ? sh->slot_s[k].parts[j] : sh->slots[k].handle;
    o.worker = tg_shard_worker(sh, j);
    TG_TRY(tg_sum_tree_insert(dp->nslots, in, tg_shard_block(sh, sh->grad, j), &o));
  }
  for (int k = 0; sh->nb > 1 && k < dp->nslots; k++) tg_split_join(&sh->slots[k], &sh->slot_s[k]);
  return 0;
}

int tg_shard_member_done(tg_shard *sh, const tg_task_opts *opts, int allreduce, tg_dtype comm) {
  if (++sh->finished < sh->nmem) return 0;
  sh->open = 0;
  TG_TRY(tg_shard_reduce(sh, opts));
  /* then each block over the ranks (hierarchical: within the node first),
   * by its owner, in pieces through buffers kept from step to step */
  if (allreduce && !sh->ar) { /* the first exchange over the ranks */
    sh->ar = calloc((size_t)sh->nb, sizeof *sh->ar);
    if (!sh->ar) return tg_fail(ENOMEM, "shard: out of memory");
    for (int j = 0; j < sh->nb; j++)
      TG_TRY(tg_dist_plan_init(&sh->ar[j], tg_shard_block(sh, sh->grad, j), comm));
  }
  tg_task_opts o = tg_shard_opts(opts, 1);
  for (int j = 0; allreduce && j < sh->nb; j++) {
    o.worker = tg_shard_worker(sh, j);
    TG_TRY(tg_dist_plan_allreduce(&sh->ar[j], &o));
  }
  return 1;
}

/* replica r of device d: its views inactive while the gather writes it */
static int tg_shard_gather_into(tg_tensor *r, tg_split *views, int nb,
                                const starpu_data_handle_t *blocks, const tg_task_opts *o) {
  if (!r->handle) return 0;
  tg_split_join(r, views);
  TG_TRY(tg_gather_rows_insert(nb, blocks, r->handle, o));
  tg_split_readonly(r, views);
  return 0;
}

int tg_shard_gather(tg_shard *sh, const tg_task_opts *opts) {
  starpu_data_handle_t lowp[TG_DP_MAX_DEVICES], f32[TG_DP_MAX_DEVICES];
  for (int j = 0; j < sh->nb; j++) {
    f32[j] = tg_shard_block(sh, sh->value, j);
    lowp[j] = sh->lowp_block[j].handle ? sh->lowp_block[j].handle : f32[j];
  }
  tg_task_opts o = tg_shard_opts(opts, 0);
  for (int d = 0; d < sh->dp->ndev; d++) {
    o.worker = sh->dp->worker[d];
    tg_tensor *r = &sh->replica[d];
    TG_TRY(tg_shard_gather_into(r, &sh->replica_v[d], sh->nb, r->dtype == TG_F32 ? f32 : lowp,
                                &o));
    TG_TRY(tg_shard_gather_into(&sh->replica32[d], &sh->replica32_v[d], sh->nb, f32, &o));
  }
  return 0;
}

/* Acquires (release: releases) in main RAM the blocks of part that hold
 * member i's values. */
static int tg_shard_member_blocks(const tg_shard *sh, tg_shard_part part, int member,
                                  enum starpu_data_access_mode mode, int release) {
  size_t lo = sh->start[member], hi = lo + (size_t)sh->rows[member] * sh->cols[member];
  for (int j = 0; j < sh->nb; j++) {
    int size;
    size_t first = (size_t)tg_split_start((int)sh->numel, sh->nb, j, &size);
    if (first >= hi || first + (size_t)size <= lo) continue;
    starpu_data_handle_t h = tg_shard_block(sh, &sh->master[part], j);
    if (release) starpu_data_release(h);
    else TG_STARPU(starpu_data_acquire(h, mode));
  }
  return 0;
}

int tg_shard_read(const tg_shard *sh, tg_shard_part part, int member, float *dst) {
  TG_TRY(tg_shard_member_blocks(sh, part, member, STARPU_R, 0));
  memcpy(dst, (const float *)sh->master[part].host + sh->start[member],
         (size_t)sh->rows[member] * sh->cols[member] * sizeof(float));
  return tg_shard_member_blocks(sh, part, member, STARPU_R, 1);
}

int tg_shard_write(tg_shard *sh, tg_shard_part part, int member, const float *src) {
  /* RW: the blocks also hold other members' values */
  TG_TRY(tg_shard_member_blocks(sh, part, member, STARPU_RW, 0));
  memcpy((float *)sh->master[part].host + sh->start[member], src,
         (size_t)sh->rows[member] * sh->cols[member] * sizeof(float));
  return tg_shard_member_blocks(sh, part, member, STARPU_RW, 1);
}
