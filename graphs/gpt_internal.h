/*
 * The GPT graph's attention part (gpt_attention.c), used by gpt.c.
 * Private to graphs/.
 */
#ifndef TASKGRAD_GRAPHS_GPT_INTERNAL_H
#define TASKGRAD_GRAPHS_GPT_INTERNAL_H

#include "taskgrad/gpt.h"

/* Attention buffers of one (layer, micro-batch) of b sequences, with
 * r->attn_splits row blocks. */
int tg_gpt_attn_create(tg_gpt_attn *a, const tg_gpt_config *c, const tg_gpt_run_config *r,
                       int b);
void tg_gpt_attn_destroy(tg_gpt_attn *a);
/* Forward of one layer's attention as S tasks: whole qkv in, whole out
 * valid after. */
int tg_gpt_attn_fwd(tg_gpt *gpt, tg_gpt_attn *a, int S, const tg_task_opts *o);
/* Backward as S tasks: whole dout in, whole dqkv valid after. */
int tg_gpt_attn_bwd(tg_gpt *gpt, tg_gpt_attn *a, int S, const tg_task_opts *o);

#endif
