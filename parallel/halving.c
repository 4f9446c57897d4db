/*
 * A gradient block's sum over the ranks in pieces (parallel.h,
 * tg_dist_plan): reduce-scatter by recursive halving, then all-gather by
 * recursive doubling (Rabenseifner's all-reduce), through StarPU-MPI.
 *
 * Design note.  Reduce-scatter, level k = 0, 1, ... (distance d = 2^k,
 * partner r ^ d): the rank holds a range of the block's P pieces (P the
 * largest power of two <= the ranks), sends the half it gives up to the
 * partner (one message) and adds the partner's copy of the half it keeps
 * (the rank with bit k clear keeps the lower half).  After log2(P) levels
 * it holds one piece summed over the P ranks.  All-gather: the same levels
 * in reverse, each rank sending the pieces it holds and receiving its
 * partner's straight into the pieces of `sum`, which a StarPU partition
 * plan cuts into the P pieces.  Each rank sends and receives 2 (P - 1) / P
 * of the block, against log2(P) whole blocks for the recursive-doubling
 * tree (collectives.c), with as few dependent steps.
 *
 * One task per level (tg_add_round): the partner's half is widened and
 * added to the kept half, the half kept at the next level stays in f32
 * (kept[k]) and the half given at the next level is rounded into that
 * level's message (send[k + 1]); the last level rounds its piece into sum.
 * A first task rounds the half given at level 0.  The block itself is only
 * read: no work copy.  So a block costs its GPU log2(P) + 2 tasks and one
 * copy per message, where a task per piece and message (a widening, an
 * addition, a rounding) cost 8 ranks more driver time than their kernels
 * in StarPU's SimGrid model (bench/results/2026-11-26-sim-mpi-halving.md).
 *
 * Same bits as the tree: every element is added in the same pairs (level k
 * adds the sums of the aligned groups of 2^k ranks), and IEEE addition is
 * commutative, so whichever partner adds gives the same result.  Ranks above
 * P fold in first and get the result back, as in the tree.  With a 16-bit
 * message type a partial sum is rounded once before it goes out, received
 * values are widened (exactly) and added in f32, the all-gather moves the
 * rounded sums, and the block is `sum` widened: the ranks all end with the
 * same bits.  With f32 messages `sum` is f32 and copied into the block.
 *
 * `sum` is a tensor of its own, not the block: a partition plan on the
 * block, a child of the master's static split, leaks its switch codelet in
 * StarPU 1.3 (the static unpartition never frees it).  The messages, the
 * kept halves and `sum` are host tensors allocated once and reused every
 * step (StarPU orders their reuse): temporaries were allocated and freed in
 * every call, and in SimGrid each pinned allocation of a few MB costs
 * milliseconds during which the simulated GPUs wait.  The tasks run where
 * opts says (the block's owner).
 *
 * Tags: (TG_DIST_PLAN_TAG | call << 8 | phase << 6 | index), index the
 * level in the reduce-scatter and the piece in the all-gather, call
 * counted by tg_dist_next_call (collectives.c), the same on every rank.
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

static int tg_plan_alloc(tg_tensor *t, int rows, tg_dtype dtype) {
  return tg_tensor_alloc(t, rows, 1, dtype);
}

/* The ranges of one reduce-scatter level for this rank: pieces [lo, lo +
 * n) held, [keep, keep + n / 2) kept, [give, give + n / 2) given. */
typedef struct tg_plan_level {
  int lo, n, keep, give;
} tg_plan_level;

static tg_plan_level tg_plan_level_of(int rank, int k, int lo, int n) {
  int half = n / 2, d = 1 << k;
  return (tg_plan_level){.lo = lo, .n = n, .keep = rank & d ? lo + half : lo,
                         .give = rank & d ? lo : lo + half};
}

/* the block's first row of piece j (j = P: its rows) */
static int tg_plan_row(const tg_dist_plan *p, int j) {
  return tg_split_start(p->block.rows, p->P, j, NULL);
}

/* rows of pieces [j, j + n) */
static int tg_plan_rows(const tg_dist_plan *p, int j, int n) {
  return tg_plan_row(p, j + n) - tg_plan_row(p, j);
}

int tg_dist_plan_init(tg_dist_plan *p, starpu_data_handle_t block, tg_dtype comm) {
  memset(p, 0, sizeof *p);
  int size = tg_dist_size();
  if (size == 1) return 0;
  if (comm != TG_F32 && comm != TG_BF16 && comm != TG_F16)
    return tg_fail(EINVAL, "gradient all-reduce: messages in %s", tg_dtype_name(comm));
  int P = 1, levels = 0;
  while (2 * P <= size) {
    P *= 2;
    levels++;
  }
  int rows = (int)starpu_matrix_get_ny(block), cols = (int)starpu_matrix_get_nx(block);
  p->comm = comm;
  p->block = (tg_tensor){.handle = block, .rows = rows, .cols = cols, .dtype = TG_F32};
  if (P > TG_DIST_PLAN_MAX_PIECES || cols != 1 || rows < P)
    return 0; /* tg_dist_plan_allreduce falls back on the tree */
  p->P = P;
  p->levels = levels;
  int rank = tg_dist_rank();
  if (rank >= P) { /* sends its block to rank - P and gets the sum back */
    p->folded = 1;
    return comm != TG_F32 ? tg_plan_alloc(&p->fold_wire, rows, comm) : 0;
  }
  TG_TRY(tg_plan_alloc(&p->sum, rows, comm));
  TG_TRY(tg_split_plan(&p->sum, P, &p->pieces));
  int lo = 0, n = P;
  for (int k = 0; k < levels; k++) {
    tg_plan_level l = tg_plan_level_of(rank, k, lo, n);
    TG_TRY(tg_plan_alloc(&p->send[k], tg_plan_rows(p, l.give, n / 2), comm));
    TG_TRY(tg_plan_alloc(&p->recv[k], tg_plan_rows(p, l.keep, n / 2), comm));
    lo = l.keep;
    n /= 2;
    if (k + 1 < levels) { /* the half kept at level k + 1 */
      tg_plan_level next = tg_plan_level_of(rank, k + 1, lo, n);
      TG_TRY(tg_plan_alloc(&p->kept[k], tg_plan_rows(p, next.keep, n / 2), TG_F32));
    }
  }
  if (rank + P < size) {
    TG_TRY(tg_plan_alloc(&p->fold_recv, rows, comm));
    TG_TRY(tg_plan_alloc(&p->fold_sum, rows, TG_F32));
  }
  return 0;
}

