/*
 * GPT-2 training step as a StarPU task graph (see include/taskgrad/gpt.h for
 * the model and the overall design).
 *
 * Residual stream gradient: one (n, C) temporary `dres` per micro-batch
 * carries dL/dx down the layers.  The skip connections pass it unchanged,
 * and each LayerNorm backward adds its branch's contribution into it (the
 * layernorm codelet accumulates into dX), so no copies are needed: StarPU's
 * sequential consistency orders the reads of dres (weight gradients, data
 * gradients) before the LayerNorm's read-modify-write.
 *
 * Lifetimes: every forward activation of a layer is a temporary, released
 * right after the last backward task that reads it is submitted.  The
 * attention tensors of a (layer, micro-batch) are persistent host-homed
 * buffers whose row-block partition plans (by whole sequences) let the
 * attention run as several tasks; the state (lse or probabilities) is
 * partitioned once for good, since only its blocks are ever used
 * (gpt_attention.c).  The update is the shared training-step core's
 * (optim.h): the parameters are registered with it at creation.
 *
 * Activation recompute (run.recompute): the forward keeps only each block's
 * input x and drops the rest as soon as its last forward reader is
 * submitted; before block l's backward, its forward is submitted again from
 * x, less the fcproj GEMM and residual whose output the backward never
 * reads, into one set of attention buffers per micro-batch (shared by the
 * layers, which take turns in them through StarPU's sequential
 * consistency).  The same tasks on the same inputs: with deterministic
 * kernels, the same bits as without (tests/test_recompute.sh).  The last
 * block keeps its activations: its backward follows at once.
 *
 * The classifier is split in two tasks when gradients add in place
 * (tg_gpt_classifier_split): the fused task would hold dwte (TG_COMMUTE)
 * for all of its run, so the micro-batches' classifiers, a large share of a
 * GPT-2 124M step, ran one at a time while the other worker idled (the
 * step before and after: bench/results/2026-11-24-cpu-perf.md, issue 16's
 * classifier split).
 * For the same reason the loss is summed in leaves (reduce.h), never in
 * place.
 *
 * This file calls only insert wrappers and tensor functions (layer 4).
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph_common.h"
#include "reduce.h"
#include "gpt_internal.h"
#include "shard.h"
#include "taskgrad/parallel.h"

tg_gpt_run_config tg_gpt_run_default(int B, int T) {
  return (tg_gpt_run_config){.B = B, .T = T, .nmicro = 1, .attention = TG_ATTN_CHUNKED,
                             .chunk = 64, .attn_splits = 0, .classifier_chunk = 256,
                             .amp = {.precision = TG_PREC_FP32, .loss_scaling = 0,
                                     .loss_scale = TG_LOSS_SCALE_DEFAULT,
                                     .loss_scale_window = TG_LOSS_SCALE_WINDOW}};
}

/* Whether the classifier may run split (tg_gpt_classifier_split): one
 * memory node, whose workers can run several micro-batches' classifiers at
 * once, and whose gradients' sums add in place (TG_COMMUTE; reduce.c);
 * known outside a step too.  One GPU also sums in place, but runs one task
 * at a time: the fused form there. */
static int tg_gpt_split_node(void) {
  return starpu_memory_nodes_get_count() == 1 && !tg_deterministic();
}

size_t tg_gpt_managed_bytes(const tg_gpt_config *cfg, const tg_gpt_run_config *run,
                            int nworkers) {
  size_t sizes[TG_GPT_NPARAMS];
  size_t N = tg_gpt_param_sizes(cfg, sizes), C = (size_t)cfg->channels;
  size_t rows = (size_t)run->B * run->T, L = (size_t)cfg->num_layers;
  size_t w = nworkers > 0 ? (size_t)nworkers : 1;
  /* kept per layer: x, ln1, x2, ln2 (C each), fch, fchg (4C each), mean and
   * rstd twice; the final x, lnf, dlnf and the backward's transients (dres,
   * 4C, C) */
  size_t acts = rows * (L * (12 * C + 4) + 9 * C + 2);
  if (run->recompute) /* x per layer, one block's set per micro-batch in flight */
    acts = rows * (L * C + (12 * C + 4) + 9 * C + 2);
  int chunk = run->classifier_chunk < run->B * run->T ? run->classifier_chunk : run->B * run->T;
  /* the classifier's chunk of logits per worker, or, split (gradients added
   * in place, f32), every micro-batch's whole dlogits at once at worst */
  int split = tg_gpt_split_node() && !tg_precision_lowp(run->amp.precision);
  size_t dlogits = split ? rows * (size_t)cfg->padded_vocab_size * sizeof(float) : 0;
  if (run->linear_tiles > 1) { /* gpt_tiles.c: per micro-batch proj, 2 dln, 2 dfch (11 C),
                                * and in f32 its dlogits, stats and dlnf, kept */
    acts += rows * 11 * C;
    if (!tg_precision_lowp(run->amp.precision))
      dlogits = rows * ((size_t)cfg->padded_vocab_size + 2 * (size_t)run->linear_tiles + C) *
                sizeof(float);
  }
  size_t scratch = (split ? 0 : (size_t)chunk * cfg->vocab_size * sizeof(float)) +
                   tg_attention_scratch_bytes(run->attention, run->B / run->nmicro, run->T,
                                              cfg->channels, cfg->num_heads, run->chunk);
  if (tg_precision_lowp(run->amp.precision)) {
    /* 16-bit activations (the statistics stay f32: no matter), and per
     * worker the adapter's f32 copies of the largest task's 16-bit buffers:
     * the classifier's lnf, dlnf and wte, or the MLP block's X, Z, H, W */
    size_t mrows = rows / (size_t)run->nmicro, Vp = (size_t)cfg->padded_vocab_size;
    size_t cls = 2 * mrows * C + Vp * C, mlp = mrows * 9 * C + 4 * C * C;
    scratch += sizeof(float) * (cls > mlp ? cls : mlp);
    /* bf16 P and dS (attention_gemm_lowp.cu; cudnn's fallback too) */
    if (run->attention == TG_ATTN_GEMM || run->attention == TG_ATTN_CUDNN)
      scratch += sizeof(float) * (size_t)cfg->num_heads * run->T * run->T;
    return sizeof(float) * N * tg_sum_buffers(nworkers) + 2 * acts + scratch * w;
  }
  return sizeof(float) * (acts + N * tg_sum_buffers(nworkers)) + dlogits + scratch * w;
}

size_t tg_gpt_device_bytes(const tg_gpt_config *cfg, const tg_gpt_run_config *run) {
  size_t sizes[TG_GPT_NPARAMS];
  size_t N = tg_gpt_param_sizes(cfg, sizes), C = (size_t)cfg->channels;
  size_t lowp = tg_precision_lowp(run->amp.precision) ? 2 : 0;
  size_t act = lowp ? 2 : 4, rows = (size_t)run->B * run->T;
  /* qkv, out, dout, dqkv: 8 C per row; the state: NH floats (chunked, gemm)
   * or T per head (naive) */
  size_t state = run->attention == TG_ATTN_NAIVE ? (size_t)cfg->num_heads * run->T * 4
                                                 : (size_t)cfg->num_heads * 4;
  size_t sets = run->recompute ? 1 : (size_t)cfg->num_layers;
  size_t attn = sets * rows * (8 * C * act + state);
  /* offloaded, the weights the GEMMs read and the gradients only */
  size_t model = run->offload_optimizer ? N * ((lowp ? lowp : 4) + 4) : N * (16 + lowp);
  return model + attn + tg_gpt_managed_bytes(cfg, run, 1);
}

double tg_gpt_flops_per_token(const tg_gpt_config *cfg, int T) {
  size_t sizes[TG_GPT_NPARAMS];
  double N = (double)tg_gpt_param_sizes(cfg, sizes);
  return 6.0 * N + 6.0 * cfg->num_layers * (double)cfg->channels * T;
}

double tg_gpt_recompute_flops_per_token(const tg_gpt_config *cfg, int T) {
  double C = cfg->channels;
  return cfg->num_layers * (16.0 * C * C + 2.0 * C * T);
}

/* critical-path ranks (graph_common.h): embedding 3L+1 at the top */
#define TG_GPT_RANKS(L) (3 * (L) + 2)

/* Offloaded optimizer on 2 or more devices, a micro-batch for each: each
 * micro-batch runs whole on one device, as when sharded (tg_dp_device),
 * but every tensor stays host-backed, so StarPU may evict any of them (the
 * weights are read-only replicas, fetched again when needed); g->dp
 * without shards.  The gradients are summed in place (tg_gpt_sum_begin). */
static int tg_gpt_pins_micros(const tg_gpt_run_config *r) {
  if (!r->offload_optimizer || r->tile_owner || r->data_parallel == TG_DP_SHARD) return 0;
  int ndev = tg_dp_count_devices();
  return ndev >= 2 && ndev <= TG_DP_MAX_DEVICES && r->nmicro >= ndev;
}

static int tg_gpt_pin_micros(tg_gpt *g) {
  g->dp = calloc(1, sizeof *g->dp);
  if (!g->dp) return tg_fail(ENOMEM, "GPT: out of memory");
  g->dp->ndev = tg_dp_scan(g->dp->worker, g->dp->node, TG_DP_MAX_DEVICES);
  g->dp->nmicro = g->dp->nslots = g->run.nmicro;
  g->dp->compute = tg_precision_lowp(g->run.amp.precision);
  return 0;
}

/* Reduce-scatter of the pinned micro-batches' gradients (run.grad_scatter,
 * reduce.h: tg_sum_begin_scatter).  Each per-layer parameter kind has
 * TG_GPT_SCATTER_RING sets of device leaves, layer l using set l mod ring,
 * so the backward goes layer by layer over the micro-batches
 * (tg_gpt_micros) and each layer's sums are finished before the layer that
 * reuses its leaves adds into them.  The embeddings and the final LayerNorm
 * have one set each, summed at the end of the step: with dwte passed from
 * device to device instead, the devices' classifiers ran one after the
 * other, and the first layer's reduce-scatter waited for the last of them
 * (bench/results/2026-11-28-grad-scatter.md).  The target plans live with
 * the gradients. */
#define TG_GPT_SCATTER_RING 2
typedef struct tg_gpt_scatter {
  tg_scatter_leaves leaves[TG_GPT_NPARAMS][TG_GPT_SCATTER_RING];
  tg_split plan[TG_GPT_NPARAMS][TG_GPT_MAX_LAYERS];
} tg_gpt_scatter;

/* GEMM weights get 16-bit copies (the embeddings' wpe and the LayerNorm and
 * bias vectors are read by f32 code only) */
static int tg_gpt_gemm_weight(tg_gpt_param p) {
  return p == TG_WTE || p == TG_QKVW || p == TG_ATTPROJW || p == TG_FCW || p == TG_FCPROJW;
}

/* The bytes of one layer's tensors at es bytes an element: every one
 * (the f32 gradients the reduce-scatter sums), or the GEMM weights only
 * (what the weight relay moves per layer and device) */
static size_t tg_gpt_layer_bytes(const tg_gpt_config *c, int gemm_only, size_t es) {
  size_t bytes = 0;
  for (int p = 0; p < TG_GPT_NPARAMS; p++) {
    if (!tg_gpt_param_per_layer((tg_gpt_param)p)) continue;
    if (gemm_only && !tg_gpt_gemm_weight((tg_gpt_param)p)) continue;
    int rows, cols;
    tg_gpt_param_shape(c, (tg_gpt_param)p, &rows, &cols);
    bytes += (size_t)rows * cols * es;
  }
  return bytes;
}

/* run.grad_scatter: 1 (on), 0 (off), or a negative errno with a message
 * where it was asked for and does not apply; the default (0) by the
 * layer's gradient bytes where it applies */
static int tg_gpt_scatter_wanted(const tg_gpt *g) {
  if (g->run.grad_scatter < 0) return 0;
  int applies = g->dp && !g->shards;
  int exact = !tg_deterministic() || (applies && g->run.nmicro == g->dp->ndev);
  if (g->run.grad_scatter == 0)
    return applies && exact && tg_gpt_layer_bytes(&g->cfg, 0, sizeof(float)) >= TG_GPT_SCATTER_AUTO_BYTES;
  if (!applies)
    return tg_fail(EINVAL, "GPT: the gradients' reduce-scatter (--grad-scatter) is for the "
                   "offloaded optimizer with micro-batches pinned to 2 or more devices "
                   "(--offload-optimizer, at least one micro-batch per device)");
  if (!exact)
    return tg_fail(EINVAL, "GPT: in deterministic mode the gradients' reduce-scatter "
                   "(--grad-scatter) needs one micro-batch per device (%d micro-batches, "
                   "%d devices): its tree then has the bits of the deterministic sums",
                   g->run.nmicro, g->dp->ndev);
  return 1;
}

/* run.weight_relay: 1 (on), 0 (off), or a negative errno with a message
 * where it was asked for and does not apply; the default (0) where the
 * gradients are reduce-scattered and a layer's GEMM weights, in the type
 * the GEMMs read, take TG_GPT_RELAY_AUTO_BYTES or more */
static int tg_gpt_relay_wanted(const tg_gpt *g) {
  if (g->run.weight_relay < 0) return 0;
  size_t es = tg_precision_lowp(g->run.amp.precision) ? 2 : sizeof(float);
  if (g->run.weight_relay == 0)
    return g->scatter && tg_gpt_layer_bytes(&g->cfg, 1, es) >= TG_GPT_RELAY_AUTO_BYTES;
  if (!g->scatter)
    return tg_fail(EINVAL, "GPT: the weight relay (--weight-relay) runs with the gradients' "
                   "reduce-scatter (--grad-scatter: the optimizer offloaded, micro-batches "
                   "pinned to 2 or more devices)");
  return 1;
}

