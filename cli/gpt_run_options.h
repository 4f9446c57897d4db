/*
 * The GPT run options, one parser for every command that runs the GPT
 * training step: `train gpt`, `bench gpt` and `simulate gpt` (and the few
 * that `simulate mlp` shares: --batch, --micro-batches, the precision).
 *
 * cli/gpt_run_options.c holds one table: each row is a flag, the kind of
 * its argument, the field it sets, its range, the commands that accept it
 * and its help line.  A command calls tg_cli_gpt_run_flag first for each
 * argument, leaving what it does not consume (its own flags) to itself,
 * prints the table's help lines for its command with tg_cli_gpt_run_help,
 * and gets the library's tg_gpt_run_config from tg_cli_gpt_run_config.
 * The rows set fields of that tg_gpt_run_config directly, so a new run
 * option of the graph is one row there, its help line included.
 */
#ifndef TASKGRAD_CLI_GPT_RUN_OPTIONS_H
#define TASKGRAD_CLI_GPT_RUN_OPTIONS_H

#include <stdio.h>

#include "cli.h"
#include "taskgrad/gpt.h"

/* The commands, as a mask in each row. */
enum {
  TG_RUN_TRAIN_GPT = 1,
  TG_RUN_BENCH_GPT = 2,
  TG_RUN_SIMULATE_GPT = 4,
  TG_RUN_SIMULATE_MLP = 8,
};

typedef struct tg_cli_gpt_run {
  tg_gpt_config model;     /* bench, simulate: the random model's shape */
  int vp_given;            /* --padded-vocab was given */
  /* the graph's run options, as the flags set them: B and T (simulate: B 0
   * is its per-GPU default), nmicro 0 = auto (simulate: its default),
   * attention, chunk, attn_splits, classifier_blocks, ...; amp comes from
   * prec (tg_cli_gpt_run_config) */
  tg_gpt_run_config cfg;
  int batch_given, seq_given, classifier_chunk_given;
  tg_cli_precision prec;
  tg_runtime_config rt;    /* train, bench: --sched, --ncpus, ... */
} tg_cli_gpt_run;

/* The command's defaults. */
void tg_cli_gpt_run_default(tg_cli_gpt_run *r, unsigned cmd);
/* Consumes argv[*i] (and its value, advancing *i) when it is a run option
 * of `cmd`: returns 1; 0 otherwise.  A bad value exits 2. */
int tg_cli_gpt_run_flag(int argc, char **argv, int *i, unsigned cmd, tg_cli_gpt_run *r);
/* After parsing: the precision's checks, the padded vocabulary's default
 * (bench, simulate), and an explicit --micro-batches against --batch
 * (train, bench).  Exits 2 on a bad combination. */
void tg_cli_gpt_run_finish(tg_cli_gpt_run *r, unsigned cmd);
/* The help lines of `cmd`'s run options, skipping those that `skip`'s
 * commands accept too (simulate prints its gpt and mlp options apart). */
void tg_cli_gpt_run_help(FILE *f, unsigned cmd, unsigned skip);
/* The graph's run configuration for B sequences (per rank) of T tokens in
 * nmicro micro-batches. */
tg_gpt_run_config tg_cli_gpt_run_config(const tg_cli_gpt_run *r, int B, int T, int nmicro);
/* --attention auto in cfg.attention until tg_cli_gpt_run_config resolves it
 * (gemm with CUDA workers, else chunked) */
#define TG_CLI_ATTN_AUTO ((tg_attention_kind)-1)
/* Automatic fit (gpt_fit.c), after tg_init: turns run->recompute on when
 * the step's StarPU-managed memory (nworkers workers) exceeds
 * STARPU_LIMIT_CPU_MEM without it but not with it, or when its estimated
 * working set on one device exceeds device_bytes (> 0; the sharded
 * optimizer's state divided among the devices when it will shard), then,
 * if that is not enough and there are CPU workers, run->offload_optimizer;
 * with `say` tells stderr what and why.  Exits 2 when STARPU_LIMIT_CPU_MEM
 * is too small even with recompute. */
void tg_cli_gpt_fit(const tg_gpt_config *cfg, tg_gpt_run_config *run, int nworkers,
                    double device_bytes, int say, const char *what);
/* The memory of the smallest device memory node (bytes), 0 without one. */
double tg_cli_device_memory(void);
/* cfg.recompute and cfg.offload_optimizer until tg_cli_gpt_fit: off, and
 * not to be turned on (--no-recompute, --no-offload-optimizer) */
#define TG_CLI_FORCED_OFF (-1)
/* "naive", "chunked", "gemm", "flash", "cudnn" ("auto" for TG_CLI_ATTN_AUTO) */
const char *tg_cli_attention_name(tg_attention_kind kind);

#endif