void tg_dist_plan_free(tg_dist_plan *p) {
  if (p->P && !p->folded) tg_split_free(&p->sum, &p->pieces);
  tg_tensor_free(&p->sum);
  for (int k = 0; k < TG_DIST_PLAN_MAX_LEVELS; k++) {
    tg_tensor_free(&p->send[k]);
    tg_tensor_free(&p->recv[k]);
    tg_tensor_free(&p->kept[k]);
  }
  tg_tensor_free(&p->fold_recv);
  tg_tensor_free(&p->fold_sum);
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

/* The reduce-scatter: ends with this rank's piece of the sum in the comm
 * type, in sum's piece *mine. */
static int tg_plan_scatter(tg_dist_plan *p, int64_t call, starpu_data_handle_t a,
                           int *mine, const tg_task_opts *opts) {
  int rank = tg_dist_rank(), lo = 0, n = p->P;
  tg_plan_level l = tg_plan_level_of(rank, 0, lo, n);
  /* the half given at level 0, rounded */
  TG_TRY(tg_add_round_insert(p->comm, a, tg_plan_row(p, l.give), tg_plan_rows(p, l.give, n / 2),
                             NULL, NULL, 0, p->send[0].handle, 0, opts));
  for (int k = 0; k < p->levels; k++) {
    int partner = rank ^ (1 << k), half = n / 2;
    l = tg_plan_level_of(rank, k, lo, n);
    TG_TRY(tg_plan_isend(p->send[k].handle, partner, tg_plan_tag(call, TG_PHASE_SCATTER, k)));
    TG_TRY(tg_plan_irecv(p->recv[k].handle, partner, tg_plan_tag(call, TG_PHASE_SCATTER, k)));
    /* a: the block (kept half at a_off) at level 0, then exactly the kept
     * half (what level k - 1 kept) */
    int a_off = k ? 0 : tg_plan_row(p, l.keep);
    int rows = tg_plan_rows(p, l.keep, half);
    if (k + 1 < p->levels) {
      tg_plan_level next = tg_plan_level_of(rank, k + 1, l.keep, half);
      TG_TRY(tg_add_round_insert(p->comm, a, a_off, rows, p->recv[k].handle,
                                 p->kept[k].handle, tg_plan_row(p, next.keep) - tg_plan_row(p, l.keep),
                                 p->send[k + 1].handle,
                                 tg_plan_row(p, next.give) - tg_plan_row(p, l.keep), opts));
      a = p->kept[k].handle;
    } else {
      TG_TRY(tg_add_round_insert(p->comm, a, a_off, rows, p->recv[k].handle, NULL, 0,
                                 p->pieces.parts[l.keep], 0, opts));
    }
    lo = l.keep;
    n = half;
  }
  *mine = lo;
  return 0;
}

int tg_dist_plan_allreduce(tg_dist_plan *p, const tg_task_opts *opts) {
  int rank = tg_dist_rank(), size = tg_dist_size();
  if (size == 1) return 0;
  if (!p->block.handle) return tg_fail(EINVAL, "gradient all-reduce: plan not initialised");
  if (!p->P) return tg_dist_allreduce_comm(p->block.handle, p->comm);
  int64_t call = tg_dist_next_call();
  if (p->folded) return tg_plan_folded(p, call, opts);
  int P = p->P;
  starpu_data_handle_t block = p->block.handle, a = block;
  if (rank + P < size) { /* the block plus the folded rank's */
    TG_TRY(tg_plan_irecv(p->fold_recv.handle, rank + P, tg_plan_tag(call, TG_PHASE_FOLD, 0)));
    TG_TRY(tg_add_round_insert(p->comm, block, 0, p->block.rows, p->fold_recv.handle,
                               p->fold_sum.handle, 0, NULL, 0, opts));
    a = p->fold_sum.handle;
  }
  tg_split_write(&p->sum, &p->pieces);
  int lo = 0;
  TG_TRY(tg_plan_scatter(p, call, a, &lo, opts));
  starpu_data_handle_t *piece = p->pieces.parts;
  for (int k = p->levels - 1, n = 1; k >= 0; k--, n *= 2) { /* all-gather, into the pieces */
    int d = 1 << k, partner = rank ^ d;
    int held = lo, other = rank & d ? lo - n : lo + n;
    for (int j = held; j < held + n; j++)
      TG_TRY(tg_plan_isend(piece[j], partner, tg_plan_tag(call, TG_PHASE_GATHER, j)));
    for (int j = other; j < other + n; j++)
      TG_TRY(tg_plan_irecv(piece[j], partner, tg_plan_tag(call, TG_PHASE_GATHER, j)));
    lo = held < other ? held : other;
  }
  tg_split_join(&p->sum, &p->pieces);
  if (p->comm != TG_F32) TG_TRY(tg_convert_insert(p->comm, p->sum.handle, block, opts));
  else TG_TRY(tg_gather_rows_insert(1, &p->sum.handle, block, opts));
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
