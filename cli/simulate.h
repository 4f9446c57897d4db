/*
 * `taskgrad simulate` (issue 13), shared between cli/simulate.c (flags,
 * platform files, sweeps and scheduler comparisons over child processes,
 * charts) and cli/simulate_run.c (one simulated run and its report).
 */
#ifndef TASKGRAD_CLI_SIMULATE_H
#define TASKGRAD_CLI_SIMULATE_H

#include "cli.h"
#include "gpt_run_options.h"
#include "taskgrad/gpt.h"
#include "taskgrad/mlp.h"
#include "taskgrad/sim.h"

#define TG_SIM_MAX_NODES 64
#define TG_SIM_MAX_MICRO 256

typedef struct tg_sim_options {
  int is_gpt;
  const char *platform; /* host name of the platform files */
  int gpus, ncpus, steps;
  int warmup;           /* untimed steps first; TG_SIM_WARMUP_AUTO: until
                           steady (simulate_run.c, timed_steps) */
  /* the run options (gpt_run_options.h): the GPT's model and run.cfg;
   * the MLP uses run.cfg.B, run.cfg.nmicro and run.prec */
  tg_cli_gpt_run run;
  tg_mlp_config mlp;
  tg_sim_roofline roofline; /* from platforms/<platform>.roofline */
  int cost;                 /* TG_SIM_COST_*: --cost */
  double host_mem;          /* bytes: --host-memory, else the platform's
                               host_mem_bytes; 0: unknown, not checked */
} tg_sim_options;

/* --cost: the peak roofline, the expected model (per-class fractions of
 * the peaks, platforms/<platform>.roofline), both (two simulations), or
 * calibrated: the histories of a real device (the platform's `history`
 * manifest, or --perfmodels), the expected model for the tasks they miss */
enum { TG_SIM_COST_PEAK, TG_SIM_COST_EXPECTED, TG_SIM_COST_BOTH, TG_SIM_COST_CALIBRATED };

/* --warmup's default: warm-up steps until one comes within
 * TG_SIM_WARMUP_TOLERANCE of the one before, at least TG_SIM_WARMUP_MIN and
 * at most TG_SIM_WARMUP_MAX of them */
#define TG_SIM_WARMUP_AUTO (-1)
#define TG_SIM_WARMUP_MIN 2
#define TG_SIM_WARMUP_MAX 6
#define TG_SIM_WARMUP_TOLERANCE 0.02

typedef struct tg_sim_result {
  double step_ms;     /* simulated, mean over the measured steps */
  double window_us;   /* simulated length of the measured steps */
  double items;       /* tokens (GPT) or samples (MLP) per step */
  double flops;       /* per step, llm.c's count */
  double extra_flops; /* per step, executed beyond it (GPT recompute) */
  double mem_peak[TG_SIM_MAX_NODES]; /* bytes in use per memory node */
  int shard_devices;  /* GPT: devices of sharded data parallelism, or 0 */
  int scatter_devices; /* GPT: devices whose gradients are reduce-scattered, or 0 */
  int relay_devices;   /* GPT: devices whose weights are relayed, or 0 */
  int packed_layers;   /* GPT: 1 when each layer's tensors are views of one buffer each */
  int packed_activations; /* GPT: 1 when each block's saved activations are too */
  int fused_blocks;    /* GPT: 1 when each block's forward and backward are a task each */
  int linear_tiles;   /* GPT: tasks per linear layer (graphs/gpt_tiles.c) */
  double host_bytes;  /* GPT: host-backed bytes (state, buffers), an estimate */
  int warmup_steps;   /* warm-up steps run */
  double warmup_ms[TG_SIM_WARMUP_MAX]; /* each one's simulated length */
} tg_sim_result;

/* Starts the simulation (tg_init with rt), runs the model, prints the
 * report, stops it.  Exits on error. */
int tg_sim_run(const tg_sim_options *o, tg_runtime_config *rt);

#endif
