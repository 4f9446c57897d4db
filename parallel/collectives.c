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

int tg_dist_allreduce(starpu_data_handle_t h) {
  int rank = tg_dist_rank(), size = tg_dist_size();
  if (size == 1) return 0;
  if (starpu_data_get_interface_id(h) != STARPU_MATRIX_INTERFACE_ID)
    return tg_fail(EINVAL, "gradient all-reduce: not a matrix handle");
  int rows = (int)starpu_matrix_get_ny(h), cols = (int)starpu_matrix_get_nx(h);
  tg_dist_note_tag_use();
  int64_t call = tg_reduce_calls++;
  /* any number of ranks: the ranks above the largest power of two P first
   * add into rank - P, which then take part in the tree, and get the sum
   * back at the end */
  int P = 1;
  while (2 * P <= size) P *= 2;
  starpu_mpi_tag_t fold = (starpu_mpi_tag_t)(call * 64 + 62), unfold = fold + 1;
  if (rank >= P) {
    TG_STARPU(starpu_mpi_isend_detached(h, rank - P, fold, MPI_COMM_WORLD, NULL, NULL));
    TG_STARPU(starpu_mpi_irecv_detached(h, rank - P, unfold, MPI_COMM_WORLD, NULL, NULL));
    return 0;
  }
  for (int k = -1; k < 0 || (1 << k) < P; k++) {
    /* k = -1: the folded rank's sum, if any; then recursive doubling */
    int partner = k < 0 ? rank + P : rank ^ (1 << k);
    if (partner >= size) continue;
    starpu_mpi_tag_t tag = k < 0 ? fold : (starpu_mpi_tag_t)(call * 64 + k + 1);
    starpu_data_handle_t recv;
    starpu_matrix_data_register(&recv, -1, 0, (uint32_t)cols, (uint32_t)cols,
                                (uint32_t)rows, sizeof(float));
    /* both partners send first, then receive: StarPU-MPI's sends are
     * detached, so neither blocks the other (the folded rank only sends) */
    if (k >= 0)
      TG_STARPU(starpu_mpi_isend_detached(h, partner, tag, MPI_COMM_WORLD, NULL, NULL));
    TG_STARPU(starpu_mpi_irecv_detached(recv, partner, tag, MPI_COMM_WORLD, NULL, NULL));
    int rc = tg_accumulate_insert(h, recv, NULL);
    starpu_data_unregister_submit(recv);
    TG_TRY(rc);
  }
  if (rank + P < size)
    TG_STARPU(starpu_mpi_isend_detached(h, rank + P, unfold, MPI_COMM_WORLD, NULL, NULL));
  return 0;
}

/* a temporary (no home node) of rows x cols elements of dtype */
static starpu_data_handle_t tg_dist_temp(int rows, int cols, tg_dtype dtype) {
  starpu_data_handle_t h;
  starpu_matrix_data_register(&h, -1, 0, (uint32_t)cols, (uint32_t)cols, (uint32_t)rows,
                              tg_dtype_size(dtype));
  return h;
}

/* The sum over the ranks of host-homed block t, any number of ranks R:
 * t is planned into R row segments; rank k receives every other rank's
 * segment k and sums the R of them in rank order with the midpoint tree
 * (tg_sum_tree), then sends its sum to every other rank (a reduce-scatter
 * and an all-gather by direct messages: each rank sends and receives
 * 2 (R - 1) / R of the block, whatever R).  The plan's switches run on the
 * host, where StarPU-MPI sends from anyway.  With a 16-bit comm type every
 * message carries the segment converted to it, half the bytes: each rank's
 * contribution (its own included) is rounded to 16 bits before the f32 sum,
 * and the sum is rounded once more before the all-gather, on every rank
 * alike, so the ranks still end with the same bits. */
