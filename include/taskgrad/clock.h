/*
 * taskgrad's one time helper: timespec to microseconds, and the monotonic
 * clock now.  StarPU's profiling records (struct timespec) and the host's
 * monotonic clock meet in the statistics and trace plugins and in the CLI's
 * timings.  Base layer, header only; public so that the CLI, the tools and
 * the bench probes use the same clock without the library's private
 * headers.  clock_gettime is POSIX: compile with POSIX (or GNU) extensions,
 * as StarPU's headers need too.
 */
#ifndef TASKGRAD_CLOCK_H
#define TASKGRAD_CLOCK_H

#include <time.h>

static inline double tg_timespec_us(const struct timespec *t) {
  return t->tv_sec * 1e6 + t->tv_nsec * 1e-3;
}

/* CLOCK_MONOTONIC in microseconds (cannot fail for that clock on Linux). */
static inline double tg_monotonic_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return tg_timespec_us(&t);
}

#endif
