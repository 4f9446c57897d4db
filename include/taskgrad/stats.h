/*
 * taskgrad statistics plugin: per-codelet task counts and times, per-worker
 * busy, idle and runtime-overhead times, from StarPU's profiling.
 *
 * Start StarPU with profiling on (tg_runtime_config.profiling = 1), call
 * tg_stats_begin() before the steps to measure and tg_stats_end() after
 * them; tg_stats_end() waits for every submitted task.
 */
#ifndef TASKGRAD_STATS_H
#define TASKGRAD_STATS_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TG_STATS_MAX_CODELETS 32
#define TG_STATS_MAX_WORKERS 64
#define TG_STATS_MAX_BUSES 256
#define TG_STATS_MAX_DEVICES 32

typedef struct tg_codelet_stats {
  const char *name;   /* codelet name, e.g. "tg_gemm" */
  long count;
  double total_us;    /* sum of task execution times */
  double flops;       /* sum of the tasks' declared flops */
  double last_end_us; /* when its last task ended (StarPU's profiling clock) */
} tg_codelet_stats;

typedef struct tg_worker_stats {
  char name[64];
  int tasks;
  double total_us;     /* profiled lifetime of the worker in the window */
  double executing_us; /* running task bodies */
  double sleeping_us;  /* blocked, waiting for work */
  double overhead_us;  /* the rest: scheduling, data management, callbacks */
  double data_wait_us; /* fetching its tasks' data (profiling's
                          acquire_data_start..end_time), part of overhead */
} tg_worker_stats;

typedef struct tg_bus_stats {
  int src, dst;          /* StarPU memory nodes */
  long long bytes;
  long transfers;
} tg_bus_stats;

typedef struct tg_stats {
  double wall_us;      /* between tg_stats_begin and the end of the last task */
  long tasks;
  int ncodelets;
  tg_codelet_stats codelets[TG_STATS_MAX_CODELETS];
  int nworkers;
  tg_worker_stats workers[TG_STATS_MAX_WORKERS];
  long long bytes_moved; /* between memory nodes (all buses) in the window */
  long transfers;        /* number of those transfers */
  int nbuses;            /* buses that moved data in the window ... */
  tg_bus_stats buses[TG_STATS_MAX_BUSES]; /* ... with their traffic */
  long evictions;          /* device buffers freed to make room (a lower
                              bound: see plugins/stats.c) ... */
  long long evicted_bytes; /* ... and their bytes */
  long prefetched_batches; /* micro-batches the loader prefetched to devices */
  int prefetch;            /* StarPU's scheduler prefetch on (STARPU_PREFETCH) */
  /* device memory nodes at tg_stats_end: StarPU's accounting of the bytes
   * in use (allocated or cached) and its size, -1 when StarPU knows none */
  int ndevices;
  int device_node[TG_STATS_MAX_DEVICES];
  double device_used[TG_STATS_MAX_DEVICES], device_total[TG_STATS_MAX_DEVICES];
} tg_stats;

int tg_stats_begin(void);
int tg_stats_end(tg_stats *out);
/* Time of the codelets whose name is `name` (0 if none ran). */
double tg_stats_codelet_us(const tg_stats *s, const char *name);
/* A per-codelet and per-worker table, and a "bytes moved" line. */
void tg_stats_print(const tg_stats *s, FILE *f);
/* Running totals per bus (StarPU bus id) since StarPU started, while
 * profiling is on: bytes[b] and transfers[b] (either may be NULL) for the
 * first `max` buses.  Returns the number of buses.  StarPU's own
 * starpu_bus_get_profiling_info() resets its counters on each read: read them
 * through this function only, so that the plugins agree. */
int tg_stats_bus_totals(long long *bytes, long *transfers, int max);
/* Running totals of device evictions since the first call (which starts
 * counting; counting stops at tg_shutdown).  Either pointer may be NULL. */
void tg_stats_evictions(long *count, long long *bytes);

#ifdef __cplusplus
}
#endif
#endif
