/*
 * Sharded data parallelism over the devices of a node (graph builders,
 * layer 4): ZeRO stage 1 in StarPU's terms.  docs/distributed.md has the
 * picture and the byte formula; this is the layout.
 *
 * With N >= 2 devices (CUDA GPUs, or emulated OpenCL devices), each
 * micro-batch runs whole on one device (micro i on device i * N / M, its
 * tasks pinned to that device's worker).  The parameters are grouped into
 * buckets (a GPT layer's GEMM weights, its LayerNorm and bias vectors, ...):
 * a bucket's tensors lie end to end in flat buffers, so that its exchange
 * is one task per block and one copy per pair of devices, whatever the
 * number of tensors in it.  Each bucket is cut into min(N, size) contiguous
 * blocks, block j owned by device j.
 * What lives where:
 *  - every device: its replica of each bucket, in the dtype its readers
 *    take (the compute dtype for GEMM weights, f32 for the others), homed on
 *    the device; tasks read their tensor through a view (a partition plan
 *    of the replica into its member tensors);
 *  - every gradient "slot": a flat f32 buffer per bucket homed on its
 *    device, seen by the backward tasks through member views.  A slot per
 *    device (micro-batches on one device add into it in turn), or,
 *    deterministic, a slot per micro-batch;
 *  - the owner of a block: that block of the f32 master weights, of the
 *    AdamW moments and of the summed gradient (static block splits of flat
 *    host tensors, so StarPU keeps each block where its tasks run), and in
 *    16-bit runs the block's 16-bit copy after its update.
 * The step:
 *  1. forward and backward of each micro-batch on its device, gradients into
 *     its slot's views;
 *  2. per bucket, once the last contribution of its last member is
 *     submitted: the reduce-scatter, one tg_sum_tree task per block on the
 *     block's owner, summing that block of every slot in the fixed midpoint
 *     tree (StarPU moves each slot's block from its device to the owner, and
 *     nothing else);
 *  3. AdamW per block on its owner (one task for all the bucket's tensors);
 *  4. the all-gather: one tg_gather_rows task per device and replica, which
 *     reads the N updated blocks (StarPU copies the N - 1 remote ones).
 * The slots switch between their member views (backward) and their blocks
 * (exchange) with partition plans, and the replicas between their views
 * (read) and the whole (gather): StarPU 1.3 runs a plan's switches on the
 * data's home node, so slots and replicas are homed on their device
 * (tg_tensor_alloc_on_node) and the switches move nothing.
 */
#ifndef TASKGRAD_GRAPH_SHARD_H
#define TASKGRAD_GRAPH_SHARD_H

#include "taskgrad/codelets.h"
#include "taskgrad/parallel.h"
#include "taskgrad/tensor.h"

#define TG_DP_MAX_DEVICES 16

/* The devices of a run and how micro-batches map onto them. */
typedef struct tg_dp {
  int ndev;
  int worker[TG_DP_MAX_DEVICES];   /* the worker a device's tasks are pinned to */
  unsigned node[TG_DP_MAX_DEVICES];
  int nmicro;
  int nslots;                      /* ndev, or nmicro when deterministic */
  tg_dtype compute;                /* TG_F32, or the 16-bit type of the GEMMs */
} tg_dp;

/* The accelerator devices StarPU started (memory nodes with a CUDA or
 * OpenCL worker), in memory-node order: how many, up to max. */
int tg_dp_count_devices(void);
/* The same scan: device k's first worker and memory node in worker[k] and
 * node[k] (either may be NULL), k < max; returns how many devices. */
int tg_dp_scan(int *worker, unsigned *node, int max);
/* The layout for nmicro micro-batches: -EINVAL with a message when there
 * are fewer than 2 devices or fewer micro-batches than devices. */
int tg_dp_init(tg_dp *dp, int nmicro, tg_dtype compute);
int tg_dp_device(const tg_dp *dp, int micro);
int tg_dp_slot(const tg_dp *dp, int micro);
/* The device gradient slot `slot` lives on. */
int tg_dp_slot_device(const tg_dp *dp, int slot);

/* Which replicas a bucket needs. */
enum { TG_SHARD_READ_COMPUTE = 1, TG_SHARD_READ_F32 = 2 };

/* A bucket's master tensors, for tg_shard_read and tg_shard_write. */
typedef enum { TG_SHARD_VALUE, TG_SHARD_GRAD, TG_SHARD_M, TG_SHARD_V } tg_shard_part;

#define TG_SHARD_MAX_MEMBERS 64

/* One bucket: nmem parameter tensors laid end to end in flat (numel, 1)
 * buffers, exchanged and updated as one. */
typedef struct tg_shard {
  const tg_dp *dp;
  int nb;                                /* blocks: min(dp->ndev, numel) */
  int owner[TG_DP_MAX_DEVICES];          /* device of block j */
  int nmem;                              /* member tensors */
  int rows[TG_SHARD_MAX_MEMBERS], cols[TG_SHARD_MAX_MEMBERS];
  size_t start[TG_SHARD_MAX_MEMBERS];    /* first element of member i */
  size_t numel;
  tg_tensor master[4];                   /* value, grad, m, v: flat f32 host tensors */
  tg_tensor *value, *grad, *m, *v;       /* &master[TG_SHARD_*] */
  tg_split master_s[4];                  /* their static block splits (nb > 1) */
  tg_tensor *slots;                      /* [dp->nslots] f32, homed on their device */
  tg_split *slot_s;                      /* [dp->nslots] block plans (nb > 1) */
  tg_split *slot_v;                      /* [dp->nslots] member view plans */
  tg_tensor *views;                      /* [nmem * nslots]: member i's view of slot k at
                                            i * nslots + k (handles only) */
  tg_tensor replica[TG_DP_MAX_DEVICES];  /* compute-dtype (or f32) copy per device */
  tg_split replica_v[TG_DP_MAX_DEVICES];
  tg_tensor replica32[TG_DP_MAX_DEVICES]; /* 16-bit runs with f32 readers too */
  tg_split replica32_v[TG_DP_MAX_DEVICES];
  tg_tensor lowp_block[TG_DP_MAX_DEVICES]; /* 16-bit replicas: block j after its update */
  tg_dist_plan *ar;                      /* [nb] over the ranks (allocated at the first
                                            exchange, with more than one rank) */
  int open;                              /* the slots' views are active */
  int finished;                          /* members whose sums this step finished */
  char name[32];                         /* the caller's: in task names */
  int rank;                              /* the caller's: its update's critical-path rank */
} tg_shard;

/* A bucket of nmem tensors (values: host tensors that hold their initial
 * values; readers: TG_SHARD_READ_*).  The values are copied: the bucket's
 * master is what the graph reads and updates from now on. */
int tg_shard_create(tg_shard *sh, const tg_dp *dp, int nmem, tg_tensor *const *values,
                    int readers);
void tg_shard_destroy(tg_shard *sh);
/* The handle of member i that device dev's tasks read: its view of the
 * device's replica (f32 one when f32, for 16-bit runs). */
starpu_data_handle_t tg_shard_weight(const tg_shard *sh, int member, int dev, int f32);
/* The views of member i of the nslots slots (tg_sum's leaves). */
tg_tensor *tg_shard_member_slots(tg_shard *sh, int member);
/* Makes the slots' member views writable for this step's contributions
 * (idempotent until the exchange). */
void tg_shard_open(tg_shard *sh);
/* Block j's handle of the master value, gradient, m or v (the wholes when
 * nb == 1). */
starpu_data_handle_t tg_shard_block(const tg_shard *sh, const tg_tensor *t, int j);
/* The worker that runs block j's tasks. */
int tg_shard_worker(const tg_shard *sh, int j);
/* Member i's sum is complete: after the last member, the reduce-scatter of
 * the slots into the gradient's blocks (opts: priority and name; the worker
 * is the owner's), then, allreduce, each block over the ranks in `comm`
 * messages.  Returns 1 when it exchanged. */
int tg_shard_member_done(tg_shard *sh, const tg_task_opts *opts, int allreduce, tg_dtype comm);
/* The all-gather of the updated blocks into the replicas. */
int tg_shard_gather(tg_shard *sh, const tg_task_opts *opts);
/* The 16-bit block of j after an update (16-bit replicas), or NULL. */
starpu_data_handle_t tg_shard_lowp_block(const tg_shard *sh, int j);
/* Reads or writes member i of a master tensor (value, grad, m or v). */
int tg_shard_read(const tg_shard *sh, tg_shard_part part, int member, float *dst);
int tg_shard_write(tg_shard *sh, tg_shard_part part, int member, const float *src);

#endif
