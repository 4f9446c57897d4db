/*
 * taskgrad runtime: start and stop StarPU the way taskgrad's codelets need it,
 * and report errors.
 *
 * Every library call that can fail returns 0 on success and a negative errno
 * value on failure, and leaves a one-line description in tg_last_error().
 *
 * Base layer (see DEVELOPERS.md, "Layers"): this header and src/ call no
 * codelet, graph or plugin.  What belongs to a layer above comes in from
 * the caller: a scheduling policy object (taskgrad's own are in sched.h,
 * looked up by name with tg_sched_policy_find), submission hooks
 * (src/hooks.h, used by the plugins).
 */
#ifndef TASKGRAD_RUNTIME_H
#define TASKGRAD_RUNTIME_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct starpu_sched_policy;

/* Overrides of StarPU's own environment (STARPU_SCHED, STARPU_NCPU,
 * STARPU_NCUDA, STARPU_CALIBRATE).  A NULL field or a negative number means
 * "leave it to StarPU's environment and defaults". */
typedef struct tg_runtime_config {
  const char *sched;   /* StarPU scheduling policy name, e.g. "dmdas" */
  struct starpu_sched_policy *sched_policy; /* a policy object to use instead
                          of any name, e.g. one of taskgrad's own
                          (sched.h: tg_sched_policy_find("tg-critpath"));
                          StarPU does not know their names */
  int ncpus;           /* number of CPU workers; negative: STARPU_NCPU, or
                          StarPU's default, but at most 4 beside CUDA
                          workers when no scheduler is named (idle CPU
                          workers slow the GPU's step: runtime.c) */
  int ncuda;           /* number of CUDA workers */
  int calibrate;       /* 1: force perfmodel calibration */
  int profiling;       /* 1: enable StarPU's task and worker profiling */
  int no_priorities;   /* 1: graph builders give every task priority 0 */
  int deterministic;   /* 1: graph builders reduce gradients in a fixed order
                          (explicit tree instead of STARPU_REDUX), for
                          bitwise-reproducible runs; see parallel.h */
  int mpi;             /* 1: start through StarPU-MPI (MPI_COMM_WORLD) for
                          data-parallel training over ranks; see parallel.h */
  int emulated_devices; /* N > 0: N emulated accelerators, PoCL's CPU OpenCL
                          devices, each a memory node of its own that
                          StarPU copies data to and from (taskgrad's
                          codelets run their CPU kernels on the mapped
                          device buffers, codelets/opencl_adapter.c);
                          0: none; negative: TG_EMULATED_DEVICES from the
                          environment, else none */
  const char *gemm_lib; /* the CPU GEMM's back end: "openblas", "onednn",
                          "libxsmm" or "auto" (the fastest per shape class,
                          measured once and cached, gemm_choice.h); NULL:
                          TG_GEMM_LIB from the environment, else "auto" */
} tg_runtime_config;

/* the most emulated devices (StarPU 1.3's STARPU_MAXOPENCLDEVS) */
#define TG_MAX_EMULATED_DEVICES 8

/* A config with every field set to "StarPU decides". */
tg_runtime_config tg_runtime_config_default(void);

/* Starts StarPU (and cuBLAS on CUDA workers), limits the BLAS library to one
 * thread per worker.  cfg may be NULL.  Returns 0 or a negative errno. */
int tg_init(const tg_runtime_config *cfg);
/* 0, or -EINVAL with a message naming the first environment variable
 * whose value StarPU or taskgrad would crash on, ignore or misread (the
 * table of src/env_check.c: numbers, lists, names, paths; listed in
 * docs/reliability.md).  tg_init runs it before starpu_init; a program can
 * run it before any work.  sched_names: the scheduling policies the
 * program provides besides StarPU's, for STARPU_SCHED (NULL-terminated, or
 * NULL; sched.h: tg_sched_policy_names()). */
int tg_check_environment(const char *const *sched_names);
/* Waits for every submitted task, then stops StarPU. */
void tg_shutdown(void);
/* 1 when the last tg_init found neither STARPU_MINIMUM_CLEAN_BUFFERS nor
 * STARPU_TARGET_CLEAN_BUFFERS nor a device memory limit set and set both to
 * 0 (in the environment too): no dirty device buffer is written back ahead
 * of an eviction, which a step that fits on its devices never needs.  A
 * program that then finds its working set larger than a device should
 * restart with StarPU's values (5 and 10) set: starpu_init reads them once
 * (the CLI does, cli/gpt_fit.c). */
