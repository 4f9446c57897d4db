/*
 * Environment values checked before StarPU starts.
 *
 * Design note
 * -----------
 * StarPU 1.3 reads its numeric environment variables with inline helpers
 * (starpu_helper.h: starpu_get_env_number, starpu_get_env_float_default)
 * that abort the whole process on a value that is not a number, and assert
 * on a negative integer.  `STARPU_NCPU=abc taskgrad train gpt` then dies
 * with status 134 instead of a message.  tg_check_env() runs first in
 * tg_init() and refuses every such value with one line (exit 2 in the CLI).
 *
 * The lists hold every variable that StarPU 1.3.10's own sources (src/,
 * mpi/src/) read through those helpers, found by grepping the source
 * package, plus taskgrad's numeric variables; built against StarPU 1.4
 * (same helpers), also those that only 1.4.10 reads.  A variable set to the empty
 * string is what StarPU reads as 0, so it passes.  The same parsing rules as
 * StarPU's: base-10 integers with nothing after them, >= 0; floats as
 * strtof reads them, with nothing after them.
 *
 * The other start-up check is the worker ceiling: Debian's StarPU is built
 * with STARPU_MAXCPUS 4, so on a larger machine it runs 4 CPU workers
 * without a word.  tg_maxcpus_note() words the one line tg_init() prints.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "env_check.h"
#include "taskgrad/starpu_version.h"

static const char *const tg_env_ints[] = {
    /* workers and devices */
    "STARPU_NCPU", "STARPU_NCPUS", "STARPU_NCUDA", "STARPU_NOPENCL", "STARPU_NMIC",
    "STARPU_NMICTHREADS", "STARPU_NMPI_MS", "STARPU_NMPIMSTHREADS", "STARPU_RESERVE_NCPU",
    "STARPU_NWORKER_PER_CUDA", "STARPU_NTHREADS_PER_CORE", "STARPU_OPENCL_ON_CPUS",
    "STARPU_OPENCL_ONLY_ON_CPUS", "STARPU_CUDA_THREAD_PER_DEV", "STARPU_CUDA_THREAD_PER_WORKER",
    "STARPU_CUDA_PIPELINE", "STARPU_OPENCL_PIPELINE", "STARPU_MAX_WORKERSIZE",
    "STARPU_MIN_WORKERSIZE", "STARPU_SINGLE_COMBINED_WORKER",
    "STARPU_SYNTHESIZE_ARITY_COMBINED_WORKER", "STARPU_WORKERS_NOBIND",
    "STARPU_WORKERS_GETBIND", "STARPU_WORKER_TREE", "STARPU_MAIN_THREAD_BIND",
    "STARPU_MAIN_THREAD_CPUID", "STARPU_MAIN_THREAD_COREID", "STARPU_USE_NUMA",
    "STARPU_PCI_FLAT", "STARPU_DISPLAY_BINDINGS",
    /* memory */
    "STARPU_LIMIT_CPU_MEM", "STARPU_LIMIT_CPU_NUMA_MEM", "STARPU_LIMIT_CUDA_MEM",
    "STARPU_LIMIT_OPENCL_MEM", "STARPU_MINIMUM_AVAILABLE_MEM", "STARPU_TARGET_AVAILABLE_MEM",
    "STARPU_MINIMUM_CLEAN_BUFFERS", "STARPU_TARGET_CLEAN_BUFFERS", "STARPU_MAX_MEMORY_USE",
    "STARPU_DISK_SWAP_SIZE", "STARPU_DISABLE_PINNING", "STARPU_MALLOC_SIMULATION_FOLD",
    /* transfers */
    "STARPU_PREFETCH", "STARPU_DISABLE_ASYNCHRONOUS_COPY",
    "STARPU_DISABLE_ASYNCHRONOUS_CUDA_COPY", "STARPU_DISABLE_ASYNCHRONOUS_OPENCL_COPY",
    "STARPU_DISABLE_ASYNCHRONOUS_MIC_COPY", "STARPU_DISABLE_ASYNCHRONOUS_MPI_MS_COPY",
    "STARPU_ENABLE_CUDA_GPU_GPU_DIRECT", "STARPU_LIMIT_BANDWIDTH", "STARPU_BUS_CALIBRATE",
    /* scheduling and perfmodels */
    "STARPU_CALIBRATE", "STARPU_CALIBRATE_MINIMUM", "STARPU_HISTORY_MAX_ERROR",
    "STARPU_MIN_PRIO", "STARPU_MAX_PRIO", "STARPU_SCHED_READY", "STARPU_SCHED_SORTED_ABOVE",
    "STARPU_SCHED_SORTED_BELOW", "STARPU_SCHED_GRAPH_TEST_DESCENDANTS",
    "STARPU_NTASKS_THRESHOLD", "STARPU_LIMIT_MAX_SUBMITTED_TASKS",
    "STARPU_LIMIT_MIN_SUBMITTED_TASKS", "STARPU_PERF_MODEL_HOMOGENEOUS_CPU",
    "STARPU_PERF_MODEL_HOMOGENEOUS_CUDA", "STARPU_PERF_MODEL_HOMOGENEOUS_OPENCL",
    "STARPU_PERF_MODEL_HOMOGENEOUS_MIC", "STARPU_PERF_MODEL_HOMOGENEOUS_MPI_MS",
    "STARPU_GLOBAL_ARBITER", "STARPU_DIDUSE_BARRIER", "STARPU_BACKOFF_MIN",
    "STARPU_BACKOFF_MAX", "STARPU_RAND_SEED", "STARPU_DISABLE_KERNELS",
    /* statistics, traces, debugging */
    "STARPU_STATS", "STARPU_BUS_STATS", "STARPU_MEMORY_STATS", "STARPU_COMM_STATS",
    "STARPU_SILENT", "STARPU_FXT_TRACE", "STARPU_GENERATE_TRACE", "STARPU_TRACE_BUFFER_SIZE",
    "STARPU_TASK_PROGRESS", "STARPU_WATCHDOG_CRASH", "STARPU_WATCHDOG_DELAY",
    "STARPU_CATCH_SIGNALS", "STARPU_CHECK_ENTIRE_PLATFORM", "STARPU_TASK_BREAK_ON_PUSH",
    "STARPU_TASK_BREAK_ON_SCHED", "STARPU_TASK_BREAK_ON_POP", "STARPU_TASK_BREAK_ON_EXEC",
    /* StarPU-MPI */
    "STARPU_MPI_CACHE", "STARPU_MPI_CACHE_STATS", "STARPU_MPI_COOP_SENDS",
    "STARPU_MPI_PRIORITIES", "STARPU_MPI_NOBIND", "STARPU_MPI_THREAD_CPUID",
    "STARPU_MPI_THREAD_COREID", "STARPU_MPI_NDETACHED_SEND", "STARPU_MPI_NREADY_PROCESS",
    "STARPU_MPI_FAKE_RANK", "STARPU_MPI_FAKE_SIZE", "STARPU_MPI_MASTER_NODE",
    "STARPU_MPI_DRIVER_CALL_FREQUENCY", "STARPU_MPI_DRIVER_TASK_FREQUENCY",
    "STARPU_MPI_DEBUG_LEVEL_MIN", "STARPU_MPI_DEBUG_LEVEL_MAX",
    /* SimGrid */
    "STARPU_SIMGRID", "STARPU_SIMGRID_CUDA_MALLOC_COST", "STARPU_SIMGRID_CUDA_QUEUE_COST",
    "STARPU_SIMGRID_TASK_SUBMIT_COST", "STARPU_SIMGRID_FETCHING_INPUT_COST",
    "STARPU_SIMGRID_SCHED_COST", "STARPU_SIMGRID_TRANSFER_COST",
