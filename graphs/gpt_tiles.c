/*
 * Tiled linear layers of the GPT (run.linear_tiles = N > 1, gpt.h).
 *
 * A transformer block's four linear layers (qkv, attproj, fc, fcproj) run
 * as N tasks each, on column tiles of the output: the forward's tile j
 * writes columns j of Z (and of GELU(Z)), the backward-data's tile j
 * columns j of dX (codelets/linear.c).  Every tile reads the whole
 * input and weight at its offset, so the weights are never partitioned and
 * the weight gradients, one GEMM per micro-batch, stay as they are.  With
 * B = 4 sequences of 64 tokens on 64 cores, four micro-batches were four
 * chains of whole-matrix GEMMs, and the step stopped at 385 ms from 16 cores
 * on (bench/results/2026-11-24-many-core.md); tiles cut each GEMM of the
 * chain into tasks for the cores the micro-batches leave idle
 * (bench/results/2026-11-26-tiles.md).
 *
 * A tile writes a column block, and only data with a home node can carry
 * StarPU 1.3's partition plans (tensor.h): the tiled outputs are
 * persistent tensors with column plans, reused every step (StarPU's
 * sequential consistency orders a step's writes after the last reads).
 * Their home is main RAM on CPUs alone, and with devices a micro-batch's
 * device (sharded, the one its tasks are pinned to; else micro-batch i on
 * device i mod devices): StarPU 1.3 runs a plan's
 * partition and join on the home node, and host homes sent every tiled
 * output to main RAM and back (8 GB per step over PCIe at GPT-2 350M on one
 * simulated H100, bench/results/2026-11-26-tiles.md).  Device homes are not
 * evictable.  The buffers:
 *   per (layer, micro-batch) attention set (gpt_attention.c): qkv and dout
 *     (the attention buffers) and the MLP's fch, fchg, which live from the
 *     forward to the backward;
 *   per micro-batch (tg_gpt_tilebufs): proj, the output of attproj and
 *     fcproj before the residual adds it; dln and dfch, the data gradients
 *     that the LayerNorm backward and the next backward-data read, in two
 *     sets by the parity of the layer, so that layer l - 1's backward does
 *     not wait for the weight gradient of layer l that reads them;
 *     and, training in f32, the classifier's in vocabulary tiles
 *     (codelets/lm_classifier_tile.c): dl (n, Vp), the logits then their
 *     gradient, stats (n, 2 per tile) and dlnf (n, C), by the same tiles.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpt_internal.h"
#include "shard.h"


int tg_gpt_tiles_auto(const tg_gpt_config *c, const tg_gpt_run_config *r) {
  int devices = starpu_cuda_worker_get_count() + tg_nopencl_workers();
  int w = tg_ncpu_workers();
  if (devices > 0) return 1; /* GPUs: opt in */
  int n = w / r->nmicro;
  /* Up to 4 workers, tiles only where the micro-batches leave a worker
   * without a chain of its own (fewer micro-batches than workers): with one
   * micro-batch per worker the 2-core graph stays as it was.  Fused blocks
   * need untiled layers. */
  if (w <= 4 && (n < 2 || r->fused_blocks > 0)) return 1;
  if (n > 16) n = 16;
  if (n > c->channels / 32) n = c->channels / 32; /* tiles of 32 columns at least */
  return n < 1 ? 1 : n;
}

unsigned tg_gpt_tile_node(const tg_gpt *g, int micro) {
  if (g->dp) return g->dp->node[tg_dp_device(g->dp, micro)]; /* pinned: its device */
  unsigned node[TG_MAX_SPLIT];
  int ndev = tg_dp_scan(NULL, node, TG_MAX_SPLIT);
  if (ndev == 0) return STARPU_MAIN_RAM;
  return node[micro % (ndev < TG_MAX_SPLIT ? ndev : TG_MAX_SPLIT)];
}

int tg_gpt_tile_tensor(tg_tensor *t, int rows, int cols, tg_dtype dt, unsigned node) {
  if (node == STARPU_MAIN_RAM) return tg_tensor_alloc(t, rows, cols, dt);
  return tg_tensor_alloc_on_node(t, rows, cols, dt, node);
}

/* a tensor (rows, cols) of type dt homed on `node`, with a plan of n
 * column blocks */
static int tg_tiled_alloc(tg_tensor *t, tg_split *s, int rows, int cols, tg_dtype dt, int n,
                          unsigned node) {
  TG_TRY(tg_gpt_tile_tensor(t, rows, cols, dt, node));
  return tg_split_plan_cols(t, n, s);
}

static void tg_tiled_free(tg_tensor *t, tg_split *s) {
  tg_split_free(t, s);
  tg_tensor_free(t);
}

int tg_gpt_attn_tiles_create(tg_gpt_attn *a, const tg_gpt_config *c, int n, int rows,
                             tg_dtype act, unsigned node) {
  int C = c->channels, N = n;
  TG_TRY(tg_split_plan_cols(&a->qkv, N, &a->qkv_c));
  TG_TRY(tg_split_plan_cols(&a->dout, N, &a->dout_c));
  TG_TRY(tg_tiled_alloc(&a->fch, &a->fch_c, rows, 4 * C, act, N, node));
  return tg_tiled_alloc(&a->fchg, &a->fchg_c, rows, 4 * C, act, N, node);
}

void tg_gpt_attn_tiles_destroy(tg_gpt_attn *a) {
  tg_split_free(&a->qkv, &a->qkv_c);
  tg_split_free(&a->dout, &a->dout_c);
  tg_tiled_free(&a->fch, &a->fch_c);
  tg_tiled_free(&a->fchg, &a->fchg_c);
}

