/*
 * Environment values checked before StarPU starts.
 *
 * Design note
 * -----------
 * StarPU aborts, asserts or crashes on many environment values a user can
 * type: its numeric helpers (starpu_helper.h: starpu_get_env_number,
 * starpu_get_env_float_default) abort on a value that is not a number and
 * assert on a negative integer (`STARPU_NCPU=abc`: status 134); its worker
 * binding lists assert on an empty or non-numeric list and index out of
 * bounds on a negative entry (`STARPU_WORKERS_CPUID=-1`: status 139); it
 * aborts when a directory it must create lies under a file
 * (`STARPU_HOME=/etc/passwd`) and when a host name holds a '/'
 * (STARPU_HOSTNAME names files); a zero STARPU_WATCHDOG_TIMEOUT makes its
 * watchdog kill the process at the first step.  Other values it ignores
 * with a warning (`STARPU_SCHED=nosuch`) or silently
 * (`STARPU_WORKERS_CPUID="0 abc"`).
 *
 * So every variable StarPU or taskgrad reads whose value can be wrong is
 * one row of tg_env_vars[] below: its name, its kind (integer, float, list,
 * name, path) and, where it has one, its range or its values.
 * tg_check_env() tries every row before StarPU starts (tg_init, and the
 * CLI before any work) and refuses the first bad value with one message
 * naming the variable (exit 2 in the CLI).  docs/reliability.md lists the
 * rows (tests/test_env.sh checks that the two agree); tests/test_env_check.c
 * tries every row with `abc`, `-1`, the empty string and a huge number.
 *
 * The rows come from grepping the sources of StarPU 1.3.10 and 1.4.10
 * (src/, mpi/src/) for starpu_getenv and the number helpers; the rows only
 * 1.4.10 reads are compiled in only against 1.4.  The syntax accepted is
 * StarPU's own (each kind's parser is named in tg_check_value), less what
 * StarPU would crash on, ignore or misread.  The empty string: StarPU
 * reads an empty number as 0 and an empty name as "the default", so those
 * pass; an empty list asserts and an empty directory means "/", so those
 * are refused (the kind decides, a row may say otherwise: .empty).
 *
 * Not in the table, because every value has a meaning: the switches that
 * are "set or not" (TG_DETERMINISTIC, TG_NO_PRIORITIES, STARPU_ENABLE_STATS,
 * STARPU_MPI_COMM), HOME, and what StarPU reads only in builds or features
 * taskgrad never uses (MIC, FxT's options, OpenCL program sources, nmad
 * hooks, the MPI load balancer).
 *
 * The other start-up check is the worker ceiling: Debian's StarPU is built
 * with STARPU_MAXCPUS 4, so on a larger machine it runs 4 CPU workers
 * without a word.  tg_maxcpus_note() words the one line tg_init() prints.
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <starpu.h>

#include "check.h"
#include "env_check.h"
#include "taskgrad/runtime.h"
#include "taskgrad/starpu_version.h"

#ifndef STARPU_MAXHIPDEVS
#define STARPU_MAXHIPDEVS 8
#endif
#ifndef STARPU_MAXMAXFPGADEVS
#define STARPU_MAXMAXFPGADEVS 8
#endif

/* an integer of StarPU's number helpers; a memory limit; a CPU count
 * (above the ceiling StarPU starts fewer workers) */
#define I(n) {n, TG_ENV_INT, 0, INT_MAX, NULL, NULL, TG_EMPTY_KIND}
#define MIB(n) {n, TG_ENV_INT, 0, INT_MAX, NULL, "number of MiB", TG_EMPTY_KIND}
#define CPUS(n) {n, TG_ENV_INT, 0, STARPU_MAXCPUS, NULL, "number of CPU workers", TG_EMPTY_KIND}
/* a float StarPU reads as a weight or a duration (>= 0); a signed one */
#define F(n) {n, TG_ENV_FLOAT, 0, FLT_MAX, NULL, NULL, TG_EMPTY_KIND}
#define FS(n) {n, TG_ENV_FLOAT, -FLT_MAX, FLT_MAX, NULL, NULL, TG_EMPTY_KIND}
/* any other row: name, kind, range, values ("a|b|c"), what the number is,
 * the empty string */