#if TG_STARPU_AT_LEAST(1, 4)
    /* read with the same aborting helpers by StarPU 1.4.10 only (HIP, FPGA
     * and TCP/IP devices, heteroprio, MPI and allocator knobs): found by the
     * same grep of sid's source package starpu 1.4.10+dfsg-2 */
    "STARPU_AUTOHETEROPRIO_FREEZE_GATHERING", "STARPU_AUTOHETEROPRIO_ORDERING_INTERVAL",
    "STARPU_AUTOHETEROPRIO_PRINT_AFTER_ORDERING",
    "STARPU_AUTOHETEROPRIO_PRINT_DATA_ON_UPDATE",
    "STARPU_AUTOHETEROPRIO_PRIORITY_ORDERING_POLICY",
    "STARPU_AUTOHETEROPRIO_TIME_ESTIMATION_POLICY", "STARPU_CODELET_PROFILING",
    "STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES", "STARPU_DATA_LOCALITY_ENFORCE",
    "STARPU_DISABLE_ASYNCHRONOUS_HIP_COPY", "STARPU_DISABLE_ASYNCHRONOUS_MAX_FPGA_COPY",
    "STARPU_DISABLE_ASYNCHRONOUS_TCPIP_MS_COPY", "STARPU_ENABLE_MAP",
    "STARPU_ENERGY_PROFILING", "STARPU_EXPECTED_TRANSFER_TIME_WRITEBACK",
    "STARPU_HETEROPRIO_CODELET_GROUPING_STRATEGY", "STARPU_HETEROPRIO_USE_AUTO_CALIBRATION",
    "STARPU_HETEROPRIO_USE_LA", "STARPU_HIP_PIPELINE", "STARPU_HIP_THREAD_PER_DEV",
    "STARPU_HIP_THREAD_PER_WORKER", "STARPU_LIMIT_HIP_MEM", "STARPU_LIMIT_MAX_FPGA_MEM",
    "STARPU_MPI_EARLYDATA_ALLOCATE", "STARPU_MPI_GPUDIRECT", "STARPU_MPI_MEM_THROTTLE",
    "STARPU_MPI_MS_MULTIPLE_THREAD", "STARPU_MPI_PSM2", "STARPU_MPI_RECV_WAIT_FINALIZE",
    "STARPU_MPI_REDUX_ARITY_THRESHOLD", "STARPU_MPI_STATS",
    "STARPU_MPI_THREAD_MULTIPLE_SEND", "STARPU_MPI_TRACE_SYNC_CLOCKS", "STARPU_NHIP",
    "STARPU_NMAX_FPGA", "STARPU_NTCPIPMSTHREADS", "STARPU_NTCPIP_MS",
    "STARPU_NWORKER_PER_HIP", "STARPU_SIMGRID_TASK_PUSH_COST", "STARPU_SUBALLOCATOR",
    "STARPU_TCPIP_MS_MULTIPLE_THREAD", "STARPU_TCPIP_MS_PORT", "STARPU_TCPIP_MS_SLAVES",
    "STARPU_TCPIP_USE_LOCAL_SOCKET",