int tg_gpt_tiles_create(tg_gpt *g, tg_dtype act) {
  int M = g->run.nmicro, n = g->run.B / M * g->run.T, C = g->cfg.channels;
  int N = g->run.linear_tiles;
  g->tilebufs = calloc((size_t)M, sizeof *g->tilebufs);
  if (!g->tilebufs) return tg_fail(ENOMEM, "GPT: out of memory for tiled buffers");
  for (int i = 0; i < M; i++) {
    struct tg_gpt_tilebufs *t = &g->tilebufs[i];
    unsigned node = tg_gpt_tile_node(g, i);
    TG_TRY(tg_tiled_alloc(&t->proj, &t->proj_c, n, C, act, N, node));
    for (int p = 0; p < 2; p++) {
      TG_TRY(tg_tiled_alloc(&t->dln[p], &t->dln_c[p], n, C, act, N, node));
      TG_TRY(tg_tiled_alloc(&t->dfch[p], &t->dfch_c[p], n, 4 * C, act, N, node));
    }
    if (act != TG_F32) continue; /* the tiled classifier is f32 */
    TG_TRY(tg_tiled_alloc(&t->dl, &t->dl_c, n, g->cfg.padded_vocab_size, TG_F32, N, node));
    TG_TRY(tg_tiled_alloc(&t->stats, &t->stats_c, n, 2 * N, TG_F32, N, node));
    TG_TRY(tg_tiled_alloc(&t->dlnf, &t->dlnf_c, n, C, TG_F32, N, node));
  }
  return 0;
}

void tg_gpt_tiles_destroy(tg_gpt *g) {
  for (int i = 0; g->tilebufs && i < g->run.nmicro; i++) {
    struct tg_gpt_tilebufs *t = &g->tilebufs[i];
    tg_tiled_free(&t->proj, &t->proj_c);
    for (int p = 0; p < 2; p++) {
      tg_tiled_free(&t->dln[p], &t->dln_c[p]);
      tg_tiled_free(&t->dfch[p], &t->dfch_c[p]);
    }
    tg_tiled_free(&t->dl, &t->dl_c);
    tg_tiled_free(&t->stats, &t->stats_c);
    tg_tiled_free(&t->dlnf, &t->dlnf_c);
  }
  free(g->tilebufs);
  g->tilebufs = NULL;
}

int tg_gpt_tile_out(tg_gpt *g, int micro, tg_gpt_tile_buf which, int layer, tg_tensor *t,
                    tg_split **plan) {
  struct tg_gpt_tilebufs *b = g->tilebufs ? &g->tilebufs[micro] : NULL;
  if (!b) {
    *plan = NULL;
    return 0;
  }
  int p = layer & 1;
  tg_tensor *src = which == TG_TILE_PROJ ? &b->proj : which == TG_TILE_DLN ? &b->dln[p]
                                                                          : &b->dfch[p];
  *plan = which == TG_TILE_PROJ ? &b->proj_c : which == TG_TILE_DLN ? &b->dln_c[p]
                                                                    : &b->dfch_c[p];
  *t = *src;
  return 1;
}

const tg_task_opts *tg_gpt_tile_opts(const tg_gpt *g, int j, const tg_task_opts *o,
                                     tg_task_opts *buf) {
  int worker[TG_MAX_SPLIT];
  int ndev = g->run.tile_owner ? tg_dp_scan(worker, NULL, TG_MAX_SPLIT) : 0;
  if (ndev == 0) return o;
  *buf = *o;
  buf->worker = worker[j % (ndev < TG_MAX_SPLIT ? ndev : TG_MAX_SPLIT)];
  return buf;
}

int tg_gpt_linear_fwd(const tg_gpt *g, starpu_data_handle_t X, starpu_data_handle_t W,
                      starpu_data_handle_t b, tg_activation act, tg_tensor *Z, tg_split *Zc,
                      tg_tensor *H, tg_split *Hc, const tg_task_opts *o) {
  int has_h = act != TG_ACT_NONE;
  tg_task_opts buf;
  if (g->run.linear_tiles < 2 || !Zc)
    return tg_linear_fwd_insert(X, W, b, act, Z->handle, has_h ? H->handle : NULL, o);
  tg_split_write(Z, Zc);
  if (has_h) tg_split_write(H, Hc);
  for (int j = 0; j < Zc->n; j++)
    TG_TRY(tg_linear_fwd_tile_insert(tg_split_start(Z->cols, Zc->n, j, NULL), X, W, b, act,
                                     Zc->parts[j], has_h ? Hc->parts[j] : NULL,
                                     tg_gpt_tile_opts(g, j, o, &buf)));
  tg_split_join(Z, Zc);
  if (has_h) tg_split_join(H, Hc);
  return 0;
}

int tg_gpt_linear_bwd_data(const tg_gpt *g, starpu_data_handle_t dZ, starpu_data_handle_t W,
                           tg_activation act, starpu_data_handle_t Zprev, tg_tensor *dX,
                           tg_split *dXc, const tg_task_opts *o) {
  tg_task_opts buf;
  if (g->run.linear_tiles < 2 || !dXc)
    return tg_linear_bwd_data_insert(dZ, W, act, Zprev, dX->handle, o);
  tg_split_write(dX, dXc);
  for (int j = 0; j < dXc->n; j++)
    TG_TRY(tg_linear_bwd_data_tile_insert(tg_split_start(dX->cols, dXc->n, j, NULL), dZ, W, act,
                                          Zprev, dXc->parts[j], tg_gpt_tile_opts(g, j, o, &buf)));
  tg_split_join(dX, dXc);
  return 0;
}
