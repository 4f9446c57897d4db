/*
 * --micro-batches auto (the default of train and bench, mlp and gpt): as
 * many micro-batches as there are workers to run them, within what the batch
 * allows, so that a user who keeps the defaults fills every worker (the
 * GPT's in f32 on a few cores: fewer, taller micro-batches, their layers in
 * tiles, below).
 */
#ifndef TASKGRAD_CLI_MICRO_BATCHES_H
#define TASKGRAD_CLI_MICRO_BATCHES_H

#include "taskgrad/precision.h"

/* The MLP's smallest automatic micro-batch: below it a micro-batch's GEMMs
 * are too thin to pay for their tasks (a 784-wide input layer). */
#define TG_MLP_AUTO_MIN_SAMPLES 16

/* The value of --micro-batches: a count in [1, max], or 0 for "auto";
 * anything else dies with exit status 2. */
int tg_cli_micro_batches_arg(const char *flag, const char *text, int max);

/* After tg_init: the automatic number of micro-batches for a global batch
 * of `batch` over `nranks` ranks.  Each rank's part (batch / nranks) is
 * split into the largest count that is at most the number of workers of
 * every rank, leaves at least `min_size` items in each micro-batch and,
 * with `must_divide`, divides the part (the GPT's micro-batches are equal;
 * the MLP's may differ by one sample).  Returns that count times nranks,
 * and prints the choice on rank 0's stderr. */
int tg_cli_auto_micro_batches(int batch, int nranks, int must_divide, int min_size);

/* The GPT's smallest automatic micro-batch in rows (sequences x tokens), in
 * f32 on up to 4 CPU workers and nothing else: below it one micro-batch per
 * worker lost to fewer, taller micro-batches whose linear layers and
 * classifier run in column tiles, one per worker (--tiles auto):
 * bench/results/2026-11-28-cpu-micro-rows.md.  16-bit activations keep a
 * micro-batch per worker: their classifier is not tiled, and one micro-batch
 * ran it on one worker while the other waited.  Many workers keep one
 * micro-batch per worker too (tiles are at most 16 per layer). */
#define TG_GPT_AUTO_MIN_ROWS 512

/* --micro-batches auto for the GPT: tg_cli_auto_micro_batches with each
 * micro-batch at least TG_GPT_AUTO_MIN_ROWS rows (ceil(rows / T) sequences,
 * while the batch allows) where that rule applies (above) and the model has
 * a 32-column tile per worker (C / 32 >= workers), else one sequence. */
int tg_cli_gpt_auto_micro_batches(int batch, int T, int C, tg_precision precision,
                                  int nranks);

/* The GPT's conditions: `micro` divides the batch and `attn_splits` (0:
 * automatic) divides a micro-batch's sequences; dies with exit status 2. */
void tg_cli_check_gpt_micro(int batch, int micro, int attn_splits);

#endif
