/*
 * Runtime start and stop.
 *
 * StarPU reads its own environment (STARPU_SCHED, STARPU_NCPU, ...); the
 * config only overrides what the caller sets.  Each StarPU worker runs one
 * kernel at a time on its own core, so the BLAS library must not start
 * threads of its own: we pin OpenBLAS to one thread before any GEMM runs.
 *
 * Base layer: nothing here calls a codelet, a graph or a plugin.  A
 * scheduling policy of taskgrad's own (plugins/) comes in from above,
 * through tg_runtime_config.sched_policy; the configuration tg_init was
 * given is kept (tg_runtime_current) for the layers above to read, e.g. the
 * deterministic setting that parallel/ reports.
 */
#include <cblas.h>
#include <stdlib.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <starpu.h>
#ifdef TG_HAVE_CUDA
#include <cuda_runtime.h>
#include <starpu_cublas_v2.h>
#endif

#include "check.h"
#include "taskgrad/runtime.h"

#include "env_check.h"
#include "hooks.h"
#include "mpi_runtime.h"

static int tg_started = 0;
/* tg_init set STARPU_MINIMUM/TARGET_CLEAN_BUFFERS to 0 itself */
static int tg_clean_off = 0;
/* CUDA workers and no scheduler named: tasks with a CUDA version stay on
 * them (tg_cuda_tasks_stay_on_gpus) */
static int tg_gpu_only = 0;
/* tg_init chose the CPU workers beside CUDA workers (tg_cpu_workers_capped) */
static int tg_cpus_capped = 0;
static int tg_use_priorities = 1;
static void (*tg_shutdown_fns[8])(void);
static int tg_nshutdown_fns = 0;

void tg_at_shutdown(void (*fn)(void)) {
  for (int i = 0; i < tg_nshutdown_fns; i++)
    if (tg_shutdown_fns[i] == fn) return;
  if (tg_nshutdown_fns == 8) TG_FATAL("tg_at_shutdown: too many functions");
  tg_shutdown_fns[tg_nshutdown_fns++] = fn;
}

static tg_init_hook_fn tg_init_fns[8];
static int tg_ninit_fns = 0;

void tg_at_init(tg_init_hook_fn fn) {
  for (int i = 0; i < tg_ninit_fns; i++)
    if (tg_init_fns[i] == fn) return;
  if (tg_ninit_fns == 8) TG_FATAL("tg_at_init: too many functions");
  tg_init_fns[tg_ninit_fns++] = fn;
}
static int tg_cublas_started = 0;

tg_runtime_config tg_runtime_config_default(void) {
  tg_runtime_config c = {
      .ncpus = -1, .ncuda = -1, .calibrate = -1, .emulated_devices = -1};
  return c;
}

/* the configuration of the last tg_init, gaps filled from the environment;
 * the defaults before the first */
static tg_runtime_config tg_current = {
    .ncpus = -1, .ncuda = -1, .calibrate = -1, .emulated_devices = -1};

const tg_runtime_config *tg_runtime_current(void) { return &tg_current; }

/* TG_DETERMINISTIC set (not "0") in the environment turns the mode on too */
void tg_set_deterministic(int on) {
  const char *env = getenv("TG_DETERMINISTIC");
  tg_current.deterministic = on || (env && strcmp(env, "0"));
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

/* cfg->emulated_devices from TG_EMULATED_DEVICES when the config leaves it
 * to the environment */
static int tg_emulated_devices(tg_runtime_config *c) {
  if (c->emulated_devices >= 0) return 0;
  c->emulated_devices = 0;
  const char *v = getenv("TG_EMULATED_DEVICES");
  if (!v || !*v) return 0;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || *end || n < 0 || n > TG_MAX_EMULATED_DEVICES)
    return tg_fail(EINVAL, "TG_EMULATED_DEVICES='%s' is not a number of devices in [0, %d]",
                   v, TG_MAX_EMULATED_DEVICES);
  c->emulated_devices = (int)n;
  return 0;
}