#define ROW(n, kind, min, max, values, what, empty) {n, kind, min, max, values, what, empty}

static const tg_env_var tg_env_vars[] = {
    /* workers and devices */
    CPUS("STARPU_NCPU"), CPUS("STARPU_NCPUS"), I("STARPU_NCUDA"), I("STARPU_NOPENCL"), I("STARPU_NMIC"),
    I("STARPU_NMICTHREADS"), I("STARPU_NMPI_MS"), I("STARPU_NMPIMSTHREADS"), I("STARPU_RESERVE_NCPU"),
    I("STARPU_NWORKER_PER_CUDA"), I("STARPU_NTHREADS_PER_CORE"), I("STARPU_OPENCL_ON_CPUS"),
    I("STARPU_OPENCL_ONLY_ON_CPUS"), I("STARPU_CUDA_THREAD_PER_DEV"), I("STARPU_CUDA_THREAD_PER_WORKER"),
    I("STARPU_CUDA_PIPELINE"), I("STARPU_OPENCL_PIPELINE"), I("STARPU_MAX_WORKERSIZE"),
    I("STARPU_MIN_WORKERSIZE"), I("STARPU_SINGLE_COMBINED_WORKER"),
    I("STARPU_SYNTHESIZE_ARITY_COMBINED_WORKER"), I("STARPU_WORKERS_NOBIND"),
    I("STARPU_WORKERS_GETBIND"), I("STARPU_WORKER_TREE"), I("STARPU_MAIN_THREAD_BIND"),
    I("STARPU_MAIN_THREAD_CPUID"), I("STARPU_MAIN_THREAD_COREID"), I("STARPU_USE_NUMA"),
    I("STARPU_PCI_FLAT"), I("STARPU_DISPLAY_BINDINGS"),
    /* memory */
    MIB("STARPU_LIMIT_CPU_MEM"), MIB("STARPU_LIMIT_CPU_NUMA_MEM"), MIB("STARPU_LIMIT_CUDA_MEM"),
    MIB("STARPU_LIMIT_OPENCL_MEM"), I("STARPU_MINIMUM_AVAILABLE_MEM"), I("STARPU_TARGET_AVAILABLE_MEM"),
    I("STARPU_MINIMUM_CLEAN_BUFFERS"), I("STARPU_TARGET_CLEAN_BUFFERS"), I("STARPU_MAX_MEMORY_USE"),
    I("STARPU_DISK_SWAP_SIZE"), I("STARPU_DISABLE_PINNING"), I("STARPU_MALLOC_SIMULATION_FOLD"),
    /* transfers */
    I("STARPU_PREFETCH"), I("STARPU_DISABLE_ASYNCHRONOUS_COPY"),
    I("STARPU_DISABLE_ASYNCHRONOUS_CUDA_COPY"), I("STARPU_DISABLE_ASYNCHRONOUS_OPENCL_COPY"),
    I("STARPU_DISABLE_ASYNCHRONOUS_MIC_COPY"), I("STARPU_DISABLE_ASYNCHRONOUS_MPI_MS_COPY"),
    I("STARPU_ENABLE_CUDA_GPU_GPU_DIRECT"), I("STARPU_LIMIT_BANDWIDTH"), I("STARPU_BUS_CALIBRATE"),
    /* scheduling and perfmodels */
    I("STARPU_CALIBRATE"), I("STARPU_CALIBRATE_MINIMUM"), I("STARPU_HISTORY_MAX_ERROR"),
    I("STARPU_MIN_PRIO"), I("STARPU_MAX_PRIO"), I("STARPU_SCHED_READY"), I("STARPU_SCHED_SORTED_ABOVE"),
    I("STARPU_SCHED_SORTED_BELOW"), I("STARPU_SCHED_GRAPH_TEST_DESCENDANTS"),
    I("STARPU_NTASKS_THRESHOLD"), I("STARPU_LIMIT_MAX_SUBMITTED_TASKS"),
    I("STARPU_LIMIT_MIN_SUBMITTED_TASKS"), I("STARPU_PERF_MODEL_HOMOGENEOUS_CPU"),
    I("STARPU_PERF_MODEL_HOMOGENEOUS_CUDA"), I("STARPU_PERF_MODEL_HOMOGENEOUS_OPENCL"),
    I("STARPU_PERF_MODEL_HOMOGENEOUS_MIC"), I("STARPU_PERF_MODEL_HOMOGENEOUS_MPI_MS"),
    I("STARPU_GLOBAL_ARBITER"), I("STARPU_DIDUSE_BARRIER"), I("STARPU_BACKOFF_MIN"),
    I("STARPU_BACKOFF_MAX"), I("STARPU_RAND_SEED"), I("STARPU_DISABLE_KERNELS"),
    /* statistics, traces, debugging */
    I("STARPU_STATS"), I("STARPU_BUS_STATS"), I("STARPU_MEMORY_STATS"), I("STARPU_COMM_STATS"),
    I("STARPU_SILENT"), I("STARPU_FXT_TRACE"), I("STARPU_GENERATE_TRACE"), I("STARPU_TRACE_BUFFER_SIZE"),
    I("STARPU_TASK_PROGRESS"), I("STARPU_WATCHDOG_CRASH"), I("STARPU_WATCHDOG_DELAY"),
    /* read with atoll, in microseconds: 0 (or what atoll reads as 0) fires at once */
    ROW("STARPU_WATCHDOG_TIMEOUT", TG_ENV_INT, 1, INT_MAX, NULL, "timeout in microseconds",
        TG_EMPTY_BAD),
    I("STARPU_CATCH_SIGNALS"), I("STARPU_CHECK_ENTIRE_PLATFORM"), I("STARPU_TASK_BREAK_ON_PUSH"),
    I("STARPU_TASK_BREAK_ON_SCHED"), I("STARPU_TASK_BREAK_ON_POP"), I("STARPU_TASK_BREAK_ON_EXEC"),
    /* StarPU-MPI */
    I("STARPU_MPI_CACHE"), I("STARPU_MPI_CACHE_STATS"), I("STARPU_MPI_COOP_SENDS"),
    I("STARPU_MPI_PRIORITIES"), I("STARPU_MPI_NOBIND"), I("STARPU_MPI_THREAD_CPUID"),
    I("STARPU_MPI_THREAD_COREID"), I("STARPU_MPI_NDETACHED_SEND"), I("STARPU_MPI_NREADY_PROCESS"),
    I("STARPU_MPI_FAKE_RANK"), I("STARPU_MPI_FAKE_SIZE"), I("STARPU_MPI_MASTER_NODE"),
    I("STARPU_MPI_DRIVER_CALL_FREQUENCY"), I("STARPU_MPI_DRIVER_TASK_FREQUENCY"),
    I("STARPU_MPI_DEBUG_LEVEL_MIN"), I("STARPU_MPI_DEBUG_LEVEL_MAX"),
    /* SimGrid */
    I("STARPU_SIMGRID"), I("STARPU_SIMGRID_CUDA_MALLOC_COST"), I("STARPU_SIMGRID_CUDA_QUEUE_COST"),
    I("STARPU_SIMGRID_TASK_SUBMIT_COST"), I("STARPU_SIMGRID_FETCHING_INPUT_COST"),
    I("STARPU_SIMGRID_SCHED_COST"), I("STARPU_SIMGRID_TRANSFER_COST"),
#if TG_STARPU_AT_LEAST(1, 4)
    /* read with the same aborting helpers by StarPU 1.4.10 only (HIP, FPGA
     * and TCP/IP devices, heteroprio, MPI and allocator knobs): found by the
     * same grep of sid's source package starpu 1.4.10+dfsg-2 */
    I("STARPU_AUTOHETEROPRIO_FREEZE_GATHERING"), I("STARPU_AUTOHETEROPRIO_ORDERING_INTERVAL"),
    I("STARPU_AUTOHETEROPRIO_PRINT_AFTER_ORDERING"),
    I("STARPU_AUTOHETEROPRIO_PRINT_DATA_ON_UPDATE"),
    I("STARPU_AUTOHETEROPRIO_PRIORITY_ORDERING_POLICY"),
    I("STARPU_AUTOHETEROPRIO_TIME_ESTIMATION_POLICY"), I("STARPU_CODELET_PROFILING"),
    I("STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES"), I("STARPU_DATA_LOCALITY_ENFORCE"),
    I("STARPU_DISABLE_ASYNCHRONOUS_HIP_COPY"), I("STARPU_DISABLE_ASYNCHRONOUS_MAX_FPGA_COPY"),
    I("STARPU_DISABLE_ASYNCHRONOUS_TCPIP_MS_COPY"), I("STARPU_ENABLE_MAP"),
    I("STARPU_ENERGY_PROFILING"), I("STARPU_EXPECTED_TRANSFER_TIME_WRITEBACK"),
    I("STARPU_HETEROPRIO_CODELET_GROUPING_STRATEGY"), I("STARPU_HETEROPRIO_USE_AUTO_CALIBRATION"),
    I("STARPU_HETEROPRIO_USE_LA"), I("STARPU_HIP_PIPELINE"), I("STARPU_HIP_THREAD_PER_DEV"),
    I("STARPU_HIP_THREAD_PER_WORKER"), MIB("STARPU_LIMIT_HIP_MEM"), MIB("STARPU_LIMIT_MAX_FPGA_MEM"),
    I("STARPU_MPI_EARLYDATA_ALLOCATE"), I("STARPU_MPI_GPUDIRECT"), I("STARPU_MPI_MEM_THROTTLE"),
    I("STARPU_MPI_MS_MULTIPLE_THREAD"), I("STARPU_MPI_PSM2"), I("STARPU_MPI_RECV_WAIT_FINALIZE"),
    I("STARPU_MPI_REDUX_ARITY_THRESHOLD"), I("STARPU_MPI_STATS"),
    I("STARPU_MPI_THREAD_MULTIPLE_SEND"), I("STARPU_MPI_TRACE_SYNC_CLOCKS"), I("STARPU_NHIP"),
    I("STARPU_NMAX_FPGA"), I("STARPU_NTCPIPMSTHREADS"), I("STARPU_NTCPIP_MS"),
    I("STARPU_NWORKER_PER_HIP"), I("STARPU_SIMGRID_TASK_PUSH_COST"), I("STARPU_SUBALLOCATOR"),
    I("STARPU_TCPIP_MS_MULTIPLE_THREAD"), I("STARPU_TCPIP_MS_PORT"), I("STARPU_TCPIP_MS_SLAVES"),
    I("STARPU_TCPIP_USE_LOCAL_SOCKET"),
#endif
    /* floats (starpu_get_env_float_default) */
    F("STARPU_SCHED_ALPHA"), F("STARPU_SCHED_BETA"), F("STARPU_SCHED_GAMMA"),
    F("STARPU_IDLE_POWER"), F("STARPU_WINDOW_TIME_SIZE"), F("STARPU_EXP_LEN_THRESHOLD"),
#if TG_STARPU_AT_LEAST(1, 4)
    /* StarPU 1.4.10 only: heteroprio's automatic calibration */
    FS("STARPU_HETEROPRIO_AURT_DOT_DIFF_10_NOD_OFFSET"),
    FS("STARPU_HETEROPRIO_BEST_NODS_SCORE_EXP_SELECTIVITY"),
    FS("STARPU_HETEROPRIO_NOD_TIME_COMBINATION_EXP_SELECTIVITY"),
    FS("STARPU_HETEROPRIO_NOD_TIME_COMBINATION_NOD_MULTIPLIER"),
    FS("STARPU_HETEROPRIO_URTS_TIME_COMBINATION_EXP_SELECTIVITY"),
    FS("STARPU_HETEROPRIO_URTS_TIME_COMBINATION_NOD_MULTIPLIER"),
    FS("STARPU_HETEROPRIO_URT_2_ARCH_NEED_MULTIPLIER"),
    FS("STARPU_HETEROPRIO_URT_2_URT_MULTIPLIER"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_10_ARCH_DIFF_OFFSET"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_11_ARCH_DIFF_OFFSET"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_11_NOD_OFFSET"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_2_ARCH_NEED_MULTIPLIER"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_3_ARCH_NEED_MULTIPLIER"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_4_ARCH_NEED_MULTIPLIER"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_5_ARCH_DIFF_OFFSET"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_5_NOD_OFFSET"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_9_ARCH_DIFF_OFFSET"),
    FS("STARPU_HETEROPRIO_URT_DOT_DIFF_9_NOD_OFFSET"), FS("STARPU_HETEROPRIO_URT_URT_MULTIPLIER"),
#endif
    /* lists (src/core/topology.c) */
    ROW("STARPU_WORKERS_CPUID", TG_ENV_CPU_LIST, 0, INT_MAX, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_WORKERS_COREID", TG_ENV_CPU_LIST, 0, INT_MAX, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_WORKERS_CUDAID", TG_ENV_ID_LIST, 0, STARPU_MAXCUDADEVS - 1, NULL, NULL,
        TG_EMPTY_KIND),
    ROW("STARPU_WORKERS_OPENCLID", TG_ENV_ID_LIST, 0, STARPU_MAXOPENCLDEVS - 1, NULL, NULL,
        TG_EMPTY_KIND),
#if TG_STARPU_AT_LEAST(1, 4)
    ROW("STARPU_WORKERS_HIPID", TG_ENV_ID_LIST, 0, STARPU_MAXHIPDEVS - 1, NULL, NULL,
        TG_EMPTY_KIND),
    ROW("STARPU_WORKERS_MAX_FPGAID", TG_ENV_ID_LIST, 0, STARPU_MAXMAXFPGADEVS - 1, NULL, NULL,
        TG_EMPTY_KIND),
#endif
    /* names; StarPU reads an empty STARPU_SCHED as its default */
    ROW("STARPU_SCHED", TG_ENV_SCHED, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_DISK_SWAP_BACKEND", TG_ENV_NAME, 0, 0, "unistd|stdio|unistd_o_direct|leveldb|hdf5",
        NULL, TG_EMPTY_BAD),
    ROW("STARPU_HOSTNAME", TG_ENV_HOSTNAME, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    /* directories StarPU creates (mkdir -p) and writes in; StarPU reads
     * XDG_CACHE_HOME before STARPU_HOME (taskgrad too, for its cache) */
    ROW("STARPU_HOME", TG_ENV_MKDIR, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("XDG_CACHE_HOME", TG_ENV_MKDIR, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_PERF_MODEL_DIR", TG_ENV_MKDIR, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_DISK_SWAP", TG_ENV_MKDIR, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    /* a directory written in (FxT builds), files written, a file read
     * (StarPU reads an empty STARPU_HWLOC_INPUT as unset) */
    ROW("STARPU_FXT_PREFIX", TG_ENV_DIR_OUT, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_IDLE_FILE", TG_ENV_FILE_OUT, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_BUS_STATS_FILE", TG_ENV_FILE_OUT, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_WORKER_STATS_FILE", TG_ENV_FILE_OUT, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_LOGFILENAME", TG_ENV_FILE_OUT, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    ROW("STARPU_HWLOC_INPUT", TG_ENV_FILE_IN, 0, 0, NULL, NULL, TG_EMPTY_KIND),
    /* taskgrad's own; empty means unset.  TG_GEMM_LIB: the names of
     * gemm_libs.h (the kernel layer's, which the base does not call) */
    ROW("TG_GEMM_LIB", TG_ENV_NAME, 0, 0, "openblas|onednn|libxsmm|auto", NULL, TG_EMPTY_OK),
    ROW("TG_GEMM_BF16", TG_ENV_NAME, 0, 0, "native|widen|auto", NULL, TG_EMPTY_OK),
    /* codelets/cublaslt.c: 0 turns the cuBLASLt GEMMs off (A/B on one GPU) */
    ROW("TG_CUBLASLT", TG_ENV_NAME, 0, 0, "0|1", NULL, TG_EMPTY_OK),
    ROW("TG_EMULATED_DEVICES", TG_ENV_INT, 0, TG_MAX_EMULATED_DEVICES, NULL, "number of devices",
        TG_EMPTY_OK),
    ROW("TG_MEMAWARE_PRESSURE", TG_ENV_FLOAT, 0, 1, NULL, "fraction", TG_EMPTY_OK),
    ROW("TG_PLATFORM_DIR", TG_ENV_DIR_IN, 0, 0, NULL, NULL, TG_EMPTY_OK),
};

const tg_env_var *tg_env_table(size_t *n) {
  *n = sizeof tg_env_vars / sizeof tg_env_vars[0];
  return tg_env_vars;
}

int tg_env_empty_ok(const tg_env_var *r) {
  if (r->empty != TG_EMPTY_KIND) return r->empty == TG_EMPTY_OK;
  switch (r->kind) {
    case TG_ENV_CPU_LIST: /* StarPU asserts on a list without an entry */
    case TG_ENV_ID_LIST:
    case TG_ENV_MKDIR: /* "" + "/.starpu": the root directory */
    case TG_ENV_DIR_OUT:
    case TG_ENV_FILE_OUT: /* fopen("") fails */
      return 0;
    default: /* a number StarPU reads as 0, a name as its default */
      return 1;
  }
}

/* a whole number from min to max at p (digits only: no sign, no space),
 * its end in *end */
static int tg_env_number(const char *p, const char **end, double min, double max) {
  if (*p < '0' || *p > '9') return -1;
  char *e;
  errno = 0;
  long long x = strtoll(p, &e, 10);
  *end = e;
  return errno || x < min || x > max ? -1 : 0;
}

/* the entries of a list at v, each a number from 0 to max; ranges (N-M,
 * N- to the last CPU) and commas only where `ranges`.  StarPU's binding
 * list (_starpu_initialize_workers_bindid) takes numbers, ranges, spaces
 * and one comma after an entry; its device lists
 * (_starpu_initialize_workers_deviceid) strtol in a loop: numbers and
 * spaces.  Both stop silently at the first thing they cannot read, and
 * assert when that is the first entry. */
static int tg_env_list(const char *v, double max, int ranges) {
  const char *p = v;
  int n = 0;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return n > 0 ? 0 : -1;
    if (tg_env_number(p, &p, 0, max) < 0) return -1;
    n++;
    if (ranges && *p == '-') {
      p++;
      if (!*p) return 0;
      if (*p == ' ' || *p == ',') { /* "N-": StarPU steps over the separator */
        p++;
        continue;
      }
      if (tg_env_number(p, &p, 0, max) < 0) return -1;
    }
    if (ranges && *p == ',') p++;
    else if (*p && *p != ' ' && *p != '\t') return -1;
  }
}

static int tg_env_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* the directory a file name lies in, into dir */
static int tg_env_dirname(const char *name, const char *v, char *dir, size_t size) {
  const char *slash = strrchr(v, '/');
  if (!slash) snprintf(dir, size, ".");
  else if (slash == v) snprintf(dir, size, "/");
  else if ((size_t)(slash - v) >= size) return tg_fail(EINVAL, "%s: path too long", name);
  else snprintf(dir, size, "%.*s", (int)(slash - v), v);
  return 0;
}

/* What mkdir -p (StarPU's _starpu_mkpath, which aborts on a failure)
 * needs: the path, or its nearest existing ancestor, is a writable
 * directory. */
static int tg_env_mkdir_ok(const char *name, const char *v) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", v) >= (int)sizeof p)
    return tg_fail(EINVAL, "%s: path too long", name);
  for (;;) {
    struct stat st;
    if (stat(p, &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        return tg_fail(EINVAL, "%s='%s': '%s' is not a directory", name, v, p);
      if (access(p, W_OK | X_OK) != 0)
        return tg_fail(EINVAL, "%s='%s': directory '%s' is not writable", name, v, p);
      return 0;
    }
    if (errno == ENOTDIR)
      return tg_fail(EINVAL, "%s='%s': a part of the path is not a directory", name, v);
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/') p[--len] = '\0'; /* "a/b/" is "a/b" */
    char up[4096];
    TG_TRY(tg_env_dirname(name, p, up, sizeof up));
    memcpy(p, up, strlen(up) + 1);
  }
}

/* a file written: not a directory, in an existing writable directory */
static int tg_env_file_out_ok(const char *name, const char *v) {
  if (tg_env_is_dir(v)) return tg_fail(EINVAL, "%s='%s' is a directory, not a file", name, v);
  char dir[4096];
  TG_TRY(tg_env_dirname(name, v, dir, sizeof dir));
  if (!tg_env_is_dir(dir))
    return tg_fail(EINVAL, "%s='%s': directory '%s' does not exist", name, v, dir);
  if (access(dir, W_OK | X_OK) != 0)
    return tg_fail(EINVAL, "%s='%s': directory '%s' is not writable", name, v, dir);
  return 0;
}

/* STARPU_SCHED: a policy of StarPU's or of the caller's (sched_names) */
static int tg_env_sched_ok(const char *name, const char *v, const char *const *sched_names) {
  for (const char *const *p = sched_names; p && *p; p++)
    if (strcmp(v, *p) == 0) return 0;
  struct starpu_sched_policy **all = starpu_sched_get_predefined_policies();
  for (int i = 0; all[i]; i++)
    if (strcmp(v, all[i]->policy_name) == 0) return 0;
#if TG_STARPU_AT_LEAST(1, 4)
  /* StarPU 1.4 also looks policies up in the library STARPU_SCHED_LIB names */
  const char *lib = getenv("STARPU_SCHED_LIB");
  if (lib && *lib) return 0;
#endif
  char known[1024];
  size_t used = 0;
  known[0] = '\0';
  for (const char *const *p = sched_names; p && *p; p++)
    used += (size_t)snprintf(known + used, used < sizeof known ? sizeof known - used : 0,
                             " %s", *p);
  for (int i = 0; all[i]; i++)
    used += (size_t)snprintf(known + used, used < sizeof known ? sizeof known - used : 0,
                             " %s", all[i]->policy_name);
  return tg_fail(EINVAL, "%s='%s' is not a scheduling policy; known:%s", name, v, known);
}

/* a name of values ("a|b|c") */
static int tg_env_name_ok(const tg_env_var *r, const char *v) {
  const size_t len = strlen(v);
  for (const char *p = r->values; p;) {
    const char *bar = strchr(p, '|');
    const size_t n = bar ? (size_t)(bar - p) : strlen(p);
    if (n == len && strncmp(p, v, n) == 0) return 0;
    p = bar ? bar + 1 : NULL;
  }
  char list[256];
  snprintf(list, sizeof list, "%s", r->values);
  for (char *c = list; *c; c++)
    if (*c == '|') *c = ',';
  return tg_fail(EINVAL, "%s='%s' is not one of %s", r->name, v, list);
}

int tg_check_value(const tg_env_var *r, const char *v, const char *const *sched_names) {
  if (!*v)
    return tg_env_empty_ok(r) ? 0
                              : tg_fail(EINVAL, "%s is set but empty: unset it or give a value",
                                        r->name);
  switch (r->kind) {
    case TG_ENV_INT: { /* starpu_get_env_number: strtol, nothing after it, >= 0 */
      const char *end;
      if (tg_env_number(v, &end, r->min, r->max) < 0 || *end)
        return tg_fail(EINVAL, "%s='%s' is not a %s from %.0f to %.0f", r->name, v,
                       r->what ? r->what : "whole number", r->min, r->max);
      return 0;
    }
    case TG_ENV_FLOAT: { /* starpu_get_env_float_default: strtof, nothing after it */
      char *end;
      errno = 0;
      const double x = strtod(v, &end);
      if (!errno && !*end && end != v && isfinite(x) && x >= r->min && x <= r->max) return 0;
      if (r->min == -FLT_MAX) return tg_fail(EINVAL, "%s='%s' is not a number", r->name, v);
      if (r->max == FLT_MAX)
        return tg_fail(EINVAL, "%s='%s' is not a number >= %g", r->name, v, r->min);
      return tg_fail(EINVAL, "%s='%s' is not a %s from %g to %g", r->name, v,
                     r->what ? r->what : "number", r->min, r->max);
    }
    case TG_ENV_CPU_LIST:
      if (tg_env_list(v, r->max, 1) == 0) return 0;
      return tg_fail(EINVAL,
                     "%s='%s' is not a list of CPU numbers or ranges N-M, separated by spaces "
                     "or commas (e.g. \"0 2 4-7\")",
                     r->name, v);
    case TG_ENV_ID_LIST:
      if (tg_env_list(v, r->max, 0) == 0) return 0;
      return tg_fail(EINVAL,
                     "%s='%s' is not a list of device numbers from 0 to %.0f separated by "
                     "spaces (e.g. \"0 1\")",
                     r->name, v, r->max);
    case TG_ENV_NAME:
      return tg_env_name_ok(r, v);
    case TG_ENV_SCHED:
      return tg_env_sched_ok(r->name, v, sched_names);
    case TG_ENV_HOSTNAME: /* a part of the perfmodels' file names */
      if (!strchr(v, '/')) return 0;
      return tg_fail(EINVAL, "%s='%s': a host name cannot hold '/' (StarPU names files after it)",
                     r->name, v);
    case TG_ENV_MKDIR:
      return tg_env_mkdir_ok(r->name, v);
    case TG_ENV_DIR_OUT:
      if (!tg_env_is_dir(v)) return tg_fail(EINVAL, "%s='%s' is not a directory", r->name, v);
      if (access(v, W_OK | X_OK) != 0)
        return tg_fail(EINVAL, "%s='%s': the directory is not writable", r->name, v);
      return 0;
    case TG_ENV_DIR_IN:
      if (!tg_env_is_dir(v)) return tg_fail(EINVAL, "%s='%s' is not a directory", r->name, v);
      return 0;
    case TG_ENV_FILE_OUT:
      return tg_env_file_out_ok(r->name, v);
    case TG_ENV_FILE_IN: {
      struct stat st;
      if (stat(v, &st) == 0 && S_ISREG(st.st_mode) && access(v, R_OK) == 0) return 0;
      return tg_fail(EINVAL, "%s='%s' is not a readable file", r->name, v);
    }
  }
  return 0;
}

int tg_check_env(const char *const *sched_names, int check_sched) {
  size_t n;
  const tg_env_var *t = tg_env_table(&n);
  for (size_t i = 0; i < n; i++) {
    if (t[i].kind == TG_ENV_SCHED && !check_sched) continue;
    const char *v = getenv(t[i].name);
    if (v) TG_TRY(tg_check_value(&t[i], v, sched_names));
  }
  return 0;
}

int tg_check_environment(const char *const *sched_names) {
  return tg_check_env(sched_names, 1);
}

int tg_check_opencl_ids(int ndevices) {
  const char *v = getenv("STARPU_WORKERS_OPENCLID");
  if (!v || ndevices <= 0 || tg_env_list(v, ndevices - 1, 0) == 0) return 0;
  return tg_fail(EINVAL, "STARPU_WORKERS_OPENCLID='%s': with %d emulated device%s the device "
                 "numbers go from 0 to %d", v, ndevices, ndevices == 1 ? "" : "s", ndevices - 1);
}

int tg_maxcpus_note(int ncores, int maxcpus, int requested, char *buf, size_t size) {
  if (size) buf[0] = '\0';
  /* a caller that asked for fewer workers than the ceiling is not capped */
  if (ncores <= maxcpus || (requested >= 0 && requested <= maxcpus)) return 0;
  snprintf(buf, size,
           "this machine has %d cores but this StarPU runs at most %d CPU workers "
           "(STARPU_MAXCPUS); scripts/build-starpu builds one without that limit",
           ncores, maxcpus);
  return 1;
}

int tg_cpus_beside_gpus(int requested, int sched_named, int ncuda, int ngpus, long ncores) {
  if (requested >= 0 || sched_named || ncuda == 0 || ngpus <= 0) return -1;
  const int used = ncuda > 0 && ncuda < ngpus ? ncuda : ngpus;
  return ncores - used > TG_CPUS_BESIDE_GPUS ? TG_CPUS_BESIDE_GPUS : -1;
}