static int tg_gpt_scatter_create(tg_gpt *g) {
  int want = tg_gpt_scatter_wanted(g);
  if (want <= 0) return want;
  tg_gpt_scatter *sc = calloc(1, sizeof *sc);
  if (!sc) return tg_fail(ENOMEM, "GPT: out of memory");
  g->scatter = sc;
  for (int p = 0; p < TG_GPT_NPARAMS; p++) {
    int rows, cols, sets = tg_gpt_param_per_layer((tg_gpt_param)p) ? TG_GPT_SCATTER_RING : 1;
    tg_gpt_param_shape(&g->cfg, (tg_gpt_param)p, &rows, &cols);
    for (int k = 0; k < sets; k++)
      TG_TRY(tg_scatter_leaves_create(&sc->leaves[p][k], g->dp, rows, cols));
  }
  return 0;
}

static void tg_gpt_scatter_destroy(tg_gpt *g) {
  tg_gpt_scatter *sc = g->scatter;
  if (!sc) return;
  for (int p = 0; p < TG_GPT_NPARAMS; p++) {
    for (int l = 0; l < TG_GPT_MAX_LAYERS; l++) tg_split_free(&g->g[p][l], &sc->plan[p][l]);
    for (int k = 0; k < TG_GPT_SCATTER_RING; k++) tg_scatter_leaves_destroy(&sc->leaves[p][k]);
  }
  free(sc);
  g->scatter = NULL;
}

/* Per-layer parameter slices: index [p][l]; global ones use l = 0. */
#define SLICE(p, l) (tg_gpt_param_per_layer(p) ? (l) : 0)
/* The f32 weight micro-batch mb's tasks read: the master, or with sharding
 * its device's replica of a sharded tensor. */
#define W(g, p, l) tg_gpt_weight((g), (p), (l), mb, 1)
/* Sharded: the bucket of (p, l), and the tensor's place in it. */
#define SHARD_AT(g, p, l) ((g)->shard_of[(p) * TG_GPT_MAX_LAYERS + SLICE(p, l)])
#define SHARD(g, p, l) (&(g)->shards[SHARD_AT(g, p, l) / TG_SHARD_MAX_MEMBERS])
#define MEMBER(g, p, l) (SHARD_AT(g, p, l) % TG_SHARD_MAX_MEMBERS)
/* This step's sum of a gradient (reduce.h), and where micro-batch mb->micro
 * adds into it, with which access mode (the same for every gradient). */
#define GSUM(g, p, l) (&(g)->sums[(p) * TG_GPT_MAX_LAYERS + (tg_gpt_param_per_layer(p) ? (l) : 0)])
#define G(g, p, l) tg_sum_handle(GSUM(g, p, l), mb->micro)
#define GMODE(g) tg_sum_mode(&(g)->sums[0])

/* Mixed precision: the 16-bit type of activations (TG_F32: none), and the
 * weight a GEMM reads (its 16-bit copy when there is one). */
#define ACT(g) tg_precision_lowp((g)->run.amp.precision)
#define WG(g, p, l) tg_gpt_weight((g), (p), (l), mb, 0)

static int tg_gpt_slices(tg_gpt_param p, const tg_gpt_config *c) {
  return tg_gpt_param_per_layer(p) ? c->num_layers : 1;
}

/* Sets of attention buffers: per (layer, micro-batch), or with recompute
 * per micro-batch (a block's are recomputed right before its backward). */
static int tg_gpt_attn_sets(const tg_gpt *g) {
  return (g->run.recompute ? 1 : g->cfg.num_layers) * g->run.nmicro;
}

size_t tg_gpt_packed_activation_bytes(const tg_gpt *g) {
  size_t bytes = 0;
  for (int i = 0; g->attn && i < tg_gpt_attn_sets(g); i++) {
    const tg_gpt_attn *a = &g->attn[i];
    if (!a->pack.handle) continue;
    const tg_tensor *set[] = {&a->qkv, &a->out, &a->dout, &a->dqkv, &a->state};
    bytes += tg_tensor_numel(&a->pack) * tg_dtype_size(a->pack.dtype);
    for (size_t k = 0; k < sizeof set / sizeof set[0]; k++)
      bytes -= tg_tensor_numel(set[k]) * tg_dtype_size(set[k]->dtype);
  }
  return bytes;
}

static int tg_gpt_check_run(const tg_gpt_config *c, tg_gpt_run_config *r) {
  if (r->B < 1 || r->T < 1)
    return tg_fail(EINVAL, "GPT: batch %d and sequence length %d must be positive", r->B, r->T);
  if (r->T > c->max_seq_len)
    return tg_fail(EINVAL, "GPT: sequence length %d exceeds the model's maximum %d", r->T,
                   c->max_seq_len);
  if (r->nmicro < 1 || r->B % r->nmicro)
    return tg_fail(EINVAL, "GPT: %d micro-batches do not divide the batch of %d sequences",
                   r->nmicro, r->B);
  int b = r->B / r->nmicro;
  if (r->attn_splits == 0 && r->data_parallel == TG_DP_SHARD)
    r->attn_splits = 1; /* a micro-batch runs on one device */
  /* With devices, one: StarPU 1.3 keeps a partition plan's coherency on
   * the tensor's home node, so each split attention sent its buffers through
   * host memory and back (124M, one simulated H100 and 15 CPU workers:
   * bench/results/2026-11-27-fusion.md, "Granularity"). */
  if (r->attn_splits == 0 && starpu_cuda_worker_get_count() + tg_nopencl_workers() > 0)
    r->attn_splits = 1;
  if (r->attn_splits == 0) {
    int w = tg_ncpu_workers();
    r->attn_splits = 1;
    for (int s = w < b ? w : b; s > 1; s--)
      if (b % s == 0) {
        r->attn_splits = s;
        break;
      }
  }
  if (r->attn_splits < 1 || b % r->attn_splits || r->attn_splits > TG_MAX_SPLIT)
    return tg_fail(EINVAL, "GPT: %d attention tasks do not divide the %d sequences of a "
                   "micro-batch", r->attn_splits, b);
  if (r->attention != TG_ATTN_NAIVE && r->attention != TG_ATTN_CHUNKED &&
      r->attention != TG_ATTN_GEMM && r->attention != TG_ATTN_FLASH &&
      r->attention != TG_ATTN_CUDNN)
    return tg_fail(EINVAL, "GPT: unknown attention kind %d", (int)r->attention);
  if (r->chunk < 1) return tg_fail(EINVAL, "GPT: attention chunk must be >= 1");
  if (r->classifier_chunk < 1) return tg_fail(EINVAL, "GPT: classifier chunk must be >= 1");
  if ((unsigned)r->data_parallel > TG_DP_REDUX)
    return tg_fail(EINVAL, "GPT: unknown data-parallel mode %d", (int)r->data_parallel);
  if (r->grad_comm != TG_F32 && r->grad_comm != TG_BF16)
    return tg_fail(EINVAL, "GPT: gradient messages in %s: f32 or bf16 only",
                   tg_dtype_name(r->grad_comm));
  if (r->grad_comm != TG_F32 && r->data_parallel != TG_DP_SHARD)
    return tg_fail(EINVAL, "GPT: bf16 gradient messages (--grad-comm) need the sharded "
                   "data parallelism of 2 or more devices (--data-parallel shard)");
  if (r->recompute != 0 && r->recompute != 1)
    return tg_fail(EINVAL, "GPT: recompute %d is not 0 or 1", r->recompute);
  if (r->offload_optimizer != 0 && r->offload_optimizer != 1)
    return tg_fail(EINVAL, "GPT: offload_optimizer %d is not 0 or 1", r->offload_optimizer);
  if (r->offload_optimizer && tg_ncpu_workers() == 0)
    return tg_fail(EINVAL, "GPT: the offloaded optimizer runs on CPU workers, and there are "
                   "none (--ncpus)");
  if (r->offload_optimizer && starpu_cuda_worker_get_count() + tg_nopencl_workers() == 0)
    return tg_fail(EINVAL, "GPT: the optimizer is offloaded from devices (CUDA GPUs, emulated "
                   "devices) to the CPU workers, and there are no devices");
  if (r->offload_optimizer && r->data_parallel == TG_DP_SHARD)
    return tg_fail(EINVAL, "GPT: the offloaded optimizer and the sharded data parallelism "
                   "(--data-parallel shard) do not go together yet: use --data-parallel redux");
  if (r->linear_tiles < 0 || r->linear_tiles > TG_MAX_SPLIT)
    return tg_fail(EINVAL, "GPT: linear tiles %d not in [0 (auto), %d]", r->linear_tiles,
                   TG_MAX_SPLIT);
  if (r->linear_tiles == 0) r->linear_tiles = tg_gpt_tiles_auto(c, r);
  if (r->linear_tiles > c->channels)
    return tg_fail(EINVAL, "GPT: %d linear tiles for %d channels: at most one per channel",
                   r->linear_tiles, c->channels);
  if (r->tile_owner != 0 && r->tile_owner != 1)
    return tg_fail(EINVAL, "GPT: tile_owner %d is not 0 or 1", r->tile_owner);
  if (r->grad_scatter < -1 || r->grad_scatter > 1)
    return tg_fail(EINVAL, "GPT: grad_scatter %d is not -1 (off), 0 (by the gradients' size) "
                   "or 1 (on)", r->grad_scatter);
  if (r->weight_relay < -1 || r->weight_relay > 1)
    return tg_fail(EINVAL, "GPT: weight_relay %d is not -1 (off), 0 (by the weights' size) "
                   "or 1 (on)", r->weight_relay);
  if (r->fused_backward < -1 || r->fused_backward > 1)
    return tg_fail(EINVAL, "GPT: fused_backward %d is not -1 (off), 0 (auto) or 1 (on)",
                   r->fused_backward);
  /* auto: where a GPU runs the backward as one chain and keeps its
   * gradients (gpt.h) */
  if (r->fused_backward == 0)
    r->fused_backward =
        tg_ncuda_workers() > 0 && r->linear_tiles < 2 && !r->offload_optimizer ? 1 : -1;
  if (r->fused_blocks < -1 || r->fused_blocks > 1)
    return tg_fail(EINVAL, "GPT: fused_blocks %d is not -1 (off), 0 (auto) or 1 (on)",
                   r->fused_blocks);
  int blocks_fuse = r->linear_tiles < 2 && r->attn_splits == 1;
  if (r->fused_blocks > 0 && !blocks_fuse)
    return tg_fail(EINVAL, "GPT: fused blocks need untiled linear layers (--tiles 1) and one "
                   "attention task per micro-batch (--attn-splits 1)");
  /* auto: where a GPU runs each block as one chain (gpt.h); with recompute
   * too (350M at B 64 on one simulated H100: 230.5 -> 224.6 ms,
   * bench/results/2026-11-28-fused-blocks.md) */
  if (r->fused_blocks == 0)
    r->fused_blocks =
        tg_ncuda_workers() > 0 && blocks_fuse && !r->offload_optimizer ? 1 : -1;
  if (r->tile_owner && r->linear_tiles < 2)
    return tg_fail(EINVAL, "GPT: the owner placement of tiles needs 2 or more tiles (--tiles)");
  if (r->tile_owner && starpu_cuda_worker_get_count() + tg_nopencl_workers() == 0)
    return tg_fail(EINVAL, "GPT: the owner placement of tiles puts them on devices, and there "
                   "are none");
  if (r->tile_owner && r->data_parallel == TG_DP_SHARD)
    return tg_fail(EINVAL, "GPT: the owner placement of tiles and the sharded data parallelism "
                   "(--data-parallel shard) do not go together: use --data-parallel redux");
  if (r->classifier_blocks < 0 || r->classifier_blocks > TG_MAX_SPLIT)
    return tg_fail(EINVAL, "GPT: classifier blocks %d not in [0 (auto), %d]", r->classifier_blocks,
                   TG_MAX_SPLIT);
  return tg_amp_config_check(&r->amp, "GPT");
}

/* The critical-path rank of (p, l)'s update: layer l's parameters gate the
 * next step's layer l, the embeddings its very start, the final LayerNorm
 * its end. */
static int tg_gpt_param_rank(const tg_gpt *g, tg_gpt_param p, int l) {
  int L = g->cfg.num_layers;
  if (tg_gpt_param_per_layer(p)) return L - l;
  return p == TG_LNFW || p == TG_LNFB ? 0 : L;
}

/* Registers every slice of every parameter tensor with the optimizer (or,
 * sharded, every bucket), in the order of their update tasks, with the
 * priorities of their place on the critical path. */
static int tg_gpt_register_params(tg_gpt *g) {
  for (int b = 0; b < g->nshards; b++) {
    tg_shard *sh = &g->shards[b];
    tg_param prm = {.value = sh->value, .grad = sh->grad, .state1 = sh->m, .state2 = sh->v,
                    .shard = sh, .rank = sh->rank};
    snprintf(prm.name, sizeof prm.name, "%s", sh->name);
    TG_TRY(tg_optim_add(&g->optim, &prm));
  }
  for (int p = 0; p < TG_GPT_NPARAMS && !g->shards; p++)
    for (int l = 0; l < tg_gpt_slices((tg_gpt_param)p, &g->cfg); l++) {
      tg_param prm = {.value = &g->w[p][l], .grad = &g->g[p][l], .state1 = &g->m[p][l],
                      .state2 = &g->v[p][l], .lowp = &g->wl[p][l],
                      .rank = tg_gpt_param_rank(g, (tg_gpt_param)p, l)};
      snprintf(prm.name, sizeof prm.name, "%s.L%d", tg_gpt_param_names[p], l);
      TG_TRY(tg_optim_add(&g->optim, &prm));
    }
  return 0;
}

/* One bucket of the tensors (ps[i], ls[i]), i < n (shard.h).  Member 0
 * names the bucket ("qkvw+.L3": + when it holds more) and sets its
 * update's priority. */
