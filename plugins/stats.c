/*
 * Statistics plugin.  A submit hook gives every task a completion callback;
 * the callback reads the task's profiling record (start and end of its body,
 * filled by StarPU before the callback runs) and adds it to a per-codelet
 * table.  Per-worker times come from starpu_profiling_worker_get_info, which
 * resets its counters on each read, so tg_stats_begin() reads once to start
 * the window.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <starpu.h>

#include "check.h"
#include "hooks.h"
#include "taskgrad/stats.h"

static pthread_mutex_t tg_stats_lock = PTHREAD_MUTEX_INITIALIZER;
static tg_stats tg_cur;
static double tg_window_start_us;

static double tg_ts_us(const struct timespec *t) {
  return t->tv_sec * 1e6 + t->tv_nsec * 1e-3;
}

static double tg_now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return tg_ts_us(&t);
}

static void tg_stats_task_done(void *arg) {
  struct starpu_task *task = starpu_task_get_current();
  if (!task || !task->cl || !task->profiling_info) return;
  struct starpu_profiling_task_info *pi = task->profiling_info;
  double us = tg_ts_us(&pi->end_time) - tg_ts_us(&pi->start_time);
  pthread_mutex_lock(&tg_stats_lock);
  tg_cur.tasks++;
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
  }
  pthread_mutex_unlock(&tg_stats_lock);
}

static void tg_stats_attach(struct starpu_task *task) {
  task->callback_func = tg_stats_task_done;
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
  tg_window_start_us = tg_now_us();
  tg_submit_hook = tg_stats_attach;
  return 0;
}

int tg_stats_end(tg_stats *out) {
  starpu_task_wait_for_all();
  double wall = tg_now_us() - tg_window_start_us;
  tg_submit_hook = NULL;
  pthread_mutex_lock(&tg_stats_lock);
  *out = tg_cur;
  pthread_mutex_unlock(&tg_stats_lock);
  out->wall_us = wall;
  unsigned n = starpu_worker_get_count();
  out->nworkers = n < TG_STATS_MAX_WORKERS ? (int)n : TG_STATS_MAX_WORKERS;
  for (int w = 0; w < out->nworkers; w++) {
    struct starpu_profiling_worker_info info;
    TG_STARPU(starpu_profiling_worker_get_info(w, &info));
    tg_worker_stats *ws = &out->workers[w];
    starpu_worker_get_name(w, ws->name, sizeof ws->name);
    ws->tasks = info.executed_tasks;
    ws->total_us = tg_ts_us(&info.total_time);
    ws->executing_us = tg_ts_us(&info.executing_time);
    ws->sleeping_us = tg_ts_us(&info.sleeping_time);
    ws->overhead_us = ws->total_us - ws->executing_us - ws->sleeping_us;
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
  fprintf(f, "%-24s %8s %8s %8s %10s\n", "worker", "tasks", "busy", "idle", "overhead");
  for (int w = 0; w < s->nworkers; w++) {
    const tg_worker_stats *ws = &s->workers[w];
    double t = ws->total_us > 0 ? ws->total_us : 1;
    fprintf(f, "%-24s %8d %7.1f%% %7.1f%% %9.1f%%\n", ws->name, ws->tasks,
            100 * ws->executing_us / t, 100 * ws->sleeping_us / t,
            100 * ws->overhead_us / t);
  }
}