int tg_clean_buffers_disabled(void);
/* 1 when the last tg_init found CUDA workers and no scheduler named
 * (tg_runtime_config.sched, .sched_policy or STARPU_SCHED): then a task that
 * has a CUDA version runs on the CUDA workers only, and the CPU workers keep
 * the tasks that have none or that ask for them (tg_task_opts.cpu_only).
 * StarPU's default policy (lws) lets idle CPU workers take GPU work at a
 * small fraction of the GPU's speed: GPT-2 124M bf16 with one simulated H100
 * and 15 CPU workers took seconds a step instead of milliseconds
 * (bench/results/2026-11-27-fusion.md).  A named policy places tasks on
 * every worker, as its authors meant. */
int tg_cuda_tasks_stay_on_gpus(void);
/* 1 when the last tg_init chose the number of CPU workers itself, at most 4
 * beside CUDA workers (nobody asked for a number or named a scheduler:
 * idle CPU workers slowed an H100's step, src/runtime.c), so that a caller
 * that wants more of them (an optimizer kept on the host) can say so. */
int tg_cpu_workers_capped(void);

/* The configuration of the last tg_init (its gaps filled from the
 * environment: emulated_devices, deterministic), for the layers above to
 * read; the defaults before the first.  Its strings are the caller's. */
const tg_runtime_config *tg_runtime_current(void);
/* Sets tg_runtime_current()->deterministic: on, or TG_DETERMINISTIC set
 * (not "0") in the environment (as tg_init does with the config's field);
 * e.g. to compare both modes in one process.  Read it with
 * tg_deterministic() (parallel.h). */
void tg_set_deterministic(int on);

/* MPI ranks (src/mpi_runtime.c).  tg_runtime_config.mpi starts StarPU
 * through StarPU-MPI; the collectives are in parallel.h.
 * tg_dist_available: 1 when this build has StarPU-MPI.
 * tg_dist_launched: 1 when the environment says an MPI launcher (mpirun/
 * mpiexec of Open MPI, MPICH, Slurm's PMI) started this process: the CLI
 * then starts StarPU-MPI.
 * tg_dist_rank, tg_dist_size: this process's rank and the number of ranks
 * (0 and 1 without MPI). */
int tg_dist_available(void);
int tg_dist_launched(void);
int tg_dist_rank(void);
int tg_dist_size(void);

/* Task priorities for graph builders: tg_priority(rank, nranks) maps a rank
 * in [0, nranks) (higher = more urgent, e.g. closer to the start of the
 * critical path) onto the scheduler's priority range; 0 for every rank when
 * priorities are off (tg_runtime_config.no_priorities or TG_NO_PRIORITIES in
 * the environment). */
int tg_priority(int rank, int nranks);
int tg_priorities_enabled(void);

int tg_ncpu_workers(void);
int tg_ncuda_workers(void);
/* OpenCL workers started: the emulated accelerators */
int tg_nopencl_workers(void);
/* 1 when this build of taskgrad has CUDA codelets (and StarPU has CUDA). */
int tg_built_with_cuda(void);

/* When OpenBLAS chose kernels far older than the CPU supports (it does on
 * CPUs it does not recognise), the OPENBLAS_CORETYPE value that fixes it,
 * e.g. "SkylakeX"; NULL when its choice is right or OPENBLAS_CORETYPE is set.
 * OpenBLAS reads the variable only when it is loaded: set it, then re-execute
 * the program (the taskgrad CLI does this itself). */
const char *tg_blas_better_coretype(void);
/* The kernel set OpenBLAS runs (openblas_get_corename), e.g. "Prescott". */
const char *tg_blas_corename(void);

/* The CPU's model name ("model name" of /proc/cpuinfo; "unknown" without). */
void tg_cpu_model_name(char *out, size_t n);
/* taskgrad's cache directory: $XDG_CACHE_HOME/taskgrad, else
 * $HOME/.cache/taskgrad; not created.  0, or a negative errno (neither
 * variable set, path too long) with tg_last_error(). */
int tg_cache_dir(char *out, size_t n);
/* mkdir -p DIR: 0 when DIR is a directory afterwards, else a negative
 * errno and a message naming the directory that could not be made. */
int tg_make_dirs(const char *dir);

/* The last error message of this thread ("" when none). */
const char *tg_last_error(void);
/* Sets the last error message (printf-style); returns -code's negation
 * convention: tg_fail(EINVAL, ...) returns -EINVAL. */
int tg_fail(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
