/*
 * The parallel layer's own: the per-process count of all-reduce calls that
 * gives every rank the same StarPU-MPI tags (collectives.c).
 */
#ifndef TG_DIST_CALLS_H
#define TG_DIST_CALLS_H
#include <stdint.h>

/* The next call's number (every rank calls in the same order). */
int64_t tg_dist_next_call(void);

#endif