/* StarPU finds OpenCL devices of type GPU or accelerator only, unless
 * STARPU_OPENCL_ON_CPUS is set; PoCL's POCL_DEVICES lists the devices it
 * creates (one "pthread" each).  STARPU_NOPENCL is set too, because StarPU
 * lets the environment override conf.nopencl.  PoCL would start a pool of
 * kernel threads per device; we run no OpenCL kernel (the adapter maps
 * buffers), so one thread each is enough unless the user says otherwise.
 * The devices' driver threads share the CPU cores with the CPU workers, so
 * no worker is bound to a core (unless STARPU_WORKERS_NOBIND says so). */
static int tg_emulated_setup(struct starpu_conf *conf, int n) {
#ifndef STARPU_USE_OPENCL
  /* e.g. scripts/build-starpu-cuda's StarPU (--disable-opencl) */
  if (n > 0)
    return tg_fail(ENODEV, "%d emulated device%s asked, but this StarPU is built without "
                   "OpenCL: the emulated accelerators need a StarPU with OpenCL (Debian's "
                   "libstarpu-dev) and PoCL's CPU device (pocl-opencl-icd)",
                   n, n == 1 ? "" : "s");
#endif
  conf->nopencl = n;
  char num[16], devices[8 * TG_MAX_EMULATED_DEVICES + 1] = "";
  snprintf(num, sizeof num, "%d", n);
  for (int i = 0; i < n; i++) strcat(devices, i ? " pthread" : "pthread");
  int rc = setenv("STARPU_NOPENCL", num, 1);
  if (n > 0 && rc == 0) rc = setenv("STARPU_OPENCL_ON_CPUS", "1", 1);
  if (n > 0 && rc == 0) rc = setenv("POCL_DEVICES", devices, 1);
  if (n > 0 && rc == 0) rc = setenv("POCL_MAX_PTHREAD_COUNT", "1", 0);
  /* more workers than cores is the point here: no binding warnings */
  if (n > 0 && rc == 0) rc = setenv("STARPU_WORKERS_NOBIND", "1", 0);
  if (rc != 0) return tg_fail(errno, "setenv for the emulated devices: %s", strerror(errno));
  return 0;
}

/* A device memory limit in the environment: STARPU_LIMIT_OPENCL_MEM,
 * STARPU_LIMIT_CUDA_MEM or a per-device STARPU_LIMIT_{OPENCL,CUDA}_<n>_MEM. */
extern char **environ;
static int tg_device_limit_set(void) {
  for (char **e = environ; *e; e++)
    if (!strncmp(*e, "STARPU_LIMIT_OPENCL_", 20) || !strncmp(*e, "STARPU_LIMIT_CUDA_", 18))
      return 1;
  return 0;
}

/* The clean-buffer thresholds (see tg_init): 0 unless the user set them
 * or a device limit is set.  TG_CLEAN_BUFFERS_OURS marks zeros that
 * taskgrad set, so that a second tg_init, or a child process that inherits
 * them, tells them from the user's. */
static int tg_clean_buffers_setup(int device_limit) {
  const char *ours = getenv("TG_CLEAN_BUFFERS_OURS");
  int user = (getenv("STARPU_MINIMUM_CLEAN_BUFFERS") || getenv("STARPU_TARGET_CLEAN_BUFFERS")) &&
             !(ours && !strcmp(ours, "1"));
  tg_clean_off = 0;
  if (user) return 0;
  int rc = 0;
  if (device_limit) { /* StarPU's own values, as if never set */
    if (ours) {
      rc = unsetenv("STARPU_MINIMUM_CLEAN_BUFFERS");
      if (rc == 0) rc = unsetenv("STARPU_TARGET_CLEAN_BUFFERS");
      if (rc == 0) rc = unsetenv("TG_CLEAN_BUFFERS_OURS");
    }
  } else {
    rc = setenv("STARPU_MINIMUM_CLEAN_BUFFERS", "0", 1);
    if (rc == 0) rc = setenv("STARPU_TARGET_CLEAN_BUFFERS", "0", 1);
    if (rc == 0) rc = setenv("TG_CLEAN_BUFFERS_OURS", "1", 1);
    tg_clean_off = rc == 0;
  }
  if (rc != 0) return tg_fail(errno, "setting STARPU_*_CLEAN_BUFFERS: %s", strerror(errno));
  return 0;
}

