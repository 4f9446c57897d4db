/*
 * Statistics plugin.  A submit hook gives every task a completion callback;
 * the callback reads the task's profiling record (start and end of its body,
 * filled by StarPU before the callback runs) and adds it to a per-codelet
 * table.  Per-worker times come from starpu_profiling_worker_get_info, which
 * resets its counters on each read, so tg_stats_begin() reads once to start
 * the window.
 *
 * The stats and trace plugins share StarPU's single per-task completion
 * callback and one submission hook (src/hooks.h): a small dispatcher here (tg_plugins_*) gives
 * every task submitted while either plugin is active one callback that calls
 * each active plugin, so their windows may nest or overlap in any order.
 * StarPU's bus counters reset on each read too; tg_stats_bus_totals() keeps
 * running totals so that several readers see consistent numbers.
 *
 * Evictions.  StarPU 1.3 counts none and has no hook for them.  A device
 * buffer of a live handle is freed in one place only: its memory manager
 * evicting it to make room (or tidying clean buffers when memory runs low),
 * through the data interface's free_data_on_node; an unregistered handle's
 * device buffers go to an allocation cache, freed at shutdown.  So the
 * first reader wraps free_data_on_node of the matrix and vector interfaces
 * (the only ones taskgrad registers) and counts the calls on non-CPU nodes
 * until tg_shutdown.  A buffer StarPU evicts by handing it straight to
 * another handle of the same footprint is not freed and not counted: the
 * count is a lower bound, exact when buffers differ in size.  Data waits:
 * the per-task profiling record holds when the worker started and finished
 * fetching the task's data (acquire_data_start/end_time); their difference,
 * summed per worker, is the time it waited for data.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <starpu.h>

#include "check.h"
#include "hooks.h"
#include "taskgrad/clock.h"
#include "taskgrad/data.h"
#include "taskgrad/stats.h"

static pthread_mutex_t tg_stats_lock = PTHREAD_MUTEX_INITIALIZER;
static tg_stats tg_cur;
static double tg_window_start_us;
static long tg_window_evictions, tg_window_prefetched;
static long long tg_window_evicted_bytes;
static long long tg_window_start_bytes;
static long tg_window_start_transfers;

/* ---- dispatcher shared with plugins/trace.c ---------------------------- */

/* The trace plugin's completion function (NULL while no trace records). */
void (*tg_plugins_trace_done)(struct starpu_task *task) = NULL;
static volatile int tg_stats_active = 0;
void tg_plugins_update_hook(void);

static void tg_stats_task_done(struct starpu_task *task);

static void tg_plugins_task_done(void *arg) {
  struct starpu_task *task = arg;
  if (!task || !task->cl || !task->profiling_info) return;
  if (tg_stats_active) tg_stats_task_done(task);
  void (*trace)(struct starpu_task *) = tg_plugins_trace_done;
  if (trace) trace(task);
}

static void tg_plugins_attach(struct starpu_task *task) {
  task->callback_func = tg_plugins_task_done;
  task->callback_arg = task;
}

/* Installs the dispatcher while a plugin is active, removes it otherwise.
 * Adding can only fail with more than TG_MAX_SUBMIT_HOOKS hooks, which
 * taskgrad never registers. */
void tg_plugins_update_hook(void) {
  if (tg_stats_active || tg_plugins_trace_done) {
    if (tg_add_submit_hook(tg_plugins_attach) < 0) TG_FATAL("%s", tg_last_error());
  } else {
    tg_remove_submit_hook(tg_plugins_attach);
  }
}

/* ---- bus counters -------------------------------------------------------- */

static pthread_mutex_t tg_bus_lock = PTHREAD_MUTEX_INITIALIZER;
static long long tg_bus_bytes_acc[TG_STATS_MAX_BUSES];
static long tg_bus_count_acc[TG_STATS_MAX_BUSES];

int tg_stats_bus_totals(long long *bytes, long *transfers, int max) {
  int n = starpu_bus_get_count();
  if (n < 0) n = 0;
  if (n > TG_STATS_MAX_BUSES) n = TG_STATS_MAX_BUSES;
  pthread_mutex_lock(&tg_bus_lock);
  for (int b = 0; b < n; b++) {
    struct starpu_profiling_bus_info info;
    if (starpu_bus_get_profiling_info(b, &info) == 0) {
      tg_bus_bytes_acc[b] += info.transferred_bytes;
      tg_bus_count_acc[b] += info.transfer_count;
    }
    if (b < max) {
      if (bytes) bytes[b] = tg_bus_bytes_acc[b];
      if (transfers) transfers[b] = tg_bus_count_acc[b];
    }
  }
  pthread_mutex_unlock(&tg_bus_lock);
  return n;
}

/* ---- device evictions ------------------------------------------------------ */

static void (*tg_matrix_free)(void *iface, unsigned node);
static void (*tg_vector_free)(void *iface, unsigned node);
static long tg_evictions;
static long long tg_evicted_bytes;
static int tg_evict_installed = 0;

static void tg_count_eviction(unsigned node, size_t bytes) {
  if (starpu_node_get_kind(node) == STARPU_CPU_RAM) return;
  __atomic_add_fetch(&tg_evictions, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&tg_evicted_bytes, (long long)bytes, __ATOMIC_RELAXED);
}

static void tg_matrix_free_counted(void *iface, unsigned node) {
  const struct starpu_matrix_interface *m = iface;
  tg_count_eviction(node, (size_t)m->nx * m->ny * m->elemsize);
  tg_matrix_free(iface, node);
}

static void tg_vector_free_counted(void *iface, unsigned node) {
  const struct starpu_vector_interface *v = iface;
  tg_count_eviction(node, (size_t)v->nx * v->elemsize);
  tg_vector_free(iface, node);
}

/* at tg_shutdown, before StarPU frees what is left: stop counting */
static void tg_evictions_uninstall(void) {
  pthread_mutex_lock(&tg_bus_lock);
  if (tg_evict_installed) {
    starpu_interface_matrix_ops.free_data_on_node = tg_matrix_free;
    starpu_interface_vector_ops.free_data_on_node = tg_vector_free;
    tg_evict_installed = 0;
  }
  pthread_mutex_unlock(&tg_bus_lock);
}

void tg_stats_evictions(long *count, long long *bytes) {
  pthread_mutex_lock(&tg_bus_lock);
  if (!tg_evict_installed) {
    tg_matrix_free = starpu_interface_matrix_ops.free_data_on_node;
    tg_vector_free = starpu_interface_vector_ops.free_data_on_node;
    starpu_interface_matrix_ops.free_data_on_node = tg_matrix_free_counted;
    starpu_interface_vector_ops.free_data_on_node = tg_vector_free_counted;
    tg_evict_installed = 1;
    tg_at_shutdown(tg_evictions_uninstall);
  }
  pthread_mutex_unlock(&tg_bus_lock);
  if (count) *count = __atomic_load_n(&tg_evictions, __ATOMIC_RELAXED);
  if (bytes) *bytes = __atomic_load_n(&tg_evicted_bytes, __ATOMIC_RELAXED);
}

/* per-bus totals at tg_stats_begin */
static long long tg_window_bus_bytes[TG_STATS_MAX_BUSES];
static long tg_window_bus_transfers[TG_STATS_MAX_BUSES];
static int tg_window_nbuses;

static void tg_bus_sum(long long *bytes, long *transfers) {
  long long b[TG_STATS_MAX_BUSES];
  long t[TG_STATS_MAX_BUSES];
  int n = tg_stats_bus_totals(b, t, TG_STATS_MAX_BUSES);
  *bytes = 0;
  *transfers = 0;
  for (int i = 0; i < n; i++) {
    *bytes += b[i];
    *transfers += t[i];
  }
}

/* ---- statistics ----------------------------------------------------------- */


static void tg_stats_task_done(struct starpu_task *task) {
  struct starpu_profiling_task_info *pi = task->profiling_info;
  double us = tg_timespec_us(&pi->end_time) - tg_timespec_us(&pi->start_time);
  pthread_mutex_lock(&tg_stats_lock);
  tg_cur.tasks++;
  int w = pi->workerid;
  if (w >= 0 && w < TG_STATS_MAX_WORKERS)
    tg_cur.workers[w].data_wait_us +=
        tg_timespec_us(&pi->acquire_data_end_time) - tg_timespec_us(&pi->acquire_data_start_time);
  int i;
  for (i = 0; i < tg_cur.ncodelets; i++)
    if (tg_cur.codelets[i].name == task->cl->name) break;
  if (i == tg_cur.ncodelets && i < TG_STATS_MAX_CODELETS) {
    tg_cur.codelets[i].name = task->cl->name;
    tg_cur.ncodelets++;
  }
  if (i < TG_STATS_MAX_CODELETS) {
    tg_cur.codelets[i].count++;
    tg_cur.codelets[i].total_us += us;
    tg_cur.codelets[i].flops += task->flops;
    double end = tg_timespec_us(&pi->end_time);
    if (end > tg_cur.codelets[i].last_end_us) tg_cur.codelets[i].last_end_us = end;
  }
  pthread_mutex_unlock(&tg_stats_lock);
}

