/*
 * Runtime start and stop.
 *
 * StarPU reads its own environment (STARPU_SCHED, STARPU_NCPU, ...); the
 * config only overrides what the caller sets.  Each StarPU worker runs one
 * kernel at a time on its own core, so the BLAS library must not start
 * threads of its own: we pin OpenBLAS to one thread before any GEMM runs.
 */
#include <cblas.h>
#include <stdlib.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <starpu.h>
#ifdef TG_HAVE_CUDA
#include <starpu_cublas_v2.h>
#endif

#include "check.h"
#include "taskgrad/runtime.h"
#include "taskgrad/sched.h"

#include "dist_internal.h"
#include "env_check.h"
#include "hooks.h"

static int tg_started = 0;
static int tg_use_priorities = 1;
static void (*tg_shutdown_fns[8])(void);
static int tg_nshutdown_fns = 0;

void tg_at_shutdown(void (*fn)(void)) {
  for (int i = 0; i < tg_nshutdown_fns; i++)
    if (tg_shutdown_fns[i] == fn) return;
  if (tg_nshutdown_fns == 8) TG_FATAL("tg_at_shutdown: too many functions");
  tg_shutdown_fns[tg_nshutdown_fns++] = fn;
}
static int tg_cublas_started = 0;

tg_runtime_config tg_runtime_config_default(void) {
  tg_runtime_config c = {NULL, -1, -1, -1, 0, 0, NULL, 0, 0, 0};
  return c;
}

