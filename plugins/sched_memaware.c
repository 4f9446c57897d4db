/*
 * "tg-memaware": priority order, memory-frugal choices under memory pressure.
 *
 * Design.  The same central ready queue as tg-critpath (plugins/
 * sched_critpath.c): the ready tasks sorted by priority, highest first, FIFO
 * among equals; a worker only gets a task it can execute (the first
 * implementation for its architecture, recorded with
 * starpu_task_set_implementation), and idle workers are woken or un-marked
 * on push the same way.
 *
 * When a worker asks for work it looks at its memory node:
 *   - total = starpu_memory_get_total(node), available =
 *     starpu_memory_get_available(node).  When total is unknown (<= 0) or
 *     available >= pressure * total (pressure = 0.10 by default, the
 *     TG_MEMAWARE_PRESSURE environment variable, a fraction in [0, 1], read
 *     at start), the node is not under pressure and the worker takes the
 *     highest-priority task it can execute: the policy is then a plain
 *     priority policy.  (StarPU 1.3 knows the size of main memory even
 *     without STARPU_LIMIT_CPU_MEM, and counts only what StarPU itself
 *     allocated there, so on CPUs pressure mostly arises under a limit.)
 *   - under pressure, among the first TG_MA_WINDOW ready tasks it can
 *     execute (priority order, whatever their priority), it takes the one
 *     that needs the fewest new bytes on the node: the summed size of its
 *     buffers (any access mode: a written temporary or a reduction buffer is
 *     allocated too) that are neither on the node nor being brought there
 *     (starpu_data_is_on_node); ties go to the higher priority.
 *
 * The heuristic, honestly: StarPU does not tell a scheduler which task
 * "frees" memory.  An activation is a temporary handle that StarPU frees
 * when the last task using it ends (taskgrad unregisters temporaries with
 * starpu_data_unregister_submit).  The tasks that allocate nothing new are
 * those whose inputs and outputs are already resident: typically consumers
 * of activations (the backward tasks that are the last readers of a forward
 * activation, gradient updates), whose completion lets the activation go.
 * Tasks that start new forward work allocate their outputs and are delayed
 * while memory is short.  This lowers peak footprint; it neither predicts
 * releases nor evicts data, and it can delay the critical path.
 *
 * Limits: as tg-critpath (one scheduling context, no parallel tasks,
 * priorities over [-100, 100] unless the application set the range).
 */
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "check.h"
#include "taskgrad/sched.h"

#define TG_MA_MIN_PRIO (-100)
#define TG_MA_MAX_PRIO 100
#define TG_MA_WINDOW 16
#define TG_MA_DEFAULT_PRESSURE 0.10

typedef struct tg_ma_data {
  starpu_pthread_mutex_t lock;
  struct starpu_task **q; /* ready tasks, priority descending */
  size_t n, cap;          /* n is read without the lock (atomically) */
  double pressure;        /* under pressure: available < pressure * total */
  unsigned char waiting[STARPU_NMAXWORKERS]; /* found nothing at last pop */
} tg_ma_data;

/* ---- sorted ready queue ------------------------------------------------- */

