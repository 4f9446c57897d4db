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
/* Streaming, so that a model is never held twice in host memory: the
 * records go to and come from the caller piece by piece, a piece being one
 * layer's slice of a per-layer tensor or a whole global tensor
 * (tg_gpt_param_slices).
 *
 * tg_checkpoint_save_from writes what tg_checkpoint_save writes, c's arrays
 * unused: get(ctx, p, kind, offset, dst, n) fills dst with the n floats at
 * `offset` of tensor p's kind (0 parameters, 1 AdamW m, 2 AdamW v), called
 * once per piece in the file's order; each record's CRC is patched into its
 * header once its data is written. */
typedef int (*tg_checkpoint_get)(void *ctx, int p, int kind, size_t offset, float *dst,
                                 size_t n);
int tg_checkpoint_save_from(const char *dir, const tg_checkpoint *c, tg_checkpoint_get get,
                            void *ctx);

/* tg_checkpoint_open validates <dir>/checkpoint.bin as tg_checkpoint_load
 * does, except the records' CRCs, and fills c's header fields (its arrays
 * NULL); tg_checkpoint_read then reads the n floats at `offset` of record
 * (p, kind), a record's pieces in order from offset 0 (any record order),
 * checking the record's CRC with its last value: a corrupted record is
 * found only once its values are read, so the caller discards what it
 * loaded on an error. */
typedef struct tg_checkpoint_reader tg_checkpoint_reader;
int tg_checkpoint_open(const char *dir, tg_checkpoint *c, tg_checkpoint_reader **r);
int tg_checkpoint_read(tg_checkpoint_reader *r, int p, int kind, size_t offset, float *dst,
                       size_t n);
void tg_checkpoint_close(tg_checkpoint_reader *r);

/* 1 when <dir>/checkpoint.bin exists, 0 when it (or dir) does not: a job
 * that is started again with the same --resume DIR begins fresh the first
 * time; a negative errno when it cannot be told (permissions, not a file). */
int tg_checkpoint_exists(const char *dir);
/* Removes <dir>/checkpoint.bin.tmp.<pid> and mlp-checkpoint.bin.tmp.<pid>
 * left by writers that were killed mid-write (their pid is no live process
 * on this host; exactly those names, regular files only); returns how many,
 * or a negative errno. */
int tg_checkpoint_remove_stale(const char *dir);

/* ---- MLP training checkpoints (format in src/mlp_checkpoint.c) ---------
 * <dir>/mlp-checkpoint.bin: the state `taskgrad train mlp` needs to go on
 * bitwise as if never stopped.  The model and optimizer kinds are stored as
 * the numbers of tg_activation, tg_optimizer_kind and tg_precision (this
 * base layer does not see the MLP's types). */
#define TG_MLP_CHECKPOINT_FILE "mlp-checkpoint.bin"
#define TG_MLP_CHECKPOINT_MAGIC 0x434D4754u /* "TGMC" little-endian */
#define TG_MLP_CHECKPOINT_VERSION 1
#define TG_MLP_CHECKPOINT_MAX_LAYERS 16

typedef struct tg_mlp_checkpoint {
  int nlayers;                                      /* linear layers L */
  int widths[TG_MLP_CHECKPOINT_MAX_LAYERS + 1];     /* widths[0] .. widths[L] */
  int activation, optimizer, precision, tiles;
  /* what defines the sequence of batches */
  int batch, shuffled, samples;                     /* samples: training set size */
  int batches_per_epoch;                            /* the position's epoch length */
  uint64_t seed;                                    /* initialisation and shuffling */
  long long step;                                   /* optimizer steps (AdamW's t) */
  long long batches;                                /* training batches consumed */
  int loss_scaling;                                 /* 1: scaler below in use */
  tg_loss_scaler_state scaler;
  /* the running epoch's metrics: sums of batch-mean losses and of correct
   * predictions over `metric_batches` batches of `metric_samples` samples */
  float loss_sum, correct_sum;
  int metric_batches, metric_samples;
  /* tg_mlp_checkpoint_numel() floats each, layer by layer W (out, in) then
   * b (out); state2 only for AdamW (NULL for SGD) */
  float *params, *state1, *state2;
} tg_mlp_checkpoint;

/* Parameters of the model that c's nlayers and widths describe. */
size_t tg_mlp_checkpoint_numel(const tg_mlp_checkpoint *c);
/* Allocates zeroed params, state1 and (AdamW) state2 for c's shape, which
 * the caller has filled in (checked: 1 .. 16 layers, positive widths). */
int tg_mlp_checkpoint_alloc(tg_mlp_checkpoint *c);
void tg_mlp_checkpoint_free(tg_mlp_checkpoint *c);
/* Writes <dir>/mlp-checkpoint.bin atomically (dir must exist). */
int tg_mlp_checkpoint_save(const char *dir, const tg_mlp_checkpoint *c);
/* Reads and validates <dir>/mlp-checkpoint.bin (arrays malloc'd: free with
 * tg_mlp_checkpoint_free; on failure c holds no allocation). */
int tg_mlp_checkpoint_load(const char *dir, tg_mlp_checkpoint *c);
/* As tg_checkpoint_exists, for <dir>/mlp-checkpoint.bin. */
int tg_mlp_checkpoint_exists(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