int tg_built_with_cuda(void) {
#ifdef TG_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

/* One line when the machine has more cores than this StarPU's worker
 * ceiling (STARPU_MAXCPUS), unless fewer workers were asked for. */
static void tg_note_maxcpus(const tg_runtime_config *c) {
  long ncores = sysconf(_SC_NPROCESSORS_ONLN);
  const char *env = getenv("STARPU_NCPU");
  int requested = c->ncpus >= 0 ? c->ncpus : (env && *env ? atoi(env) : -1);
  char note[256];
  if (ncores > 0 && tg_maxcpus_note((int)ncores, STARPU_MAXCPUS, requested, note, sizeof note))
    fprintf(stderr, "taskgrad: note: %s\n", note);
}

int tg_init(const tg_runtime_config *cfg) {
  if (tg_started) return tg_fail(EBUSY, "tg_init: taskgrad is already started");
  TG_TRY(tg_check_env());
  tg_runtime_config c = cfg ? *cfg : tg_runtime_config_default();
  tg_note_maxcpus(&c);
  struct starpu_conf conf;
  TG_STARPU(starpu_conf_init(&conf));
  if (c.sched) conf.sched_policy_name = c.sched;
  /* taskgrad's own policies (include/taskgrad/sched.h), by name from the
   * config or else STARPU_SCHED: StarPU does not know their names, so we
   * hand it the policy object (conf.sched_policy).  StarPU 1.3 looks the
   * policy up by name first, and starpu_init() itself copies STARPU_SCHED
   * over conf.sched_policy_name (_starpu_conf_check_environment): with
   * STARPU_SCHED=tg-... it would print "scheduling policy not found" before
   * falling back to conf.sched_policy.  So the variable is removed from the
   * environment for the duration of starpu_init() and put back afterwards
   * (children and re-executions still see it).  tg_init() is meant to run
   * before the program starts threads of its own; setenv/unsetenv are not
   * thread-safe. */
  const char *env_sched = getenv("STARPU_SCHED");
  const char *sched_name = c.sched ? c.sched : env_sched;
  struct starpu_sched_policy *tg_policy = tg_sched_policy_find(sched_name);
  char *saved_sched = NULL; /* STARPU_SCHED to restore after starpu_init */
  if (tg_policy) {
    conf.sched_policy = tg_policy;
    conf.sched_policy_name = NULL;
  }
  /* the same hiding makes a policy named in the config win over
   * STARPU_SCHED for StarPU's own policies too, as documented in runtime.h */
  if (env_sched && (tg_policy || c.sched)) {
    saved_sched = strdup(env_sched);
    if (!saved_sched) return tg_fail(ENOMEM, "tg_init: out of memory");
    unsetenv("STARPU_SCHED");
  }
  if (c.ncpus >= 0) conf.ncpus = c.ncpus;
  if (c.ncuda >= 0) conf.ncuda = c.ncuda;
  if (c.calibrate >= 0) conf.calibrate = c.calibrate;
  /* taskgrad's tensors and codelets use neither OpenCL nor MIC */
  conf.nopencl = 0;

  openblas_set_num_threads(1);
#ifdef TG_SIMGRID
  /* SimGrid build: starpu_init starts the simulation, which needs an argv
   * (starpu_init passes NULL and StarPU 1.3.10 dereferences it) */
  static char *sim_argv0[] = {"taskgrad", "--log=root.thres:warning", NULL};
  int sim_argc = 2; /* and SimGrid's own chatter off */
  char **sim_argv = sim_argv0;
  int rc = starpu_initialize(&conf, &sim_argc, &sim_argv);
#else
  int rc = c.mpi ? tg_dist_start(&conf) : starpu_init(&conf);
#endif
  if (saved_sched) {
    setenv("STARPU_SCHED", saved_sched, 1);
    free(saved_sched);
  }
  if (rc < 0 && c.mpi) return rc; /* message set by tg_dist_start */
  if (rc == -ENODEV)
    return tg_fail(ENODEV, "starpu_init: no worker available (check STARPU_NCPU/STARPU_NCUDA)");
  if (rc != 0)
    return tg_fail(rc < 0 ? -rc : EIO, "starpu_init failed: %s", strerror(rc < 0 ? -rc : EIO));
  tg_started = 1;
  tg_dist_set_deterministic(c.deterministic);
  tg_use_priorities = !c.no_priorities && !getenv("TG_NO_PRIORITIES");
  if (c.profiling > 0) starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
#ifdef TG_HAVE_CUDA
  if (starpu_cuda_worker_get_count() > 0) {
    starpu_cublas_init();
    tg_cublas_started = 1;
  }
#endif
  return 0;
}

void tg_shutdown(void) {
  if (!tg_started) return;
  starpu_task_wait_for_all();
  for (int i = tg_nshutdown_fns - 1; i >= 0; i--) tg_shutdown_fns[i]();
  tg_nshutdown_fns = 0;
#ifdef TG_HAVE_CUDA
  if (tg_cublas_started) starpu_cublas_shutdown();
#endif
  tg_cublas_started = 0;
  if (tg_dist_active())
    tg_dist_stop(); /* shuts StarPU down too */
  else
    starpu_shutdown();
  tg_started = 0;
}

int tg_priorities_enabled(void) { return tg_use_priorities; }

int tg_priority(int rank, int nranks) {
  if (!tg_use_priorities || nranks <= 1) return 0;
  long long lo = starpu_sched_get_min_priority(), hi = starpu_sched_get_max_priority();
  if (hi <= lo) return 0; /* the scheduler ignores priorities */
  if (rank < 0) rank = 0;
  if (rank >= nranks) rank = nranks - 1;
  /* a wide range (prio, dmdas, lws advertise all of int): the ranks
   * themselves, from 0 when the range allows it */
  if (hi - lo + 1 >= nranks) {
    long long base = lo > 0 ? lo : (hi < nranks - 1 ? hi - (nranks - 1) : 0);
    return (int)(base + rank);
  }
  /* a narrow range: spread the ranks over it, several sharing a level */
  return (int)(lo + (long long)rank * (hi - lo) / (nranks - 1));
}

int tg_ncpu_workers(void) { return (int)starpu_cpu_worker_get_count(); }
int tg_ncuda_workers(void) {
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID) /* SimGrid: simulated GPUs */
  return (int)starpu_cuda_worker_get_count();
#else
  return 0;
#endif
}
