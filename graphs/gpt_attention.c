/*
 * The GPT's attention buffers and tasks (see gpt.c and gpt.h).
 *
 * Each (layer, micro-batch) owns persistent host-homed qkv, out, dout,
 * dqkv and state tensors, reused every step, because StarPU 1.3 can plan
 * partitions only of such data: with S attention tasks per micro-batch,
 * they carry row-block plans by whole sequences, partitioned around the
 * attention tasks and joined again after, so that the GEMMs around them
 * see whole tensors.  The state (lse or probabilities) is partitioned once
 * for good, since only its blocks are ever used.
 */
#include <string.h>

#include "check.h"
#include "gpt_internal.h"

/* Attention buffers of one (layer, micro-batch) of b sequences. */
int tg_gpt_attn_create(tg_gpt_attn *a, const tg_gpt_config *c,
                       const tg_gpt_run_config *r, int b, unsigned node) {
  int n = b * r->T, C = c->channels, NH = c->num_heads, S = r->attn_splits;
  memset(a, 0, sizeof *a);
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
