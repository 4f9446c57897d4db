/*
 * taskgrad layer 4: GPT-2 training step as a task graph (the model exactly
 * as llm.c defines it; see gpt_model.h for the parameters).
 *
 * tg_gpt_step() submits forward, backward and AdamW for a batch of B
 * sequences of T tokens split into micro-batches.  Per micro-batch of b
 * sequences (n = b*T rows), per layer:
 *   ln1 = LN(x); qkv = ln1 Wqkv^T + bqkv; a = attention(qkv);
 *   x2 = x + a Wproj^T + bproj; ln2 = LN(x2);
 *   h = gelu(ln2 Wfc^T + bfc); x = x2 + h Wfcproj^T + bfcproj
 * then LN_f and the tied classifier (chunked, no full logits matrix, except
 * when training adds gradients in place, where each micro-batch keeps its
 * (n, Vp) dlogits for a separate dwte GEMM: see graphs/gpt.c).
 * Gradients of the parameters are summed over micro-batches in place
 * (one memory node), with STARPU_REDUX (devices) or in a fixed tree
 * (deterministic; graphs/reduce.h); the attention of one micro-batch is split into several
 * tasks (row blocks of whole sequences, through asynchronous partition
 * plans) so several workers process it at once.  Activations are
 * temporaries released as soon as the backward no longer needs them; the
 * attention tensors are per-(layer, micro-batch) buffers with a home node,
 * reused every step (StarPU 1.3 can only plan partitions of such data).
 */
#ifndef TASKGRAD_GPT_H
#define TASKGRAD_GPT_H

#include "taskgrad/codelets.h"
#include "taskgrad/precision.h"
#include "taskgrad/data.h"
#include "taskgrad/gpt_model.h"
#include "taskgrad/optim.h"
#include "taskgrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TG_GPT_MAX_LAYERS 64

typedef enum tg_data_parallel {
  TG_DP_AUTO = 0,  /* TG_DP_SHARD on 2 or more devices, else TG_DP_REDUX */
  TG_DP_SHARD,     /* micro-batches pinned to devices, gradients reduce-scattered
                      in blocks, AdamW on each block's owner, weights all-gathered
                      (graphs/shard.h) */
  TG_DP_REDUX      /* one copy of everything; the scheduler places every task and
                      StarPU reductions merge the gradients (before sharding) */
} tg_data_parallel;