static int tg_gpt_bucket(tg_gpt *g, const tg_gpt_param *ps, const int *ls, int n, int readers) {
  tg_tensor *values[TG_SHARD_MAX_MEMBERS];
  int b = g->nshards++;
  for (int i = 0; i < n; i++) {
    values[i] = &g->w[ps[i]][ls[i]];
    g->shard_of[ps[i] * TG_GPT_MAX_LAYERS + ls[i]] = b * TG_SHARD_MAX_MEMBERS + i;
  }
  tg_shard *sh = &g->shards[b];
  TG_TRY(tg_shard_create(sh, g->dp, n, values, readers));
  snprintf(sh->name, sizeof sh->name, "%s%s.L%d", tg_gpt_param_names[ps[0]], n > 1 ? "+" : "",
           ls[0]);
  sh->rank = tg_gpt_param_rank(g, ps[0], ls[0]);
  return 0;
}

/* Sharded data parallelism (shard.h): the devices and the buckets.
 * Consecutive layers share buckets until their f32 gradient reaches
 * TG_GPT_BUCKET_BYTES: every bucket costs its exchange a copy per pair of
 * devices and a few tasks per device, each of which keeps a device's
 * driver busy (SimGrid charges 10 us a copy or task), and on 8 simulated
 * H100s one layer of GPT-2 124M a bucket (28 MB) left a third of the steps'
 * idle time to that (bench/results/2026-11-26-bucket-size.md).  Megatron's
 * buckets hold 40M parameters, PyTorch DDP's 25 MB.  In 16-bit runs the
 * GEMM weights (16-bit replicas) and the LayerNorm and bias vectors (f32
 * replicas) have buckets of their own, the vectors' as many layers as
 * TG_SHARD_MAX_MEMBERS allows (a few kB a layer).  Member 0 of a bucket is
 * from its lowest layer, whose backward ends it and whose forward needs it
 * first.  The embeddings and the final LayerNorm get a bucket each: their
 * gradients are final at different times (lnf first, wte last). */
#define TG_GPT_BUCKET_BYTES ((size_t)64 << 20)
static int tg_gpt_shard(tg_gpt *g) {
  int L = g->cfg.num_layers;
  g->dp = calloc(1, sizeof *g->dp);
  g->shards = calloc((size_t)2 * L + 3, sizeof *g->shards);
  g->shard_of = calloc((size_t)TG_GPT_NPARAMS * TG_GPT_MAX_LAYERS, sizeof *g->shard_of);
  if (!g->dp || !g->shards || !g->shard_of) return tg_fail(ENOMEM, "GPT: out of memory");
  TG_TRY(tg_dp_init(g->dp, g->run.nmicro, ACT(g)));
  int lowp = ACT(g) != TG_F32;
  const tg_gpt_param wte = TG_WTE, wpe = TG_WPE, lnf[2] = {TG_LNFW, TG_LNFB};
  const int l0[2] = {0, 0};
  TG_TRY(tg_gpt_bucket(g, &wte, l0, 1, TG_SHARD_READ_COMPUTE | TG_SHARD_READ_F32));
  TG_TRY(tg_gpt_bucket(g, &wpe, l0, 1, TG_SHARD_READ_F32));
  tg_gpt_param vec[TG_SHARD_MAX_MEMBERS], gemm[TG_SHARD_MAX_MEMBERS];
  int vl[TG_SHARD_MAX_MEMBERS], gl[TG_SHARD_MAX_MEMBERS], nv = 0, ng = 0, per_layer = 0;
  size_t bytes = 0;
  for (int l = 0; l < L; l++) {
    for (int p = 0; p < TG_GPT_NPARAMS; p++) {
      if (!tg_gpt_param_per_layer((tg_gpt_param)p)) continue;
      if (l == 0) per_layer++;
      if (tg_gpt_gemm_weight((tg_gpt_param)p) || !lowp) {
        gemm[ng] = (tg_gpt_param)p, gl[ng++] = l;
        bytes += tg_tensor_numel(&g->w[p][l]) * sizeof(float);
      } else {
        vec[nv] = (tg_gpt_param)p, vl[nv++] = l;
      }
    }
    if (nv && (nv + per_layer > TG_SHARD_MAX_MEMBERS || l == L - 1)) {
      TG_TRY(tg_gpt_bucket(g, vec, vl, nv, TG_SHARD_READ_F32));
      nv = 0;
    }
    if (bytes < TG_GPT_BUCKET_BYTES && ng + per_layer <= TG_SHARD_MAX_MEMBERS && l < L - 1)
      continue;
    TG_TRY(tg_gpt_bucket(g, gemm, gl, ng, lowp ? TG_SHARD_READ_COMPUTE : TG_SHARD_READ_F32));
    ng = 0;
    bytes = 0;
  }
  return tg_gpt_bucket(g, lnf, l0, 2, TG_SHARD_READ_F32);
}

/* run.packed_layers resolved: where no partition plan or reduction
 * splits the parameters' tensors (gpt.h) */
static int tg_gpt_packing(tg_gpt *g) {
  tg_gpt_run_config *r = &g->run;
  if (r->packed_layers < -1 || r->packed_layers > 1)
    return tg_fail(EINVAL, "GPT: packed_layers %d is not -1 (off), 0 (auto) or 1 (on)",
                   r->packed_layers);
  int packable = r->data_parallel != TG_DP_SHARD && !r->offload_optimizer &&
                 tg_dist_size() == 1 && (tg_sum_in_place() || tg_deterministic());
  if (r->packed_layers > 0 && !packable)
    return tg_fail(EINVAL, "GPT: packed layers need the optimizer on the devices, no sharding, "
                   "one rank, and one device memory node or deterministic mode (the "
                   "gradients summed without STARPU_REDUX)");
  if (r->packed_layers == 0) r->packed_layers = packable && r->fused_blocks > 0 ? 1 : -1;
  return 0;
}

/* run.packed_layers: layer l's per-layer tensors as views of one pack each
 * for the values, gradients, first and second moments (f32), and in mixed
 * precision one for the 16-bit GEMM weights */
static int tg_gpt_pack_layers(tg_gpt *g) {
  tg_dtype lowp = ACT(g);
  for (int l = 0; l < g->cfg.num_layers; l++) {
    for (int k = 0; k < 5; k++) {
      tg_tensor(*which)[TG_GPT_MAX_LAYERS] = k == 0 ? g->w : k == 1 ? g->g : k == 2 ? g->m
                                           : k == 3 ? g->v : g->wl;
      tg_tensor *parts[TG_GPT_NPARAMS];
      int rows[TG_GPT_NPARAMS], cols[TG_GPT_NPARAMS], n = 0;
      tg_dtype dt[TG_GPT_NPARAMS];
      for (int p = 0; p < TG_GPT_NPARAMS; p++) {
        if (!tg_gpt_param_per_layer((tg_gpt_param)p)) continue;
        if (k == 4 && (!lowp || !tg_gpt_gemm_weight((tg_gpt_param)p))) continue;
        tg_gpt_param_shape(&g->cfg, (tg_gpt_param)p, &rows[n], &cols[n]);
        dt[n] = k == 4 ? lowp : TG_F32;
        parts[n++] = &which[p][l];
      }
      if (n) TG_TRY(tg_tensor_pack(&g->packs[k][l], n, parts, rows, cols, dt));
    }
  }
  return 0;
}

/* tg_gpt_create's source: the whole llm.c-layout array */
typedef struct params_array {
  const float *params;
  size_t base[TG_GPT_NPARAMS]; /* where each tensor starts */
} params_array;

static int params_array_fill(void *ctx, int param, size_t off, float *dst, size_t n) {
  const params_array *a = ctx;
  memcpy(dst, a->params + a->base[param] + off, n * sizeof(float));
  return 0;
}

int tg_gpt_create(tg_gpt *g, const tg_gpt_config *cfg, const float *params,
                  const tg_gpt_run_config *run, const tg_optimizer_config *opt) {
  params_array a = {.params = params};
  size_t sizes[TG_GPT_NPARAMS];
  if (params && tg_gpt_param_sizes(cfg, sizes) > 0)
    for (int p = 1; p < TG_GPT_NPARAMS; p++) a.base[p] = a.base[p - 1] + sizes[p - 1];
  return tg_gpt_create_from(g, cfg, params ? params_array_fill : NULL, &a, run, opt);
}

int tg_gpt_create_from(tg_gpt *g, const tg_gpt_config *cfg, tg_gpt_param_source source,
                       void *ctx, const tg_gpt_run_config *run,
                       const tg_optimizer_config *opt) {
  memset(g, 0, sizeof *g);
  TG_TRY(tg_gpt_config_check(cfg));
  if (cfg->num_layers > TG_GPT_MAX_LAYERS)
    return tg_fail(EINVAL, "GPT: %d layers, at most %d supported", cfg->num_layers,
                   TG_GPT_MAX_LAYERS);
  if (opt->kind != TG_OPT_ADAMW) return tg_fail(EINVAL, "GPT: only AdamW is supported");
  g->cfg = *cfg;
  g->run = *run;
  if (g->run.data_parallel == TG_DP_AUTO) { /* shard when every device gets a micro-batch */
    int ndev = tg_dp_count_devices();
    g->run.data_parallel = ndev >= 2 && g->run.nmicro >= ndev && !g->run.offload_optimizer &&
                                   !g->run.tile_owner
                               ? TG_DP_SHARD : TG_DP_REDUX;
  }
  int pinned = tg_gpt_pins_micros(&g->run);
  if (pinned && g->run.attn_splits == 0) g->run.attn_splits = 1; /* one device per micro */
  TG_TRY(tg_gpt_check_run(cfg, &g->run));
  if (pinned) TG_TRY(tg_gpt_pin_micros(g));
  TG_TRY(tg_optim_init(&g->optim, opt, &g->run.amp, TG_GPT_RANKS(cfg->num_layers), "GPT"));
  g->optim.on_cpu = g->run.offload_optimizer;
  int rc = tg_gpt_packing(g);
  if (rc == 0 && g->run.packed_layers > 0) rc = tg_gpt_pack_layers(g);
  for (int p = 0; p < TG_GPT_NPARAMS && rc == 0; p++) {
    int rows, cols;
    tg_gpt_param_shape(cfg, (tg_gpt_param)p, &rows, &cols);
    for (int l = 0; l < tg_gpt_slices((tg_gpt_param)p, cfg) && rc == 0; l++) {
      tg_tensor *all[4] = {&g->w[p][l], &g->g[p][l], &g->m[p][l], &g->v[p][l]};
      int packed = all[0]->handle != NULL; /* views already (tg_gpt_pack_layers) */
      for (int k = 0; k < 4 && rc == 0 && !packed; k++)
        rc = tg_tensor_alloc(all[k], rows, cols, TG_F32);
      if (rc) break;
      /* no task has touched the fresh host buffers: plain writes are safe;
       * without a source they stay as allocated (zeros; folded, simulated) */
      const size_t n = (size_t)rows * cols;
      if (source) rc = source(ctx, p, (size_t)l * n, g->w[p][l].host, n);
      if (rc) break;
      if (!packed) tg_tensor_enable_reduction(&g->g[p][l]);
    }
  }
  if (rc == 0) rc = tg_tensor_alloc(&g->loss, 1, 1, TG_F32);
  if (rc == 0) tg_tensor_enable_reduction(&g->loss);
  tg_dtype lowp = ACT(g);
  if (rc == 0 && g->run.data_parallel == TG_DP_SHARD) rc = tg_gpt_shard(g);
  for (int p = 0; p < TG_GPT_NPARAMS && lowp && !g->shards && rc == 0; p++) {
    if (!tg_gpt_gemm_weight((tg_gpt_param)p)) continue;
    int rows, cols;
    tg_gpt_param_shape(cfg, (tg_gpt_param)p, &rows, &cols);
    for (int l = 0; l < tg_gpt_slices((tg_gpt_param)p, cfg) && rc == 0; l++)
      if (!g->wl[p][l].handle) rc = tg_tensor_alloc(&g->wl[p][l], rows, cols, lowp);
  }
  /* packed, a layer's update names 5 buffers: fused across layers (optim.h) */
  g->optim.fuse_updates = g->run.packed_layers > 0 && g->run.fused_blocks > 0;
  if (rc == 0) rc = tg_gpt_register_params(g);
  if (rc == 0) rc = tg_optim_start(&g->optim);
  int sets = tg_gpt_attn_sets(g), M = g->run.nmicro;
  if (rc == 0) {
    g->attn = calloc((size_t)sets, sizeof *g->attn);
    if (!g->attn) rc = tg_fail(ENOMEM, "GPT: out of memory for attention buffers");
  }
  for (int i = 0; i < sets && rc == 0; i++)
    rc = tg_gpt_attn_create(&g->attn[i], cfg, &g->run, g->run.B / M, tg_gpt_tile_node(g, i % M),
                            i < M);
  if (rc == 0 && g->run.linear_tiles > 1) rc = tg_gpt_tiles_create(g, ACT(g));
  if (rc == 0) rc = tg_gpt_scatter_create(g);
  if (rc == 0) rc = tg_gpt_relay_wanted(g);
  if (rc > 0) rc = tg_gpt_relay_create(g);
  if (rc) tg_gpt_destroy(g);
  return rc;
}

void tg_gpt_destroy(tg_gpt *g) {
  tg_optim_destroy(&g->optim); /* its block plans go before the tensors they split */
  tg_gpt_relay_destroy(g);
  tg_gpt_scatter_destroy(g);
  for (int i = 0; g->shards && i < g->nshards; i++) tg_shard_destroy(&g->shards[i]);
  free(g->shards);
  free(g->shard_of);
  free(g->dp);
  g->shards = NULL;
  g->shard_of = NULL;
  g->nshards = 0;
  g->dp = NULL;
  tg_split_free(&g->g[TG_WTE][0], &g->dwte_split);
  tg_gpt_tiles_destroy(g);
  free(g->embed_dres);
  g->embed_dres = NULL;
  if (g->attn) {
    for (int i = 0; i < tg_gpt_attn_sets(g); i++) tg_gpt_attn_destroy(&g->attn[i]);
    free(g->attn);
    g->attn = NULL;
  }
  for (int p = 0; p < TG_GPT_NPARAMS; p++)
    for (int l = 0; l < TG_GPT_MAX_LAYERS; l++) {
      tg_tensor_free(&g->w[p][l]);
      tg_tensor_free(&g->g[p][l]);
      tg_tensor_free(&g->m[p][l]);
      tg_tensor_free(&g->v[p][l]);
      tg_tensor_free(&g->wl[p][l]);
    }
  for (int k = 0; k < 5; k++) /* after their views */
    for (int l = 0; l < TG_GPT_MAX_LAYERS; l++) tg_tensor_free(&g->packs[k][l]);
  tg_tensor_free(&g->loss);
}