/* StarPU 1.3 can spin for good allocating device memory under a limit too
 * small for the graph (src/device_memory.c refuses the cases we know).  As
 * a last resort, under a device memory limit StarPU's watchdog (default 10
 * s without a finished task while tasks are pending; STARPU_WATCHDOG_TIMEOUT
 * in us overrides) ends the process with a message instead of a hang.
 * _exit: the stuck workers hold StarPU's locks, so exit handlers could
 * block. */
static void tg_watchdog_fired(void *arg) {
  (void)arg;
  const char *t = getenv("STARPU_WATCHDOG_TIMEOUT");
  fprintf(stderr,
          "taskgrad: error: no task finished for %.1f s under a device memory limit "
          "(STARPU_LIMIT_OPENCL_MEM / STARPU_LIMIT_CUDA_MEM): StarPU 1.3 is stuck "
          "allocating device memory; raise the limit (or STARPU_WATCHDOG_TIMEOUT, in "
          "microseconds, if tasks really run that long)\n",
          t ? atof(t) / 1e6 : 0.0);
  fflush(stderr);
  _exit(2);
}

/* The CPU workers to start beside CUDA workers when nobody chose: at most
 * TG_CPUS_BESIDE_GPUS (env_check.h), or -1 for StarPU's default.  With
 * tasks kept on the GPUs (tg_cuda_tasks_stay_on_gpus) idle CPU workers only
 * poll: on a 16-core H100 machine, 15 of them beside one GPU made GPT-2
 * 124M's step three times slower, where 1, 2 or 4 cost nothing measurable
 * (bench/results/2026-11-27-h100-measured-2.md).  Four keep room for the
 * tasks that only CPUs run (the loader's, an optimizer kept on the host). */
static int tg_default_cpus(const tg_runtime_config *c, int sched_named) {
#ifdef TG_HAVE_CUDA
  const int env_cpus = getenv("STARPU_NCPU") || getenv("STARPU_NCPUS");
  const char *env_ncuda = getenv("STARPU_NCUDA");
  const int requested = c->ncpus >= 0 ? c->ncpus : env_cpus ? 1 : -1;
  const int ncuda = c->ncuda >= 0 ? c->ncuda : env_ncuda ? atoi(env_ncuda) : -1;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  /* the GPUs are counted (the CUDA driver started) only where they matter */
  if (tg_cpus_beside_gpus(requested, sched_named, ncuda, 1, cores) < 0) return -1;
  int ngpus = 0;
  if (cudaGetDeviceCount(&ngpus) != cudaSuccess) { /* no driver or no GPU */
    (void)cudaGetLastError();
    return -1;
  }
  return tg_cpus_beside_gpus(requested, sched_named, ncuda, ngpus, cores);
#else
  (void)c;
  (void)sched_named;
  return -1;
#endif
}

/* After starpu_init: did the devices appear, each with its own node? */
static int tg_emulated_check(int n) {
  if (n == 0) return 0;
  int got = tg_nopencl_workers();
  if (got != n)
    return tg_fail(ENODEV,
                   "%d emulated device%s asked, StarPU started %d OpenCL worker%s: the "
                   "emulated accelerators need PoCL's CPU device (Debian: apt-get install "
                   "pocl-opencl-icd; check with clinfo -l)",
                   n, n == 1 ? "" : "s", got, got == 1 ? "" : "s");
  int nodes = (int)starpu_memory_nodes_get_count();
  if (nodes < n + 1)
    return tg_fail(ENODEV, "%d emulated devices but %d memory nodes", n, nodes);
  return 0;
}