typedef struct tg_gpt_run_config {
  int B, T;                    /* sequences per batch, tokens per sequence */
  int nmicro;                  /* micro-batches; divides B */
  tg_attention_kind attention; /* naive or chunked */
  int chunk;                   /* attention chunk (default 64) */
  int attn_splits;             /* attention tasks per micro-batch; divides
                                  B / nmicro; 0 = as many as CPU workers */
  int classifier_chunk;        /* classifier rows per chunk (default 256) */
  int classifier_blocks;       /* row blocks of dwte that the split classifier's
                                  increments go to (gpt.c); 0 = by the workers */
  /* mixed precision (optim.h): with bf16 or fp16 the activations, their
   * gradients and the GEMMs' weight operands are 16-bit (weights as copies
   * refreshed by the optimizer), master weights, AdamW state and weight
   * gradients f32 */
  tg_amp_config amp;           /* default fp32 */
  /* how micro-batches on several devices (CUDA GPUs, emulated OpenCL
   * devices) share the step (docs/distributed.md): TG_DP_AUTO shards on 2
   * or more devices and keeps one memory node's in-place sums otherwise */
  tg_data_parallel data_parallel;
  /* the type of the gradient messages between ranks when sharded: TG_F32
   * (default) or TG_BF16 (half the bytes; parallel.h) */
  tg_dtype grad_comm;
  /* activation recompute: 1 keeps only each transformer block's input from
   * the forward and submits the block's forward again (without its output)
   * right before its backward.  Activation memory falls from about 12 C +
   * the attention buffers per layer and row to C, for the block forwards'
   * FLOPs once more (tg_gpt_recompute_flops_per_token); with the same
   * kernels, the results are the same bits (graphs/gpt.c) */
  int recompute;
  /* optimizer offload: 1 runs AdamW on the CPU workers, next to the
   * host-backed f32 master weights and moments (tg_optim.on_cpu), so that
   * a device holds the 16-bit weights and the gradients only; the
   * gradients are then summed in leaves (reduce.h), never STARPU_REDUX.
   * Needs CPU workers; not with the sharded data parallelism */
  int offload_optimizer;
  /* tiled linear layers: each of the four linear layers of a block runs as
   * this many tasks on column tiles of its output (forward) and of its
   * input's gradient (backward-data), codelets/linear.c; the weight
   * gradients stay whole.  Intra-operation parallelism where micro-batches
   * alone leave workers idle.  0 = auto: by the CPU workers per
   * micro-batch, at most 16 (1 with devices, with fused blocks, and up to 4
   * workers where every worker has a micro-batch); 1 = off.
   * Resolved by tg_gpt_create (tg_gpt.run holds the count used) */
  int linear_tiles;
  /* owner placement of the tiles: 1 pins tile j of every tiled layer (and
   * of the classifier) to device j mod devices, a fixed tensor-parallel
   * layout, where 0 leaves the tiles to the scheduler like every other
   * task.  Needs linear_tiles > 1, devices, and not the sharded data
   * parallelism (whose micro-batches are pinned to their devices) */
  int tile_owner;
  /* each linear layer's backward as one task (tg_linear_bwd_insert: the
   * input's gradient, the weight and bias gradients) instead of two: 0 =
   * auto, on with CUDA workers, untiled linear layers and the optimizer on
   * the devices, where a GPU runs the backward as one chain and each task
   * costs it some 19 us besides its kernels; 1 = on (untiled); -1 = off.
   * On CPU workers the two tasks let a weight gradient overlap the layers
   * below it, and with the optimizer offloaded they send each weight
   * gradient to the host as soon as it is made (GPT-3 13B's shape on one
   * simulated H100: 2065 ms a step apart, 2319 fused).  The same bits
   * either way.  Resolved by tg_gpt_create */
  int fused_backward;
  /* with the optimizer offloaded and the micro-batches pinned to 2 or more
   * devices: the gradients summed on the devices by a reduce-scatter (each
   * device adds its micro-batches into a leaf of its own, block j of the
   * sum is formed on device j and goes to the host from there:
   * graphs/reduce.h, tg_sum_begin_scatter) instead of one copy of each
   * gradient passed from device to device.  1 = on, -1 = off, 0 (default)
   * = on where it applies and one layer's f32 gradients take at least
   * TG_GPT_SCATTER_AUTO_BYTES: simulated on 8 H100s it made steps of 113 MB
   * of gradients a layer and more 1.14-1.96x faster, and steps of 28-50 MB
   * from 9% slower to 6% faster, depending on the CPU workers
   * (bench/results/2026-11-28-grad-scatter.md).  In deterministic mode it
   * needs one micro-batch per device, and then has the bits of the
   * deterministic sums (the default stays off otherwise).  tg_gpt_create
   * fails where 1 does not apply. */
  int grad_scatter;
  /* with the reduce-scatter (grad_scatter on): each device's copy of a
   * layer's GEMM weights (16-bit in mixed precision) built from 1/N of it read from the host by
   * each device and the rest from the other devices, a layer ahead of its
   * use, and dropped between the forward and the backward
   * (graphs/gpt_relay.c) instead of every device reading every weight from
   * the host when the layer's first task is ready.  1 = on, -1 = off, 0
   * (default) = where the reduce-scatter is on and one layer's GEMM weights
   * take at least TG_GPT_RELAY_AUTO_BYTES: simulated on 8 H100s the 52B
   * step (1.6 GB a layer) went from 12.71 to 4.86 s and 4 layers of C 4096
   * (403 MB) 1.10x faster, while at C 1344-2048 (43-101 MB) steps went
   * from 8% slower to 1% faster (bench/results/2026-11-28-weight-relay.md).
   * The same bits either way.  tg_gpt_create fails where 1 does not
   * apply. */
  int weight_relay;
  /* each transformer block's forward as one task and its backward as one
   * (tg_fuse_begin, codelets.h: the block's 7 and 5 tasks run by one task,
   * in the same order, so the same bits) instead of a task per operation:
   * 0 = auto, on with CUDA workers, untiled linear layers, one attention
   * task per micro-batch and the optimizer on the devices, where a GPU runs
   * a block as one chain and each task costs it StarPU's time to fetch its
   * buffers and queue it (with recompute, the block's forward submitted
   * again is one task too); 1 = on (needs untiled linear layers and one
   * attention task per micro-batch; tg_gpt_create fails otherwise); -1 =
   * off.  On CPU workers
   * separate tasks let the weight gradients overlap the layers below.
   * Resolved by tg_gpt_create */
  int fused_blocks;
  /* each layer's parameters as one StarPU buffer, and so its gradients,
   * its moments and its 16-bit GEMM weights (tg_tensor_pack, tensor.h:
   * the tensors are views of it), so that a fused block's tasks and the
   * layer's update name 5 buffers instead of about 50 (StarPU's driver
   * time is per buffer); without recompute, untiled and with one
   * attention task, each block's saved activations too (tg_gpt_attn: kept
   * from step to step, host-backed, instead of temporaries), and a step's
   * updates fused across layers (tg_optim.fuse_updates): 0 = auto, on with fused blocks where no plan or
   * reduction splits the tensors (not sharded, the optimizer on the
   * devices, one rank, the gradients summed in place or deterministically);
   * 1 = on wherever that holds (tg_gpt_create fails elsewhere); -1 = off.
   * The same kernels in the same order: the same bits.  Resolved by
   * tg_gpt_create */
  int packed_layers;
} tg_gpt_run_config;

