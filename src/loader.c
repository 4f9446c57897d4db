/*
 * Batch loaders: a thread that fills upcoming batches into pinned,
 * StarPU-registered buffers while the current training step runs.
 *
 * Design notes
 *
 * One core, two fillers.  The core (slots, the thread, the W acquire,
 * prefetch, the ready queue, destroy) knows nothing about where samples
 * come from: a source describes the batches (rows of a full batch, rows of
 * an epoch's last batch when it is smaller, batches per epoch, the dtype and
 * columns of x, a row granularity the micro-batches must respect) and
 * provides two functions run in the loader thread, begin_epoch (e.g. a new
 * permutation) and fill (write rows r0 .. r0+rows-1 of batch b into one
 * micro-batch's x and y).  The fillers are:
 *  - the data-set filler behind tg_loader_create: x (batch, features) f32,
 *    y (batch, 1) i32 labels, a seeded permutation per epoch, an optional
 *    partial last batch;
 *  - the token filler behind tg_token_loader_create: x and y (B*T, 1) i32,
 *    y being x shifted by one token, sequential (llm.c) or shuffled windows,
 *    micro-batches of whole sequences.
 *
 * Why a loader thread.  Gathering a shuffled batch is a host memcpy per
 * sample.  Done by the thread that submits the training graph it would
 * serialise with submission (and with every synchronisation the caller
 * does); done here it overlaps with the step: while the tasks of batch k
 * run, this thread has already written batches k+1 .. k+prefetch.
 *
 * Slots.  There are prefetch + 1 full-size slots (at least 2).  Each slot is
 * a pinned x tensor (rows, x_cols) and a y tensor (rows, 1) i32
 * (tg_tensor_alloc), each partitioned ONCE, at creation, into nmicro row
 * blocks with starpu_matrix_filter_vertical_block; the children are what a
 * batch hands out, so no partitioning happens inside a step.  Uneven splits
 * are fine for the data set (StarPU spreads the remainder; the rows of every
 * child are read back from its interface).  The token loader needs whole
 * sequences per child: with B*T rows and nmicro dividing B, the filter's
 * chunk size is exactly (B/nmicro)*T with no remainder, and slot_init checks
 * that every child really holds a multiple of T rows.  At any time one slot
 * may be in use by the caller and up to prefetch slots are ready or being
 * filled.
 *
 * Partial batch.  When the data set's !drop_last and batch does not divide
 * n, the last batch of every epoch has n % batch rows.  Those rows need
 * children of other sizes, so there is ONE extra slot of that size,
 * partitioned into min(nmicro, n % batch) children, used only for that
 * batch.  Batches are filled in order, so when an epoch is shorter than the
 * prefetch depth the loader may wait for that slot (the previous epoch's
 * last batch) to come back before running further ahead; it never
 * deadlocks, since the caller consumes batches in the same order.  The
 * token loader has no partial batch.
 *
 * Why a W acquire.  A slot handed out by tg_loader_next() becomes free again
 * at the NEXT tg_loader_next() call: by then the caller has submitted the
 * step's tasks reading that batch, but they may still be queued or running.
 * The loader does not wait on the host for them; it takes each child with
 * starpu_data_acquire(child, STARPU_W), which StarPU's implicit (sequential
 * consistency) dependencies order after every task submitted earlier on
 * the child.  So the refill happens exactly when the last reader is done, and
 * a batch is never overwritten under a running task.  The loader is an
 * application thread, not a task or callback, so the blocking acquire is
 * allowed.
 *
 * Prefetch.  Once a slot is written (and released), each child i is
 * prefetched asynchronously (starpu_data_prefetch_on_node(..., async=1)) to
 * the memory node of device worker (i mod ndev) -- CUDA workers, then
 * OpenCL ones (the emulated accelerators) -- where the training graph is
 * expected to run micro-batch i.  The copy then overlaps with the current
 * step instead of delaying the next one.  With CPU workers only there is
 * nothing to do: the data already lives in main RAM.  Each micro-batch
 * prefetched counts in tg_loader_prefetched() (--stats shows it).
 *
 * Order.  Epochs follow one another without a break; epoch e uses a
 * permutation computed from (seed, e) with splitmix64 and Fisher-Yates when
 * shuffling (identity otherwise), so a run is reproducible and two loaders
 * with the same seed hand out the same sequence.
 *
 * The data set or token array must outlive the loader (the loader thread
 * copies from it).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "taskgrad/data.h"
#include "taskgrad/rng.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"

/* ---- what a filler provides --------------------------------------------- */

