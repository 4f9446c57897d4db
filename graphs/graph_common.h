/*
 * Task options for the graph builders: a priority from the task's rank on
 * the step's critical path, and a name "L<layer>.m<micro>.<what>" for
 * traces.  tg_submit copies the name, so one buffer serves every task.
 *
 * Ranks are remaining path lengths in layer units, up to the next step's
 * forward pass (a step of L layers: forward of layer l, 3L - l; backward
 * chain at layer l, L + l; weight gradients and the optimizer of layer l,
 * L - l, since layer 0's parameters gate the start of the next step).
 */
#ifndef TASKGRAD_GRAPH_COMMON_H
#define TASKGRAD_GRAPH_COMMON_H

#include <stdarg.h>
#include <stdio.h>

#include "taskgrad/codelets.h"
#include "taskgrad/runtime.h"

typedef struct tg_gopts {
  tg_task_opts opts;
  char name[48];
} tg_gopts;

static inline const tg_task_opts *tg_gvopt(tg_gopts *g, tg_dtype lowp, int rank,
                                           int nranks, const char *fmt, va_list ap) {
  vsnprintf(g->name, sizeof g->name, fmt, ap);
  /* whole, so that a field added to tg_task_opts starts at zero */
  g->opts = (tg_task_opts){.priority = tg_priority(rank, nranks), .worker = -1,
                           .name = g->name, .lowp = lowp};
  return &g->opts;
}

static inline const tg_task_opts *tg_gopt(tg_gopts *g, int rank, int nranks,
                                          const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline const tg_task_opts *tg_gopt(tg_gopts *g, int rank, int nranks,
                                          const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const tg_task_opts *o = tg_gvopt(g, TG_F32, rank, nranks, fmt, ap);
  va_end(ap);
  return o;
}

/* The same for a task whose 2-byte buffers hold `lowp` values (mixed
 * precision; TG_F32 when there are none). */
static inline const tg_task_opts *tg_gopt_lowp(tg_gopts *g, tg_dtype lowp, int rank,
                                               int nranks, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static inline const tg_task_opts *tg_gopt_lowp(tg_gopts *g, tg_dtype lowp, int rank,
                                               int nranks, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const tg_task_opts *o = tg_gvopt(g, lowp, rank, nranks, fmt, ap);
  va_end(ap);
  return o;
}

#endif