#endif
    /* taskgrad's own */
    "TG_EMULATED_DEVICES",
};

static const char *const tg_env_floats[] = {
    "STARPU_SCHED_ALPHA", "STARPU_SCHED_BETA", "STARPU_SCHED_GAMMA",
    "STARPU_IDLE_POWER", "STARPU_WINDOW_TIME_SIZE", "STARPU_EXP_LEN_THRESHOLD",
#if TG_STARPU_AT_LEAST(1, 4)
    /* StarPU 1.4.10 only: heteroprio's automatic calibration */
    "STARPU_HETEROPRIO_AURT_DOT_DIFF_10_NOD_OFFSET",
    "STARPU_HETEROPRIO_BEST_NODS_SCORE_EXP_SELECTIVITY",
    "STARPU_HETEROPRIO_NOD_TIME_COMBINATION_EXP_SELECTIVITY",
    "STARPU_HETEROPRIO_NOD_TIME_COMBINATION_NOD_MULTIPLIER",
    "STARPU_HETEROPRIO_URTS_TIME_COMBINATION_EXP_SELECTIVITY",
    "STARPU_HETEROPRIO_URTS_TIME_COMBINATION_NOD_MULTIPLIER",
    "STARPU_HETEROPRIO_URT_2_ARCH_NEED_MULTIPLIER",
    "STARPU_HETEROPRIO_URT_2_URT_MULTIPLIER",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_10_ARCH_DIFF_OFFSET",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_11_ARCH_DIFF_OFFSET",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_11_NOD_OFFSET",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_2_ARCH_NEED_MULTIPLIER",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_3_ARCH_NEED_MULTIPLIER",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_4_ARCH_NEED_MULTIPLIER",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_5_ARCH_DIFF_OFFSET",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_5_NOD_OFFSET",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_9_ARCH_DIFF_OFFSET",
    "STARPU_HETEROPRIO_URT_DOT_DIFF_9_NOD_OFFSET", "STARPU_HETEROPRIO_URT_URT_MULTIPLIER",
#endif
};

/* TG_GEMM_LIB: the names of gemm_libs.h (the kernel layer's, which the
 * base does not call) and "auto" */
static const char *const tg_gemm_lib_values[] = {"openblas", "onednn", "libxsmm", "auto"};

int tg_check_env(void) {
  const char *g = getenv("TG_GEMM_LIB");
  if (g && *g) {
    int known = 0;
    for (size_t i = 0; i < sizeof tg_gemm_lib_values / sizeof tg_gemm_lib_values[0]; i++)
      known |= strcmp(g, tg_gemm_lib_values[i]) == 0;
    if (!known)
      return tg_fail(EINVAL, "TG_GEMM_LIB='%s' is not one of openblas, onednn, libxsmm, auto",
                     g);
  }
  for (size_t i = 0; i < sizeof tg_env_ints / sizeof tg_env_ints[0]; i++) {
    const char *v = getenv(tg_env_ints[i]);
    if (!v || !*v) continue;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < 0 || x > 0x7fffffffLL)
      return tg_fail(EINVAL, "%s='%s' is not a %s", tg_env_ints[i], v,
                     strncmp(tg_env_ints[i], "STARPU_LIMIT_", 13)
                         ? "whole number from 0 to 2147483647"
                         : "number of MiB");
  }
  for (size_t i = 0; i < sizeof tg_env_floats / sizeof tg_env_floats[0]; i++) {
    const char *v = getenv(tg_env_floats[i]);
    if (!v || !*v) continue;
    char *end;
    errno = 0;
    (void)strtof(v, &end);
    if (errno || *end) return tg_fail(EINVAL, "%s='%s' is not a number", tg_env_floats[i], v);
  }
  return 0;
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
