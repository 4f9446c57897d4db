/*
 * taskgrad train gpt, private to cli/train_gpt*.c: the command's options
 * and the state one run's steps share.  train_gpt.c parses the options,
 * runs the training loop and finishes the run; train_gpt_setup.c prepares
 * it (model, data, StarPU, the graph's model, loaders) and tears it down.
 */
#ifndef TASKGRAD_CLI_TRAIN_GPT_H
#define TASKGRAD_CLI_TRAIN_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "gpt_run_options.h"
#include "taskgrad/checkpoint.h"
#include "taskgrad/gpt.h"

typedef struct gpt_opts {
  /* the GPT run options (gpt_run_options.h): run.cfg.B, .T, .nmicro, the
   * attention and classifier settings, run.prec, run.rt */
  tg_cli_gpt_run run;
  const char *init_from, *data, *val, *save, *checkpoint, *resume;
  int steps, warmup, sample, val_every, val_batches;
  int log_every, cosine, shuffled, checkpoint_every;
  int order_given, seed_given;
  double temperature;
  tg_optimizer_config opt;
  uint64_t seed;
  int demo;
} gpt_opts;

/* One run of the command: what its steps share. */
typedef struct gpt_session {
  gpt_opts o;
  int distributed;               /* launched under MPI */
  char train_path[4096], val_path[4096]; /* the demonstration's token files */
  tg_gpt_config cfg;
  float *params;                 /* the initial parameters (freed once built) */
  tg_llmc_model_reader *reader;  /* or --init-from, read while it is built */
  tg_checkpoint ck;              /* --resume's checkpoint header, when have_ck */
  tg_checkpoint_reader *ck_reader; /* and its records, read while the model is built */
  int have_ck;
  uint16_t *tokens, *vtokens;    /* training and validation tokens */
  size_t ntok, nvtok;
  int R, root;                   /* MPI ranks; this is rank 0 */
  tg_gpt g;
  tg_loader *ld, *vl;            /* training and validation (or NULL) batches */
  int start;                     /* the first step this run takes */
  long long start_batch;         /* training batches consumed before it */
} gpt_session;

/* The steps of a run, in order; each exits with a message on failure. */
/* The model and its initial parameters: the demonstration's, a
 * checkpoint's, or --init-from's; everything checked before StarPU starts. */
void gpt_setup_model(gpt_session *s);
/* The outputs' places and the token files, checked against the model. */
void gpt_setup_data(gpt_session *s);
/* Starts StarPU and builds the graph's model on every rank, from rank 0's
 * parameters, continuing the checkpoint's optimizer state when resuming. */
void gpt_build_model(gpt_session *s);
/* The batch loaders and the run's banner. */
void gpt_open_loaders(gpt_session *s);
/* Frees what the run holds and stops StarPU. */
void gpt_teardown(gpt_session *s);

#endif
