/*
 * A gradient block's sum over the ranks in pieces (parallel.h,
 * tg_dist_plan): reduce-scatter by recursive halving, then all-gather by
 * recursive doubling (Rabenseifner's all-reduce), through StarPU-MPI.
 *
 * Design note.  The block is copied into a work buffer of its own, which a
 * StarPU partition plan cuts into P pieces, P the largest power of two <=
 * the ranks, and copied back at the end (a plan on the block itself, a
 * child of the master's static split, leaks its switch codelet in StarPU
 * 1.3: the static unpartition never frees it).  Reduce-scatter, level k = 0, 1,
 * ... (distance d = 2^k, partner r ^ d): the rank holds a range of pieces,
 * sends the half it gives up to the partner (one message per piece) and adds
 * the partner's copy of the half it keeps (the rank with bit k clear keeps
 * the lower half).  After log2(P) levels it holds one piece summed over the
 * P ranks.  All-gather: the same levels in reverse, each rank sending the
 * pieces it holds and receiving its partner's straight into the pieces.
 * Each rank sends and receives 2 (P - 1) / P of the block, against log2(P)
 * whole blocks for the recursive-doubling tree (collectives.c), with as few
 * dependent steps.
 *
 * Same bits as the tree: every element is added in the same pairs (level k
 * adds the sums of the aligned groups of 2^k ranks), and IEEE addition is
 * commutative, so whichever partner adds gives the same result.  Ranks above
 * P fold in first and get the result back, as in the tree.
 *
 * With a 16-bit message type the block is rounded to it whole (the wire,
 * cut in the same pieces), so the first level's messages cost no task; a
 * piece is rounded again only after an addition.  Received pieces are
 * widened and added in f32.  Before the all-gather each piece's owner
 * rounds its sum into the wire, the all-gather moves wire pieces only, and
 * the block is the wire widened: the ranks all end with the same bits.
 *
 * The receive buffers, the 16-bit wires and their f32 widenings are host
 * tensors allocated once and reused every step (StarPU orders their reuse):
 * temporaries were allocated and freed in every call, and in SimGrid each
 * pinned allocation of a few MB costs milliseconds during which the
 * simulated GPUs wait (bench/results/2026-11-26-sim-mpi-halving.md).  The
 * adding and converting tasks run where opts says (the block's owner).
 *
 * Tags: (TG_DIST_PLAN_TAG | call << 8 | phase << 6 | piece), call counted
 * by tg_dist_next_call (collectives.c), the same on every rank.
 */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "dist_calls.h"
#include "mpi_runtime.h"
#include "taskgrad/codelets.h"
#include "taskgrad/parallel.h"
#include "taskgrad/precision_codelets.h"

#ifdef TG_HAVE_MPI
#include <starpu_mpi.h>

#define TG_DIST_PLAN_TAG ((starpu_mpi_tag_t)1 << 41)
enum { TG_PHASE_SCATTER, TG_PHASE_GATHER, TG_PHASE_FOLD, TG_PHASE_UNFOLD };

static starpu_mpi_tag_t tg_plan_tag(int64_t call, int phase, int piece) {
  return TG_DIST_PLAN_TAG | ((starpu_mpi_tag_t)call << 8) | (phase << 6) | piece;
}

static int tg_plan_alloc(tg_tensor *t, const tg_tensor *like, tg_dtype dtype) {
  return tg_tensor_alloc(t, like->rows, like->cols, dtype);
}

int tg_dist_plan_init(tg_dist_plan *p, starpu_data_handle_t block, tg_dtype comm) {
  memset(p, 0, sizeof *p);
  int size = tg_dist_size();
  if (size == 1) return 0;
  if (comm != TG_F32 && comm != TG_BF16 && comm != TG_F16)
    return tg_fail(EINVAL, "gradient all-reduce: messages in %s", tg_dtype_name(comm));
  int P = 1;
  while (2 * P <= size) P *= 2;
  int rows = (int)starpu_matrix_get_ny(block), cols = (int)starpu_matrix_get_nx(block);
  p->comm = comm;
  p->block = (tg_tensor){.handle = block, .rows = rows, .cols = cols, .dtype = TG_F32};
  if (P > TG_DIST_PLAN_MAX_PIECES || cols != 1 || rows < P)
    return 0; /* tg_dist_plan_allreduce falls back on the tree */
  p->P = P;
  int lowp = comm != TG_F32, rank = tg_dist_rank();
  if (rank >= P) { /* sends its block to rank - P and gets the sum back */
    p->folded = 1;
    return lowp ? tg_plan_alloc(&p->fold_wire, &p->block, comm) : 0;
  }
  TG_TRY(tg_plan_alloc(&p->work, &p->block, TG_F32));
  TG_TRY(tg_split_plan(&p->work, P, &p->pieces));
  if (lowp) {
    TG_TRY(tg_plan_alloc(&p->wire, &p->block, comm));
    TG_TRY(tg_split_plan(&p->wire, P, &p->wire_pieces));
  }
  for (int j = 0; j < P; j++) {
    tg_tensor piece = {.cols = 1};
    tg_split_start(rows, P, j, &piece.rows);
    TG_TRY(tg_plan_alloc(&p->recv[j], &piece, comm));
    if (lowp) TG_TRY(tg_plan_alloc(&p->widened[j], &piece, TG_F32));
  }
  if (rank + P < size) {
    TG_TRY(tg_plan_alloc(&p->fold_recv, &p->work, comm));
    if (lowp) TG_TRY(tg_plan_alloc(&p->fold_widened, &p->work, TG_F32));
  }
  return 0;
}

void tg_dist_plan_free(tg_dist_plan *p) {
  if (p->P && !p->folded) {
    tg_split_free(&p->work, &p->pieces);
    if (p->wire.handle) tg_split_free(&p->wire, &p->wire_pieces);
  }
  tg_tensor_free(&p->work);
  tg_tensor_free(&p->wire);
  for (int j = 0; j < p->P; j++) {
    tg_tensor_free(&p->recv[j]);
    tg_tensor_free(&p->widened[j]);
  }
  tg_tensor_free(&p->fold_recv);
  tg_tensor_free(&p->fold_widened);
  tg_tensor_free(&p->fold_wire);
  memset(p, 0, sizeof *p);
}

static int tg_plan_isend(starpu_data_handle_t h, int to, starpu_mpi_tag_t tag) {
  TG_STARPU(starpu_mpi_isend_detached(h, to, tag, MPI_COMM_WORLD, NULL, NULL));
  return 0;
}

static int tg_plan_irecv(starpu_data_handle_t h, int from, starpu_mpi_tag_t tag) {
  TG_STARPU(starpu_mpi_irecv_detached(h, from, tag, MPI_COMM_WORLD, NULL, NULL));
  return 0;
}

/* h += recv, a message in the comm type (16-bit: widened into f32 first,
 * exact) */
static int tg_plan_add(const tg_dist_plan *p, starpu_data_handle_t h, const tg_tensor *recv,
                       const tg_tensor *widened, const tg_task_opts *opts) {
  starpu_data_handle_t f32 = recv->handle;
  if (p->comm != TG_F32) {
    TG_TRY(tg_convert_insert(p->comm, recv->handle, widened->handle, opts));
    f32 = widened->handle;
  }
  return tg_accumulate_insert(h, f32, opts);
}

/* A rank above P: its block to rank - P (in the comm type), the sum back
 * in f32. */
static int tg_plan_folded(tg_dist_plan *p, int64_t call, const tg_task_opts *opts) {
  int partner = tg_dist_rank() - p->P;
  starpu_data_handle_t msg = p->block.handle;
  if (p->comm != TG_F32) {
    TG_TRY(tg_convert_insert(p->comm, msg, p->fold_wire.handle, opts));
    msg = p->fold_wire.handle;
  }
  TG_TRY(tg_plan_isend(msg, partner, tg_plan_tag(call, TG_PHASE_FOLD, 0)));
  return tg_plan_irecv(p->block.handle, partner, tg_plan_tag(call, TG_PHASE_UNFOLD, 0));
}