typedef struct loader_source {
  int rows;            /* rows of a full batch */
  int partial_rows;    /* rows of each epoch's last batch if smaller, else 0 */
  int bpe;             /* batches per epoch */
  int x_cols;          /* columns of x */
  tg_dtype x_dtype;    /* y is always (rows, 1) i32 */
  int row_unit;        /* every micro-batch holds a multiple of this many rows */
  void *ctx;
  /* Both run in the loader thread only.  begin_epoch precedes the first
   * fill of each epoch; fill writes rows r0 .. r0+nrows-1 of batch b of the
   * current epoch into one micro-batch (leading dimensions in elements). */
  void (*begin_epoch)(void *ctx, long long epoch);
  void (*fill)(void *ctx, int b, int r0, int nrows, void *x, size_t xld,
               int32_t *y, size_t yld);
  void (*free_ctx)(void *ctx);
  long long start_seq; /* global number of the first batch handed out */
} loader_source;

/* ---- core --------------------------------------------------------------- */

enum slot_state { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_INUSE };

typedef struct tg_slot {
  tg_tensor x, y;
  int rows;                /* rows of the whole slot */
  int nchild;              /* number of row blocks */
  int partitioned;         /* x and y partitioned (both or neither) */
  int partial;             /* 1: the slot for an epoch's partial batch */
  starpu_data_handle_t *xc, *yc;
  int *child_rows;         /* rows of each child */
  enum slot_state state;
  long long seq;           /* global batch number when READY/INUSE */
} tg_slot;

struct tg_loader {
  loader_source src;
  int nmicro;
  int prefetch;

  tg_slot *slots;
  int nslots;

  int ndev;
  unsigned *dev_nodes;     /* memory node of each CUDA, then OpenCL worker */

  pthread_t thread;
  int thread_started;
  int sync_init;           /* mutex and condvar initialised */
  pthread_mutex_t mu;
  pthread_cond_t cv;       /* any state change; waiters re-check */
  int stop;
  int nready;
  long long take_seq;      /* next batch tg_loader_next hands out */
  int inuse;               /* slot index in use by the caller, or -1 */
  int err;                 /* loader thread failure (negative) */
  char errmsg[512];
};

/* ---- random order ------------------------------------------------------ */

/* Uniform in [0, bound) without modulo bias (rejection sampling). */
static uint64_t rand_below(uint64_t *s, uint64_t bound) {
  uint64_t threshold = (0 - bound) % bound; /* 2^64 mod bound */
  for (;;) {
    uint64_t r = tg_splitmix64(s);
    if (r >= threshold) return r % bound;
  }
}

/* perm = 0 .. n-1, shuffled by Fisher-Yates when shuffle; the permutation
 * depends on (seed, epoch) only. */
