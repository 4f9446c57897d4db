/*
 * Trace plugin: see include/taskgrad/trace.h.  Tasks get the plugins' shared
 * completion callback (plugins/stats.c); tg_trace_task_done copies what the
 * trace needs (codelet and task name, worker, start and end of the body from
 * the task's profiling record) into a growing array, and tg_trace_end writes
 * the array out as Chrome trace events.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <starpu.h>

#include "check.h"
#include "taskgrad/clock.h"
#include "taskgrad/codelets.h"
#include "taskgrad/data.h"
#include "taskgrad/runtime.h"
#include "taskgrad/stats.h"
#include "atomic_file.h"
#include "taskgrad/trace.h"

/* The plugins' dispatcher (plugins/stats.c). */
extern void (*tg_plugins_trace_done)(struct starpu_task *task);
void tg_plugins_update_hook(void);

#define TG_TRACE_NAME 64
#define TG_TRACE_PARTS 16

typedef struct tg_trace_event {
  const char *codelet; /* the codelet's name: static storage */
  char name[TG_TRACE_NAME]; /* task name ("" when unnamed) */
  int worker;
  double start_us, end_us; /* StarPU clock (starpu_timing_now's) */
  double flops;
  int buffers; /* the task's data buffers: StarPU's cost per task grows with them */
  int nparts;  /* a fused task's parts (codelets.h: tg_fused_parts), else 0 */
  const char *parts[TG_TRACE_PARTS];
} tg_trace_event;

static pthread_mutex_t tg_trace_lock = PTHREAD_MUTEX_INITIALIZER;
static tg_trace_event *tg_events;
static long tg_nevents, tg_cap;
static int tg_trace_oom;
static int tg_recording;
static double tg_origin_us;
static long long tg_bus_bytes0[TG_STATS_MAX_BUSES];
static long tg_bus_count0[TG_STATS_MAX_BUSES];
static long tg_evictions0, tg_prefetched0; /* at tg_trace_begin */

static void tg_trace_task_done(struct starpu_task *task) {
  struct starpu_profiling_task_info *pi = task->profiling_info;
  pthread_mutex_lock(&tg_trace_lock);
  if (tg_nevents == tg_cap) {
    long cap = tg_cap ? 2 * tg_cap : 4096;
    tg_trace_event *grown = realloc(tg_events, cap * sizeof *grown);
    if (!grown) {
      tg_trace_oom = 1;
      pthread_mutex_unlock(&tg_trace_lock);
      return;
    }
    tg_events = grown;
    tg_cap = cap;
  }
  tg_trace_event *e = &tg_events[tg_nevents++];
  e->codelet = task->cl->name ? task->cl->name : "?";
  e->name[0] = 0;
  if (task->name && strcmp(task->name, e->codelet) != 0)
    snprintf(e->name, sizeof e->name, "%s", task->name);
  e->worker = pi->workerid;
  e->start_us = tg_timespec_us(&pi->start_time);
  e->end_us = tg_timespec_us(&pi->end_time);
  e->flops = task->flops;
  e->buffers = (int)STARPU_TASK_GET_NBUFFERS(task);
  e->nparts = tg_fused_parts(task, e->parts, TG_TRACE_PARTS);
  if (e->nparts > TG_TRACE_PARTS) e->nparts = TG_TRACE_PARTS;
  pthread_mutex_unlock(&tg_trace_lock);
}

int tg_trace_begin(void) {
  if (starpu_profiling_status_get() != STARPU_PROFILING_ENABLE)
    return tg_fail(EINVAL, "traces need StarPU profiling (tg_runtime_config.profiling = 1)");
  if (tg_recording) return tg_fail(EBUSY, "a trace is already being recorded");
  starpu_task_wait_for_all();
  pthread_mutex_lock(&tg_trace_lock);
  tg_nevents = 0;
  tg_trace_oom = 0;
  pthread_mutex_unlock(&tg_trace_lock);
  tg_stats_bus_totals(tg_bus_bytes0, tg_bus_count0, TG_STATS_MAX_BUSES);
  tg_stats_evictions(&tg_evictions0, NULL);
  tg_prefetched0 = tg_loader_prefetched();
  tg_origin_us = starpu_timing_now();
  tg_recording = 1;
  tg_plugins_trace_done = tg_trace_task_done;
  tg_plugins_update_hook();
  return 0;
}

long tg_trace_ntasks(void) {
  pthread_mutex_lock(&tg_trace_lock);
  long n = tg_nevents;
  pthread_mutex_unlock(&tg_trace_lock);
  return n;
}

/* ---- JSON output: the first failing call is remembered ---------------- */

typedef struct tg_out {
  FILE *f;
  int err;          /* errno of the first failure, 0 if none */
  const char *what; /* the failing call */
} tg_out;

__attribute__((format(printf, 2, 3))) static void tg_emit(tg_out *o, const char *fmt, ...) {
  if (o->err) return;
  va_list ap;
  va_start(ap, fmt);
  int rc = vfprintf(o->f, fmt, ap);
  va_end(ap);
  if (rc < 0) {
    o->err = errno ? errno : EIO;
    o->what = "write";
  }
}

/* s as a JSON string body (quotes, backslashes and control characters). */
static void tg_emit_str(tg_out *o, const char *s) {
  for (; *s && !o->err; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') tg_emit(o, "\\%c", c);
    else if (c < 0x20) tg_emit(o, "\\u%04x", c);
    else if (fputc(c, o->f) == EOF) {
      o->err = errno ? errno : EIO;
      o->what = "write";
    }
  }
}