int tg_init(const tg_runtime_config *cfg) {
  if (tg_started) return tg_fail(EBUSY, "tg_init: taskgrad is already started");
  tg_runtime_config c = cfg ? *cfg : tg_runtime_config_default();
  /* STARPU_SCHED may name the caller's policy object; when the config
   * names a policy, StarPU never reads the variable (hidden below) */
  const char *given_sched[] = {c.sched_policy ? c.sched_policy->policy_name : NULL, NULL};
  TG_TRY(tg_check_env(given_sched, !c.sched && !c.sched_policy));
  tg_note_maxcpus(&c);
  for (int i = 0; i < tg_ninit_fns; i++) TG_TRY(tg_init_fns[i](&c));
  struct starpu_conf conf;
  TG_STARPU(starpu_conf_init(&conf));
  if (c.sched) conf.sched_policy_name = c.sched;
  /* OpenCL only for the emulated accelerators (before STARPU_SCHED is
   * hidden below, so that an error leaves the environment as it was) */
  TG_TRY(tg_emulated_devices(&c));
  TG_TRY(tg_check_opencl_ids(c.emulated_devices));
  TG_TRY(tg_emulated_setup(&conf, c.emulated_devices));
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID) /* SimGrid: simulated GPUs */
  const int cuda_possible = 1;
#else
  const int cuda_possible = 0;
#endif
  if (c.ncpus == 0 && c.emulated_devices == 0 && (c.ncuda == 0 || !cuda_possible))
    return tg_fail(EINVAL, "0 CPU workers and no device: nothing could run a task "
                           "(--ncpus 0 needs --emulated-devices N or CUDA workers)");
  /* A policy object from the caller (taskgrad's own policies, plugins/,
   * which the application or the CLI looks up by name: StarPU does not know
   * their names).  StarPU 1.3 looks the policy up by name first, and
   * starpu_init() itself copies STARPU_SCHED over conf.sched_policy_name
   * (_starpu_conf_check_environment): with STARPU_SCHED=tg-... it would
   * print "scheduling policy not found" before falling back to
   * conf.sched_policy.  So the variable is removed from the environment for
   * the duration of starpu_init() and put back afterwards (children and
   * re-executions still see it).  tg_init() is meant to run before the
   * program starts threads of its own; setenv/unsetenv are not
   * thread-safe. */
  const char *env_sched = getenv("STARPU_SCHED");
  const int sched_named = c.sched || c.sched_policy || env_sched;
  char *saved_sched = NULL; /* STARPU_SCHED to restore after starpu_init */
  if (c.sched_policy) {
    conf.sched_policy = c.sched_policy;
    conf.sched_policy_name = NULL;
  }
  /* the same hiding makes a policy named in the config win over
   * STARPU_SCHED for StarPU's own policies too, as documented in runtime.h */
  if (env_sched && (c.sched_policy || c.sched)) {
    saved_sched = strdup(env_sched);
    if (!saved_sched) return tg_fail(ENOMEM, "tg_init: out of memory");
    unsetenv("STARPU_SCHED");
  }
  if (c.ncpus >= 0) conf.ncpus = c.ncpus;
  const int default_cpus = tg_default_cpus(&c, sched_named);
  if (default_cpus >= 0) conf.ncpus = default_cpus;
  tg_cpus_capped = default_cpus >= 0;
  if (c.ncuda >= 0) conf.ncuda = c.ncuda;
  if (c.calibrate >= 0) conf.calibrate = c.calibrate;

  int device_limit = tg_device_limit_set();
  if (device_limit && setenv("STARPU_WATCHDOG_TIMEOUT", "10000000", 0) != 0)
    return tg_fail(errno, "setenv STARPU_WATCHDOG_TIMEOUT: %s", strerror(errno));

  /* StarPU 1.3 writes dirty device buffers back to their home node
   * whenever fewer than 5% of a node's buffers are clean, up to 10%
   * (STARPU_MINIMUM/TARGET_CLEAN_BUFFERS, read once by starpu_init), so
   * that eviction finds clean buffers to drop.  A training step that fits
   * on its devices rewrites its weights, optimizer state and gradients
   * there every step: those copies are stale before they are needed, and
   * the tasks that next touch that data wait for the copies in flight
   * (GPT-2 124M on one simulated H100: bench/results/2026-11-27-fusion.md,
   * "StarPU's clean buffers").  So unless the user set them, or set a
   * device memory limit (eviction expected), none are kept clean ahead of
   * time; a program that then finds its step too large for the devices
   * restarts with StarPU's values (tg_clean_buffers_disabled; the CLI's
   * automatic fit does): for a model beyond device memory they are what
   * eviction needs (the 52B step on 8 simulated H100s, same page). */
  TG_TRY(tg_clean_buffers_setup(device_limit));

  openblas_set_num_threads(1);