/* run.grad_scatter's default turns the reduce-scatter on from this many
 * bytes of f32 gradients per layer (above). */
#define TG_GPT_SCATTER_AUTO_BYTES ((size_t)80 << 20)
/* run.weight_relay's default relays the weights from this many bytes of
 * one layer's GEMM weights in the compute type (12 C^2 elements: 16-bit
 * C >= 2365, f32 C >= 1673). */
#define TG_GPT_RELAY_AUTO_BYTES ((size_t)128 << 20)

/* Defaults for a batch shape: 1 micro-batch, chunked attention, chunk 64. */
tg_gpt_run_config tg_gpt_run_default(int B, int T);

/* Per (layer, micro-batch) attention buffers; see the note above. */
typedef struct tg_gpt_attn {
  tg_tensor qkv, out, dout, dqkv, state;
  tg_split qkv_s, out_s, dout_s, dqkv_s, state_s;
  /* tiled linear layers (linear_tiles > 1): the MLP's hidden activations
   * (pre- and post-GELU, (b T, 4C)) kept here instead of temporaries, and
   * column plans of the linear layers' outputs (graphs/gpt_tiles.c) */
  tg_tensor fch, fchg;
  tg_split qkv_c, dout_c, fch_c, fchg_c;
  /* packed activations (run.packed_layers, without recompute, untiled, one
   * attention task): every buffer above (fch and fchg too) and the block's
   * other saved activations (its input x, LayerNorm outputs and statistics,
   * x2 = x + attention) and a projection's output are views of `pack`, one
   * StarPU buffer a block's tasks name once; layer 0's set also holds the
   * micro-batch's backward buffers: dL/dx (n, C) from layer to layer,
   * dL/dfch (n, 4C) and a LayerNorm output's gradient (n, C); empty
   * otherwise */
  tg_tensor x, ln1, mean1, rstd1, x2, ln2, mean2, rstd2, proj;
  tg_tensor dres, dfch, dln;
  tg_tensor pack;
} tg_gpt_attn;

