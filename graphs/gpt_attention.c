/*
 * The GPT's attention buffers and tasks (see gpt.c and gpt.h).
 *
 * Each (layer, micro-batch) owns persistent host-homed qkv, out, dout,
 * dqkv and state tensors, reused every step, because StarPU 1.3 can plan
 * partitions only of such data: with S attention tasks per micro-batch,
 * they carry row-block plans by whole sequences, partitioned around the
 * attention tasks and joined again after, so that the GEMMs around them
 * see whole tensors.  The state (lse or probabilities) is partitioned once
 * for good, since only its blocks are ever used.  Packed (gpt.h, one
 * attention task), they and the block's saved activations are views of one
 * pack instead.
 */
#include <string.h>

#include "check.h"
#include "gpt_internal.h"

/* Packed activations (gpt.h): the set's buffers and the block's saved
 * activations as views of one pack */
static int tg_gpt_attn_pack(tg_gpt_attn *a, const tg_gpt_config *c, const tg_gpt_run_config *r,
                            int b, int first) {
  int n = b * r->T, C = c->channels, NH = c->num_heads;
  tg_dtype act = tg_precision_lowp(r->amp.precision), f32 = TG_F32;
  int naive = r->attention == TG_ATTN_NAIVE;
  struct {
    tg_tensor *t;
    int rows, cols;
    tg_dtype dt;
  } v[] = {{&a->qkv, n, 3 * C, act},   {&a->out, n, C, act},
           {&a->dout, n, C, act},      {&a->dqkv, n, 3 * C, act},
           {&a->state, naive ? b * NH * r->T : n, naive ? r->T : NH, f32},
           {&a->x, n, C, act},         {&a->ln1, n, C, act},
           {&a->mean1, n, 1, f32},     {&a->rstd1, n, 1, f32},
           {&a->x2, n, C, act},        {&a->ln2, n, C, act},
           {&a->mean2, n, 1, f32},     {&a->rstd2, n, 1, f32},
           {&a->fch, n, 4 * C, act},   {&a->fchg, n, 4 * C, act},
           {&a->proj, n, C, act},
           /* the micro-batch's backward buffers (layer 0's set only) */
           {&a->dres, n, C, act},      {&a->dfch, n, 4 * C, act},
           {&a->dln, n, C, act}};
  enum { NV = sizeof v / sizeof v[0] };
  tg_tensor *parts[NV];
  int rows[NV], cols[NV], nv = first ? NV : NV - 3;
  tg_dtype dt[NV];
  for (int i = 0; i < nv; i++) {
    parts[i] = v[i].t;
    rows[i] = v[i].rows;
    cols[i] = v[i].cols;
    dt[i] = v[i].dt;
  }
  return tg_tensor_pack(&a->pack, nv, parts, rows, cols, dt);
}

/* Attention buffers of one (layer, micro-batch) of b sequences. */
int tg_gpt_attn_create(tg_gpt_attn *a, const tg_gpt_config *c,
                       const tg_gpt_run_config *r, int b, unsigned node, int first) {
  int n = b * r->T, C = c->channels, NH = c->num_heads, S = r->attn_splits;
  memset(a, 0, sizeof *a);
  if (r->packed_layers > 0 && !r->recompute && S == 1 && r->linear_tiles < 2)
    return tg_gpt_attn_pack(a, c, r, b, first);
  tg_dtype act = tg_precision_lowp(r->amp.precision); /* TG_F32 unless 16-bit */
  if (r->linear_tiles < 2) node = STARPU_MAIN_RAM;
  TG_TRY(tg_gpt_tile_tensor(&a->qkv, n, 3 * C, act, node));
  TG_TRY(tg_gpt_tile_tensor(&a->out, n, C, act, node));
  TG_TRY(tg_gpt_tile_tensor(&a->dout, n, C, act, node));
  TG_TRY(tg_gpt_tile_tensor(&a->dqkv, n, 3 * C, act, node));
  if (r->attention == TG_ATTN_NAIVE)
    TG_TRY(tg_tensor_alloc(&a->state, b * NH * r->T, r->T, TG_F32));
  else
    TG_TRY(tg_tensor_alloc(&a->state, n, NH, TG_F32));
  if (S > 1) {
    TG_TRY(tg_split_plan(&a->qkv, S, &a->qkv_s));
    TG_TRY(tg_split_plan(&a->out, S, &a->out_s));
    TG_TRY(tg_split_plan(&a->dout, S, &a->dout_s));
    TG_TRY(tg_split_plan(&a->dqkv, S, &a->dqkv_s));
    TG_TRY(tg_tensor_split_static(&a->state, S, &a->state_s));
  }
  if (r->linear_tiles > 1)
    TG_TRY(tg_gpt_attn_tiles_create(a, c, r->linear_tiles, n, act, node));
  return 0;
}

