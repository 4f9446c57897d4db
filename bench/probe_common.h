/*
 * What the bench probes (ceiling.c, cpu-kernels.c, cpu-kernels-ab.c) share:
 * the clock in seconds (taskgrad's one time helper, taskgrad/clock.h) and the
 * comparator that sorts timings for medians and best calls.
 */
#ifndef TASKGRAD_BENCH_PROBE_COMMON_H
#define TASKGRAD_BENCH_PROBE_COMMON_H

#include "taskgrad/clock.h"

static inline double probe_now_s(void) { return tg_monotonic_us() * 1e-6; }

/* qsort comparator of doubles, ascending */
static inline int probe_by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif
