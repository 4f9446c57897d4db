/*
 * Start-up checks of the environment (src/env_check.c): base layer, called
 * by tg_init() before starpu_init().
 */
#ifndef TASKGRAD_ENV_CHECK_H
#define TASKGRAD_ENV_CHECK_H

#include <stddef.h>

/* 0, or -EINVAL with a message naming the first numeric StarPU or taskgrad
 * variable whose value StarPU would abort on (or that taskgrad refuses). */
int tg_check_env(void);

/* Writes into buf (size bytes) the one-line note for a machine with more
 * cores than StarPU's worker ceiling and returns 1; returns 0 (buf empty)
 * when there is nothing to say.  requested: the CPU workers asked for, or
 * -1 for StarPU's default (every core). */
int tg_maxcpus_note(int ncores, int maxcpus, int requested, char *buf, size_t size);

/* The CPU workers to start beside CUDA workers when nobody chose, or -1
 * for StarPU's default (every core but one per CUDA driver): at most
 * TG_CPUS_BESIDE_GPUS when no scheduler is named (tasks then stay on the
 * GPUs and idle CPU workers only poll: tg_init, src/runtime.c).
 * requested: the CPU workers asked for (config or STARPU_NCPU(S)), -1 for
 * none; ncuda: the CUDA workers asked for, -1 for all; ngpus: the GPUs
 * found; ncores: the machine's. */
enum { TG_CPUS_BESIDE_GPUS = 4 };
int tg_cpus_beside_gpus(int requested, int sched_named, int ncuda, int ngpus, long ncores);

#endif