int tg_dist_allreduce_segments(tg_tensor *t, tg_dtype comm) {
  int rank = tg_dist_rank(), R = tg_dist_size();
  if (R == 1) return 0;
  /* segments of rows, or of columns for a one-row tensor (a bias); the
   * recursive doubling of tg_dist_allreduce when neither has R */
  int by_cols = t->rows < R;
  if (R > TG_EXCHANGE_MAX || (by_cols && (t->rows != 1 || t->cols < R)))
    return tg_dist_allreduce(t->handle);
  int lowp = comm != TG_F32;
  tg_split seg;
  TG_TRY(by_cols ? tg_split_plan_cols(t, R, &seg) : tg_split_plan(t, R, &seg));
  tg_dist_note_tag_use();
  starpu_mpi_tag_t tag = (starpu_mpi_tag_t)(tg_reduce_calls++ * 64 + 1);
  int srows[TG_EXCHANGE_MAX] = {0}, scols[TG_EXCHANGE_MAX] = {0}; /* segment k's shape */
  for (int k = 0; k < R; k++) {
    int size;
    tg_split_start(by_cols ? t->cols : t->rows, R, k, &size);
    srows[k] = by_cols ? 1 : size;
    scols[k] = by_cols ? size : t->cols;
  }
  int me = rank, rc = 0;
  tg_split_readonly(t, &seg);
  /* reduce-scatter: segment k to rank k; my segment from every rank */
  starpu_data_handle_t in[TG_EXCHANGE_MAX], wire;
  for (int k = 0; k < R && rc == 0; k++) {
    if (k == me && !lowp) {
      in[k] = seg.parts[k];
      continue;
    }
    if (lowp) { /* my copy of segment k, in 16 bits */
      wire = tg_dist_temp(srows[k], scols[k], comm);
      rc = tg_convert_insert(comm, seg.parts[k], wire, NULL);
    } else {
      wire = seg.parts[k];
    }
    if (rc == 0 && k != me)
      TG_STARPU(starpu_mpi_isend_detached(wire, k, tag, MPI_COMM_WORLD, NULL, NULL));
    starpu_data_handle_t got = wire; /* rank k's copy of my segment (mine: wire) */
    if (k != me) {
      got = tg_dist_temp(srows[me], scols[me], comm);
      TG_STARPU(starpu_mpi_irecv_detached(got, k, tag, MPI_COMM_WORLD, NULL, NULL));
    }
    if (lowp) { /* widened for the f32 sum */
      in[k] = tg_dist_temp(srows[me], scols[me], TG_F32);
      if (rc == 0) rc = tg_convert_insert(comm, got, in[k], NULL);
      if (got != wire) starpu_data_unregister_submit(got);
      starpu_data_unregister_submit(wire);
    } else {
      in[k] = got;
    }
  }
  starpu_data_handle_t sum = tg_dist_temp(srows[me], scols[me], TG_F32);
  if (rc == 0) rc = tg_sum_tree_insert(R, in, sum, NULL);
  for (int k = 0; k < R; k++)
    if (lowp || k != me) starpu_data_unregister_submit(in[k]);
  tg_split_write(t, &seg); /* after the sends that read the segments */
  /* all-gather: my sum to every rank, theirs into their segments */
  starpu_data_handle_t mine = sum;
  if (lowp && rc == 0) {
    mine = tg_dist_temp(srows[me], scols[me], comm);
    rc = tg_convert_insert(comm, sum, mine, NULL);
    if (rc == 0) rc = tg_convert_insert(comm, mine, seg.parts[me], NULL);
  } else if (rc == 0) {
    rc = tg_gather_rows_insert(1, &sum, seg.parts[me], NULL);
    mine = seg.parts[me];
  }
  starpu_data_unregister_submit(sum);
  for (int k = 0; k < R && rc == 0; k++) {
    if (k == me) continue;
    TG_STARPU(starpu_mpi_isend_detached(mine, k, tag + 1, MPI_COMM_WORLD, NULL, NULL));
    starpu_data_handle_t got = seg.parts[k];
    if (lowp) got = tg_dist_temp(srows[k], scols[k], comm);
    TG_STARPU(starpu_mpi_irecv_detached(got, k, tag + 1, MPI_COMM_WORLD, NULL, NULL));
    if (lowp) {
      rc = tg_convert_insert(comm, got, seg.parts[k], NULL);
      starpu_data_unregister_submit(got);
    }
  }
  if (lowp && mine != sum) starpu_data_unregister_submit(mine);
  tg_split_free(t, &seg);
  return rc;
}

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

int tg_dist_allreduce_segments(tg_tensor *t, tg_dtype comm) {
  (void)t;
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