static void tg_write_events(tg_out *o, double end_us) {
  int nw = (int)starpu_worker_get_count();
  int transfers_tid = nw; /* the track after the workers' */
  tg_emit(o, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  tg_emit(o, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"taskgrad\"}}");
  for (int w = 0; w < nw; w++) {
    char name[64];
    starpu_worker_get_name(w, name, sizeof name);
    tg_emit(o, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"", w);
    tg_emit_str(o, name);
    tg_emit(o, "\"}}");
    tg_emit(o, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}", w, w);
  }
  tg_emit(o, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"transfers\"}}",
          transfers_tid);

  /* StarPU's profiling clock and starpu_timing_now() agree; should a task
   * start before the origin all the same, move the origin back */
  double origin = tg_origin_us;
  for (long i = 0; i < tg_nevents; i++)
    if (tg_events[i].start_us < origin) origin = tg_events[i].start_us;
  for (long i = 0; i < tg_nevents && !o->err; i++) {
    const tg_trace_event *e = &tg_events[i];
    double dur = e->end_us - e->start_us;
    if (dur < 0) dur = 0;
    tg_emit(o, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"cat\":\"task\",\"name\":\"",
            e->worker, e->start_us - origin, dur);
    tg_emit_str(o, e->codelet);
    if (e->name[0]) {
      tg_emit(o, " ");
      tg_emit_str(o, e->name);
    }
    tg_emit(o, "\",\"args\":{\"codelet\":\"");
    tg_emit_str(o, e->codelet);
    tg_emit(o, "\",\"task\":\"");
    tg_emit_str(o, e->name[0] ? e->name : e->codelet);
    tg_emit(o, "\",\"worker\":%d,\"flops\":%.0f,\"buffers\":%d", e->worker, e->flops,
            e->buffers);
    for (int k = 0; k < e->nparts; k++) {
      tg_emit(o, k ? ",\"" : ",\"parts\":[\"");
      tg_emit_str(o, e->parts[k]);
      tg_emit(o, "\"");
    }
    tg_emit(o, e->nparts ? "]}}" : "}}");
  }

  /* per-bus totals of the window: a counter per bus (0 at the start, the
   * total at the end) and one instant event with the whole table */
  long long bytes[TG_STATS_MAX_BUSES];
  long count[TG_STATS_MAX_BUSES];
  int nb = tg_stats_bus_totals(bytes, count, TG_STATS_MAX_BUSES);
  double end_ts = end_us - origin;
  if (end_ts < 0) end_ts = 0;
  long long all_bytes = 0;
  long all_count = 0;
  for (int b = 0; b < nb; b++) {
    bytes[b] -= tg_bus_bytes0[b];
    count[b] -= tg_bus_count0[b];
    all_bytes += bytes[b];
    all_count += count[b];
    char src[32], dst[32];
    if (starpu_memory_node_get_name((unsigned)starpu_bus_get_src(b), src, sizeof src) < 0)
      snprintf(src, sizeof src, "node %d", starpu_bus_get_src(b));
    if (starpu_memory_node_get_name((unsigned)starpu_bus_get_dst(b), dst, sizeof dst) < 0)
      snprintf(dst, sizeof dst, "node %d", starpu_bus_get_dst(b));
    for (int k = 0; k < 2; k++) {
      tg_emit(o, ",\n{\"ph\":\"C\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"name\":\"bus ",
              transfers_tid, k ? end_ts : 0.0);
      tg_emit_str(o, src);
      tg_emit(o, " -> ");
      tg_emit_str(o, dst);
      tg_emit(o, "\",\"args\":{\"bytes\":%lld,\"transfers\":%ld}}", k ? bytes[b] : 0LL,
              k ? count[b] : 0L);
    }
  }
  long evictions;
  tg_stats_evictions(&evictions, NULL);
  tg_emit(o, ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,"
          "\"name\":\"transfer totals\",\"args\":{\"bytes\":%lld,\"transfers\":%ld,\"buses\":%d,"
          "\"evictions\":%ld,\"prefetched_batches\":%ld,\"scheduler_prefetch\":%d,"
          "\"note\":\"per-transfer events need a StarPU built with FxT\"}}",
          transfers_tid, end_ts, all_bytes, all_count, nb, evictions - tg_evictions0,
          tg_loader_prefetched() - tg_prefetched0, starpu_get_prefetch_flag());
  tg_emit(o, "\n]}\n");
}

int tg_trace_end(const char *path) {
  if (!tg_recording) return tg_fail(EINVAL, "no trace is being recorded (tg_trace_begin)");
  starpu_task_wait_for_all();
  double end_us = starpu_timing_now();
  tg_plugins_trace_done = NULL;
  tg_plugins_update_hook();
  tg_recording = 0;
  if (tg_trace_oom) return tg_fail(ENOMEM, "trace: out of memory while recording tasks");

  tg_atomic_file af;
  int rc = tg_atomic_open(&af, path);
  if (rc < 0) return rc;
  tg_out o = {.f = af.f, .err = 0, .what = NULL};
  pthread_mutex_lock(&tg_trace_lock);
  tg_write_events(&o, end_us);
  pthread_mutex_unlock(&tg_trace_lock);
  if (o.err) {
    tg_atomic_abort(&af);
    return tg_fail(o.err, "cannot write the trace %s (%s: %s)", path, o.what, strerror(o.err));
  }
  return tg_atomic_commit(&af);
}