typedef struct tg_gpt {
  tg_gpt_config cfg;
  tg_gpt_run_config run;
  /* AdamW (lr per step), its step count and the loss scaler; its
   * parameter set holds every slice of every tensor, by tensor then layer */
  tg_optim optim;
  int nslices;                 /* L for per-layer tensors, 1 otherwise */
  /* [param][layer]: one tensor per layer slice (shape: tg_gpt_param_shape) */
  tg_tensor w[TG_GPT_NPARAMS][TG_GPT_MAX_LAYERS];
  tg_tensor g[TG_GPT_NPARAMS][TG_GPT_MAX_LAYERS]; /* REDUX-enabled */
  tg_tensor m[TG_GPT_NPARAMS][TG_GPT_MAX_LAYERS];
  tg_tensor v[TG_GPT_NPARAMS][TG_GPT_MAX_LAYERS];
  tg_tensor loss;              /* (1, 1): sum over batches of the mean loss */
  int loss_batches;
  struct tg_sum *sums;         /* internal: the gradients' sums of the step
                                  being submitted ([param * MAX_LAYERS + l]) */
  tg_gpt_attn *attn;           /* [layer * nmicro + micro]; with recompute
                                  [micro], shared by the layers */
  /* internal: dwte's row blocks for the split classifier's increments, how
   * many this step (1: none), and each micro-batch's dres kept for the
   * embedding backward, which waits until the blocks are joined */
  tg_split dwte_split;
  int dwte_blocks;
  tg_tensor *embed_dres;
  /* mixed precision: 16-bit copies of the GEMM weights (qkvw, attprojw,
   * fcw, fcprojw, wte; empty otherwise) */
  tg_tensor wl[TG_GPT_NPARAMS][TG_GPT_MAX_LAYERS];
  /* internal, sharded data parallelism (graphs/shard.h): the devices, the
   * buckets, and where each tensor is ([param * MAX_LAYERS + l]: bucket *
   * TG_SHARD_MAX_MEMBERS + member); NULL otherwise.  dp alone (no shards):
   * micro-batches pinned to devices, the optimizer offloaded */
  struct tg_gpt_tilebufs *tilebufs; /* internal, tiled: [micro] outputs */
  struct tg_dp *dp;
  struct tg_shard *shards;
  int nshards;
  int *shard_of;
  /* internal: the reduce-scatter's leaves and plans (run.grad_scatter) */
  struct tg_gpt_scatter *scatter;
  /* internal: the weight relay's shards and replicas (run.weight_relay) */
  struct tg_gpt_relay *relay;
  /* run.packed_layers: layer l's w, g, m, v and wl tensors are views of
   * packs[0..4][l] (empty otherwise) */
  tg_tensor packs[5][TG_GPT_MAX_LAYERS];
} tg_gpt;

/* Registers the parameters (llm.c layout, tg_gpt_param_sizes() floats;
 * NULL: zeros, for a simulation, where no kernel reads them), zeroed
 * gradients and AdamW state.  opt->kind must be TG_OPT_ADAMW. */
int tg_gpt_create(tg_gpt *g, const tg_gpt_config *cfg, const float *params,
                  const tg_gpt_run_config *run, const tg_optimizer_config *opt);
/* Writes n floats into dst: elements [off, off + n) of parameter tensor
 * `param` (tg_gpt_param) in llm.c's layout; 0, or a negative errno with a
 * message (tg_fail), which makes tg_gpt_create_from fail. */
typedef int (*tg_gpt_param_source)(void *ctx, int param, size_t off, float *dst, size_t n);
/* tg_gpt_create with the parameters from `source`, one layer's slice at a
 * time, written straight into the model's own buffers: no second whole
 * copy of the model in host memory (e.g. tg_gpt_init_param_range, or a
 * file read piece by piece).  source NULL: zeros. */
int tg_gpt_create_from(tg_gpt *g, const tg_gpt_config *cfg, tg_gpt_param_source source,
                       void *ctx, const tg_gpt_run_config *run,
                       const tg_optimizer_config *opt);
void tg_gpt_destroy(tg_gpt *g);
/* How the classifier's gradient is formed in a training step: 0 fused (one
 * task adds into dwte), else split, its dwte increments in that many row
 * blocks of dwte (1: the whole). */
int tg_gpt_classifier_blocks(const tg_gpt *g);
/* The vocabulary tiles of the training classifier (with tiled linear
 * layers in f32: the linear tile count), or 0 when it is not tiled. */
int tg_gpt_classifier_tiles(const tg_gpt *g);

/* Zeroes the gradients, then forward and backward of every micro-batch;
 * the gradients are then those of the batch-mean loss. */
int tg_gpt_forward_backward(tg_gpt *g, const tg_batch *batch);
/* AdamW on every parameter tensor with this step's learning rate. */
int tg_gpt_update(tg_gpt *g, float lr);
int tg_gpt_step(tg_gpt *g, const tg_batch *batch, float lr);
/* Forward and loss only (validation). */
int tg_gpt_evaluate(tg_gpt *g, const tg_batch *batch);
/* Mean loss per batch since the last reset (waits for it). */
int tg_gpt_loss(tg_gpt *g, double *mean_loss, int reset);

/* Logits (n, Vp) of b = n / T sequences of T tokens (tokens: (n, 1) int32
 * host tensor), written to `logits` (n * Vp floats); waits for them. */
int tg_gpt_logits(tg_gpt *g, const tg_tensor *tokens, int T, float *logits);
/* Copies parameters or gradients out in llm.c's layout (waits). */
/* The devices a sharded model spreads over (run.data_parallel ==
 * TG_DP_SHARD after tg_gpt_create), or 0. */
int tg_gpt_shard_devices(const tg_gpt *g);
/* The devices whose micro-batches' gradients are reduce-scattered
 * (run.grad_scatter), or 0. */
