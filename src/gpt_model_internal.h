/*
 * The GPT-2 configuration's validation with its reason as text, for the
 * file readers and writers (llmc.c) that name the file in their message.
 */
#ifndef TASKGRAD_GPT_MODEL_INTERNAL_H
#define TASKGRAD_GPT_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "taskgrad/gpt_model.h"

/* Element counts of the tensors in uint64_t, returning their sum; 0 with
 * the reason in msg when c is invalid. */
uint64_t tg_gpt_config_sizes(const tg_gpt_config *c, uint64_t sz[TG_GPT_NPARAMS], char *msg,
                             size_t msglen);

#endif