void tg_gpt_attn_destroy(tg_gpt_attn *a) {
  tg_gpt_attn_tiles_destroy(a);
  tg_split_free(&a->qkv, &a->qkv_s);
  tg_split_free(&a->out, &a->out_s);
  tg_split_free(&a->dout, &a->dout_s);
  tg_split_free(&a->dqkv, &a->dqkv_s);
  tg_split_free(&a->state, &a->state_s);
  tg_tensor_free(&a->qkv);
  tg_tensor_free(&a->out);
  tg_tensor_free(&a->dout);
  tg_tensor_free(&a->dqkv);
  tg_tensor_free(&a->state);
  tg_tensor *acts[] = {&a->x, &a->ln1, &a->mean1, &a->rstd1, &a->x2,
                       &a->ln2, &a->mean2, &a->rstd2, &a->proj,
                       &a->dres, &a->dfch, &a->dln};
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) tg_tensor_free(acts[i]);
  tg_tensor_free(&a->pack); /* after its views */
}

/* Attention forward of one layer: whole qkv in, whole out valid after. */
int tg_gpt_attn_fwd(tg_gpt *gpt, tg_gpt_attn *a, int S, const tg_task_opts *o) {
  const tg_gpt_run_config *r = &gpt->run;
  int NH = gpt->cfg.num_heads;
  if (S == 1)
    return tg_attention_fwd_insert(r->attention, r->T, NH, r->chunk, a->qkv.handle,
                                   a->out.handle, a->state.handle, o);
  tg_split_readonly(&a->qkv, &a->qkv_s);
  tg_split_write(&a->out, &a->out_s);
  for (int s = 0; s < S; s++)
    TG_TRY(tg_attention_fwd_insert(r->attention, r->T, NH, r->chunk, a->qkv_s.parts[s],
                                   a->out_s.parts[s], a->state_s.parts[s], o));
  tg_split_join(&a->out, &a->out_s);
  return 0;
}

/* Attention backward: whole dout in, whole dqkv valid after. */
int tg_gpt_attn_bwd(tg_gpt *gpt, tg_gpt_attn *a, int S, const tg_task_opts *o) {
  const tg_gpt_run_config *r = &gpt->run;
  int NH = gpt->cfg.num_heads;
  if (S == 1)
    return tg_attention_bwd_insert(r->attention, r->T, NH, r->chunk, a->qkv.handle,
                                   a->out.handle, a->state.handle, a->dout.handle,
                                   a->dqkv.handle, o);
  tg_split_readonly(&a->dout, &a->dout_s);
  tg_split_readonly(&a->out, &a->out_s);
  tg_split_write(&a->dqkv, &a->dqkv_s);
  for (int s = 0; s < S; s++)
    TG_TRY(tg_attention_bwd_insert(r->attention, r->T, NH, r->chunk, a->qkv_s.parts[s],
                                   a->out_s.parts[s], a->state_s.parts[s],
                                   a->dout_s.parts[s], a->dqkv_s.parts[s], o));
  tg_split_join(&a->dqkv, &a->dqkv_s);
  tg_split_join(&a->dout, &a->dout_s);
  tg_split_join(&a->out, &a->out_s);
  tg_split_join(&a->qkv, &a->qkv_s);
  return 0;
}
