/*
 * "tg-critpath": critical path first, then data locality.
 *
 * Design.  One central ready queue per scheduling context: an array of the
 * ready tasks sorted by priority, highest first, first-come first-served
 * among equal priorities (the graph builders give tasks near the start of
 * the critical path the higher priorities, see tg_priority()).  A worker
 * that asks for work scans the queue from the top:
 *   - tasks it cannot execute (no implementation for its architecture) are
 *     skipped, so a task only ever goes to a worker that can run it; the
 *     implementation found is recorded with starpu_task_set_implementation;
 *   - the first task it can execute sets the top priority P; the candidates
 *     are that task and the next executable ones whose priority is at least
 *     P - slack (slack = 1/16 of the context's priority range), at most
 *     TG_CP_WINDOW of them;
 *   - among the candidates it takes the one with the fewest bytes of input
 *     (buffers read: R or RW) missing from its memory node
 *     (starpu_data_is_on_node, which also counts transfers already under
 *     way), ties going to the higher priority / earlier task.
 * With CPU workers only every buffer lives in main memory, so this is exactly
 * priority order; with GPUs a worker prefers, among near-critical tasks, one
 * whose inputs it already holds.  When nothing within the window fits, the
 * worker takes whatever it can execute further down: the queue is global, so
 * "stealing" from the pool is implicit.
 *
 * Wake-ups follow StarPU's eager policy: with non-blocking drivers (Debian's
 * build) an idle worker polls pop_task; one that found nothing it can execute
 * marks itself waiting and does not take the lock again until a push of a
 * task it can execute clears the mark; with blocking drivers a push wakes a
 * worker that can execute the task.
 *
 * Limits: one scheduling context (the per-context task counters of StarPU's
 * multi-context support are not maintained); no parallel (combined-worker)
 * tasks.  Priorities range over [-100, 100] unless the application set the
 * context's range.
 *
 * This file also holds the small registry of taskgrad's policies
 * (include/taskgrad/sched.h).
 */
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "check.h"
#include "taskgrad/sched.h"

#define TG_CP_MIN_PRIO (-100)
#define TG_CP_MAX_PRIO 100
#define TG_CP_WINDOW 8

typedef struct tg_cp_data {
  starpu_pthread_mutex_t lock;
  struct starpu_task **q; /* ready tasks, priority descending */
  size_t n, cap;          /* n is read without the lock (atomically) */
  int slack;
  unsigned char waiting[STARPU_NMAXWORKERS]; /* found nothing at last pop */
} tg_cp_data;

/* ---- sorted ready queue ------------------------------------------------- */

static void tg_cp_insert(tg_cp_data *d, struct starpu_task *task) {
  if (d->n == d->cap) {
    size_t cap = d->cap ? 2 * d->cap : 256;
    struct starpu_task **q = realloc(d->q, cap * sizeof *q);
    if (!q) TG_FATAL("tg-critpath: out of memory for the ready queue");
    d->q = q;
    d->cap = cap;
  }
  /* after every task of priority >= task's: FIFO among equals */
  size_t lo = 0, hi = d->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (d->q[mid]->priority >= task->priority)
      lo = mid + 1;
    else
      hi = mid;
  }
  memmove(d->q + lo + 1, d->q + lo, (d->n - lo) * sizeof *d->q);
  d->q[lo] = task;
  __atomic_store_n(&d->n, d->n + 1, __ATOMIC_RELAXED);
}

static struct starpu_task *tg_cp_remove(tg_cp_data *d, size_t i) {
  struct starpu_task *t = d->q[i];
  memmove(d->q + i, d->q + i + 1, (d->n - i - 1) * sizeof *d->q);
  __atomic_store_n(&d->n, d->n - 1, __ATOMIC_RELAXED);
  return t;
}

/* bytes of the buffers `task` reads that are neither on `node` nor on their
 * way there */
static size_t tg_cp_missing_input(struct starpu_task *task, unsigned node) {
  size_t bytes = 0;
  unsigned nb = STARPU_TASK_GET_NBUFFERS(task);
  for (unsigned i = 0; i < nb; i++) {
    if (!(STARPU_TASK_GET_MODE(task, i) & STARPU_R)) continue;
    starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(task, i);
    if (!starpu_data_is_on_node(h, node)) bytes += starpu_data_get_size(h);
  }
  return bytes;
}

/* under d->lock: the task worker w should run next, removed from the queue;
 * NULL when it can execute none of the ready tasks */
static struct starpu_task *tg_cp_choose(tg_cp_data *d, unsigned w) {
  unsigned node = starpu_worker_get_memory_node(w);
  size_t best = 0, best_missing = 0;
  unsigned best_impl = 0;
  int ncand = 0, top = 0;
  for (size_t i = 0; i < d->n; i++) {
    struct starpu_task *t = d->q[i];
    if (ncand > 0 && t->priority < top - d->slack) break;
    unsigned impl;
    if (!starpu_worker_can_execute_task_first_impl(w, t, &impl)) continue;
    size_t missing = tg_cp_missing_input(t, node);
    if (ncand == 0) top = t->priority;
    if (ncand == 0 || missing < best_missing) {
      best = i;
      best_missing = missing;
      best_impl = impl;
    }
    ncand++;
    if (best_missing == 0 || ncand >= TG_CP_WINDOW) break;
  }
  if (ncand == 0) return NULL;
  struct starpu_task *t = tg_cp_remove(d, best);
  starpu_task_set_implementation(t, best_impl);
  return t;
}