static void make_perm(int *perm, int n, int shuffle, uint64_t seed,
                      long long epoch) {
  for (int i = 0; i < n; i++) perm[i] = i;
  if (!shuffle) return;
  uint64_t s = seed ^ (0xD1B54A32D192ED03ULL * (uint64_t)(epoch + 1));
  (void)tg_splitmix64(&s);
  for (int i = n - 1; i > 0; i--) {
    int j = (int)rand_below(&s, (uint64_t)i + 1);
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* ---- slots ------------------------------------------------------------- */

static void slot_free(tg_slot *s) {
  if (s->partitioned) {
    /* Wait for the tasks still reading the children (a W acquire is ordered
     * after them), then gather back and unregister. */
    for (int i = 0; i < s->nchild; i++) {
      if (s->xc[i] && starpu_data_acquire(s->xc[i], STARPU_W) == 0)
        starpu_data_release(s->xc[i]);
      if (s->yc[i] && starpu_data_acquire(s->yc[i], STARPU_W) == 0)
        starpu_data_release(s->yc[i]);
    }
    starpu_data_unpartition(s->x.handle, STARPU_MAIN_RAM);
    starpu_data_unpartition(s->y.handle, STARPU_MAIN_RAM);
    s->partitioned = 0;
  }
  tg_tensor_free(&s->x);
  tg_tensor_free(&s->y);
  free(s->xc);
  free(s->yc);
  free(s->child_rows);
  s->xc = s->yc = NULL;
  s->child_rows = NULL;
}

static int slot_init(tg_slot *s, const loader_source *src, int rows,
                     int nmicro, int partial) {
  memset(s, 0, sizeof *s);
  s->rows = rows;
  s->nchild = nmicro < rows ? nmicro : rows;
  s->partial = partial;
  s->state = SLOT_FREE;
  s->seq = -1;
  int rc = tg_tensor_alloc(&s->x, rows, src->x_cols, src->x_dtype);
  if (rc < 0) return rc;
  rc = tg_tensor_alloc(&s->y, rows, 1, TG_I32);
  if (rc < 0) return rc;
  s->xc = calloc((size_t)s->nchild, sizeof *s->xc);
  s->yc = calloc((size_t)s->nchild, sizeof *s->yc);
  s->child_rows = calloc((size_t)s->nchild, sizeof *s->child_rows);
  if (!s->xc || !s->yc || !s->child_rows)
    return tg_fail(ENOMEM, "loader: out of memory for %d micro-batches",
                   s->nchild);

  struct starpu_data_filter f;
  memset(&f, 0, sizeof f);
  f.filter_func = starpu_matrix_filter_vertical_block;
  f.nchildren = (unsigned)s->nchild;
  starpu_data_partition(s->x.handle, &f);
  starpu_data_partition(s->y.handle, &f);
  s->partitioned = 1;

  int total = 0;
  for (int i = 0; i < s->nchild; i++) {
    s->xc[i] = starpu_data_get_sub_data(s->x.handle, 1, i);
    s->yc[i] = starpu_data_get_sub_data(s->y.handle, 1, i);
    if (!s->xc[i] || !s->yc[i])
      return tg_fail(EIO, "loader: StarPU returned no handle for "
                     "micro-batch %d of %d", i, s->nchild);
    int rx = (int)starpu_matrix_get_ny(s->xc[i]);
    int ry = (int)starpu_matrix_get_ny(s->yc[i]);
    if (rx != ry || rx <= 0)
      return tg_fail(EIO, "loader: micro-batch %d has %d input rows and %d "
                     "label rows", i, rx, ry);
    if (rx % src->row_unit != 0)
      return tg_fail(EIO, "loader: micro-batch %d has %d rows, not whole "
                     "sequences of %d", i, rx, src->row_unit);
    s->child_rows[i] = rx;
    total += rx;
  }
  if (total != rows)
    return tg_fail(EIO, "loader: micro-batches cover %d rows, expected %d",
                   total, rows);
  return 0;
}

static long tg_prefetched_batches = 0; /* micro-batches, all loaders */

long tg_loader_prefetched(void) {
  return __atomic_load_n(&tg_prefetched_batches, __ATOMIC_RELAXED);
}

/* Writes batch b of the current epoch into slot s through W acquires of its
 * children, then prefetches them to the device workers.  Runs in the loader
 * thread. */
static int slot_fill(tg_loader *ld, tg_slot *s, int b) {
  int r0 = 0;
  for (int i = 0; i < s->nchild; i++) {
    int rc = starpu_data_acquire(s->xc[i], STARPU_W);
    if (rc != 0)
      return tg_fail(rc < 0 ? -rc : EIO, "loader: starpu_data_acquire of "
                     "micro-batch %d inputs failed (%d)", i, rc);
    rc = starpu_data_acquire(s->yc[i], STARPU_W);
    if (rc != 0) {
      starpu_data_release(s->xc[i]);
      return tg_fail(rc < 0 ? -rc : EIO, "loader: starpu_data_acquire of "
                     "micro-batch %d labels failed (%d)", i, rc);
    }
    ld->src.fill(ld->src.ctx, b, r0, s->child_rows[i],
                 (void *)starpu_matrix_get_local_ptr(s->xc[i]),
                 starpu_matrix_get_local_ld(s->xc[i]),
                 (int32_t *)starpu_matrix_get_local_ptr(s->yc[i]),
                 starpu_matrix_get_local_ld(s->yc[i]));
    starpu_data_release(s->yc[i]);
    starpu_data_release(s->xc[i]);
    r0 += s->child_rows[i];
  }
  if (ld->ndev > 0) {
    for (int i = 0; i < s->nchild; i++) {
      unsigned node = ld->dev_nodes[i % ld->ndev];
      int rc = starpu_data_prefetch_on_node(s->xc[i], node, 1);
      if (rc == 0) rc = starpu_data_prefetch_on_node(s->yc[i], node, 1);
      if (rc != 0)
        return tg_fail(rc < 0 ? -rc : EIO, "loader: prefetch of micro-batch "
                       "%d to memory node %u failed (%d)", i, node, rc);
      __atomic_add_fetch(&tg_prefetched_batches, 1, __ATOMIC_RELAXED);
    }
  }
  return 0;
}

/* ---- loader thread ----------------------------------------------------- */

static int lock(tg_loader *ld) {
  int e = pthread_mutex_lock(&ld->mu);
  if (e) fprintf(stderr, "taskgrad loader: pthread_mutex_lock: %s\n",
                 strerror(e));
  return e;
}
static void unlock(tg_loader *ld) {
  int e = pthread_mutex_unlock(&ld->mu);
  if (e) fprintf(stderr, "taskgrad loader: pthread_mutex_unlock: %s\n",
                 strerror(e));
}
static int wait_cv(tg_loader *ld) {
  int e = pthread_cond_wait(&ld->cv, &ld->mu);
  if (e) fprintf(stderr, "taskgrad loader: pthread_cond_wait: %s\n",
                 strerror(e));
  return e;
}
static void broadcast(tg_loader *ld) {
  int e = pthread_cond_broadcast(&ld->cv);
  if (e) fprintf(stderr, "taskgrad loader: pthread_cond_broadcast: %s\n",
                 strerror(e));
}

static int find_free(const tg_loader *ld, int partial) {
  for (int i = 0; i < ld->nslots; i++)
    if (ld->slots[i].state == SLOT_FREE && ld->slots[i].partial == partial)
      return i;
  return -1;
}

/* Records a loader-thread failure for tg_loader_next (mutex held). */
static void set_error(tg_loader *ld, int rc) {
  if (ld->err) return;
  ld->err = rc < 0 ? rc : -EIO;
  snprintf(ld->errmsg, sizeof ld->errmsg, "%s", tg_last_error());
}

static void *loader_main(void *arg) {
  tg_loader *ld = arg;
  const int bpe = ld->src.bpe;
  long long cur_epoch = -1;
  for (long long seq = ld->src.start_seq;; seq++) {
    const long long epoch = seq / bpe;
    const int b = (int)(seq % bpe);
    const int partial = ld->src.partial_rows > 0 && b == bpe - 1;

    if (lock(ld)) return NULL;
    int s = -1;
    for (;;) {
      if (ld->stop) break;
      if (ld->nready < ld->prefetch) {
        s = find_free(ld, partial);
        if (s >= 0) break;
      }
      if (wait_cv(ld)) {
        set_error(ld, tg_fail(EIO, "loader: pthread_cond_wait failed"));
        break;
      }
    }
    if (ld->stop || s < 0) {
      broadcast(ld);
      unlock(ld);
      return NULL;
    }
    ld->slots[s].state = SLOT_FILLING;
    ld->nready++; /* counts batches ready or being filled */
    unlock(ld);

    if (epoch != cur_epoch) {
      ld->src.begin_epoch(ld->src.ctx, epoch);
      cur_epoch = epoch;
    }
    int rc = slot_fill(ld, &ld->slots[s], b);

    if (lock(ld)) return NULL;
    if (rc < 0) {
      set_error(ld, rc);
      ld->slots[s].state = SLOT_FREE;
      ld->nready--;
      broadcast(ld);
      unlock(ld);
      return NULL;
    }
    ld->slots[s].seq = seq;
    ld->slots[s].state = SLOT_READY;
    broadcast(ld);
    unlock(ld);
  }
}

/* ---- core: creation, hand-out, destruction ------------------------------ */

static void loader_free(tg_loader *ld) {
  if (!ld) return;
  if (ld->slots)
    for (int i = 0; i < ld->nslots; i++) slot_free(&ld->slots[i]);
  free(ld->slots);
  free(ld->dev_nodes);
  if (ld->src.free_ctx) ld->src.free_ctx(ld->src.ctx);
  if (ld->sync_init) {
    int e = pthread_cond_destroy(&ld->cv);
    if (e) fprintf(stderr, "taskgrad loader: pthread_cond_destroy: %s\n",
                   strerror(e));
    e = pthread_mutex_destroy(&ld->mu);
    if (e) fprintf(stderr, "taskgrad loader: pthread_mutex_destroy: %s\n",
                   strerror(e));
  }
  free(ld);
}

static int check_prefetch(int prefetch) {
  if (prefetch < 1)
    return tg_fail(EINVAL, "loader: prefetch depth %d must be >= 1", prefetch);
  if (prefetch > 1024)
    return tg_fail(EINVAL, "loader: prefetch depth %d is too large (max 1024)",
                   prefetch);
  return 0;
}

/* Allocates the slots and starts the thread for a validated source.  Owns
 * src->ctx from here on: it is freed (free_ctx) on failure too. */
static tg_loader *loader_start(const loader_source *src, int nmicro,
                               int prefetch) {
  tg_loader *ld = calloc(1, sizeof *ld);
  if (!ld) {
    src->free_ctx(src->ctx);
    tg_fail(ENOMEM, "loader: out of memory");
    return NULL;
  }
  ld->src = *src;
  ld->nmicro = nmicro;
  ld->prefetch = prefetch;
  ld->inuse = -1;
  ld->take_seq = src->start_seq;

  int e = pthread_mutex_init(&ld->mu, NULL);
  if (e) {
    tg_fail(e, "loader: pthread_mutex_init: %s", strerror(e));
    goto fail;
  }
  e = pthread_cond_init(&ld->cv, NULL);
  if (e) {
    tg_fail(e, "loader: pthread_cond_init: %s", strerror(e));
    pthread_mutex_destroy(&ld->mu);
    goto fail;
  }
  ld->sync_init = 1;

  const int nfull = prefetch + 1;
  ld->nslots = nfull + (src->partial_rows > 0 ? 1 : 0);
  ld->slots = calloc((size_t)ld->nslots, sizeof *ld->slots);
  if (!ld->slots) {
    tg_fail(ENOMEM, "loader: out of memory");
    ld->nslots = 0;
    goto fail;
  }

  int ndev = (int)starpu_worker_get_count() - (int)starpu_cpu_worker_get_count();
  if (ndev > 0) {
    int *ids = calloc((size_t)ndev, sizeof *ids);
    ld->dev_nodes = calloc((size_t)ndev, sizeof *ld->dev_nodes);
    if (!ids || !ld->dev_nodes) {
      free(ids);
      tg_fail(ENOMEM, "loader: out of memory");
      goto fail;
    }
    static const enum starpu_worker_archtype kinds[] = {STARPU_CUDA_WORKER,
                                                        STARPU_OPENCL_WORKER};
    for (int k = 0; k < 2 && ld->ndev < ndev; k++) {
      unsigned got = starpu_worker_get_ids_by_type(kinds[k], ids, (unsigned)(ndev - ld->ndev));
      for (unsigned i = 0; i < got; i++)
        ld->dev_nodes[ld->ndev++] = starpu_worker_get_memory_node((unsigned)ids[i]);
    }
    free(ids);
  }

  for (int i = 0; i < ld->nslots; i++) {
    const int partial = i >= nfull;
    const int rows = partial ? src->partial_rows : src->rows;
    int rc = slot_init(&ld->slots[i], src, rows, nmicro, partial);
    if (rc < 0) goto fail; /* slot i is freed with the others */
  }

  e = pthread_create(&ld->thread, NULL, loader_main, ld);
  if (e) {
    tg_fail(e, "loader: pthread_create: %s", strerror(e));
    goto fail;
  }
  ld->thread_started = 1;
  return ld;

fail:
  /* The message set by tg_fail above stays: freeing sets none. */
  loader_free(ld);
  return NULL;
}

int tg_loader_batches_per_epoch(const tg_loader *ld) {
  return ld ? ld->src.bpe : 0;
}

int tg_loader_next(tg_loader *ld, tg_batch *out) {
  if (!ld || !out) return tg_fail(EINVAL, "tg_loader_next: NULL argument");
  memset(out, 0, sizeof *out);
  int e = pthread_mutex_lock(&ld->mu);
  if (e) return tg_fail(e, "loader: pthread_mutex_lock: %s", strerror(e));
  /* The batch handed out last time goes back to the loader: the caller has
   * submitted its tasks, and the loader's W acquire waits for them. */
  if (ld->inuse >= 0) {
    ld->slots[ld->inuse].state = SLOT_FREE;
    ld->inuse = -1;
    broadcast(ld);
  }
  int s = -1;
  for (;;) {
    for (int i = 0; i < ld->nslots; i++)
      if (ld->slots[i].state == SLOT_READY &&
          ld->slots[i].seq == ld->take_seq) {
        s = i;
        break;
      }
    if (s >= 0 || ld->err || ld->stop) break;
    e = pthread_cond_wait(&ld->cv, &ld->mu);
    if (e) {
      unlock(ld);
      return tg_fail(e, "loader: pthread_cond_wait: %s", strerror(e));
    }
  }
  if (s < 0) {
    int rc = ld->err ? ld->err : -ESHUTDOWN;
    char msg[512];
    snprintf(msg, sizeof msg, "%s",
             ld->err ? ld->errmsg : "loader: stopped");
    unlock(ld);
    return tg_fail(-rc, "%s", msg);
  }
  tg_slot *sl = &ld->slots[s];
  sl->state = SLOT_INUSE;
  ld->inuse = s;
  ld->nready--;
  ld->take_seq++;
  broadcast(ld);
  unlock(ld);

  out->rows = sl->rows;
  out->nmicro = sl->nchild;
  out->x = sl->xc;
  out->y = sl->yc;
  return 0;
}

void tg_loader_destroy(tg_loader *ld) {
  if (!ld) return;
  if (ld->thread_started) {
    if (lock(ld) == 0) {
      ld->stop = 1;
      broadcast(ld);
      unlock(ld);
    }
    int e = pthread_join(ld->thread, NULL);
    if (e) fprintf(stderr, "taskgrad loader: pthread_join: %s\n", strerror(e));
    ld->thread_started = 0;
  }
  /* slot_free waits (W acquire) for the tasks still reading each child,
   * unpartitions and frees the tensors. */
  loader_free(ld);
}

/* ---- data-set filler (tg_loader_create) --------------------------------- */

typedef struct dataset_ctx {
  const tg_dataset *ds;
  int batch;              /* global batch (the permutation's stride) */
  int shuffle;
  uint64_t seed;
  int *perm;               /* current epoch's order of the samples */
  int shard;               /* this loader's part of each batch ... */
  int local;               /* ... of `local` rows (batch / nshards) */
  int partial_local;       /* rows of its part of the last, partial batch */
  int bpe;
} dataset_ctx;

static void dataset_begin_epoch(void *arg, long long epoch) {
  dataset_ctx *c = arg;
  make_perm(c->perm, c->ds->n, c->shuffle, c->seed, epoch);
}

static void dataset_fill(void *arg, int b, int r0, int nrows, void *xv,
                         size_t xld, int32_t *y, size_t yld) {
  const dataset_ctx *c = arg;
  const tg_dataset *ds = c->ds;
  const size_t features = (size_t)ds->features;
  const int part = c->partial_local > 0 && b == c->bpe - 1 ? c->partial_local : c->local;
  const int *order = c->perm + (size_t)b * (size_t)c->batch + (size_t)c->shard * part + r0;
  float *x = xv;
  for (int r = 0; r < nrows; r++) {
    memcpy(x + (size_t)r * xld, ds->x + (size_t)order[r] * features,
           features * sizeof(float));
    y[(size_t)r * yld] = ds->y[order[r]];
  }
}

static void dataset_free(void *arg) {
  dataset_ctx *c = arg;
  if (!c) return;
  free(c->perm);
  free(c);
}

tg_loader *tg_loader_create(const tg_dataset *ds, const tg_loader_config *cfg) {
  if (!ds || !cfg) {
    tg_fail(EINVAL, "tg_loader_create: %s is NULL", ds ? "config" : "dataset");
    return NULL;
  }
  if (ds->n <= 0 || ds->features <= 0 || !ds->x || !ds->y) {
    tg_fail(EINVAL, "tg_loader_create: empty data set (n = %d, features = "
            "%d)", ds->n, ds->features);
    return NULL;
  }
  if (cfg->batch < 1) {
    tg_fail(EINVAL, "loader: batch size %d must be >= 1", cfg->batch);
    return NULL;
  }
  const int nshards = cfg->nshards > 1 ? cfg->nshards : 1;
  if (nshards > 1 && (cfg->batch % nshards || cfg->shard < 0 || cfg->shard >= nshards)) {
    tg_fail(EINVAL, "loader: a batch of %d cannot be split into %d equal parts (part %d)",
            cfg->batch, nshards, cfg->shard);
    return NULL;
  }
  const int local = cfg->batch / nshards;
  if (cfg->nmicro < 1 || cfg->nmicro > local) {
    tg_fail(EINVAL, "loader: %d micro-batches must be between 1 and the "
            "batch size %d", cfg->nmicro, local);
    return NULL;
  }
  if (cfg->prefetch < 1 && check_prefetch(cfg->prefetch) < 0) return NULL;
  if (cfg->batch > ds->n) {
    tg_fail(EINVAL, "loader: batch size %d exceeds the %d samples of the "
            "data set", cfg->batch, ds->n);
    return NULL;
  }
  if (check_prefetch(cfg->prefetch) < 0) return NULL;
  if (cfg->start_batch < 0) {
    tg_fail(EINVAL, "loader: start batch %lld must be >= 0", cfg->start_batch);
    return NULL;
  }

  dataset_ctx *c = calloc(1, sizeof *c);
  int *perm = malloc((size_t)ds->n * sizeof *perm);
  if (!c || !perm) {
    free(c);
    free(perm);
    tg_fail(ENOMEM, "loader: out of memory");
    return NULL;
  }
  c->ds = ds;
  c->batch = cfg->batch;
  c->shuffle = cfg->shuffle;
  c->seed = cfg->seed;
  c->perm = perm;
  int partial = cfg->drop_last ? 0 : ds->n % cfg->batch;
  if (partial % nshards) partial = 0; /* cannot be shared evenly: skipped */
  c->shard = nshards > 1 ? cfg->shard : 0;
  c->local = local;
  c->partial_local = partial / nshards;
  c->bpe = ds->n / cfg->batch + (partial > 0 ? 1 : 0);

  loader_source src = {0};
  src.rows = local;
  src.partial_rows = c->partial_local;
  src.bpe = c->bpe;
  src.x_cols = ds->features;
  src.x_dtype = TG_F32;
  src.row_unit = 1;
  src.ctx = c;
  src.begin_epoch = dataset_begin_epoch;
  src.fill = dataset_fill;
  src.free_ctx = dataset_free;
  src.start_seq = cfg->start_batch;
  return loader_start(&src, cfg->nmicro, cfg->prefetch);
}

/* ---- token filler (tg_token_loader_create) ------------------------------ */

/* Sequential (llm.c's DataLoader without shards): batch b of an epoch starts
 * at token b*B*T, its sequence i at b*B*T + i*T; bpe = (ntokens-1) / (B*T)
 * is the number of starts p with p + B*T + 1 <= ntokens, so wrapping to 0
 * after bpe batches is exactly llm.c's "reset when the next batch would run
 * past the end".  Shuffled: window w is tokens w*T .. w*T + T, for w < nwin =
 * (ntokens-1)/T; an epoch is a permutation of the windows, B per batch, the
 * nwin % B left over dropped (a different set every epoch). */
typedef struct token_ctx {
  const uint16_t *tokens;
  int B, T;
  int shuffled;
  uint64_t seed;
  int nwin;                /* shuffled: windows */
  int *perm;               /* shuffled: current epoch's window order */
  int first;               /* first sequence of this loader's part */
} token_ctx;

static void token_begin_epoch(void *arg, long long epoch) {
  token_ctx *c = arg;
  if (c->shuffled) make_perm(c->perm, c->nwin, 1, c->seed, epoch);
}

static void token_fill(void *arg, int b, int r0, int nrows, void *xv,
                       size_t xld, int32_t *y, size_t yld) {
  const token_ctx *c = arg;
  const size_t T = (size_t)c->T;
  int32_t *x = xv;
  /* r0 and nrows are multiples of T (whole sequences, see slot_init) */
  for (int r = 0; r < nrows; r += c->T) {
    const size_t i = (size_t)c->first + (size_t)(r0 + r) / T; /* sequence in the batch */
    const size_t start =
        c->shuffled ? (size_t)c->perm[(size_t)b * (size_t)c->B + i] * T
                    : ((size_t)b * (size_t)c->B + i) * T;
    const uint16_t *tok = c->tokens + start;
    for (size_t t = 0; t < T; t++) {
      x[(size_t)(r + (int)t) * xld] = tok[t];
      y[(size_t)(r + (int)t) * yld] = tok[t + 1];
    }
  }
}

static void token_free(void *arg) {
  token_ctx *c = arg;
  if (!c) return;
  free(c->perm);
  free(c);
}

tg_loader *tg_token_loader_create(const uint16_t *tokens, size_t ntokens,
                                  const tg_token_loader_config *cfg) {
  if (!tokens || !cfg) {
    tg_fail(EINVAL, "tg_token_loader_create: %s is NULL",
            tokens ? "config" : "tokens");
    return NULL;
  }
  if (cfg->B < 1 || cfg->T < 1) {
    tg_fail(EINVAL, "token loader: B = %d and T = %d must be >= 1", cfg->B,
            cfg->T);
    return NULL;
  }
  if ((long long)cfg->B * cfg->T > INT_MAX / 4) {
    tg_fail(EINVAL, "token loader: a batch of B*T = %lld tokens is too large",
            (long long)cfg->B * cfg->T);
    return NULL;
  }
  const int nshards = cfg->nshards > 1 ? cfg->nshards : 1;
  if (nshards > 1 && (cfg->B % nshards || cfg->shard < 0 || cfg->shard >= nshards)) {
    tg_fail(EINVAL, "token loader: B = %d sequences cannot be split into %d equal parts "
            "(part %d)", cfg->B, nshards, cfg->shard);
    return NULL;
  }
  const int Blocal = cfg->B / nshards;
  if (cfg->nmicro < 1 || cfg->nmicro > Blocal || Blocal % cfg->nmicro != 0) {
    tg_fail(EINVAL, "token loader: %d micro-batches must divide B = %d (each "
            "micro-batch holds whole sequences)", cfg->nmicro, Blocal);
    return NULL;
  }
  if (check_prefetch(cfg->prefetch) < 0) return NULL;
  if (cfg->start_batch < 0) {
    tg_fail(EINVAL, "token loader: start batch %lld must be >= 0",
            cfg->start_batch);
    return NULL;
  }
  const size_t BT = (size_t)cfg->B * (size_t)cfg->T;
  if (ntokens < BT + 1) {
    tg_fail(EINVAL, "token loader: %zu tokens are too few for one batch of "
            "B = %d sequences of T = %d (needs B*T+1 = %zu)", ntokens, cfg->B,
            cfg->T, BT + 1);
    return NULL;
  }
  const size_t nwin = (ntokens - 1) / (size_t)cfg->T;
  const size_t bpe = cfg->shuffled ? nwin / (size_t)cfg->B : (ntokens - 1) / BT;
  if (nwin > INT_MAX || bpe > INT_MAX) {
    tg_fail(EINVAL, "token loader: %zu tokens are too many for T = %d (at "
            "most %d windows)", ntokens, cfg->T, INT_MAX);
    return NULL;
  }

  token_ctx *c = calloc(1, sizeof *c);
  int *perm = cfg->shuffled ? malloc(nwin * sizeof *perm) : NULL;
  if (!c || (cfg->shuffled && !perm)) {
    free(c);
    free(perm);
    tg_fail(ENOMEM, "token loader: out of memory");
    return NULL;
  }
  c->tokens = tokens;
  c->B = cfg->B;
  c->T = cfg->T;
  c->shuffled = cfg->shuffled != 0;
  c->seed = cfg->seed;
  c->nwin = (int)nwin;
  c->perm = perm;
  c->first = nshards > 1 ? cfg->shard * Blocal : 0;

  loader_source src = {0};
  src.rows = Blocal * cfg->T;
  src.partial_rows = 0;
  src.bpe = (int)bpe;
  src.x_cols = 1;
  src.x_dtype = TG_I32;
  src.row_unit = cfg->T;
  src.ctx = c;
  src.begin_epoch = token_begin_epoch;
  src.fill = token_fill;
  src.free_ctx = token_free;
  src.start_seq = cfg->start_batch;
  return loader_start(&src, cfg->nmicro, cfg->prefetch);
}
