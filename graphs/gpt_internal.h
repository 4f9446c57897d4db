/*
 * The GPT graph's attention part (gpt_attention.c), used by gpt.c.
 * Private to graphs/.
 */
#ifndef TASKGRAD_GRAPHS_GPT_INTERNAL_H
#define TASKGRAD_GRAPHS_GPT_INTERNAL_H

#include "taskgrad/gpt.h"

/* Attention buffers of one (layer, micro-batch) of b sequences, with
 * r->attn_splits row blocks; tiled, qkv, out, dout and dqkv on `node`
 * (tg_gpt_tile_node).  Packed activations (gpt.h): views of one pack, and
 * with first (layer 0's set) the micro-batch's backward buffers too. */
int tg_gpt_attn_create(tg_gpt_attn *a, const tg_gpt_config *c, const tg_gpt_run_config *r,
                       int b, unsigned node, int first);
void tg_gpt_attn_destroy(tg_gpt_attn *a);
/* Forward of one layer's attention as S tasks: whole qkv in, whole out
 * valid after. */
int tg_gpt_attn_fwd(tg_gpt *gpt, tg_gpt_attn *a, int S, const tg_task_opts *o);
/* Backward as S tasks: whole dout in, whole dqkv valid after. */
int tg_gpt_attn_bwd(tg_gpt *gpt, tg_gpt_attn *a, int S, const tg_task_opts *o);

/* ---- tiled linear layers (gpt_tiles.c) ---- */
/* The auto tile count (run.linear_tiles 0) for this runtime's workers. */
int tg_gpt_tiles_auto(const tg_gpt_config *c, const tg_gpt_run_config *r);
/* An attention set's column plans and MLP buffers, n tiles of rows rows. */
int tg_gpt_attn_tiles_create(tg_gpt_attn *a, const tg_gpt_config *c, int n, int rows,
                             tg_dtype act, unsigned node);
/* The home of micro-batch micro's tiled buffers: main RAM without devices,
 * else device micro mod devices (gpt_tiles.c), and a tensor there (main
 * RAM: zero-filled and pinned; a device: not initialised). */
unsigned tg_gpt_tile_node(const tg_gpt *g, int micro);
int tg_gpt_tile_tensor(tg_tensor *t, int rows, int cols, tg_dtype dt, unsigned node);
void tg_gpt_attn_tiles_destroy(tg_gpt_attn *a);
/* The per-micro-batch outputs (g->tilebufs), of the activations' type. */
int tg_gpt_tiles_create(tg_gpt *g, tg_dtype act);
void tg_gpt_tiles_destroy(tg_gpt *g);
/* A micro-batch's persistent tiled outputs (column plans of linear_tiles
 * blocks; gpt_tiles.c says which is which) */
struct tg_gpt_tilebufs {
  tg_tensor proj;    /* (n, C) attproj or fcproj output */
  tg_tensor dln[2];  /* (n, C) dL/d(LayerNorm output), by layer parity */
  tg_tensor dfch[2]; /* (n, 4C) dL/dfch, by layer parity */
  tg_tensor dl;      /* (n, Vp) f32 logits, then dlogits (f32 runs only) */
  tg_tensor stats;   /* (n, 2 tiles) f32 softmax statistics per tile */
  tg_tensor dlnf;    /* (n, C) f32 dL/dlnf */
  tg_split proj_c, dln_c[2], dfch_c[2], dl_c, stats_c, dlnf_c;
};
typedef enum { TG_TILE_PROJ, TG_TILE_DLN, TG_TILE_DFCH } tg_gpt_tile_buf;
/* Tiled: *t = micro-batch micro's persistent buffer `which` (for layer
 * `layer`: dln and dfch alternate by its parity) and *plan its column
 * plan; returns 1.  Untiled: *plan = NULL, returns 0 (t untouched). */
int tg_gpt_tile_out(tg_gpt *g, int micro, tg_gpt_tile_buf which, int layer, tg_tensor *t,
                    tg_split **plan);
/* A linear layer's forward or backward-data: one task, or with
 * g->run.linear_tiles > 1 and a column plan (Zc, Hc, dXc) one per tile of
 * the output (written through the plan, whole again after). */
int tg_gpt_linear_fwd(const tg_gpt *g, starpu_data_handle_t X, starpu_data_handle_t W,
                      starpu_data_handle_t b, tg_activation act, tg_tensor *Z, tg_split *Zc,
                      tg_tensor *H, tg_split *Hc, const tg_task_opts *o);
int tg_gpt_linear_bwd_data(const tg_gpt *g, starpu_data_handle_t dZ, starpu_data_handle_t W,
                           tg_activation act, starpu_data_handle_t Zprev, tg_tensor *dX,
                           tg_split *dXc, const tg_task_opts *o);
/* Tile j's options: o, or with owner placement (run.tile_owner) o pinned
 * to device j mod devices (buf holds the copy). */
const tg_task_opts *tg_gpt_tile_opts(const tg_gpt *g, int j, const tg_task_opts *o,
                                     tg_task_opts *buf);

/* ---- the weight relay (gpt_relay.c) ---- */
typedef struct tg_gpt_relay tg_gpt_relay;
/* Plans the relay over g->dp's devices (g->relay). */
int tg_gpt_relay_create(tg_gpt *g);
void tg_gpt_relay_destroy(tg_gpt *g);
/* Device dev's copy of GEMM weight (p, l) while one is gathered, or NULL
 * (no relay, or not a relayed weight: read wl). */
starpu_data_handle_t tg_gpt_relay_weight(const tg_gpt *g, tg_gpt_param p, int l, int dev);
/* Layer l's shards, block j onto device j after gate[j]'s writer (gate NULL
 * or gate[j] NULL: at once); a layer outside [0, L) is nothing. */
int tg_gpt_relay_stage(tg_gpt *g, int l, const starpu_data_handle_t *gate);
/* Layer l's replicas, device d's after gate[d]'s writer; one still there
 * is kept. */
int tg_gpt_relay_gather(tg_gpt *g, int l, const starpu_data_handle_t *gate);
/* Releases layer l's replicas and (or) its shards. */
void tg_gpt_relay_drop(tg_gpt *g, int l, int replicas, int shards);

#endif