#ifdef TG_SIMGRID
  /* SimGrid build: starpu_init starts the simulation, which needs an argv
   * (starpu_init passes NULL and StarPU 1.3.10 dereferences it) */
  static char *sim_argv0[] = {"taskgrad", "--log=root.thres:warning", NULL};
  int sim_argc = 2; /* and SimGrid's own chatter off */
  char **sim_argv = sim_argv0;
  /* under starpu_smpirun (scripts/build-sim-mpi) SMPI has started SimGrid */
  int rc = c.mpi ? tg_mpi_start(&conf) : starpu_initialize(&conf, &sim_argc, &sim_argv);
#else
  int rc = c.mpi ? tg_mpi_start(&conf) : starpu_init(&conf);
#endif
  if (saved_sched) {
    setenv("STARPU_SCHED", saved_sched, 1);
    free(saved_sched);
  }
  if (rc < 0 && c.mpi) return rc; /* message set by tg_mpi_start */
  if (rc == -ENODEV)
    return tg_fail(ENODEV, "starpu_init: no worker available (check STARPU_NCPU/STARPU_NCUDA)");
  if (rc != 0)
    return tg_fail(rc < 0 ? -rc : EIO, "starpu_init failed: %s", strerror(rc < 0 ? -rc : EIO));
  tg_started = 1;
  if (device_limit) starpu_task_watchdog_set_hook(tg_watchdog_fired, NULL);
  if (tg_emulated_check(c.emulated_devices) < 0) {
    tg_shutdown();
    return -ENODEV;
  }
  tg_current = c;
  tg_gpu_only = starpu_cuda_worker_get_count() > 0 && !sched_named;
  tg_set_deterministic(c.deterministic);
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

int tg_clean_buffers_disabled(void) { return tg_clean_off; }

int tg_cuda_tasks_stay_on_gpus(void) { return tg_gpu_only; }

int tg_cpu_workers_capped(void) { return tg_cpus_capped; }

void tg_shutdown(void) {
  if (!tg_started) return;
  starpu_task_wait_for_all();
  for (int i = tg_nshutdown_fns - 1; i >= 0; i--) tg_shutdown_fns[i]();
  tg_nshutdown_fns = 0;
#ifdef TG_HAVE_CUDA
  if (tg_cublas_started) starpu_cublas_shutdown();
#endif
  tg_cublas_started = 0;
  if (tg_mpi_active())
    tg_mpi_stop(); /* shuts StarPU down too */
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
void tg_exit_process(int status) {
  fflush(stdout);
  fflush(stderr);
  if (tg_started) _exit(status);
  exit(status);
}

int tg_nopencl_workers(void) {
#ifdef STARPU_USE_OPENCL
  return (int)starpu_opencl_worker_get_count();
#else
  return 0;
#endif
}
int tg_ncuda_workers(void) {
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID) /* SimGrid: simulated GPUs */
  return (int)starpu_cuda_worker_get_count();
#else
  return 0;
#endif
}

/* ---- TF32 math mode on every CUDA worker's cuBLAS handle ---------------------- */

#ifdef TG_HAVE_CUDA
static void tg_tf32_on_worker(void *arg) {
  int on = *(const int *)arg;
  TG_CUBLAS_CHECK(cublasSetMathMode(starpu_cublas_get_local_handle(),
                                    on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}
#endif

/* runtime state (the cuBLAS handles tg_init started), not a codelet */
int tg_set_tf32(int on) {
#ifdef TG_HAVE_CUDA
  if (starpu_cuda_worker_get_count() > 0)
    starpu_execute_on_each_worker(tg_tf32_on_worker, &on, STARPU_CUDA);
#else
  (void)on;
#endif
  return 0;
}