int tg_dist_plan_allreduce(tg_dist_plan *p, const tg_task_opts *opts) {
  int rank = tg_dist_rank(), size = tg_dist_size();
  if (size == 1) return 0;
  if (!p->block.handle) return tg_fail(EINVAL, "gradient all-reduce: plan not initialised");
  if (!p->P) return tg_dist_allreduce_comm(p->block.handle, p->comm);
  int64_t call = tg_dist_next_call();
  if (p->folded) return tg_plan_folded(p, call, opts);
  int P = p->P, levels = 0, lowp = p->comm != TG_F32;
  while ((1 << levels) < P) levels++;
  starpu_data_handle_t block = p->block.handle, work = p->work.handle;
  TG_TRY(tg_gather_rows_insert(1, &block, work, opts)); /* a copy */
  if (rank + P < size) {
    TG_TRY(tg_plan_irecv(p->fold_recv.handle, rank + P, tg_plan_tag(call, TG_PHASE_FOLD, 0)));
    TG_TRY(tg_plan_add(p, work, &p->fold_recv, &p->fold_widened, opts));
  }
  /* 16-bit messages: every piece sent is a piece of the wire, the whole
   * rounded once here, pieces again after each addition */
  if (lowp) TG_TRY(tg_convert_insert(p->comm, work, p->wire.handle, opts));
  tg_split_write(&p->work, &p->pieces);
  if (lowp) tg_split_write(&p->wire, &p->wire_pieces);
  starpu_data_handle_t *piece = p->pieces.parts, *wire = lowp ? p->wire_pieces.parts : piece;
  int lo = 0, n = P, level_lo[32], level_n[32];
  for (int k = 0; k < levels; k++) { /* reduce-scatter */
    int d = 1 << k, partner = rank ^ d, half = n / 2;
    int keep = rank & d ? lo + half : lo, give = rank & d ? lo : lo + half;
    level_lo[k] = lo;
    level_n[k] = n;
    for (int j = give; j < give + half; j++) {
      if (lowp && k > 0) TG_TRY(tg_convert_insert(p->comm, piece[j], wire[j], opts));
      TG_TRY(tg_plan_isend(wire[j], partner, tg_plan_tag(call, TG_PHASE_SCATTER, j)));
    }
    for (int j = keep; j < keep + half; j++) {
      TG_TRY(tg_plan_irecv(p->recv[j].handle, partner, tg_plan_tag(call, TG_PHASE_SCATTER, j)));
      TG_TRY(tg_plan_add(p, piece[j], &p->recv[j], &p->widened[j], opts));
    }
    lo = keep;
    n = half;
  }
  /* this rank's sum, rounded before it goes out (the same bits everywhere) */
  if (lowp) TG_TRY(tg_convert_insert(p->comm, piece[lo], wire[lo], opts));
  for (int k = levels - 1; k >= 0; k--) { /* all-gather, straight into the pieces */
    int partner = rank ^ (1 << k), other = lo == level_lo[k] ? lo + n : level_lo[k];
    for (int j = lo; j < lo + n; j++)
      TG_TRY(tg_plan_isend(wire[j], partner, tg_plan_tag(call, TG_PHASE_GATHER, j)));
    for (int j = other; j < other + n; j++)
      TG_TRY(tg_plan_irecv(wire[j], partner, tg_plan_tag(call, TG_PHASE_GATHER, j)));
    lo = level_lo[k];
    n = level_n[k];
  }
  tg_split_join(&p->work, &p->pieces);
  if (lowp) {
    tg_split_join(&p->wire, &p->wire_pieces);
    TG_TRY(tg_convert_insert(p->comm, p->wire.handle, block, opts));
  } else {
    TG_TRY(tg_gather_rows_insert(1, &work, block, opts));
  }
  if (rank + P < size) /* the folded rank gets the sum in f32: exact */
    TG_TRY(tg_plan_isend(block, rank + P, tg_plan_tag(call, TG_PHASE_UNFOLD, 0)));
  return 0;
}

#else /* no MPI in this build: one rank, nothing to sum */

int tg_dist_plan_init(tg_dist_plan *p, starpu_data_handle_t block, tg_dtype comm) {
  (void)block;
  (void)comm;
  memset(p, 0, sizeof *p);
  return 0;
}
void tg_dist_plan_free(tg_dist_plan *p) { memset(p, 0, sizeof *p); }
int tg_dist_plan_allreduce(tg_dist_plan *p, const tg_task_opts *opts) {
  (void)p;
  (void)opts;
  return 0;
}
#endif
