/*
 * Starting and stopping StarPU through StarPU-MPI, and the rank queries.
 *
 * Design note: this is runtime start and stop (the base layer), kept apart
 * from the collectives of parallel/ (all-reduce, broadcast, all_ok), which
 * submit codelets and so sit above the codelet layer.  Everything here
 * needs only StarPU-MPI and MPI, no codelet: src/runtime.c starts StarPU
 * through tg_mpi_start when tg_runtime_config.mpi asks for it, and the
 * layers above ask for the rank and the number of ranks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpi_runtime.h"
#include "taskgrad/runtime.h"

int tg_dist_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                     "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

#ifdef TG_HAVE_MPI
#include <starpu_mpi.h>

static int tg_mpi_on = 0;
static int tg_rank = 0, tg_size = 1;

int tg_dist_available(void) { return 1; }

int tg_mpi_start(struct starpu_conf *conf) {
  int rc = starpu_mpi_init_conf(NULL, NULL, 1, MPI_COMM_WORLD, conf);
  if (rc != 0)
    return tg_fail(rc < 0 ? -rc : EIO, "starpu_mpi_init_conf failed (%s)",
                   strerror(rc < 0 ? -rc : EIO));
  tg_mpi_on = 1;
  TG_STARPU(starpu_mpi_comm_rank(MPI_COMM_WORLD, &tg_rank));
  TG_STARPU(starpu_mpi_comm_size(MPI_COMM_WORLD, &tg_size));
  return 0;
}

void tg_mpi_stop(void) {
  /* also shuts StarPU down, which it started */
  int rc = starpu_mpi_shutdown();
  if (rc != 0) fprintf(stderr, "taskgrad: starpu_mpi_shutdown failed (%d)\n", rc);
  tg_mpi_on = 0;
  tg_rank = 0;
  tg_size = 1;
}

int tg_mpi_active(void) { return tg_mpi_on; }
int tg_dist_rank(void) { return tg_rank; }
int tg_dist_size(void) { return tg_size; }

#else /* no MPI in this build */

int tg_dist_available(void) { return 0; }
int tg_mpi_start(struct starpu_conf *conf) {
  (void)conf;
  return tg_fail(ENOTSUP, "this taskgrad was built without StarPU-MPI (starpumpi-1.3 and "
                 "an MPI library were not found at configure time)");
}
void tg_mpi_stop(void) {}
int tg_mpi_active(void) { return 0; }
int tg_dist_rank(void) { return 0; }
int tg_dist_size(void) { return 1; }
#endif