/* Forward activations of one layer kept for its backward. */
typedef struct tg_gpt_layer_acts {
  tg_tensor x, ln1, mean1, rstd1, x2, ln2, mean2, rstd2, fch, fchg;
  tg_split *fch_c, *fchg_c; /* tiled: fch and fchg are the attention set's */
} tg_gpt_layer_acts;

typedef struct tg_gpt_micro {
  int n;                          /* rows: b * T */
  int micro;                      /* index, for task names */
  starpu_data_handle_t tokens, targets;
  tg_gpt_attn *attn;              /* [layer]: stride nmicro, or temporaries */
  int attn_stride;
  tg_gpt_layer_acts acts[TG_GPT_MAX_LAYERS];
  tg_tensor xL, lnf, meanf, rstdf, dlnf;
  tg_split *dlnf_c;               /* tiled classifier: dlnf is a tile buffer */
  tg_tensor dres;                 /* (n, C) the backward's dL/dx, layer to layer */
  int dev;                        /* sharded: its device, else 0 */
  int last;                       /* the step's last micro-batch submitted */
  int worker;                     /* sharded: the worker its tasks run on, else -1 */
} tg_gpt_micro;

/* The weight of (p, l) that mb's tasks read, f32 or for a GEMM (its 16-bit
 * copy in mixed precision). */
static starpu_data_handle_t tg_gpt_weight(const tg_gpt *g, tg_gpt_param p, int l,
                                          const tg_gpt_micro *mb, int f32) {
  if (g->shards) return tg_shard_weight(SHARD(g, p, l), MEMBER(g, p, l), mb->dev, f32);
  starpu_data_handle_t relayed = f32 ? NULL : tg_gpt_relay_weight(g, p, l, mb->dev);
  if (relayed) return relayed;
  if (!f32 && g->wl[p][0].handle) return g->wl[p][SLICE(p, l)].handle;
  return g->w[p][SLICE(p, l)].handle;
}

/* Sharded: every task of a micro-batch on its device's worker.  Offloaded
 * optimizer: on the devices, the CPU workers being the optimizer's. */
static const tg_task_opts *tg_gpt_pin(const tg_gpt *g, tg_gopts *go, const tg_gpt_micro *mb) {
  go->opts.worker = mb->worker;
  go->opts.device_only = g->run.offload_optimizer;
  return &go->opts;
}

/* Sharded: micro-batch mb's device and worker; else anywhere. */
static void tg_gpt_micro_place(const tg_gpt *g, tg_gpt_micro *mb) {
  mb->dev = g->dp ? tg_dp_device(g->dp, mb->micro) : 0;
  mb->worker = g->dp ? g->dp->worker[mb->dev] : -1;
}

/* Starts the step's sum of gradient (p, l): sharded, or lazy (reduce.h). */
static int tg_gpt_sum_begin(tg_gpt *g, tg_gpt_param p, int l) {
  /* offloaded, the optimizer partitions the gradients: no REDUX; with
   * micro-batches pinned to devices, reduce-scattered (run.grad_scatter) or
   * one copy passed from device to device (leaves when deterministic) */
  int L = g->cfg.num_layers;
  tg_gopts go;
  int rank = tg_gpt_param_rank(g, p, l);
  if (g->scatter)
    return tg_sum_begin_scatter(GSUM(g, p, l), &g->g[p][l], &g->scatter->plan[p][l],
                                &g->scatter->leaves[p][l % TG_GPT_SCATTER_RING], 1,
                                tg_gopt(&go, TG_GPT_RANKS(L) - 1, TG_GPT_RANKS(L), "%s.L%d.scatter",
                                        tg_gpt_param_names[p], l));
  if (!g->shards)
    return tg_sum_begin_lazy(GSUM(g, p, l), &g->g[p][l], g->run.nmicro, 1,
                             !g->run.offload_optimizer ? TG_SUM_ANY
                             : g->dp                   ? TG_SUM_IN_PLACE
                                                       : TG_SUM_LEAVES);
  tg_shard *sh = SHARD(g, p, l); /* the exchange is the bucket's */
  return tg_sum_begin_sharded(GSUM(g, p, l), sh, MEMBER(g, p, l), g->run.nmicro, 1,
                              g->run.grad_comm,
                              tg_gopt(&go, rank, TG_GPT_RANKS(L), "%s.exchange", sh->name));
}

/* Sharded: layer l's gradients are final once the last micro-batch's
 * backward of layer l is submitted; their exchange goes now, under the
 * backward of the layers below (the bucket of layer l). */
static int tg_gpt_exchange_layer(tg_gpt *g, const tg_gpt_micro *mb, int l) {
  if (!g->shards || !mb->last) return 0;
  for (int p = 0; p < TG_GPT_NPARAMS; p++)
    if (tg_gpt_param_per_layer((tg_gpt_param)p)) TG_TRY(tg_sum_finish(GSUM(g, p, l)));
  return 0;
}

/* every task of the graph names the 16-bit type of its 2-byte buffers */
#define OPT(...) (tg_gopt_lowp(&go, ACT(g), __VA_ARGS__), tg_gpt_pin(g, &go, mb))
#define FWD(l) OPT(3 * L - (l), TG_GPT_RANKS(L), "L%d.m%d.fwd", (l), mb->micro)
#define BWD(l) OPT(L + (l), TG_GPT_RANKS(L), "L%d.m%d.bwd", (l), mb->micro)
/* in a tg_gopts of its own (gw): a call passes it beside BWD's, whose go it
 * would overwrite (both were BWD's or both WGRAD's, by argument order) */
#define WGRAD(l)                                                            \
  (tg_gopt_lowp(&gw, ACT(g), L - (l), TG_GPT_RANKS(L), "L%d.m%d.wgrad", (l), mb->micro), \
   tg_gpt_pin(g, &gw, mb))

/* f32 temporaries: LayerNorm statistics */
static int tg_temp(tg_tensor *t, int rows, int cols) {
  return tg_tensor_temp(t, rows, cols, TG_F32);
}

/* activations and their gradients: 16-bit in mixed precision */
static int tg_act_temp(const tg_gpt *g, tg_tensor *t, int rows, int cols) {
  return tg_tensor_temp(t, rows, cols, ACT(g)); /* TG_F32 unless 16-bit */
}
#define TEMP(t, r, c) tg_act_temp(g, t, r, c)

/* A linear layer's output (rows, cols): tiled, micro-batch mb's persistent
 * buffer `which` and *plan its column plan (gpt_tiles.c); else a new
 * temporary and *plan NULL. */
static int tg_gpt_out(tg_gpt *g, const tg_gpt_micro *mb, tg_gpt_tile_buf which, int l,
                      tg_tensor *t, tg_split **plan, int rows, int cols) {
  if (tg_gpt_tile_out(g, mb->micro, which, l, t, plan)) return 0;
  /* packed activations: the view (the backward's in layer 0's set) */
  const tg_gpt_attn *at = &mb->attn[l * mb->attn_stride], *a0 = &mb->attn[0];
  if (which == TG_TILE_PROJ && at->pack.handle) {
    *t = at->proj;
    return 0;
  }
  if (which != TG_TILE_PROJ && a0->dln.handle) {
    *t = which == TG_TILE_DLN ? a0->dln : a0->dfch;
    return 0;
  }
  return TEMP(t, rows, cols);
}

/* The end of an output's use in this layer: a temporary is released, a
 * persistent tiled buffer (plan set) only forgotten here. */
static void tg_gpt_out_release(tg_tensor *t, const tg_split *plan) {
  if (plan) memset(t, 0, sizeof *t);
  else tg_tensor_release(t);
}
#define NT(g) ((g)->run.linear_tiles)
/* The small fusions (a residual add with the LayerNorm after it, a weight
 * gradient with its bias gradient) only with the optimizer on the devices,
 * as the fused backward: offloaded, the separate tasks let the host's
 * update start sooner, and the 52B step on 8 simulated H100s was faster
 * without them (bench/results/2026-11-27-fusion.md).  Same bits either way. */
#define TG_GPT_FUSE_SMALL(g) (!(g)->run.offload_optimizer)
/* A linear layer's backward in one task (run.fused_backward), unless its
 * input's gradient is tiled (a column plan dXc over 2 or more tiles) */
#define TG_GPT_FUSED_BWD(g, dXc) ((g)->run.fused_backward > 0 && !((dXc) && NT(g) > 1))

/* How micro-batch mb's next contribution to gradient (p, l) adds
 * (reduce.h, lazy sums): TG_OVERWRITE for the first one to its handle when
 * it can overwrite, after the zeros when it cannot. */
static int tg_gpt_take(tg_gpt *g, const tg_gpt_micro *mb, tg_gpt_param p, int l,
                       int can_overwrite, tg_accum *mode) {
  tg_accum m;
  TG_TRY(tg_sum_take(GSUM(g, p, l), mb->micro, can_overwrite, &m));
  if (mode) *mode = m;
  return 0;
}
/* zeros first if nothing wrote gradient (p, l) yet: for kernels that add */
#define GZERO(p, l) TG_TRY(tg_gpt_take(g, mb, (p), (l), 0, NULL))

/* How micro-batch mb's task that writes the gradients of weight pw and of
 * the bias after it (pw + 1: a LayerNorm's or a linear layer's) adds them:
 * TG_OVERWRITE for the first contribution to both, so that no zero fill
 * comes before it.  Their sums are alike (one per parameter, the same
 * micro-batches), so both take the same mode. */
static int tg_gpt_pair_take(tg_gpt *g, const tg_gpt_micro *mb, tg_gpt_param pw, int l,
                            tg_accum *mode) {
  tg_accum mb_mode;
  /* A LayerNorm backward is on its micro-batch's critical path (dres):
   * where the micro-batches of several devices add into one gradient in
   * place (pinned, offloaded), the others' would wait for the first's
   * overwrite; a zero fill lets them add in any order. */
  int ln = pw == TG_LN1W || pw == TG_LN2W || pw == TG_LNFW;
  int can = !(ln && g->dp && !g->shards && !GSUM(g, pw, l)->scatter); /* leaves: any order */
  TG_TRY(tg_gpt_take(g, mb, pw, l, can, mode));
  TG_TRY(tg_gpt_take(g, mb, (tg_gpt_param)(pw + 1), l, can, &mb_mode));
  if (mb_mode != *mode)
    return tg_fail(EINVAL, "GPT: parameter %d.%d's weight and bias gradients sum differently",
                   (int)pw, l);
  return 0;
}

/* dW (+)= alpha dY^T X: with 16-bit dY and X (the activations' type)
 * through the 16-bit GEMM codelet (cublasGemmEx or the CPU's native bf16,
 * fp32 accumulation), else the f32 one */
static int tg_gpt_gemm_tn(const tg_gpt *g, float alpha, starpu_data_handle_t dY,
                          starpu_data_handle_t X, starpu_data_handle_t dW, tg_accum mode,
                          const tg_task_opts *o) {
  if (ACT(g)) return tg_gemm_lowp_insert(ACT(g), 1, 0, alpha, dY, X, 1.0f, dW, mode, o);
  return tg_gemm_insert(1, 0, alpha, dY, X, 1.0f, dW, mode, o);
}

/* The weight and bias gradients of linear layer (pw, l) (its bias pw + 1)
 * from its output's gradient dY and its input X, in one task */
static int tg_gpt_linear_grads(tg_gpt *g, const tg_gpt_micro *mb, tg_gpt_param pw, int l,
                               starpu_data_handle_t dY, starpu_data_handle_t X,
                               const tg_task_opts *o) {
  tg_accum mode;
  TG_TRY(tg_gpt_pair_take(g, mb, pw, l, &mode));
  if (TG_GPT_FUSE_SMALL(g))
    return tg_linear_bwd_weight_insert(dY, X, G(g, pw, l), G(g, (tg_gpt_param)(pw + 1), l),
                                       mode, o);
  TG_TRY(tg_gpt_gemm_tn(g, 1.0f, dY, X, G(g, pw, l), mode, o));
  return tg_bias_grad_insert(dY, G(g, (tg_gpt_param)(pw + 1), l), mode, o);
}

/* Linear layer (pw, l)'s backward from its output's gradient dZ and its
 * input X: its input's gradient dX (a column plan dXc when tiled) from W
 * (and Zprev with an activation), and its weight and bias gradients (the
 * bias is pw + 1).  One task when the run fuses them (untiled), else the
 * gradients under `ow` then dX under `o`. */
static int tg_gpt_linear_bwd(tg_gpt *g, const tg_gpt_micro *mb, tg_gpt_param pw, int l,
                             starpu_data_handle_t dZ, starpu_data_handle_t X,
                             starpu_data_handle_t W, tg_activation act,
                             starpu_data_handle_t Zprev, tg_tensor *dX, tg_split *dXc,
                             const tg_task_opts *ow, const tg_task_opts *o) {
  if (TG_GPT_FUSED_BWD(g, dXc)) {
    tg_accum mode;
    TG_TRY(tg_gpt_pair_take(g, mb, pw, l, &mode));
    return tg_linear_bwd_insert(dZ, W, act, Zprev, X, dX->handle, G(g, pw, l),
                                G(g, (tg_gpt_param)(pw + 1), l), mode, o);
  }
  TG_TRY(tg_gpt_linear_grads(g, mb, pw, l, dZ, X, ow));
  return tg_gpt_linear_bwd_data(g, dZ, W, act, Zprev, dX, dXc, o);
}

/* The activations of block l of micro-batch mb that its backward reads,
 * all but its input x (with recompute, the forward drops them and the
 * backward submits the block's forward again). */
