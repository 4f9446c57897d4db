/*
 * What the bench probes (ceiling.c, cpu-kernels.c, cpu-kernels-ab.c,
 * gemm-shapes.c, cpu-attention16.c) share: the clock in seconds (taskgrad's
 * one time helper, taskgrad/clock.h), the comparator that sorts timings for
 * medians and best calls, and an allocation that exits on failure.
 */
#ifndef TASKGRAD_BENCH_PROBE_COMMON_H
#define TASKGRAD_BENCH_PROBE_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "taskgrad/clock.h"

static inline double probe_now_s(void) { return tg_monotonic_us() * 1e-6; }

/* qsort comparator of doubles, ascending */
static inline int probe_by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* malloc, or exit 1 with "WHO: error: out of memory" */
static inline void *probe_alloc(const char *who, size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "%s: error: out of memory\n", who);
    exit(1);
  }
  return p;
}

#endif
