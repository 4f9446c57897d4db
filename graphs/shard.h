/*
 * Sharded data parallelism over the devices of a node (graph builders,
 * layer 4): ZeRO stage 1 in StarPU's terms.  docs/distributed.md has the
 * picture and the byte formula; this is the layout.
 *
 * With N >= 2 devices (CUDA GPUs, or emulated OpenCL devices), each
 * micro-batch runs whole on one device (micro i on device i * N / M, its
 * tasks pinned to that device's worker), and each parameter tensor is
 * either
 *  - sharded (what GEMMs or the embeddings read: the graph asks for
 *    replicas): min(N, rows) row blocks, block j owned by device j; or
 *  - whole (LayerNorm and bias vectors): owned by one device, the one that
 *    owns the fewest bytes so far, and read by all from its master.
 * What lives where:
 *  - every device: its own replica of each sharded weight, in the dtype its
 *    readers take (the compute dtype for GEMMs; f32 for the embeddings),
 *    registered with that device's memory as home; the whole tensors are
 *    read straight from their master (StarPU copies them where needed);
 *  - every gradient "slot": a full f32 gradient buffer homed on its device.
 *    A slot per device (micro-batches on one device add into it in turn),
 *    or, deterministic, a slot per micro-batch;
 *  - the owner of a block: that block of the f32 master weights, of the
 *    AdamW moments and of the summed gradient (static row splits of the host
 *    tensors, so StarPU keeps each block where its tasks run), and in 16-bit
 *    runs the block's 16-bit copy after its update.
 * The step:
 *  1. forward and backward of each micro-batch on its device, gradients into
 *     its slot;
 *  2. per parameter, once its last contribution is submitted: the
 *     reduce-scatter, one tg_sum_tree task per block on the block's owner,
 *     summing that block of every slot in the fixed midpoint tree (StarPU
 *     moves each slot's block from its device to the owner, and nothing else);
 *  3. AdamW per block on its owner;
 *  4. the all-gather: one tg_gather_rows task per device and sharded tensor,
 *     which reads the N updated blocks (StarPU copies the N - 1 remote ones)
 *     and writes the device's replica.
 * Each slot is split into its blocks with a partition plan: StarPU 1.3 runs
 * a plan's switches on the data's home node, so slots are homed on their
 * device (tg_tensor_alloc_on_node) and the switches move nothing.
 */
#ifndef TASKGRAD_GRAPH_SHARD_H
#define TASKGRAD_GRAPH_SHARD_H

#include "taskgrad/codelets.h"
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
  double owned[TG_DP_MAX_DEVICES]; /* bytes of whole tensors owned (balance) */
} tg_dp;

/* The accelerator devices StarPU started (memory nodes with a CUDA or
 * OpenCL worker), in memory-node order: how many, up to max. */
int tg_dp_count_devices(void);
/* The layout for nmicro micro-batches: -EINVAL with a message when there
 * are fewer than 2 devices or fewer micro-batches than devices. */
int tg_dp_init(tg_dp *dp, int nmicro, tg_dtype compute);
int tg_dp_device(const tg_dp *dp, int micro);
int tg_dp_slot(const tg_dp *dp, int micro);
/* The device gradient slot `slot` lives on. */
int tg_dp_slot_device(const tg_dp *dp, int slot);

/* Which replicas a sharded parameter needs. */
enum { TG_SHARD_READ_COMPUTE = 1, TG_SHARD_READ_F32 = 2 };

/* One parameter tensor's sharding. */
typedef struct tg_shard {
  const tg_dp *dp;
  int nb;                               /* blocks: 1 (whole) or dp->ndev */
  int owner[TG_DP_MAX_DEVICES];         /* device of block j */
  tg_tensor *value, *grad, *m, *v;      /* the model's host tensors */
  tg_split value_s, grad_s, m_s, v_s;   /* their static row splits (nb > 1) */
  tg_tensor *slots;                     /* [dp->nslots] f32, homed on their device */
  tg_split *slot_s;                     /* [dp->nslots] plans (nb > 1) */
  tg_tensor replica[TG_DP_MAX_DEVICES]; /* nb > 1: compute-dtype copy per device */
  tg_tensor replica32[TG_DP_MAX_DEVICES]; /* nb > 1, 16-bit runs, f32 readers */
  tg_tensor lowp_block[TG_DP_MAX_DEVICES]; /* nb > 1, 16-bit runs: updated block */
} tg_shard;

/* Shards a parameter (its host tensors must hold their values and no task
 * may have touched them yet); readers: TG_SHARD_READ_* of the graph. */
int tg_shard_create(tg_shard *sh, tg_dp *dp, tg_tensor *value, tg_tensor *grad, tg_tensor *m,
                    tg_tensor *v, int readers);
void tg_shard_destroy(tg_shard *sh);
/* The handle device dev's tasks read: its replica (f32 one when f32, for
 * 16-bit runs), or the master when the tensor is whole. */
starpu_data_handle_t tg_shard_weight(const tg_shard *sh, int dev, int f32);
/* Block j's handle of the master value, gradient, m, v (the wholes when
 * nb == 1). */
starpu_data_handle_t tg_shard_block(const tg_shard *sh, const tg_tensor *t, int j);
/* The worker that runs block j's tasks. */
int tg_shard_worker(const tg_shard *sh, int j);
/* Steps 2 and 4 above: the reduce-scatter of the slots into the gradient's
 * blocks (opts: priority and name; the worker is the owner's), and the
 * all-gather of the updated blocks into the replicas. */
int tg_shard_reduce(tg_shard *sh, const tg_task_opts *opts);
int tg_shard_gather(tg_shard *sh, const tg_task_opts *opts);
/* The 16-bit block of j after an update (16-bit runs), or NULL. */
starpu_data_handle_t tg_shard_lowp_block(const tg_shard *sh, int j);
/* Reads or writes the whole host tensor t (value, grad, m or v). */
int tg_shard_read(const tg_shard *sh, const tg_tensor *t, void *dst);
int tg_shard_write(tg_shard *sh, tg_tensor *t, const void *src);

#endif