/* ---- policy methods ----------------------------------------------------- */

static void tg_cp_init(unsigned ctx) {
  tg_cp_data *d = calloc(1, sizeof *d);
  if (!d) TG_FATAL("tg-critpath: out of memory");
  STARPU_PTHREAD_MUTEX_INIT(&d->lock, NULL);
  if (!starpu_sched_ctx_min_priority_is_set(ctx))
    starpu_sched_ctx_set_min_priority(ctx, TG_CP_MIN_PRIO);
  if (!starpu_sched_ctx_max_priority_is_set(ctx))
    starpu_sched_ctx_set_max_priority(ctx, TG_CP_MAX_PRIO);
  int range = starpu_sched_ctx_get_max_priority(ctx) - starpu_sched_ctx_get_min_priority(ctx);
  d->slack = range > 0 ? range / 16 : 0;
  starpu_sched_ctx_set_policy_data(ctx, d);
}

static void tg_cp_deinit(unsigned ctx) {
  tg_cp_data *d = starpu_sched_ctx_get_policy_data(ctx);
  if (d->n) fprintf(stderr, "taskgrad: tg-critpath: %zu ready tasks never ran\n", d->n);
  STARPU_PTHREAD_MUTEX_DESTROY(&d->lock);
  free(d->q);
  free(d);
  starpu_sched_ctx_set_policy_data(ctx, NULL);
}

static int tg_cp_push(struct starpu_task *task) {
  unsigned ctx = task->sched_ctx;
  tg_cp_data *d = starpu_sched_ctx_get_policy_data(ctx);
  char wake[STARPU_NMAXWORKERS] = {0};
  starpu_worker_relax_on();
  STARPU_PTHREAD_MUTEX_LOCK_SCHED(&d->lock);
  starpu_worker_relax_off();
  tg_cp_insert(d, task);
  starpu_push_task_end(task);
  struct starpu_worker_collection *workers = starpu_sched_ctx_get_worker_collection(ctx);
  struct starpu_sched_ctx_iterator it;
  workers->init_iterator(workers, &it);
  while (workers->has_next(workers, &it)) {
    unsigned w = (unsigned)workers->get_next(workers, &it);
#ifdef STARPU_NON_BLOCKING_DRIVERS
    if (!__atomic_load_n(&d->waiting[w], __ATOMIC_RELAXED)) continue;
#endif
    if (starpu_worker_can_execute_task_first_impl(w, task, NULL)) {
      __atomic_store_n(&d->waiting[w], 0, __ATOMIC_RELAXED);
      wake[w] = 1;
    }
  }
  STARPU_PTHREAD_MUTEX_UNLOCK_SCHED(&d->lock);
  /* an idle worker that can run it: wake one (polling workers have had
   * their waiting mark cleared above, which is what they look at) */
  for (unsigned w = 0; w < STARPU_NMAXWORKERS; w++)
    if (wake[w] && starpu_wake_worker_relax_light((int)w)) break;
  return 0;
}

static struct starpu_task *tg_cp_pop(unsigned ctx) {
  tg_cp_data *d = starpu_sched_ctx_get_policy_data(ctx);
  unsigned w = (unsigned)starpu_worker_get_id_check();
  if (__atomic_load_n(&d->n, __ATOMIC_RELAXED) == 0) return NULL;
#ifdef STARPU_NON_BLOCKING_DRIVERS
  /* nothing for us at the last look, and no push for us since */
  if (__atomic_load_n(&d->waiting[w], __ATOMIC_RELAXED)) return NULL;
#endif
  starpu_worker_relax_on();
  STARPU_PTHREAD_MUTEX_LOCK_SCHED(&d->lock);
  starpu_worker_relax_off();
  struct starpu_task *t = tg_cp_choose(d, w);
  if (!t) __atomic_store_n(&d->waiting[w], 1, __ATOMIC_RELAXED);
  STARPU_PTHREAD_MUTEX_UNLOCK_SCHED(&d->lock);
  return t;
}

struct starpu_sched_policy tg_sched_critpath_policy = {
    .init_sched = tg_cp_init,
    .deinit_sched = tg_cp_deinit,
    .push_task = tg_cp_push,
    .pop_task = tg_cp_pop,
    .policy_name = "tg-critpath",
    .policy_description = "taskgrad: priority (critical path) order, input locality "
                          "among the top-priority ready tasks",
    .worker_type = STARPU_WORKER_LIST,
};

/* ---- registry ----------------------------------------------------------- */

static const char *const tg_sched_names[] = {"tg-critpath", "tg-memaware", NULL};

const char *const *tg_sched_policy_names(void) { return tg_sched_names; }

struct starpu_sched_policy *tg_sched_policy_find(const char *name) {
  if (!name) return NULL;
  if (strcmp(name, "tg-critpath") == 0) return &tg_sched_critpath_policy;
  if (strcmp(name, "tg-memaware") == 0) return &tg_sched_memaware_policy;
  return NULL;
}