static void tg_gpt_block_drop(tg_gpt_micro *mb, int l) {
  tg_gpt_layer_acts *A = &mb->acts[l];
  tg_tensor *all[] = {&A->ln1, &A->mean1, &A->rstd1, &A->x2, &A->ln2, &A->mean2, &A->rstd2};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tg_tensor_release(all[k]);
  tg_gpt_out_release(&A->fch, A->fch_c);
  tg_gpt_out_release(&A->fchg, A->fchg_c);
}

/* A LayerNorm's parameters and its outputs: normalised (n, C), mean and
 * rstd (n, 1) f32, created by whoever computes it; with packed activations
 * views of block `layer`'s set (first: its x, ln1, mean1, rstd1; else x2,
 * ln2, mean2, rstd2; layer -1: temporaries) */
typedef struct tg_gpt_ln {
  starpu_data_handle_t w, b;
  tg_tensor *y, *mean, *rstd;
  int layer, first;
} tg_gpt_ln;

/* Packed activations (gpt.h, tg_gpt_attn): *t = the view at offset f of
 * block l's set of micro-batch mb; otherwise a new (rows, cols) temporary */
static int tg_gpt_act(const tg_gpt_micro *mb, int l, size_t f, tg_tensor *t, int rows,
                      int cols, tg_dtype dt) {
  const tg_gpt_attn *at = l >= 0 ? &mb->attn[l * mb->attn_stride] : NULL;
  if (at && at->pack.handle) {
    *t = *(const tg_tensor *)((const char *)at + f);
    return 0;
  }
  return tg_tensor_temp(t, rows, cols, dt);
}
#define ACT_VIEW(l, f, t, r, c, dt) tg_gpt_act(mb, (l), offsetof(tg_gpt_attn, f), t, r, c, dt)

/* sum = a + b (n, C) and the LayerNorm ln of it, in one task: sum and ln's
 * outputs are new temporaries (or views: tg_gpt_ln) */
static int tg_gpt_residual_ln(const tg_gpt *g, const tg_gpt_micro *mb, tg_tensor a, tg_tensor b,
                              tg_tensor *sum, const tg_gpt_ln *ln, const tg_task_opts *o) {
  int n = mb->n, C = g->cfg.channels, l = ln->layer;
  tg_dtype act = ACT(g);
  if (ln->first) {
    TG_TRY(ACT_VIEW(l, x, sum, n, C, act));
    TG_TRY(ACT_VIEW(l, ln1, ln->y, n, C, act));
    TG_TRY(ACT_VIEW(l, mean1, ln->mean, n, 1, TG_F32));
    TG_TRY(ACT_VIEW(l, rstd1, ln->rstd, n, 1, TG_F32));
  } else {
    TG_TRY(ACT_VIEW(l, x2, sum, n, C, act));
    TG_TRY(ACT_VIEW(l, ln2, ln->y, n, C, act));
    TG_TRY(ACT_VIEW(l, mean2, ln->mean, n, 1, TG_F32));
    TG_TRY(ACT_VIEW(l, rstd2, ln->rstd, n, 1, TG_F32));
  }
  if (!TG_GPT_FUSE_SMALL(g)) {
    TG_TRY(tg_residual_insert(a.handle, b.handle, sum->handle, o));
    return tg_layernorm_fwd_insert(sum->handle, ln->w, ln->b, ln->y->handle, ln->mean->handle,
                                   ln->rstd->handle, o);
  }
  return tg_residual_layernorm_fwd_insert(a.handle, b.handle, ln->w, ln->b, sum->handle,
                                          ln->y->handle, ln->mean->handle, ln->rstd->handle, o);
}

/* run.fused_blocks: the tasks between the two calls as one (codelets.h,
 * tg_fuse_begin); the group is dropped when its body failed */
static int tg_gpt_fuse_begin(const tg_gpt *g) {
  return g->run.fused_blocks > 0 ? tg_fuse_begin() : 0;
}
static int tg_gpt_fuse_end(const tg_gpt *g, int rc) {
  if (g->run.fused_blocks <= 0) return rc;
  int end = tg_fuse_end(rc == 0);
  return rc ? rc : end;
}

/* Block l of micro-batch mb's forward from its input x (n, C) into
 * mb->acts[l] and its attention buffers, under options o.  ln1_done: the
 * task that summed x also wrote the block's first LayerNorm (ln1, mean1,
 * rstd1 of mb->acts[l]).  x_out: the block's output (n, C), a new
 * temporary, and with `next` the LayerNorm of it that comes next (the next
 * block's ln1 or the final one), in the same task; x_out NULL (recompute)
 * stops after the MLP's hidden activation, the last thing the backward
 * reads. */
static int tg_gpt_block_fwd_tasks(tg_gpt *g, tg_gpt_micro *mb, int S, int l, tg_tensor x,
                                  int ln1_done, tg_tensor *x_out, const tg_gpt_ln *next,
                                  const tg_task_opts *o) {
  int n = mb->n, C = g->cfg.channels;
  tg_gpt_layer_acts *A = &mb->acts[l];
  tg_gpt_attn *at = &mb->attn[l * mb->attn_stride];
  A->x = x;
  if (!ln1_done) {
    TG_TRY(ACT_VIEW(l, ln1, &A->ln1, n, C, ACT(g)));       /* (n, C) */
    TG_TRY(ACT_VIEW(l, mean1, &A->mean1, n, 1, TG_F32));  /* (n, 1) f32 */
    TG_TRY(ACT_VIEW(l, rstd1, &A->rstd1, n, 1, TG_F32));  /* (n, 1) f32 */
    TG_TRY(tg_layernorm_fwd_insert(x.handle, W(g, TG_LN1W, l), W(g, TG_LN1B, l),
                                   A->ln1.handle, A->mean1.handle, A->rstd1.handle, o));
  }
  int N = NT(g);
  TG_TRY(tg_gpt_linear_fwd(g, A->ln1.handle, WG(g, TG_QKVW, l), W(g, TG_QKVB, l), TG_ACT_NONE,
                           &at->qkv, N > 1 ? &at->qkv_c : NULL, NULL, NULL, o));
  TG_TRY(tg_gpt_attn_fwd(g, at, S, o));
  tg_tensor proj;                    /* (n, C) */
  tg_split *pc;
  TG_TRY(tg_gpt_out(g, mb, TG_TILE_PROJ, l, &proj, &pc, n, C));
  TG_TRY(tg_gpt_linear_fwd(g, at->out.handle, WG(g, TG_ATTPROJW, l), W(g, TG_ATTPROJB, l),
                           TG_ACT_NONE, &proj, pc, NULL, NULL, o));
  /* x2 (n, C) = x + attention, and ln2 of it */
  tg_gpt_ln ln2 = {W(g, TG_LN2W, l), W(g, TG_LN2B, l), &A->ln2, &A->mean2, &A->rstd2, l, 0};
  TG_TRY(tg_gpt_residual_ln(g, mb, x, proj, &A->x2, &ln2, o));
  tg_gpt_out_release(&proj, pc);
  A->fch_c = A->fchg_c = NULL;
  if (N > 1) { /* the set's buffers, with their column plans */
    A->fch = at->fch;
    A->fchg = at->fchg;
    A->fch_c = &at->fch_c;
    A->fchg_c = &at->fchg_c;
  } else {
    TG_TRY(ACT_VIEW(l, fch, &A->fch, n, 4 * C, ACT(g)));   /* (n, 4C) pre-activation */
    TG_TRY(ACT_VIEW(l, fchg, &A->fchg, n, 4 * C, ACT(g))); /* (n, 4C) GELU of it */
  }
  TG_TRY(tg_gpt_linear_fwd(g, A->ln2.handle, WG(g, TG_FCW, l), W(g, TG_FCB, l), TG_ACT_GELU,
                           &A->fch, A->fch_c, &A->fchg, A->fchg_c, o));
  if (!x_out) return 0;
  TG_TRY(tg_gpt_out(g, mb, TG_TILE_PROJ, l, &proj, &pc, n, C));
  TG_TRY(tg_gpt_linear_fwd(g, A->fchg.handle, WG(g, TG_FCPROJW, l), W(g, TG_FCPROJB, l),
                           TG_ACT_NONE, &proj, pc, NULL, NULL, o));
  if (next) {
    TG_TRY(tg_gpt_residual_ln(g, mb, A->x2, proj, x_out, next, o));
  } else {
    TG_TRY(TEMP(x_out, n, C));
    TG_TRY(tg_residual_insert(A->x2.handle, proj.handle, x_out->handle, o));
  }
  tg_gpt_out_release(&proj, pc);
  /* the last block's backward comes right after: nothing to gain */
  if (!g->run.recompute || l == g->cfg.num_layers - 1) return 0;
  /* keep x only; the shared attention buffers whole for the next block */
  tg_gpt_block_drop(mb, l);
  tg_split_join(&at->qkv, &at->qkv_s);
  return 0;
}

/* ... its tasks, one task with run.fused_blocks */
static int tg_gpt_block_fwd(tg_gpt *g, tg_gpt_micro *mb, int S, int l, tg_tensor x,
                            int ln1_done, tg_tensor *x_out, const tg_gpt_ln *next,
                            const tg_task_opts *o) {
  TG_TRY(tg_gpt_fuse_begin(g));
  return tg_gpt_fuse_end(g, tg_gpt_block_fwd_tasks(g, mb, S, l, x, ln1_done, x_out, next, o));
}

/* Layers [first, end) of micro-batch mb's forward: the embedding before
 * layer 0, the final LayerNorm after the last; the residual stream between
 * two calls in mb->xL. */
static int tg_gpt_forward_layers(tg_gpt *g, tg_gpt_micro *mb, int S, int first, int end) {
  const tg_gpt_config *c = &g->cfg;
  int n = mb->n, C = c->channels, L = c->num_layers;
  tg_gopts go;
  tg_tensor x = mb->xL;
  if (first == 0) {
    TG_TRY(ACT_VIEW(0, x, &x, n, C, ACT(g)));
    TG_TRY(tg_embedding_fwd_insert(g->run.T, mb->tokens, W(g, TG_WTE, 0), W(g, TG_WPE, 0),
                                   x.handle,
                                   OPT(3 * L + 1, TG_GPT_RANKS(L), "m%d.embed", mb->micro)));
  }
  /* each block's last residual add computes the LayerNorm after it too:
   * the next block's ln1 in this range, or the final one after the last
   * block (a range that stops before it leaves that to the next call) */
  for (int l = first; l < end; l++) {
    tg_tensor next;
    tg_gpt_ln ln;
    const tg_gpt_ln *fused = &ln;
    if (l + 1 < end) {
      tg_gpt_layer_acts *B = &mb->acts[l + 1];
      ln = (tg_gpt_ln){W(g, TG_LN1W, l + 1), W(g, TG_LN1B, l + 1), &B->ln1, &B->mean1,
                       &B->rstd1, l + 1, 1};
    } else if (end == L) {
      ln = (tg_gpt_ln){W(g, TG_LNFW, 0), W(g, TG_LNFB, 0), &mb->lnf, &mb->meanf, &mb->rstdf,
                       -1, 0};
    } else {
      fused = NULL;
    }
    TG_TRY(tg_gpt_block_fwd(g, mb, S, l, x, l > first, &next, fused, FWD(l)));
    x = next;
  }
  mb->xL = x;
  if (end < L || end > first) return 0; /* lnf: with the last block's sum */
  TG_TRY(TEMP(&mb->lnf, n, C));
  TG_TRY(tg_temp(&mb->meanf, n, 1));
  TG_TRY(tg_temp(&mb->rstdf, n, 1));
  return tg_layernorm_fwd_insert(x.handle, W(g, TG_LNFW, 0), W(g, TG_LNFB, 0),
                                 mb->lnf.handle, mb->meanf.handle, mb->rstdf.handle,
                                 OPT(2 * L, TG_GPT_RANKS(L), "m%d.head", mb->micro));
}

static int tg_gpt_forward_micro(tg_gpt *g, tg_gpt_micro *mb, int S) {
  return tg_gpt_forward_layers(g, mb, S, 0, g->cfg.num_layers);
}

/* Releases what a forward-only pass left registered. */
static void tg_gpt_release_forward(tg_gpt *g, tg_gpt_micro *mb) {
  for (int l = 0; l < g->cfg.num_layers; l++) {
    tg_gpt_block_drop(mb, l);
    tg_tensor_release(&mb->acts[l].x);
    tg_gpt_attn *at = &mb->attn[l * mb->attn_stride];
    tg_split_join(&at->qkv, &at->qkv_s);
  }
  tg_tensor *fin[] = {&mb->xL, &mb->lnf, &mb->meanf, &mb->rstdf};
  for (size_t k = 0; k < sizeof fin / sizeof fin[0]; k++) tg_tensor_release(fin[k]);
  tg_gpt_out_release(&mb->dlnf, mb->dlnf_c);
}

/* The embedding backward of micro-batch mb from dres = dL/dx0 (n, C),
 * released after. */
static int tg_gpt_embed_bwd(tg_gpt *g, const tg_gpt_micro *mb, tg_tensor *dres) {
  int L = g->cfg.num_layers;
  tg_gopts go;
  int rc = tg_gpt_take(g, mb, TG_WTE, 0, 0, NULL);
  if (rc == 0) rc = tg_gpt_take(g, mb, TG_WPE, 0, 0, NULL);
  if (rc == 0)
    rc = tg_embedding_bwd_insert(g->run.T, mb->tokens, dres->handle, G(g, TG_WTE, 0),
                                 G(g, TG_WPE, 0), GMODE(g),
                                 OPT(L, TG_GPT_RANKS(L), "m%d.embed_bwd", mb->micro));
  tg_tensor_release(dres);
  return rc;
}

/* Tiled: the residual stream's gradient dres (n, C) as a new temporary, a
 * copy, before the LayerNorm backward adds into it.  The weight gradient of
 * the projection reads the old dres, and an add in place would wait for
 * that GEMM (a write after read): on many cores, with the backward-data in
 * tiles, those waits were most of a layer's backward (GPT-2 124M, 64
 * simulated cores: bench/results/2026-11-26-tiles.md).  The copy is the same
 * bits. */
static int tg_gpt_dres_rename(tg_gpt *g, tg_tensor *dres, const tg_task_opts *o) {
  if (NT(g) < 2) return 0;
  tg_tensor next;
  TG_TRY(TEMP(&next, dres->rows, dres->cols));
  int rc = tg_gather_rows_insert(1, &dres->handle, next.handle, o);
  tg_tensor_release(dres);
  *dres = next;
  return rc;
}

/* Linear layer (pw, l), fed by LayerNorm (lw, l) of input LX with
 * statistics mean and rstd: its backward as tg_gpt_linear_bwd (no
 * activation) into dX, then the LayerNorm's from dX, adding into the
 * residual stream's gradient dres; one task when the run fuses the
 * backward. */
static int tg_gpt_linear_ln_bwd(tg_gpt *g, const tg_gpt_micro *mb, tg_gpt_param pw,
                                tg_gpt_param lw, int l, starpu_data_handle_t dZ,
                                starpu_data_handle_t X, starpu_data_handle_t LX,
                                starpu_data_handle_t mean, starpu_data_handle_t rstd,
                                tg_tensor *dX, tg_split *dXc, tg_tensor *dres,
                                const tg_task_opts *ow, const tg_task_opts *o) {
  tg_accum lnmode;
  if (TG_GPT_FUSED_BWD(g, dXc)) {
    tg_accum mode;
    TG_TRY(tg_gpt_pair_take(g, mb, pw, l, &mode));
    TG_TRY(tg_gpt_pair_take(g, mb, lw, l, &lnmode));
    tg_layernorm_bwd_part ln = {.x = LX, .w = W(g, lw, l), .mean = mean, .rstd = rstd,
                                .dres = dres->handle, .dw = G(g, lw, l),
                                .db = G(g, (tg_gpt_param)(lw + 1), l), .accum = lnmode};
    return tg_linear_layernorm_bwd_insert(dZ, WG(g, pw, l), X, dX->handle, G(g, pw, l),
                                          G(g, (tg_gpt_param)(pw + 1), l), mode, &ln, o);
  }
  TG_TRY(tg_gpt_linear_bwd(g, mb, pw, l, dZ, X, WG(g, pw, l), TG_ACT_NONE, NULL, dX, dXc, ow, o));
  TG_TRY(tg_gpt_dres_rename(g, dres, o));
  TG_TRY(tg_gpt_pair_take(g, mb, lw, l, &lnmode));
  return tg_layernorm_bwd_insert(dX->handle, LX, W(g, lw, l), mean, rstd, dres->handle,
                                 G(g, lw, l), G(g, (tg_gpt_param)(lw + 1), l), lnmode, o);
}

/* The backward of micro-batch mb in three parts (tg_gpt_backward_micro, or
 * layer by layer over the micro-batches: tg_gpt_micros): the final
 * LayerNorm's, which starts mb->dres ... */
static int tg_gpt_backward_head(tg_gpt *g, tg_gpt_micro *mb) {
  const tg_gpt_config *c = &g->cfg;
  int n = mb->n, C = c->channels, L = c->num_layers;
  tg_gopts go;
  tg_tensor *d = &mb->dres;
  if (mb->attn[0].dres.handle) *d = mb->attn[0].dres; /* packed (gpt.h) */
  else TG_TRY(TEMP(d, n, C));
  TG_TRY(tg_fill_insert(d->handle, 0.0f, BWD(L)));
  tg_accum lnmode;
  TG_TRY(tg_gpt_pair_take(g, mb, TG_LNFW, 0, &lnmode));
  TG_TRY(tg_layernorm_bwd_insert(mb->dlnf.handle, mb->xL.handle, W(g, TG_LNFW, 0),
                                 mb->meanf.handle, mb->rstdf.handle, d->handle,
                                 G(g, TG_LNFW, 0), G(g, TG_LNFB, 0), lnmode, BWD(L)));
  tg_tensor *fin[] = {&mb->xL, &mb->lnf, &mb->meanf, &mb->rstdf};
  for (size_t k = 0; k < sizeof fin / sizeof fin[0]; k++) tg_tensor_release(fin[k]);
  tg_gpt_out_release(&mb->dlnf, mb->dlnf_c);
  return 0;
}

/* ... block l's ... */
static int tg_gpt_backward_block(tg_gpt *g, tg_gpt_micro *mb, int S, int l);
static int tg_gpt_backward_layer(tg_gpt *g, tg_gpt_micro *mb, int S, int l) {
  int L = g->cfg.num_layers;
  tg_gopts go;
  tg_gpt_layer_acts *A = &mb->acts[l];
  if (g->run.recompute && l < L - 1) /* at the backward's priority: it waits for it */
    TG_TRY(tg_gpt_block_fwd(g, mb, S, l, A->x, 0, NULL, NULL,
                            OPT(L + l, TG_GPT_RANKS(L), "L%d.m%d.recompute", l, mb->micro)));
  TG_TRY(tg_gpt_fuse_begin(g));
  TG_TRY(tg_gpt_fuse_end(g, tg_gpt_backward_block(g, mb, S, l)));
  return tg_gpt_exchange_layer(g, mb, l);
}

/* ... (its tasks) ... */
static int tg_gpt_backward_block(tg_gpt *g, tg_gpt_micro *mb, int S, int l) {
  const tg_gpt_config *c = &g->cfg;
  int n = mb->n, C = c->channels, L = c->num_layers, N = NT(g);
  tg_gopts go, gw;
  tg_tensor *dres = &mb->dres, tmp;
  tg_gpt_layer_acts *A = &mb->acts[l];
  tg_gpt_attn *at = &mb->attn[l * mb->attn_stride];
  /* MLP block: dres holds dL/d(x2 + fcproj) */
  tg_split *tc, *dc;
  TG_TRY(tg_gpt_out(g, mb, TG_TILE_DFCH, l, &tmp, &tc, n, 4 * C)); /* dL/dfch */
  TG_TRY(tg_gpt_linear_bwd(g, mb, TG_FCPROJW, l, dres->handle, A->fchg.handle,
                           WG(g, TG_FCPROJW, l), TG_ACT_GELU, A->fch.handle, &tmp, tc,
                           WGRAD(l), BWD(l)));
  tg_gpt_out_release(&A->fchg, A->fchg_c);
  tg_gpt_out_release(&A->fch, A->fch_c);
  tg_tensor dln;                                                   /* (n, C) */
  TG_TRY(tg_gpt_out(g, mb, TG_TILE_DLN, l, &dln, &dc, n, C));
  TG_TRY(tg_gpt_linear_ln_bwd(g, mb, TG_FCW, TG_LN2W, l, tmp.handle, A->ln2.handle,
                              A->x2.handle, A->mean2.handle, A->rstd2.handle, &dln, dc,
                              dres, WGRAD(l), BWD(l)));
  tg_gpt_out_release(&tmp, tc);
  tg_gpt_out_release(&dln, dc);
  tg_tensor *mlp[] = {&A->ln2, &A->mean2, &A->rstd2, &A->x2};
  for (size_t k = 0; k < sizeof mlp / sizeof mlp[0]; k++) tg_tensor_release(mlp[k]);
  /* attention block: dres holds dL/d(x + attproj) */
  TG_TRY(tg_gpt_linear_bwd(g, mb, TG_ATTPROJW, l, dres->handle, at->out.handle,
                           WG(g, TG_ATTPROJW, l), TG_ACT_NONE, NULL, &at->dout,
                           N > 1 ? &at->dout_c : NULL, WGRAD(l), BWD(l)));
  TG_TRY(tg_gpt_attn_bwd(g, at, S, BWD(l)));
  TG_TRY(tg_gpt_out(g, mb, TG_TILE_DLN, l, &dln, &dc, n, C));
  TG_TRY(tg_gpt_linear_ln_bwd(g, mb, TG_QKVW, TG_LN1W, l, at->dqkv.handle, A->ln1.handle,
                              A->x.handle, A->mean1.handle, A->rstd1.handle, &dln, dc,
                              dres, WGRAD(l), BWD(l)));
  tg_gpt_out_release(&dln, dc);
  tg_tensor *att[] = {&A->ln1, &A->mean1, &A->rstd1, &A->x};
  for (size_t k = 0; k < sizeof att / sizeof att[0]; k++) tg_tensor_release(att[k]);
  return 0;
}

/* ... and the embeddings', which ends it */
static int tg_gpt_backward_tail(tg_gpt *g, tg_gpt_micro *mb) {
  if (g->dwte_blocks > 1) { /* dwte is in row blocks: after the last classifier */
    g->embed_dres[mb->micro] = mb->dres;
    return 0;
  }
  return tg_gpt_embed_bwd(g, mb, &mb->dres);
}

static int tg_gpt_backward_micro(tg_gpt *g, tg_gpt_micro *mb, int S) {
  TG_TRY(tg_gpt_backward_head(g, mb));
  for (int l = g->cfg.num_layers - 1; l >= 0; l--) TG_TRY(tg_gpt_backward_layer(g, mb, S, l));
  return tg_gpt_backward_tail(g, mb);
}

/* The relay's gates (gpt_relay.c): per device, the handle of the tensor at
 * byte offset `field` of its first micro-batch of mbs (a tg_tensor), NULL
 * (not gated) before that tensor is registered. */
static void tg_gpt_relay_gates(const tg_gpt *g, tg_gpt_micro **mbs, int M, size_t field,
                               starpu_data_handle_t *gate) {
  for (int d = 0; d < g->dp->ndev; d++) gate[d] = NULL;
  for (int k = M - 1; k >= 0; k--) { /* the first one last: it stays */
    const tg_tensor *t = (const tg_tensor *)((const char *)mbs[k] + field);
    gate[mbs[k]->dev] = t->handle;
  }
}

/* The relay before the forward of layer l: at the first layer, the shards
 * of layers 0 and 1 and the replicas of layer 0 at once; then, once each
 * device's input of layer l is there, the replicas of layer l + 1 and the
 * shards of layer l + 2, which the compute of layer l hides.  Each layer's
 * shards and (but the last layer's) replicas are dropped after its forward:
 * kept, the shards of 64 layers of C 8192 (13 GB a device) filled the
 * devices, and StarPU wrote them back to the host to make room. */
static int tg_gpt_relay_forward(tg_gpt *g, tg_gpt_micro **mbs, int M, int l) {
  if (!g->relay) return 0;
  starpu_data_handle_t gate[TG_DP_MAX_DEVICES];
  tg_gpt_relay_gates(g, mbs, M, offsetof(tg_gpt_micro, xL), gate); /* none at layer 0 */
  if (l == 0) {
    TG_TRY(tg_gpt_relay_stage(g, 0, NULL));
    TG_TRY(tg_gpt_relay_stage(g, 1, NULL));
    TG_TRY(tg_gpt_relay_gather(g, 0, NULL));
  }
  TG_TRY(tg_gpt_relay_gather(g, l + 1, gate));
  return tg_gpt_relay_stage(g, l + 2, gate);
}

/* The same before the backward of layer l, descending, once the gradient
 * entering layer l is there: the replicas of layer l - 1 and the shards of
 * layer l - 2 (the last layer's replicas are the forward's).  dres is
 * updated in place, so layer l's first write of it waits for these copies
 * to finish reading it; they are ready long before (the MLP's backward and
 * the recompute come first). */
static int tg_gpt_relay_backward(tg_gpt *g, tg_gpt_micro **mbs, int M, int l) {
  if (!g->relay) return 0;
  starpu_data_handle_t gate[TG_DP_MAX_DEVICES];
  tg_gpt_relay_gates(g, mbs, M, offsetof(tg_gpt_micro, dres), gate);
  if (l == g->cfg.num_layers - 1) TG_TRY(tg_gpt_relay_stage(g, l - 1, NULL));
  TG_TRY(tg_gpt_relay_gather(g, l - 1, gate));
  return tg_gpt_relay_stage(g, l - 2, gate);
}

/* The backward of every micro-batch, layer by layer: each layer's
 * reduce-scattered sums finished before the layer below adds into the
 * leaves they share (tg_gpt_scatter). */
static int tg_gpt_backward_by_layer(tg_gpt *g, tg_gpt_micro **mbs, int M, int S) {
  const tg_gpt_config *c = &g->cfg;
  for (int k = 0; k < M; k++) TG_TRY(tg_gpt_backward_head(g, mbs[k]));
  for (int l = c->num_layers - 1; l >= 0; l--) {
    /* the relay: layer l - 1's weights once the gradient entering layer l
     * is there (the last layer's stay from the forward) */
    TG_TRY(tg_gpt_relay_backward(g, mbs, M, l));
    for (int k = 0; k < M; k++) TG_TRY(tg_gpt_backward_layer(g, mbs[k], S, l));
    tg_gpt_relay_drop(g, l, 1, 1);
    for (int p = 0; p < TG_GPT_NPARAMS; p++)
      if (tg_gpt_param_per_layer((tg_gpt_param)p)) TG_TRY(tg_sum_finish(GSUM(g, p, l)));
  }
  for (int k = 0; k < M; k++) TG_TRY(tg_gpt_backward_tail(g, mbs[k]));
  return 0;
}

static int tg_gpt_check_batch(const tg_gpt *g, const tg_batch *batch) {
  const tg_gpt_run_config *r = &g->run;
  if (batch->nmicro != r->nmicro || batch->rows != r->B * r->T)
    return tg_fail(EINVAL, "GPT: batch of %d rows in %d micro-batches, the graph was built "
                   "for %d x %d tokens in %d", batch->rows, batch->nmicro, r->B, r->T,
                   r->nmicro);
  return 0;
}

