/*
 * Sharded data parallelism over a node's devices (see shard.h).  Only
 * insert wrappers, tensor functions and StarPU's worker queries here.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shard.h"
#include "taskgrad/parallel.h"

/* device d: the memory node of a CUDA or OpenCL worker, and its first worker */
static int tg_dp_scan(int *worker, unsigned *node, int max) {
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

static int tg_shard_layout(tg_shard *sh, tg_dp *dp, int readers) {
  const tg_tensor *v = sh->value;
  sh->nb = readers ? (v->rows < dp->ndev ? v->rows : dp->ndev) : 1;
  if (sh->nb > 1 || readers) {
    for (int j = 0; j < sh->nb; j++) sh->owner[j] = j;
    return 0;
  }
  int best = 0; /* a whole tensor: to the device that owns the fewest bytes */
  for (int d = 1; d < dp->ndev; d++)
    if (dp->owned[d] < dp->owned[best]) best = d;
  sh->owner[0] = best;
  dp->owned[best] += (double)tg_tensor_numel(v) * sizeof(float);
  return 0;
}

int tg_shard_create(tg_shard *sh, tg_dp *dp, tg_tensor *value, tg_tensor *grad, tg_tensor *m,
                    tg_tensor *v, int readers) {
  memset(sh, 0, sizeof *sh);
  sh->dp = dp;
  sh->value = value;
  sh->grad = grad;
  sh->m = m;
  sh->v = v;
  TG_TRY(tg_shard_layout(sh, dp, readers));
  int rows = value->rows, cols = value->cols;
  if (sh->nb > 1) {
    TG_TRY(tg_tensor_split_static(value, sh->nb, &sh->value_s));
    TG_TRY(tg_tensor_split_static(grad, sh->nb, &sh->grad_s));
    TG_TRY(tg_tensor_split_static(m, sh->nb, &sh->m_s));
    if (v) TG_TRY(tg_tensor_split_static(v, sh->nb, &sh->v_s));
  }
  sh->slots = calloc((size_t)dp->nslots, sizeof *sh->slots);
  sh->slot_s = calloc((size_t)dp->nslots, sizeof *sh->slot_s);
  if (!sh->slots || !sh->slot_s) return tg_fail(ENOMEM, "sharding: out of memory");
  for (int k = 0; k < dp->nslots; k++) {
    TG_TRY(tg_tensor_alloc_on_node(&sh->slots[k], rows, cols, TG_F32,
                                   dp->node[tg_dp_slot_device(dp, k)]));
    if (sh->nb > 1) TG_TRY(tg_split_plan(&sh->slots[k], sh->nb, &sh->slot_s[k]));
  }
  int lowp = dp->compute != TG_F32;
  for (int d = 0; readers && d < dp->ndev; d++) {
    tg_dtype t = readers & TG_SHARD_READ_COMPUTE ? dp->compute : TG_F32;
    TG_TRY(tg_tensor_alloc_on_node(&sh->replica[d], rows, cols, t, dp->node[d]));
    if (lowp && (readers & TG_SHARD_READ_COMPUTE) && (readers & TG_SHARD_READ_F32))
      TG_TRY(tg_tensor_alloc_on_node(&sh->replica32[d], rows, cols, TG_F32, dp->node[d]));
  }
  for (int j = 0; lowp && readers & TG_SHARD_READ_COMPUTE && j < sh->nb; j++) {
    int size;
    tg_split_start(rows, sh->nb, j, &size);
    TG_TRY(tg_tensor_temp(&sh->lowp_block[j], size, cols, dp->compute));
  }
  return 0;
}

void tg_shard_destroy(tg_shard *sh) {
  for (int k = 0; sh->slots && k < sh->dp->nslots; k++) {
    if (sh->slot_s) tg_split_free(&sh->slots[k], &sh->slot_s[k]);
    tg_tensor_free(&sh->slots[k]);
  }
  free(sh->slots);
  free(sh->slot_s);
  sh->slots = NULL;
  sh->slot_s = NULL;
  for (int d = 0; d < TG_DP_MAX_DEVICES; d++) {
    tg_tensor_free(&sh->replica[d]);
    tg_tensor_free(&sh->replica32[d]);
    tg_tensor_release(&sh->lowp_block[d]);
  }
  if (sh->nb > 1) {
    tg_split_free(sh->value, &sh->value_s);
    tg_split_free(sh->grad, &sh->grad_s);
    tg_split_free(sh->m, &sh->m_s);
    if (sh->v) tg_split_free(sh->v, &sh->v_s);
  }
  sh->nb = 0;
}

starpu_data_handle_t tg_shard_weight(const tg_shard *sh, int dev, int f32) {
  if (!sh->replica[dev].handle) return sh->value->handle;
  if (f32 && sh->replica32[dev].handle) return sh->replica32[dev].handle;
  return sh->replica[dev].handle;
}

static const tg_split *tg_shard_split_of(const tg_shard *sh, const tg_tensor *t) {
  if (t == sh->value) return &sh->value_s;
  if (t == sh->grad) return &sh->grad_s;
  if (t == sh->m) return &sh->m_s;
  return &sh->v_s;
}

starpu_data_handle_t tg_shard_block(const tg_shard *sh, const tg_tensor *t, int j) {
  if (!t) return NULL;
  return sh->nb > 1 ? tg_shard_split_of(sh, t)->parts[j] : t->handle;
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

int tg_shard_reduce(tg_shard *sh, const tg_task_opts *opts) {
  const tg_dp *dp = sh->dp;
  starpu_data_handle_t in[TG_EXCHANGE_MAX];
  tg_task_opts o = tg_shard_opts(opts, 1);
  for (int k = 0; sh->nb > 1 && k < dp->nslots; k++) tg_split_readonly(&sh->slots[k], &sh->slot_s[k]);
  for (int j = 0; j < sh->nb; j++) {
    for (int k = 0; k < dp->nslots; k++)
      in[k] = sh->nb > 1 ? sh->slot_s[k].parts[j] : sh->slots[k].handle;
    o.worker = tg_shard_worker(sh, j);
    TG_TRY(tg_sum_tree_insert(dp->nslots, in, tg_shard_block(sh, sh->grad, j), &o));
  }
  for (int k = 0; sh->nb > 1 && k < dp->nslots; k++) tg_split_join(&sh->slots[k], &sh->slot_s[k]);
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
    if (sh->replica[d].handle)
      TG_TRY(tg_gather_rows_insert(sh->nb, sh->replica[d].dtype == TG_F32 ? f32 : lowp,
                                   sh->replica[d].handle, &o));
    if (sh->replica32[d].handle)
      TG_TRY(tg_gather_rows_insert(sh->nb, f32, sh->replica32[d].handle, &o));
  }
  return 0;
}

int tg_shard_read(const tg_shard *sh, const tg_tensor *t, void *dst) {
  if (sh->nb > 1) return tg_tensor_read_split(t, tg_shard_split_of(sh, t), dst);
  return tg_tensor_read(t, dst);
}

int tg_shard_write(tg_shard *sh, tg_tensor *t, const void *src) {
  if (sh->nb > 1) return tg_tensor_write_split(t, tg_shard_split_of(sh, t), src);
  return tg_tensor_write(t, src);
}
