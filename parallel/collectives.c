/*
 * Distributed training over MPI ranks with StarPU-MPI (see
 * include/taskgrad/parallel.h for the reduction scheme): the collectives.
 *
 * Design note: this is the parallel layer, above the codelets (the all-reduce
 * adds partial sums with the accumulate codelet) and below the graphs.
 * StarPU-MPI itself is started and stopped by the base (src/mpi_runtime.c),
 * which also answers the rank queries used here.
 *
 * Tags: StarPU-MPI matches a transfer by (communicator, source, data tag).
 * Every rank calls tg_dist_allreduce for the same handles in the same order,
 * so a per-process call counter gives both partners the same tag; level k
 * of call n uses tag n * 64 + k.  Parameters registered for the initial
 * broadcast take tags from TG_DIST_PARAM_TAG up, far from those.  The
 * counters restart with each start of the runtime: they are reset at
 * tg_shutdown (tg_at_shutdown), as they were when the runtime started
 * StarPU-MPI.
 *
 * Receive buffers are temporaries (no home node) of the gradient's shape,
 * released right after the accumulate task that reads them, so StarPU frees
 * each as soon as it has been added.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dist_calls.h"
#include "hooks.h"
#include "mpi_runtime.h"
#include "taskgrad/codelets.h"
#include "taskgrad/precision_codelets.h"
#include "taskgrad/parallel.h"

#ifdef TG_HAVE_MPI
#include <starpu_mpi.h>

#define TG_DIST_PARAM_TAG ((starpu_mpi_tag_t)1 << 40)

static int64_t tg_reduce_calls = 0;
static int64_t tg_param_tags = 0;
static int tg_tags_reset_registered = 0;

static void tg_dist_reset_tags(void) {
  tg_reduce_calls = 0;
  tg_param_tags = 0;
  tg_tags_reset_registered = 0;
}

/* the first tag taken in a run arranges for the counters to restart with
 * the next run */
static void tg_dist_note_tag_use(void) {
  if (tg_tags_reset_registered) return;
  tg_at_shutdown(tg_dist_reset_tags);
  tg_tags_reset_registered = 1;
}

/* a temporary (no home node) of rows x cols elements of dtype */
static starpu_data_handle_t tg_dist_temp(int rows, int cols, tg_dtype dtype) {
  starpu_data_handle_t h;
  starpu_matrix_data_register(&h, -1, 0, (uint32_t)cols, (uint32_t)cols, (uint32_t)rows,
                              tg_dtype_size(dtype));
  return h;
}

/* One level of the tree: h += partner's h (tag), both partners alike.  With
 * a 16-bit comm type the message is h rounded to it, and h itself is
 * rounded first, so both partners add the same two values. */
static int tg_dist_exchange(starpu_data_handle_t h, int rows, int cols, int partner,
                            starpu_mpi_tag_t tag, int send, tg_dtype comm) {
  int lowp = comm != TG_F32, rc = 0;
  starpu_data_handle_t wire = h, recv = tg_dist_temp(rows, cols, comm);
  if (lowp) {
    wire = tg_dist_temp(rows, cols, comm);
    rc = tg_convert_insert(comm, h, wire, NULL);
    if (rc == 0) rc = tg_convert_insert(comm, wire, h, NULL); /* h rounded */
  }
  /* both partners send first, then receive: StarPU-MPI's sends are
   * detached, so neither blocks the other (a folded rank only sends) */
  if (rc == 0 && send)
    TG_STARPU(starpu_mpi_isend_detached(wire, partner, tag, MPI_COMM_WORLD, NULL, NULL));
  if (rc == 0)
    TG_STARPU(starpu_mpi_irecv_detached(recv, partner, tag, MPI_COMM_WORLD, NULL, NULL));
  starpu_data_handle_t add = recv;
  if (lowp) {
    add = tg_dist_temp(rows, cols, TG_F32);
    if (rc == 0) rc = tg_convert_insert(comm, recv, add, NULL);
    starpu_data_unregister_submit(wire);
  }
  if (rc == 0) rc = tg_accumulate_insert(h, add, NULL);
  starpu_data_unregister_submit(recv);
  if (lowp) starpu_data_unregister_submit(add);
  return rc;
}

int64_t tg_dist_next_call(void) {
  tg_dist_note_tag_use();
  return tg_reduce_calls++;
}

int tg_dist_allreduce_comm(starpu_data_handle_t h, tg_dtype comm) {
  int rank = tg_dist_rank(), size = tg_dist_size();
  if (size == 1) return 0;
  if (starpu_data_get_interface_id(h) != STARPU_MATRIX_INTERFACE_ID)
    return tg_fail(EINVAL, "gradient all-reduce: not a matrix handle");
  if (comm != TG_F32 && comm != TG_BF16 && comm != TG_F16)
    return tg_fail(EINVAL, "gradient all-reduce: messages in %s", tg_dtype_name(comm));
  int rows = (int)starpu_matrix_get_ny(h), cols = (int)starpu_matrix_get_nx(h);
  int64_t call = tg_dist_next_call();
  /* any number of ranks: the ranks above the largest power of two P first
   * add into rank - P, which then take part in the tree, and get the sum
   * back (in f32) at the end */
  int P = 1;
  while (2 * P <= size) P *= 2;
  starpu_mpi_tag_t fold = (starpu_mpi_tag_t)(call * 64 + 62), unfold = fold + 1;
  if (rank >= P) {
    starpu_data_handle_t wire = h;
    if (comm != TG_F32) { /* the partner rounds both, as in a level */
      wire = tg_dist_temp(rows, cols, comm);
      TG_TRY(tg_convert_insert(comm, h, wire, NULL));
    }
    TG_STARPU(starpu_mpi_isend_detached(wire, rank - P, fold, MPI_COMM_WORLD, NULL, NULL));
    if (wire != h) starpu_data_unregister_submit(wire);
    TG_STARPU(starpu_mpi_irecv_detached(h, rank - P, unfold, MPI_COMM_WORLD, NULL, NULL));
    return 0;
  }
  if (rank + P < size) TG_TRY(tg_dist_exchange(h, rows, cols, rank + P, fold, 0, comm));
  for (int k = 0; (1 << k) < P; k++)
    TG_TRY(tg_dist_exchange(h, rows, cols, rank ^ (1 << k),
                            (starpu_mpi_tag_t)(call * 64 + k + 1), 1, comm));
  if (rank + P < size)
    TG_STARPU(starpu_mpi_isend_detached(h, rank + P, unfold, MPI_COMM_WORLD, NULL, NULL));
  return 0;
}

int tg_dist_allreduce(starpu_data_handle_t h) { return tg_dist_allreduce_comm(h, TG_F32); }

int tg_dist_broadcast(starpu_data_handle_t h) {
  if (tg_dist_size() == 1) return 0;
  tg_dist_note_tag_use();
  starpu_mpi_data_register(h, TG_DIST_PARAM_TAG + tg_param_tags++, 0);
  starpu_mpi_get_data_on_all_nodes_detached(MPI_COMM_WORLD, h);
  return 0;
}

/* Through StarPU-MPI rather than a direct MPI collective: StarPU-MPI
 * initialises MPI_THREAD_SERIALIZED and makes its calls from its own
 * thread, so the application thread must not call MPI itself. */
int tg_dist_all_ok(int ok) {
  if (tg_dist_size() == 1) return ok != 0;
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
  if (tg_mpi_active()) MPI_Abort(MPI_COMM_WORLD, status);
  tg_exit_process(status);
}

#else /* no MPI in this build */

int tg_dist_allreduce_comm(starpu_data_handle_t h, tg_dtype comm) {
  (void)h;
  (void)comm;
  return 0;
}

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
