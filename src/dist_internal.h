/*
 * What the runtime (src/runtime.c) needs from src/dist.c: starting and
 * stopping StarPU through StarPU-MPI, and the deterministic switch.
 */
#ifndef TASKGRAD_DIST_INTERNAL_H
#define TASKGRAD_DIST_INTERNAL_H

#include <starpu.h>

/* Initialises MPI and StarPU-MPI, which starts StarPU with conf. */
int tg_dist_start(struct starpu_conf *conf);
/* Shuts StarPU-MPI down, which also shuts StarPU down and finalises MPI. */
void tg_dist_stop(void);
/* 1 between tg_dist_start and tg_dist_stop. */
int tg_dist_active(void);
/* on, or TG_DETERMINISTIC set (not "0") in the environment */
void tg_dist_set_deterministic(int on);

/* exit(status), or _exit(status) while StarPU runs OpenCL workers (the
 * emulated accelerators: PoCL's exit-time teardown frees what their threads
 * still use, a crash after the error message); src/runtime.c */
__attribute__((noreturn)) void tg_exit_process(int status);

#endif
