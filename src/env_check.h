/*
 * Start-up checks of the environment (src/env_check.c): base layer, called
 * by tg_init() before starpu_init().
 */
#ifndef TASKGRAD_ENV_CHECK_H
#define TASKGRAD_ENV_CHECK_H

#include <stddef.h>

/* The kinds of tg_env_vars[] (src/env_check.c), each checked as StarPU or
 * taskgrad reads it. */
typedef enum tg_env_kind {
  TG_ENV_INT,      /* a whole number from min to max, digits only */
  TG_ENV_FLOAT,    /* a finite number from min to max */
  TG_ENV_CPU_LIST, /* CPU numbers (to max) or ranges N-M, N-; spaces, commas */
  TG_ENV_ID_LIST,  /* device numbers from 0 to max separated by spaces */
  TG_ENV_NAME,     /* one of values ("a|b|c") */
  TG_ENV_SCHED,    /* a scheduling policy: StarPU's or the caller's */
  TG_ENV_HOSTNAME, /* a host name StarPU names files after: no '/' */
  TG_ENV_MKDIR,    /* a directory StarPU creates (mkdir -p) and writes in */
  TG_ENV_DIR_OUT,  /* an existing directory written in */
  TG_ENV_DIR_IN,   /* an existing directory read */
  TG_ENV_FILE_OUT, /* a file written, in an existing writable directory */
  TG_ENV_FILE_IN,  /* a readable file */
} tg_env_kind;

/* The empty string: as the kind says (tg_env_empty_ok), or accepted, or
 * refused. */
typedef enum tg_env_empty { TG_EMPTY_KIND, TG_EMPTY_OK, TG_EMPTY_BAD } tg_env_empty;

/* One row of the table: every variable StarPU or taskgrad reads whose
 * value can be wrong. */
typedef struct tg_env_var {
  const char *name;
  tg_env_kind kind;
  double min, max;    /* INT, FLOAT: the range; lists: the largest number */
  const char *values; /* NAME: the values, "a|b|c" */
  const char *what;   /* INT, FLOAT: what the number is, for the message */
  tg_env_empty empty;
} tg_env_var;

/* The table (n rows). */
const tg_env_var *tg_env_table(size_t *n);
/* 1 when the row accepts the empty string. */
int tg_env_empty_ok(const tg_env_var *r);
/* 0 when v is a good value of row r, else -EINVAL with a message naming
 * the variable.  sched_names: the scheduling policies the caller has
 * besides StarPU's (NULL-terminated; NULL for none). */
int tg_check_value(const tg_env_var *r, const char *v, const char *const *sched_names);
/* Every row set in the environment, in table order: 0, or the first bad
 * value's -EINVAL.  STARPU_SCHED only when check_sched (tg_init skips it
 * when the config names a policy: StarPU then never reads it).  The public
 * form, tg_check_environment (runtime.h), checks them all. */
int tg_check_env(const char *const *sched_names, int check_sched);

/* STARPU_WORKERS_OPENCLID against the ndevices emulated devices (PoCL's,
 * all the OpenCL devices StarPU then sees): StarPU 1.3 asserts on a device
 * it does not find.  0 when unset or ndevices is 0. */
int tg_check_opencl_ids(int ndevices);

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
