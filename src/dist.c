/*
 * Distributed training over MPI ranks with StarPU-MPI (see
 * include/taskgrad/dist.h for the reduction scheme).
 *
 * Tags: StarPU-MPI matches a transfer by (communicator, source, data tag).
 * Every rank calls tg_dist_allreduce for the same handles in the same order,
 * so a per-process call counter gives both partners the same tag; level k
 * of call n uses tag n * 64 + k.  Parameters registered for the initial
 * broadcast take tags from TG_DIST_PARAM_TAG up, far from those.
 *
 * Receive buffers are temporaries (no home node) of the gradient's shape,
 * released right after the accumulate task that reads them, so StarPU frees
 * each as soon as it has been added.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dist_internal.h"
#include "taskgrad/codelets.h"
#include "taskgrad/dist.h"

static int tg_det_flag = 0;

void tg_dist_set_deterministic(int on) {
  tg_det_flag = on || (getenv("TG_DETERMINISTIC") && strcmp(getenv("TG_DETERMINISTIC"), "0"));
}

int tg_deterministic(void) { return tg_det_flag; }

int tg_dist_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                     "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

#ifdef TG_HAVE_MPI
#include <starpu_mpi.h>

#define TG_DIST_PARAM_TAG ((starpu_mpi_tag_t)1 << 40)

static int tg_mpi_on = 0;
static int tg_rank = 0, tg_size = 1;
static int64_t tg_reduce_calls = 0;
static int64_t tg_param_tags = 0;

int tg_dist_available(void) { return 1; }

int tg_dist_start(struct starpu_conf *conf) {
  int rc = starpu_mpi_init_conf(NULL, NULL, 1, MPI_COMM_WORLD, conf);
  if (rc != 0)
    return tg_fail(rc < 0 ? -rc : EIO, "starpu_mpi_init_conf failed (%s)",
                   strerror(rc < 0 ? -rc : EIO));
  tg_mpi_on = 1;
  TG_STARPU(starpu_mpi_comm_rank(MPI_COMM_WORLD, &tg_rank));
  TG_STARPU(starpu_mpi_comm_size(MPI_COMM_WORLD, &tg_size));
  tg_reduce_calls = 0;
  tg_param_tags = 0;
  return 0;
}

void tg_dist_stop(void) {
  /* also shuts StarPU down, which it started */
  int rc = starpu_mpi_shutdown();
  if (rc != 0) fprintf(stderr, "taskgrad: starpu_mpi_shutdown failed (%d)\n", rc);
  tg_mpi_on = 0;
  tg_rank = 0;
  tg_size = 1;
}

int tg_dist_active(void) { return tg_mpi_on; }
int tg_dist_rank(void) { return tg_rank; }
int tg_dist_size(void) { return tg_size; }

int tg_dist_allreduce(starpu_data_handle_t h) {
  if (tg_size == 1) return 0;
  if (tg_size & (tg_size - 1))
    return tg_fail(EINVAL, "gradient all-reduce: %d ranks; the reduction tree needs a "
                   "power of two", tg_size);
  if (starpu_data_get_interface_id(h) != STARPU_MATRIX_INTERFACE_ID)
    return tg_fail(EINVAL, "gradient all-reduce: not a matrix handle");
  int rows = (int)starpu_matrix_get_ny(h), cols = (int)starpu_matrix_get_nx(h);
  int64_t call = tg_reduce_calls++;
  for (int k = 0; (1 << k) < tg_size; k++) {
    int partner = tg_rank ^ (1 << k);
    starpu_mpi_tag_t tag = (starpu_mpi_tag_t)(call * 64 + k + 1);
    starpu_data_handle_t recv;
    starpu_matrix_data_register(&recv, -1, 0, (uint32_t)cols, (uint32_t)cols,
                                (uint32_t)rows, sizeof(float));
    /* both partners send first, then receive: StarPU-MPI's sends are
     * detached, so neither blocks the other */
    TG_STARPU(starpu_mpi_isend_detached(h, partner, tag, MPI_COMM_WORLD, NULL, NULL));
    TG_STARPU(starpu_mpi_irecv_detached(recv, partner, tag, MPI_COMM_WORLD, NULL, NULL));
    int rc = tg_accumulate_insert(h, recv, NULL);
    starpu_data_unregister_submit(recv);
    TG_TRY(rc);
  }
  return 0;
}

int tg_dist_broadcast(starpu_data_handle_t h) {
  if (tg_size == 1) return 0;
  starpu_mpi_data_register(h, TG_DIST_PARAM_TAG + tg_param_tags++, 0);
  starpu_mpi_get_data_on_all_nodes_detached(MPI_COMM_WORLD, h);
  return 0;
}

/* Through StarPU-MPI rather than a direct MPI collective: StarPU-MPI
 * initialises MPI_THREAD_SERIALIZED and makes its calls from its own
 * thread, so the application thread must not call MPI itself. */
int tg_dist_all_ok(int ok) {
  if (tg_size == 1) return ok != 0;
  float flag = ok ? 0.0f : 1.0f; /* failures */
  starpu_data_handle_t h;
  starpu_matrix_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&flag, 1, 1, 1, sizeof flag);
  int rc = tg_dist_allreduce(h);
  if (rc == 0) rc = starpu_data_acquire(h, STARPU_R);
  if (rc == 0) starpu_data_release(h);
  starpu_data_unregister(h);
  if (rc != 0) tg_dist_abort(2);
  return flag == 0.0f;
}

void tg_dist_abort(int status) {
  fflush(stdout);
  fflush(stderr);
  if (tg_mpi_on) MPI_Abort(MPI_COMM_WORLD, status);
  tg_exit_process(status);
}

#else /* no MPI in this build */

int tg_dist_available(void) { return 0; }
int tg_dist_start(struct starpu_conf *conf) {
  (void)conf;
  return tg_fail(ENOTSUP, "this taskgrad was built without StarPU-MPI (starpumpi-1.3 and "
                 "an MPI library were not found at configure time)");
}
void tg_dist_stop(void) {}
int tg_dist_active(void) { return 0; }
int tg_dist_rank(void) { return 0; }
int tg_dist_size(void) { return 1; }
int tg_dist_allreduce(starpu_data_handle_t h) {
  (void)h;
  return 0;
}
int tg_dist_broadcast(starpu_data_handle_t h) {
  (void)h;
  return 0;
}
int tg_dist_all_ok(int ok) { return ok != 0; }
void tg_dist_abort(int status) {
  fflush(stdout);
  fflush(stderr);
  tg_exit_process(status);
}
#endif
