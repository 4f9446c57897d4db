/*
 * What the runtime (src/runtime.c) and the collectives (parallel/) need from
 * src/mpi_runtime.c: starting and stopping StarPU through StarPU-MPI.  The
 * rank queries are public (taskgrad/runtime.h).
 */
#ifndef TASKGRAD_MPI_RUNTIME_H
#define TASKGRAD_MPI_RUNTIME_H

#include <starpu.h>

/* Initialises MPI and StarPU-MPI, which starts StarPU with conf. */
int tg_mpi_start(struct starpu_conf *conf);
/* Shuts StarPU-MPI down, which also shuts StarPU down and finalises MPI. */
void tg_mpi_stop(void);
/* 1 between tg_mpi_start and tg_mpi_stop. */
int tg_mpi_active(void);

/* exit(status), or _exit(status) while StarPU runs: exit's teardown (the
 * libraries' destructors, PoCL's among them) would run while StarPU's
 * workers and the data loader's thread still use what it frees, and the
 * process would crash after its error message (status 134 in about 1 run
 * in 20 of tests/test_memory_limit.sh).  Files are written atomically, so
 * skipping the handlers loses nothing; src/runtime.c */
__attribute__((noreturn)) void tg_exit_process(int status);

#endif