/* 1 when the classifier runs split (kernels/cpu/lm_classifier.c): training
 * with the gradients added in place (TG_COMMUTE, one memory node), where the
 * fused task would hold dwte for its whole run and the micro-batches'
 * classifiers would run one at a time.  In mixed precision dlogits are
 * 16-bit like the other activation gradients (on a CPU with native bf16
 * GEMMs the classifier and the dwte GEMM use them as they are, matmul_onednn.c).
 * With STARPU_REDUX or deterministic leaves each micro-batch adds
 * into its own buffer and the fused task is kept (bit for bit as before).
 * The price: each micro-batch's whole (n, Vp) dlogits at once, 206 MB at
 * GPT-2 124M, B=8 T=256 with 2 micro-batches (1024 rows), where the fused
 * task's chunk of logits is 51 MB per worker; there too the split cuts the
 * workers' idle time. */
static int tg_gpt_classifier_split(const tg_gpt *g, int backward) {
  return backward && tg_gpt_split_node();
}

/* 1 when the classifier runs in vocabulary tiles (gpt_tiles.c): with the
 * linear layers tiled, training, in f32 */
static int tg_gpt_classifier_tiled(const tg_gpt *g, int backward) {
  return backward && NT(g) > 1 && !ACT(g);
}

int tg_gpt_classifier_tiles(const tg_gpt *g) {
  return tg_gpt_classifier_tiled(g, 1) ? NT(g) : 0;
}

/* dwte (Vp, C) += alpha dlogits^T lnf for micro-batch mb: off the critical
 * path (the wte update at the end of the step is the only task that waits
 * for it); one GEMM, or one per row block of dwte, where block j's
 * increments of the micro-batches wait for each other, not for those of
 * the other blocks */
static int tg_gpt_dwte(tg_gpt *g, tg_gpt_micro *mb, starpu_data_handle_t dl, float alpha) {
  int L = g->cfg.num_layers, i = mb->micro;
  tg_gopts go;
  tg_accum mode = TG_ACCUMULATE;
  TG_TRY(tg_gpt_take(g, mb, TG_WTE, 0, 1, &mode));
  if (g->dwte_blocks < 2) /* dl is 16-bit in mixed precision (tg_gpt_classifier) */
    return tg_gpt_gemm_tn(g, alpha, dl, mb->lnf.handle, G(g, TG_WTE, 0), mode,
                          OPT(0, TG_GPT_RANKS(L), "m%d.classifier_dwte", i));
  for (int j = 0; j < g->dwte_blocks; j++)
    TG_TRY(tg_lm_classifier_dwte_insert(
        tg_split_start(g->cfg.padded_vocab_size, g->dwte_blocks, j, NULL), alpha, dl,
        mb->lnf.handle, g->dwte_split.parts[j], mode,
        OPT(0, TG_GPT_RANKS(L), "m%d.classifier_dwte%d", i, j)));
  return 0;
}

/* The training classifier of micro-batch mb in vocabulary tiles: the
 * logits and their stats per tile, the loss and lse in one task, dlogits
 * per tile (times the loss scale, so that dlnf, a tiled backward-data on
 * wte, and the dwte increment take them as they are), then dwte. */
static int tg_gpt_classifier_tiles_insert(tg_gpt *g, tg_gpt_micro *mb, tg_sum *loss_sum,
                                          float scale) {
  const tg_gpt_config *c = &g->cfg;
  int L = c->num_layers, i = mb->micro, N = NT(g), V = c->vocab_size;
  int Vp = c->padded_vocab_size;
  struct tg_gpt_tilebufs *tb = &g->tilebufs[i];
  starpu_data_handle_t wte = WG(g, TG_WTE, 0);
  tg_gopts go;
  const tg_task_opts *o = OPT(2 * L, TG_GPT_RANKS(L), "m%d.classifier", i);
  tg_split_write(&tb->dl, &tb->dl_c);
  tg_split_write(&tb->stats, &tb->stats_c);
  tg_task_opts buf;
  for (int j = 0; j < N; j++)
    TG_TRY(tg_lm_logits_tile_insert(V, tg_split_start(Vp, N, j, NULL), mb->lnf.handle, wte,
                                    tb->dl_c.parts[j], tb->stats_c.parts[j],
                                    tg_gpt_tile_opts(g, j, o, &buf)));
  tg_split_join(&tb->dl, &tb->dl_c);
  tg_split_join(&tb->stats, &tb->stats_c);
  tg_tensor lse; /* (n, 2) hi, lo */
  TG_TRY(tg_temp(&lse, mb->n, 2));
  int rc = tg_lm_softmax_combine_insert(V, scale, tb->stats.handle, tb->dl.handle, mb->targets,
                                        lse.handle, tg_sum_handle(loss_sum, i),
                                        tg_sum_mode(loss_sum), o);
  if (rc == 0) tg_split_write(&tb->dl, &tb->dl_c);
  for (int j = 0; j < N && rc == 0; j++)
    rc = tg_lm_dlogits_tile_insert(V, tg_split_start(Vp, N, j, NULL),
                                   scale * g->optim.scaler.scale, lse.handle, mb->targets,
                                   tb->dl_c.parts[j], tg_gpt_tile_opts(g, j, o, &buf));
  tg_split_join(&tb->dl, &tb->dl_c);
  tg_tensor_release(&lse);
  TG_TRY(rc);
  TG_TRY(tg_gpt_linear_bwd_data(g, tb->dl.handle, wte, TG_ACT_NONE, NULL, &mb->dlnf,
                                mb->dlnf_c, o));
  return tg_gpt_dwte(g, mb, tb->dl.handle, 1.0f);
}

/* dL/dlnf (n, C) of micro-batch mb: the tile buffer the tiled classifier
 * writes, or a temporary */
static int tg_gpt_dlnf(tg_gpt *g, tg_gpt_micro *mb) {
  mb->dlnf_c = NULL;
  if (!tg_gpt_classifier_tiled(g, 1)) return TEMP(&mb->dlnf, mb->n, g->cfg.channels);
  mb->dlnf = g->tilebufs[mb->micro].dlnf;
  mb->dlnf_c = &g->tilebufs[mb->micro].dlnf_c;
  return 0;
}

/* The tied classifier of micro-batch mb: loss into its leaf of loss_sum and,
 * training, dlnf and dwte's increment. */
static int tg_gpt_classifier(tg_gpt *g, tg_gpt_micro *mb, tg_sum *loss_sum, int backward,
                             float scale) {
  const tg_gpt_config *c = &g->cfg;
  int L = c->num_layers, i = mb->micro;
  float gs = g->optim.scaler.scale;
  tg_gopts go;
  if (tg_gpt_classifier_tiled(g, backward))
    return tg_gpt_classifier_tiles_insert(g, mb, loss_sum, scale);
  if (!tg_gpt_classifier_split(g, backward)) {
    /* the fused kernel adds into dwte[:V] */
    if (backward) GZERO(TG_WTE, 0);
    return tg_lm_classifier_scaled_insert(
        c->vocab_size, g->run.classifier_chunk, scale, gs, mb->lnf.handle, WG(g, TG_WTE, 0),
        mb->targets, backward ? mb->dlnf.handle : NULL, backward ? G(g, TG_WTE, 0) : NULL,
        backward ? GMODE(g) : TG_REDUCE, tg_sum_handle(loss_sum, i), tg_sum_mode(loss_sum),
        OPT(2 * L, TG_GPT_RANKS(L), "m%d.classifier", i));
  }
  /* dlogits (n, Vp): the padded columns are zero, so the GEMM adds nothing
   * to the padded rows of dwte (or, as the first contribution, zeroes them) */
  tg_tensor dl; /* 16-bit in mixed precision, as the activations */
  TG_TRY(TEMP(&dl, mb->n, c->padded_vocab_size));
  int rc = tg_lm_classifier_dlogits_insert(
      c->vocab_size, g->run.classifier_chunk, scale, gs, mb->lnf.handle, WG(g, TG_WTE, 0),
      mb->targets, mb->dlnf.handle, dl.handle, tg_sum_handle(loss_sum, i),
      tg_sum_mode(loss_sum), OPT(2 * L, TG_GPT_RANKS(L), "m%d.classifier", i));
  if (rc == 0) rc = tg_gpt_dwte(g, mb, dl.handle, gs);
  tg_tensor_release(&dl);
  return rc;
}

/* How many row blocks of dwte the split classifier adds into this step
 * (1: the whole).  A micro-batch's increment is about a sixth of its
 * classifier and one block at a time is enough while the workers are few;
 * with many micro-batches on many workers, the increments of one dwte, one
 * at a time, became the whole step's tail (GPT-2 124M, 64 micro-batches on
 * 64 simulated cores: most of the step, on one core;
 * bench/results/2026-11-24-many-core.md).  So by default a block per 4
 * workers, at most 16. */
static int tg_gpt_dwte_blocks(const tg_gpt *g) {
  if (!tg_gpt_classifier_split(g, 1)) return 1;
  int n = g->run.classifier_blocks;
  if (n == 0) {
    int w = tg_ncpu_workers() + starpu_cuda_worker_get_count();
    n = (w + 3) / 4;
    if (n > 16) n = 16;
  }
  if (n > g->cfg.padded_vocab_size) n = g->cfg.padded_vocab_size;
  return n < 1 ? 1 : n;
}

int tg_gpt_classifier_blocks(const tg_gpt *g) {
  return tg_gpt_classifier_split(g, 1) ? tg_gpt_dwte_blocks(g) : 0;
}

/* Before the micro-batches: dwte into its row blocks when they are used
 * (the plan made once, or again when the number changes). */
static int tg_gpt_dwte_split(tg_gpt *g) {
  g->dwte_blocks = tg_gpt_dwte_blocks(g);
  if (g->dwte_blocks < 2) return 0;
  tg_tensor *dwte = &g->g[TG_WTE][0];
  if (g->dwte_split.n != g->dwte_blocks) {
    tg_split_free(dwte, &g->dwte_split);
    TG_TRY(tg_split_plan(dwte, g->dwte_blocks, &g->dwte_split));
  }
  if (!g->embed_dres) { /* kept for the next steps; tg_gpt_dwte_join empties it */
    g->embed_dres = calloc((size_t)g->run.nmicro, sizeof *g->embed_dres);
    if (!g->embed_dres) return tg_fail(ENOMEM, "GPT: out of memory");
  }
  tg_split_write(dwte, &g->dwte_split);
  return 0;
}

/* After them: dwte whole again, then the embedding backwards that waited
 * for it (or, after an error, their dres released).  Returns rc, or the
 * first error of its own. */
static int tg_gpt_dwte_join(tg_gpt *g, const tg_batch *batch, int rc) {
  if (g->dwte_blocks < 2) return rc;
  tg_split_join(&g->g[TG_WTE][0], &g->dwte_split);
  for (int i = 0; g->embed_dres && i < g->run.nmicro; i++) {
    tg_tensor *dres = &g->embed_dres[i];
    if (!dres->handle) continue;
    if (rc != 0) {
      tg_tensor_release(dres);
      continue;
    }
    tg_gpt_micro mb = {.n = batch->rows / g->run.nmicro, .micro = i, .tokens = batch->x[i]};
    tg_gpt_micro_place(g, &mb);
    rc = tg_gpt_embed_bwd(g, &mb, dres);
  }
  g->dwte_blocks = 1;
  return rc;
}

/* The micro-batch submitted k-th: in order, or sharded round-robin over the
 * devices (device 0's first, device 1's first, ..., device 0's second, ...),
 * so that every device gets work from the start of the step instead of
 * waiting for the submission of the devices before it (StarPU's submission
 * takes time, simulated too).  Each device still receives its own
 * micro-batches in order, so its slot sums them in the same order. */
static int tg_gpt_submission_order(const tg_gpt *g, int k) {
  if (!g->dp) return k;
  int M = g->run.nmicro, N = g->dp->ndev;
  for (int r = 0, seen = 0;; r++)
    for (int d = 0; d < N; d++) {
      int first = (d * M + N - 1) / N, end = ((d + 1) * M + N - 1) / N; /* device d's micros */
      if (first + r < end && seen++ == k) return first + r;
    }
}

/* Submits the micro-batches of a batch into the step's sums (g->sums,
 * loss_sum).  Each micro-batch's forward and classifier, then its backward;
 * sharded, in phases: the forwards layer by layer (layer l of every
 * micro-batch, round-robin over the devices, then layer l + 1), the
 * classifiers, then every backward; tiled (gpt_tiles.c) the same.  A device runs its forwards before its
 * backwards anyway (their priorities), and StarPU's submission, one task
 * after the other, would otherwise reach the last device only after the
 * whole step of every device before it was submitted (by whole forwards,
 * after 1 ms of a simulated 8-GPU step; layer by layer, 8 GPUs 29.2 ->
 * 28.5 ms, 2 GPUs 26.8 -> 26.6: bench/results/2026-11-26-bucket-size.md). */
