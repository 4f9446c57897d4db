/*
 * taskgrad training checkpoints: everything needed to continue a GPT-2
 * training run exactly where it stopped (model configuration, parameters,
 * AdamW moments and step, data position, seeds, loss-scaler state), in one
 * file <dir>/checkpoint.bin.  The format is documented in src/checkpoint.c.
 *
 * Saving writes a temporary file in the same directory, fsyncs it, renames
 * it over the previous checkpoint and fsyncs the directory: a crash at any
 * moment leaves either the previous or the new checkpoint, never a mix.
 * Loading validates the header, the sizes against the configuration and the
 * file size, and a CRC32 per tensor; on bad input it returns -EINVAL (or
 * -errno) with a message naming the file and the problem in tg_last_error().
 */
#ifndef TASKGRAD_CHECKPOINT_H
#define TASKGRAD_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "taskgrad/llmc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TG_CHECKPOINT_FILE "checkpoint.bin"
#define TG_CHECKPOINT_MAGIC 0x4B434754u /* "TGCK" little-endian */
#define TG_CHECKPOINT_VERSION 1

/* Dynamic loss scaling (mixed precision); the defaults (scale 1, the rest 0)
 * mean "no scaling". */
typedef struct tg_loss_scaler_state {
  float scale;
  int window;                /* steps between scale increases (0: none) */
  long long clean_steps;     /* finite steps since the last change */
  long long skipped_steps;   /* steps skipped for non-finite gradients */
} tg_loss_scaler_state;

typedef struct tg_checkpoint {
  tg_gpt_config cfg;
  long long step;            /* optimizer steps taken (AdamW's t) */
  /* data position: the run's training batches consumed so far, and what
   * defines their sequence */
  long long batches;
  int B, T;                  /* batch shape the position counts in */
  int data_order;            /* 0 sequential, 1 shuffled */
  uint64_t data_seed;        /* shuffling seed */
  uint64_t rng_seed;         /* sampling seed */
  tg_loss_scaler_state scaler;
  /* tg_gpt_param_sizes(&cfg) floats each, llm.c's layout */
  float *params, *m, *v;
} tg_checkpoint;

/* Zeroes c, sets the loss-scaler defaults and allocates zeroed params, m
 * and v for cfg (which must be valid). */
int tg_checkpoint_alloc(tg_checkpoint *c, const tg_gpt_config *cfg);
/* Frees the arrays (c may come from tg_checkpoint_alloc or _load). */
void tg_checkpoint_free(tg_checkpoint *c);

/* Writes <dir>/checkpoint.bin atomically (dir must exist). */
int tg_checkpoint_save(const char *dir, const tg_checkpoint *c);
/* Reads and validates <dir>/checkpoint.bin; the arrays are malloc'd
 * (tg_checkpoint_free).  On failure c holds no allocation. */
int tg_checkpoint_load(const char *dir, tg_checkpoint *c);
/* 1 when <dir>/checkpoint.bin exists, 0 when it (or dir) does not: a job
 * that is started again with the same --resume DIR begins fresh the first
 * time; a negative errno when it cannot be told (permissions, not a file). */
int tg_checkpoint_exists(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