static void tg_ma_insert(tg_ma_data *d, struct starpu_task *task) {
  if (d->n == d->cap) {
    size_t cap = d->cap ? 2 * d->cap : 256;
    struct starpu_task **q = realloc(d->q, cap * sizeof *q);
    if (!q) TG_FATAL("tg-memaware: out of memory for the ready queue");
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

static struct starpu_task *tg_ma_remove(tg_ma_data *d, size_t i) {
  struct starpu_task *t = d->q[i];
  memmove(d->q + i, d->q + i + 1, (d->n - i - 1) * sizeof *d->q);
  __atomic_store_n(&d->n, d->n - 1, __ATOMIC_RELAXED);
  return t;
}

/* bytes `task` would newly need on `node`: its buffers (any mode) neither
 * there nor on their way there */
static size_t tg_ma_new_bytes(struct starpu_task *task, unsigned node) {
  size_t bytes = 0;
  unsigned nb = STARPU_TASK_GET_NBUFFERS(task);
  for (unsigned i = 0; i < nb; i++) {
    starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(task, i);
    if (!starpu_data_is_on_node(h, node)) bytes += starpu_data_get_size(h);
  }
  return bytes;
}

/* 1 when the free part of `node` is below the pressure threshold */
static int tg_ma_under_pressure(const tg_ma_data *d, unsigned node) {
  starpu_ssize_t total = starpu_memory_get_total(node);
  if (total <= 0) return 0; /* unknown or unlimited */
  starpu_ssize_t avail = starpu_memory_get_available(node);
  if (avail < 0) return 0;
  return (double)avail < d->pressure * (double)total;
}

/* under d->lock: the task worker w should run next, removed from the queue;
 * NULL when it can execute none of the ready tasks */
static struct starpu_task *tg_ma_choose(tg_ma_data *d, unsigned w) {
  unsigned node = starpu_worker_get_memory_node(w);
  int frugal = tg_ma_under_pressure(d, node);
  size_t best = 0, best_bytes = 0;
  unsigned best_impl = 0;
  int ncand = 0;
  for (size_t i = 0; i < d->n; i++) {
    struct starpu_task *t = d->q[i];
    unsigned impl;
    if (!starpu_worker_can_execute_task_first_impl(w, t, &impl)) continue;
    if (!frugal) { /* plain priority order */
      best = i;
      best_impl = impl;
      ncand = 1;
      break;
    }
    size_t bytes = tg_ma_new_bytes(t, node);
    if (ncand == 0 || bytes < best_bytes) {
      best = i;
      best_bytes = bytes;
      best_impl = impl;
    }
    ncand++;
    if (best_bytes == 0 || ncand >= TG_MA_WINDOW) break;
  }
  if (ncand == 0) return NULL;
  struct starpu_task *t = tg_ma_remove(d, best);
  starpu_task_set_implementation(t, best_impl);
  return t;
}

/* ---- policy methods ----------------------------------------------------- */

static void tg_ma_init(unsigned ctx) {
  tg_ma_data *d = calloc(1, sizeof *d);
  if (!d) TG_FATAL("tg-memaware: out of memory");
  STARPU_PTHREAD_MUTEX_INIT(&d->lock, NULL);
  if (!starpu_sched_ctx_min_priority_is_set(ctx))
    starpu_sched_ctx_set_min_priority(ctx, TG_MA_MIN_PRIO);
  if (!starpu_sched_ctx_max_priority_is_set(ctx))
    starpu_sched_ctx_set_max_priority(ctx, TG_MA_MAX_PRIO);
  d->pressure = TG_MA_DEFAULT_PRESSURE;
  const char *env = getenv("TG_MEMAWARE_PRESSURE");
  if (env && *env) {
    char *end;
    double p = strtod(env, &end);
    if (*end == '\0' && p >= 0 && p <= 1)
      d->pressure = p;
    else
      fprintf(stderr, "taskgrad: tg-memaware: ignoring TG_MEMAWARE_PRESSURE='%s' "
              "(not a fraction in [0, 1])\n", env);
  }
  starpu_sched_ctx_set_policy_data(ctx, d);
}

static void tg_ma_deinit(unsigned ctx) {
  tg_ma_data *d = starpu_sched_ctx_get_policy_data(ctx);
  if (d->n) fprintf(stderr, "taskgrad: tg-memaware: %zu ready tasks never ran\n", d->n);
  STARPU_PTHREAD_MUTEX_DESTROY(&d->lock);
  free(d->q);
  free(d);
  starpu_sched_ctx_set_policy_data(ctx, NULL);
}

static int tg_ma_push(struct starpu_task *task) {
  unsigned ctx = task->sched_ctx;
  tg_ma_data *d = starpu_sched_ctx_get_policy_data(ctx);
  char wake[STARPU_NMAXWORKERS] = {0};
  starpu_worker_relax_on();
  STARPU_PTHREAD_MUTEX_LOCK_SCHED(&d->lock);
  starpu_worker_relax_off();
  tg_ma_insert(d, task);
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

static struct starpu_task *tg_ma_pop(unsigned ctx) {
  tg_ma_data *d = starpu_sched_ctx_get_policy_data(ctx);
  unsigned w = (unsigned)starpu_worker_get_id_check();
  if (__atomic_load_n(&d->n, __ATOMIC_RELAXED) == 0) return NULL;
#ifdef STARPU_NON_BLOCKING_DRIVERS
  /* nothing for us at the last look, and no push for us since */
  if (__atomic_load_n(&d->waiting[w], __ATOMIC_RELAXED)) return NULL;
#endif
  starpu_worker_relax_on();
  STARPU_PTHREAD_MUTEX_LOCK_SCHED(&d->lock);
  starpu_worker_relax_off();
  struct starpu_task *t = tg_ma_choose(d, w);
  if (!t) __atomic_store_n(&d->waiting[w], 1, __ATOMIC_RELAXED);
  STARPU_PTHREAD_MUTEX_UNLOCK_SCHED(&d->lock);
  return t;
}

struct starpu_sched_policy tg_sched_memaware_policy = {
    .init_sched = tg_ma_init,
    .deinit_sched = tg_ma_deinit,
    .push_task = tg_ma_push,
    .pop_task = tg_ma_pop,
    .policy_name = "tg-memaware",
    .policy_description = "taskgrad: priority order; under memory pressure, the ready "
                          "task needing the least new memory on the node",
    .worker_type = STARPU_WORKER_LIST,
};