static int tg_gpt_micros(tg_gpt *g, tg_sum *loss_sum, const tg_batch *batch, int backward,
                         float scale) {
  const tg_gpt_config *c = &g->cfg;
  int M = g->run.nmicro, S = g->run.attn_splits, L = c->num_layers;
  /* tiled, there are many more tasks to submit (at 1 us each in the
   * simulator, the 4th micro-batch of GPT-2 124M in 16 tiles started 13 ms
   * after the first): in phases too */
  int phased = backward && (g->dp || NT(g) > 1);
  tg_gpt_micro **mbs = calloc((size_t)M, sizeof *mbs);
  if (!mbs) return tg_fail(ENOMEM, "GPT: out of memory");
  int rc = 0;
  for (int k = 0; k < M && rc == 0; k++) {
    int i = tg_gpt_submission_order(g, k);
    tg_gpt_micro *mb = mbs[k] = calloc(1, sizeof *mb);
    if (!mb) {
      rc = tg_fail(ENOMEM, "GPT: out of memory");
      break;
    }
    mb->n = batch->rows / M;
    mb->micro = i;
    mb->last = k == M - 1;
    mb->tokens = batch->x[i];
    mb->targets = batch->y[i];
    mb->attn = &g->attn[i];
    mb->attn_stride = g->run.recompute ? 0 : M;
    tg_gpt_micro_place(g, mb);
    if (phased) continue;
    rc = tg_gpt_forward_micro(g, mb, S);
    if (rc == 0 && backward) rc = tg_gpt_dlnf(g, mb);
    if (rc == 0) rc = tg_gpt_classifier(g, mb, loss_sum, backward, scale);
    if (rc == 0 && backward)
      rc = tg_gpt_backward_micro(g, mb, S);
    else if (rc == 0)
      tg_gpt_release_forward(g, mb);
    free(mb);
    mbs[k] = NULL;
  }
  for (int l = 0; l < L && phased && rc == 0; l++) {
    rc = tg_gpt_relay_forward(g, mbs, M, l);
    for (int k = 0; k < M && rc == 0; k++) rc = tg_gpt_forward_layers(g, mbs[k], S, l, l + 1);
    tg_gpt_relay_drop(g, l, l < L - 1, 1); /* the last layer's copies: for its backward */
  }
  for (int k = 0; k < M && phased && rc == 0; k++) {
    rc = tg_gpt_dlnf(g, mbs[k]);
    if (rc == 0) rc = tg_gpt_classifier(g, mbs[k], loss_sum, backward, scale);
  }
  if (phased && rc == 0 && g->scatter) rc = tg_gpt_backward_by_layer(g, mbs, M, S);
  for (int k = 0; k < M && phased && !g->scatter && rc == 0; k++)
    rc = tg_gpt_backward_micro(g, mbs[k], S);
  for (int k = 0; k < M; k++) {
    if (mbs[k] && rc) tg_gpt_release_forward(g, mbs[k]); /* after an error */
    free(mbs[k]);
  }
  free(mbs);
  return rc;
}

/* One batch: training (backward) is summed over the ranks too, each rank
 * holding B of the ranks * B sequences of the global batch; evaluation is
 * local. */
static int tg_gpt_run(tg_gpt *g, const tg_batch *batch, int backward) {
  TG_TRY(tg_gpt_check_batch(g, batch));
  const tg_gpt_config *c = &g->cfg;
  int M = g->run.nmicro, ranks = backward ? tg_dist_size() : 1;
  g->sums = backward ? calloc((size_t)TG_GPT_NPARAMS * TG_GPT_MAX_LAYERS, sizeof *g->sums)
                     : NULL;
  if (backward && !g->sums) return tg_fail(ENOMEM, "GPT: out of memory");
  int rc = 0;
  for (int p = 0; p < TG_GPT_NPARAMS && backward && rc == 0; p++)
    for (int l = 0; l < tg_gpt_slices((tg_gpt_param)p, c) && rc == 0; l++)
      rc = tg_gpt_sum_begin(g, (tg_gpt_param)p, l);
  /* the loss in leaves, one per micro-batch, whatever the gradients do: a
   * loss added in place would make the micro-batches' classifiers take
   * turns (see tg_gpt_classifier_split) */
  tg_sum loss_sum = {0};
  if (rc == 0) rc = tg_sum_begin_ordered(&loss_sum, &g->loss, 1, M, backward);
  if (rc == 0 && backward) rc = tg_gpt_dwte_split(g);
  if (rc == 0)
    rc = tg_gpt_micros(g, &loss_sum, batch, backward,
                       1.0f / ((float)g->run.B * g->run.T * ranks));
  if (backward) rc = tg_gpt_dwte_join(g, batch, rc);
  /* finish every sum begun, even after an error, so no leaf is left behind */
  for (int p = 0; p < TG_GPT_NPARAMS && backward; p++)
    for (int l = 0; l < tg_gpt_slices((tg_gpt_param)p, c); l++) {
      int r = tg_sum_finish(GSUM(g, p, l));
      if (rc == 0) rc = r;
    }
  int r = tg_sum_finish(&loss_sum);
  if (rc == 0) rc = r;
  free(g->sums);
  g->sums = NULL;
  TG_TRY(rc);
  g->loss_batches++;
  return 0;
}

int tg_gpt_forward_backward(tg_gpt *g, const tg_batch *batch) { return tg_gpt_run(g, batch, 1); }
int tg_gpt_evaluate(tg_gpt *g, const tg_batch *batch) { return tg_gpt_run(g, batch, 0); }

int tg_gpt_update(tg_gpt *g, float lr) { return tg_optim_update(&g->optim, lr); }

int tg_gpt_step(tg_gpt *g, const tg_batch *batch, float lr) {
  TG_TRY(tg_gpt_forward_backward(g, batch));
  return tg_gpt_update(g, lr);
}

int tg_gpt_loss(tg_gpt *g, double *mean_loss, int reset) {
  float loss = 0;
  TG_TRY(tg_tensor_read(&g->loss, &loss));
  if (mean_loss) *mean_loss = g->loss_batches ? loss / g->loss_batches : 0.0;
  if (reset) {
    TG_TRY(tg_fill_insert(g->loss.handle, 0.0f, NULL));
    g->loss_batches = 0;
  }
  return 0;
}

/* The state tensors of kind TG_GPT_STATE_*, and their sharded part. */
static tg_tensor (*tg_gpt_state(tg_gpt *g, int kind, tg_shard_part *part))[TG_GPT_MAX_LAYERS] {
  switch (kind) {
  case TG_GPT_STATE_M: *part = TG_SHARD_M; return g->m;
  case TG_GPT_STATE_V: *part = TG_SHARD_V; return g->v;
  case TG_GPT_STATE_GRAD: *part = TG_SHARD_GRAD; return g->g;
  default: *part = TG_SHARD_VALUE; return g->w;
  }
}

static int tg_gpt_slice_check(const tg_gpt *g, int kind, tg_gpt_param p, int l) {
  if (kind < TG_GPT_STATE_VALUE || kind > TG_GPT_STATE_GRAD || (unsigned)p >= TG_GPT_NPARAMS ||
      l < 0 || l >= tg_gpt_slices(p, &g->cfg))
    return tg_fail(EINVAL, "GPT: no state slice (kind %d, tensor %d, layer %d)", kind, (int)p, l);
  return 0;
}

int tg_gpt_read_slice(tg_gpt *g, int kind, tg_gpt_param p, int l, float *dst) {
  TG_TRY(tg_gpt_slice_check(g, kind, p, l));
  tg_shard_part part;
  tg_tensor(*which)[TG_GPT_MAX_LAYERS] = tg_gpt_state(g, kind, &part);
  if (g->shards) return tg_shard_read(SHARD(g, p, l), part, MEMBER(g, p, l), dst);
  return tg_tensor_read(&which[p][l], dst);
}

int tg_gpt_write_slice(tg_gpt *g, int kind, tg_gpt_param p, int l, const float *src) {
  TG_TRY(tg_gpt_slice_check(g, kind, p, l));
  if (kind == TG_GPT_STATE_GRAD) return tg_fail(EINVAL, "GPT: gradients are not written");
  tg_shard_part part;
  tg_tensor(*which)[TG_GPT_MAX_LAYERS] = tg_gpt_state(g, kind, &part);
  if (g->shards) return tg_shard_write(SHARD(g, p, l), part, MEMBER(g, p, l), src);
  return tg_tensor_write(&which[p][l], src);
}

/* Copies every slice of the tensors of `kind`, in llm.c's layout. */
static int tg_gpt_read(tg_gpt *g, int kind, float *dst) {
  for (int p = 0; p < TG_GPT_NPARAMS; p++)
    for (int l = 0; l < tg_gpt_slices((tg_gpt_param)p, &g->cfg); l++) {
      TG_TRY(tg_gpt_read_slice(g, kind, (tg_gpt_param)p, l, dst));
      dst += tg_tensor_numel(&g->w[p][l]);
    }
  return 0;
}

int tg_gpt_shard_devices(const tg_gpt *g) { return g->shards ? g->dp->ndev : 0; }
int tg_gpt_scatter_devices(const tg_gpt *g) { return g->scatter ? g->dp->ndev : 0; }
int tg_gpt_relay_devices(const tg_gpt *g) { return g->relay ? g->dp->ndev : 0; }

int tg_gpt_broadcast_params(tg_gpt *g) {
  if (tg_dist_size() == 1) return 0;
  for (int b = 0; b < g->nshards; b++) {
    const tg_shard *sh = &g->shards[b];
    for (int j = 0; j < sh->nb; j++) TG_TRY(tg_dist_broadcast(tg_shard_block(sh, sh->value, j)));
  }
  for (int p = 0; p < TG_GPT_NPARAMS && !g->shards; p++)
    for (int l = 0; l < tg_gpt_slices((tg_gpt_param)p, &g->cfg); l++)
      TG_TRY(tg_dist_broadcast(g->w[p][l].handle));
  return tg_optim_refresh_lowp(&g->optim);
}

int tg_gpt_read_params(tg_gpt *g, float *params) {
  return tg_gpt_read(g, TG_GPT_STATE_VALUE, params);
}
int tg_gpt_read_grads(tg_gpt *g, float *grads) { return tg_gpt_read(g, TG_GPT_STATE_GRAD, grads); }

int tg_gpt_read_state(tg_gpt *g, float *params, float *m, float *v, int *step) {
  if (params) TG_TRY(tg_gpt_read(g, TG_GPT_STATE_VALUE, params));
  if (m) TG_TRY(tg_gpt_read(g, TG_GPT_STATE_M, m));
  if (v) TG_TRY(tg_gpt_read(g, TG_GPT_STATE_V, v));
  if (step) *step = g->optim.step;
  return 0;
}

/* Overwrites every slice of the tensors of `kind` from src (llm.c layout). */
static int tg_gpt_write(tg_gpt *g, int kind, const float *src) {
  for (int p = 0; p < TG_GPT_NPARAMS; p++)
    for (int l = 0; l < tg_gpt_slices((tg_gpt_param)p, &g->cfg); l++) {
      TG_TRY(tg_gpt_write_slice(g, kind, (tg_gpt_param)p, l, src));
      src += tg_tensor_numel(&g->w[p][l]);
    }
  return 0;
}

int tg_gpt_state_written(tg_gpt *g, int params, int step) {
  if (step < 0) return tg_fail(EINVAL, "GPT: optimizer step %d must be >= 0", step);
  g->optim.step = step;
  /* the 16-bit copies, and with sharding the replicas */
  return params ? tg_optim_refresh_lowp(&g->optim) : 0;
}

int tg_gpt_write_state(tg_gpt *g, const float *params, const float *m, const float *v,
                       int step) {
  if (step < 0) return tg_fail(EINVAL, "GPT: optimizer step %d must be >= 0", step);
  if (params) TG_TRY(tg_gpt_write(g, TG_GPT_STATE_VALUE, params));
  if (m) TG_TRY(tg_gpt_write(g, TG_GPT_STATE_M, m));
  if (v) TG_TRY(tg_gpt_write(g, TG_GPT_STATE_V, v));
  return tg_gpt_state_written(g, params != NULL, step);
}

int tg_gpt_logits(tg_gpt *g, const tg_tensor *tokens, int T, float *logits) {
  const tg_gpt_config *c = &g->cfg;
  int n = tokens->rows;
  if (T < 1 || T > c->max_seq_len || n % T)
    return tg_fail(EINVAL, "GPT logits: %d tokens are not whole sequences of %d <= %d", n, T,
                   c->max_seq_len);
  /* a one-off pass: temporaries for the attention, no split, and untiled
   * layers (the tile buffers have the step's rows, not these) */
  tg_gpt_run_config saved = g->run;
  struct tg_gpt_tilebufs *tilebufs = g->tilebufs;
  g->run.T = T;
  g->run.linear_tiles = 1;
  g->tilebufs = NULL;
  tg_gpt_attn *attn = calloc((size_t)c->num_layers, sizeof *attn);
  tg_gpt_micro *mb = calloc(1, sizeof *mb);
  int rc = attn && mb ? 0 : tg_fail(ENOMEM, "GPT logits: out of memory");
  int b = n / T;
  for (int l = 0; l < c->num_layers && rc == 0; l++) {
    tg_gpt_attn *a = &attn[l];
    rc = TEMP(&a->qkv, n, 3 * c->channels);
    if (rc == 0) rc = TEMP(&a->out, n, c->channels);
    if (rc == 0)
      rc = g->run.attention == TG_ATTN_NAIVE ? tg_temp(&a->state, b * c->num_heads * T, T)
                                             : tg_temp(&a->state, n, c->num_heads);
  }
  tg_tensor out = {0};
  if (rc == 0) {
    mb->n = n;
    mb->worker = g->dp ? g->dp->worker[0] : -1; /* micro 0's device */
    mb->tokens = tokens->handle;
    mb->attn = attn;
    mb->attn_stride = 1;
    rc = tg_gpt_forward_micro(g, mb, 1);
  }
  if (rc == 0) rc = tg_temp(&out, n, c->padded_vocab_size);
  if (rc == 0)
    rc = tg_gemm_insert(0, 1, 1.0f, mb->lnf.handle, WG(g, TG_WTE, 0), 0.0f, out.handle,
                        TG_OVERWRITE,
                        &(tg_task_opts){.priority = 0, .worker = -1, .name = NULL,
                                        .lowp = ACT(g)});
  if (mb) tg_gpt_release_forward(g, mb);
  for (int l = 0; attn && l < c->num_layers; l++) {
    tg_tensor_release(&attn[l].qkv);
    tg_tensor_release(&attn[l].out);
    tg_tensor_release(&attn[l].state);
  }
  /* a temporary cannot be acquired before it is written: read through a
   * host tensor */
  tg_tensor host = {0};
  if (rc == 0) rc = tg_tensor_alloc(&host, n, c->padded_vocab_size, TG_F32);
  if (rc == 0) rc = tg_accumulate_insert(host.handle, out.handle, NULL);
  if (rc == 0) rc = tg_tensor_read(&host, logits);
  tg_tensor_release(&out);
  tg_tensor_free(&host);
  free(attn);
  free(mb);
  g->run = saved;
  g->tilebufs = tilebufs;
  return rc;
}