int tg_stats_begin(void) {
  if (starpu_profiling_status_get() != STARPU_PROFILING_ENABLE)
    return tg_fail(EINVAL, "statistics need StarPU profiling (tg_runtime_config.profiling = 1)");
  starpu_task_wait_for_all();
  struct starpu_profiling_worker_info info;
  for (unsigned w = 0; w < starpu_worker_get_count(); w++)
    TG_STARPU(starpu_profiling_worker_get_info((int)w, &info));
  pthread_mutex_lock(&tg_stats_lock);
  memset(&tg_cur, 0, sizeof tg_cur);
  pthread_mutex_unlock(&tg_stats_lock);
  tg_bus_sum(&tg_window_start_bytes, &tg_window_start_transfers);
  tg_window_nbuses = tg_stats_bus_totals(tg_window_bus_bytes, tg_window_bus_transfers,
                                         TG_STATS_MAX_BUSES);
  tg_stats_evictions(&tg_window_evictions, &tg_window_evicted_bytes);
  tg_window_prefetched = tg_loader_prefetched();
  tg_window_start_us = tg_monotonic_us();
  tg_stats_active = 1;
  tg_plugins_update_hook();
  return 0;
}

/* every non-RAM memory node: what StarPU counts in use, and its size */
static void tg_stats_devices(tg_stats *out) {
  out->ndevices = 0;
  unsigned n = starpu_memory_nodes_get_count();
  for (unsigned node = 0; node < n && out->ndevices < TG_STATS_MAX_DEVICES; node++) {
    if (starpu_node_get_kind(node) == STARPU_CPU_RAM) continue;
    int i = out->ndevices++;
    starpu_ssize_t total = starpu_memory_get_total(node), avail = starpu_memory_get_available(node);
    out->device_node[i] = (int)node;
    out->device_total[i] = total > 0 ? (double)total : -1;
    out->device_used[i] = total > 0 && avail >= 0 ? (double)(total - avail) : -1;
  }
}

int tg_stats_end(tg_stats *out) {
  starpu_task_wait_for_all();
  double wall = tg_monotonic_us() - tg_window_start_us;
  tg_stats_active = 0;
  tg_plugins_update_hook();
  pthread_mutex_lock(&tg_stats_lock);
  *out = tg_cur;
  pthread_mutex_unlock(&tg_stats_lock);
  out->wall_us = wall;
  tg_stats_devices(out);
  long long bytes;
  long transfers;
  tg_bus_sum(&bytes, &transfers);
  out->bytes_moved = bytes - tg_window_start_bytes;
  out->transfers = transfers - tg_window_start_transfers;
  tg_stats_evictions(&out->evictions, &out->evicted_bytes);
  out->evictions -= tg_window_evictions;
  out->evicted_bytes -= tg_window_evicted_bytes;
  out->prefetched_batches = tg_loader_prefetched() - tg_window_prefetched;
  out->prefetch = starpu_get_prefetch_flag();
  long long bb[TG_STATS_MAX_BUSES];
  long bt[TG_STATS_MAX_BUSES];
  int nb = tg_stats_bus_totals(bb, bt, TG_STATS_MAX_BUSES);
  out->nbuses = 0;
  for (int b = 0; b < nb; b++) {
    long long d = bb[b] - (b < tg_window_nbuses ? tg_window_bus_bytes[b] : 0);
    long dt = bt[b] - (b < tg_window_nbuses ? tg_window_bus_transfers[b] : 0);
    if (d <= 0 && dt <= 0) continue;
    tg_bus_stats *bs = &out->buses[out->nbuses++];
    bs->src = starpu_bus_get_src(b);
    bs->dst = starpu_bus_get_dst(b);
    bs->bytes = d;
    bs->transfers = dt;
  }
  unsigned n = starpu_worker_get_count();
  out->nworkers = n < TG_STATS_MAX_WORKERS ? (int)n : TG_STATS_MAX_WORKERS;
  for (int w = 0; w < out->nworkers; w++) {
    struct starpu_profiling_worker_info info;
    TG_STARPU(starpu_profiling_worker_get_info(w, &info));
    tg_worker_stats *ws = &out->workers[w];
    starpu_worker_get_name(w, ws->name, sizeof ws->name);
    ws->tasks = info.executed_tasks;
    ws->total_us = tg_timespec_us(&info.total_time);
    ws->executing_us = tg_timespec_us(&info.executing_time);
    ws->sleeping_us = tg_timespec_us(&info.sleeping_time);
    /* StarPU 1.3's OpenCL driver counts as sleeping the time its worker
     * spends waiting in its own loop, tasks in flight included (measured on
     * emulated devices: busy and sleeping together came to more than the
     * whole): idle is at most what is not executing */
    if (ws->sleeping_us > ws->total_us - ws->executing_us)
      ws->sleeping_us = ws->total_us - ws->executing_us;
    ws->overhead_us = ws->total_us - ws->executing_us - ws->sleeping_us;
    /* data_wait_us was summed from the tasks' records by the callbacks */
    if (ws->overhead_us < 0) ws->overhead_us = 0;
  }
  return 0;
}