int tg_gpt_scatter_devices(const tg_gpt *g);
/* The devices whose 16-bit weights are relayed (run.weight_relay), or 0. */
int tg_gpt_relay_devices(const tg_gpt *g);
/* Under StarPU-MPI: every rank's parameters become rank 0's (block by
 * block when sharded), then the 16-bit copies and replicas follow.
 * Asynchronous; a no-op with one rank. */
int tg_gpt_broadcast_params(tg_gpt *g);
int tg_gpt_read_params(tg_gpt *g, float *params);
int tg_gpt_read_grads(tg_gpt *g, float *grads);
/* The training state: parameters, AdamW first and second moments (each
 * tg_gpt_param_sizes() floats in llm.c's layout; NULL skips one) and the
 * optimizer step counter (bias correction).  Reading waits for the tasks
 * writing them; writing waits for those reading them, and the next update
 * continues from `step` (checkpoint/resume). */
int tg_gpt_read_state(tg_gpt *g, float *params, float *m, float *v, int *step);
int tg_gpt_write_state(tg_gpt *g, const float *params, const float *m, const float *v,
                       int step);
/* The same slice by slice, so that a caller streaming a checkpoint never
 * holds the model twice: layer l's slice of tensor p (l = 0 for the global
 * tensors), kind TG_GPT_STATE_* (the checkpoint's record kinds first;
 * gradients are read only).  After writing slices, tg_gpt_state_written
 * sets the optimizer step and, when parameters were written (params 1),
 * refreshes their 16-bit copies and replicas. */
enum { TG_GPT_STATE_VALUE, TG_GPT_STATE_M, TG_GPT_STATE_V, TG_GPT_STATE_GRAD };
int tg_gpt_read_slice(tg_gpt *g, int kind, tg_gpt_param p, int l, float *dst);
int tg_gpt_write_slice(tg_gpt *g, int kind, tg_gpt_param p, int l, const float *src);
int tg_gpt_state_written(tg_gpt *g, int params, int step);

/* Bytes StarPU itself allocates (and counts against STARPU_LIMIT_*_MEM)
 * during a step, at most: every micro-batch's activation temporaries in
 * flight, the backward's transient ones, one gradient reduction copy per
 * worker when gradients are reduced with STARPU_REDUX or deterministic
 * leaves (none when they add in place: CPU workers only), and each worker's
 * attention and classifier scratch (or, adding in place in f32, every
 * micro-batch's dlogits); with recompute, the block inputs and one block's
 * activations per micro-batch.  Call it after tg_init.  The
 * parameters, optimizer state, batches and attention buffers are the
 * application's memory, not counted.  See tg_mlp_managed_bytes. */
size_t tg_gpt_managed_bytes(const tg_gpt_config *cfg, const tg_gpt_run_config *run,
                            int nworkers);

/* Bytes one device holds when a whole step runs there with nothing evicted
 * (one copy of everything: the unsharded case): the model's state (f32
 * parameters, gradients and AdamW moments, 16-bit copies; offloaded, the
 * weights the GEMMs read and the gradients), the attention
 * buffers and tg_gpt_managed_bytes of one worker.  An estimate for choosing
 * recompute and offload, not a guarantee: StarPU evicts host-backed data
 * when a device is full. */
size_t tg_gpt_device_bytes(const tg_gpt_config *cfg, const tg_gpt_run_config *run);
/* The host memory that packed activations (run.packed_layers without
 * recompute: tg_gpt_attn's pack) take beyond the attention buffers that
 * tg_gpt_device_bytes counts as the application's: the saved activations
 * and backward buffers, which are temporaries (tg_gpt_managed_bytes)
 * otherwise.  0 when they are not packed. */
size_t tg_gpt_packed_activation_bytes(const tg_gpt *g);

/* llm.c's FLOP count per token: 6 N + 6 L C T (N parameters). */
double tg_gpt_flops_per_token(const tg_gpt_config *cfg, int T);
/* What activation recompute adds to it per token: each block's forward
 * again, less its last GEMM (fcproj), whose output the backward does not
 * need: 2 x 8 C^2 per layer for the GEMMs and 2 L C T for the attention
 * (llm.c counts 6 L C T for its forward and backward). */
double tg_gpt_recompute_flops_per_token(const tg_gpt_config *cfg, int T);

#ifdef __cplusplus
}
#endif
#endif