double tg_stats_codelet_us(const tg_stats *s, const char *name) {
  for (int i = 0; i < s->ncodelets; i++)
    if (s->codelets[i].name && !strcmp(s->codelets[i].name, name))
      return s->codelets[i].total_us;
  return 0;
}

void tg_stats_print(const tg_stats *s, FILE *f) {
  double worker_time = s->wall_us * (s->nworkers > 0 ? s->nworkers : 1);
  fprintf(f, "%-16s %8s %12s %10s %10s %8s\n", "codelet", "tasks", "total us",
          "mean us", "GFLOP/s", "share");
  for (int i = 0; i < s->ncodelets; i++) {
    const tg_codelet_stats *c = &s->codelets[i];
    fprintf(f, "%-16s %8ld %12.0f %10.1f %10.2f %7.1f%%\n", c->name, c->count,
            c->total_us, c->count ? c->total_us / c->count : 0,
            c->total_us > 0 ? c->flops / (c->total_us * 1e3) : 0,
            100.0 * c->total_us / worker_time);
  }
  fprintf(f, "%-24s %8s %8s %8s %10s %10s\n", "worker", "tasks", "busy", "idle", "overhead",
          "data wait");
  for (int w = 0; w < s->nworkers; w++) {
    const tg_worker_stats *ws = &s->workers[w];
    double t = ws->total_us > 0 ? ws->total_us : 1;
    fprintf(f, "%-24.24s %8d %7.1f%% %7.1f%% %9.1f%% %9.1f%%\n", ws->name, ws->tasks,
            100 * ws->executing_us / t, 100 * ws->sleeping_us / t,
            100 * ws->overhead_us / t, 100 * ws->data_wait_us / t);
  }
  fprintf(f, "bytes moved:      %lld bytes (%.1f MiB) in %ld transfers between memory nodes\n",
          s->bytes_moved, s->bytes_moved / 1048576.0, s->transfers);
  for (int b = 0; b < s->nbuses; b++) {
    const tg_bus_stats *bs = &s->buses[b];
    char src[32], dst[32];
    starpu_memory_node_get_name(bs->src, src, sizeof src);
    starpu_memory_node_get_name(bs->dst, dst, sizeof dst);
    fprintf(f, "  %-10s -> %-10s %12lld bytes (%.1f MiB) in %ld transfers\n", src, dst,
            bs->bytes, bs->bytes / 1048576.0, bs->transfers);
  }
  for (int d = 0; d < s->ndevices; d++) {
    char name[32];
    starpu_memory_node_get_name((unsigned)s->device_node[d], name, sizeof name);
    if (s->device_used[d] < 0)
      fprintf(f, "device memory:    %-10s size unknown to StarPU\n", name);
    else
      fprintf(f, "device memory:    %-10s %.1f MiB in use of %.1f MiB\n", name,
              s->device_used[d] / 1048576.0, s->device_total[d] / 1048576.0);
  }
  fprintf(f, "evictions:        %ld device buffers (%.1f MiB) freed to make room\n",
          s->evictions, s->evicted_bytes / 1048576.0);
  fprintf(f, "prefetches:       %ld micro-batches by the loader to device nodes; "
          "scheduler prefetch %s (STARPU_PREFETCH)\n",
          s->prefetched_batches, s->prefetch ? "on" : "off");
}
