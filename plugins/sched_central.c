/*
 * The central ready queue of taskgrad's scheduling policies; see
 * sched_central.h.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sched_central.h"

#define TG_CENTRAL_MIN_PRIO (-100)
#define TG_CENTRAL_MAX_PRIO 100

static void tg_central_insert(tg_central *q, struct starpu_task *task) {
  if (q->n == q->cap) {
    size_t cap = q->cap ? 2 * q->cap : 256;
    struct starpu_task **grown = realloc(q->tasks, cap * sizeof *grown);
    if (!grown) TG_FATAL("%s: out of memory for the ready queue", q->name);
    q->tasks = grown;
    q->cap = cap;
  }
  /* after every task of priority >= task's: FIFO among equals */
  size_t lo = 0, hi = q->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (q->tasks[mid]->priority >= task->priority)
      lo = mid + 1;
    else
      hi = mid;
  }
  memmove(q->tasks + lo + 1, q->tasks + lo, (q->n - lo) * sizeof *q->tasks);
  q->tasks[lo] = task;
  __atomic_store_n(&q->n, q->n + 1, __ATOMIC_RELAXED);
}

static struct starpu_task *tg_central_remove(tg_central *q, size_t i) {
  struct starpu_task *t = q->tasks[i];
  memmove(q->tasks + i, q->tasks + i + 1, (q->n - i - 1) * sizeof *q->tasks);
  __atomic_store_n(&q->n, q->n - 1, __ATOMIC_RELAXED);
  return t;
}

size_t tg_central_missing_bytes(struct starpu_task *task, unsigned node, int reads_only) {
  size_t bytes = 0;
  unsigned nb = STARPU_TASK_GET_NBUFFERS(task);
  for (unsigned i = 0; i < nb; i++) {
    if (reads_only && !(STARPU_TASK_GET_MODE(task, i) & STARPU_R)) continue;
    starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(task, i);
    if (!starpu_data_is_on_node(h, node)) bytes += starpu_data_get_size(h);
  }
  return bytes;
}

void tg_central_init(unsigned ctx, const char *name, tg_central_choose choose, void *extra) {
  tg_central *q = calloc(1, sizeof *q);
  if (!q) TG_FATAL("%s: out of memory", name);
  STARPU_PTHREAD_MUTEX_INIT(&q->lock, NULL);
  if (!starpu_sched_ctx_min_priority_is_set(ctx))
    starpu_sched_ctx_set_min_priority(ctx, TG_CENTRAL_MIN_PRIO);
  if (!starpu_sched_ctx_max_priority_is_set(ctx))
    starpu_sched_ctx_set_max_priority(ctx, TG_CENTRAL_MAX_PRIO);
  int range = starpu_sched_ctx_get_max_priority(ctx) - starpu_sched_ctx_get_min_priority(ctx);
  q->slack = range > 0 ? range / 16 : 0;
  q->name = name;
  q->choose = choose;
  q->extra = extra;
  starpu_sched_ctx_set_policy_data(ctx, q);
}

void tg_central_deinit(unsigned ctx) {
  tg_central *q = starpu_sched_ctx_get_policy_data(ctx);
  if (q->n) fprintf(stderr, "taskgrad: %s: %zu ready tasks never ran\n", q->name, q->n);
  STARPU_PTHREAD_MUTEX_DESTROY(&q->lock);
  free(q->tasks);
  free(q->extra);
  free(q);
  starpu_sched_ctx_set_policy_data(ctx, NULL);
}

int tg_central_push(struct starpu_task *task) {
  unsigned ctx = task->sched_ctx;
  tg_central *q = starpu_sched_ctx_get_policy_data(ctx);
  char wake[STARPU_NMAXWORKERS] = {0};
  starpu_worker_relax_on();
  STARPU_PTHREAD_MUTEX_LOCK_SCHED(&q->lock);
  starpu_worker_relax_off();
  tg_central_insert(q, task);
  starpu_push_task_end(task);
  struct starpu_worker_collection *workers = starpu_sched_ctx_get_worker_collection(ctx);
  struct starpu_sched_ctx_iterator it;
  workers->init_iterator(workers, &it);
  while (workers->has_next(workers, &it)) {
    unsigned w = (unsigned)workers->get_next(workers, &it);
#ifdef STARPU_NON_BLOCKING_DRIVERS
    if (!__atomic_load_n(&q->waiting[w], __ATOMIC_RELAXED)) continue;
#endif
    if (starpu_worker_can_execute_task_first_impl(w, task, NULL)) {
      __atomic_store_n(&q->waiting[w], 0, __ATOMIC_RELAXED);
      wake[w] = 1;
    }
  }
  STARPU_PTHREAD_MUTEX_UNLOCK_SCHED(&q->lock);
  /* an idle worker that can run it: wake one (polling workers have had
   * their waiting mark cleared above, which is what they look at) */
  for (unsigned w = 0; w < STARPU_NMAXWORKERS; w++)
    if (wake[w] && starpu_wake_worker_relax_light((int)w)) break;
  return 0;
}

struct starpu_task *tg_central_pop(unsigned ctx) {
  tg_central *q = starpu_sched_ctx_get_policy_data(ctx);
  unsigned w = (unsigned)starpu_worker_get_id_check();
  if (__atomic_load_n(&q->n, __ATOMIC_RELAXED) == 0) return NULL;
#ifdef STARPU_NON_BLOCKING_DRIVERS
  /* nothing for us at the last look, and no push for us since */
  if (__atomic_load_n(&q->waiting[w], __ATOMIC_RELAXED)) return NULL;
#endif
  starpu_worker_relax_on();
  STARPU_PTHREAD_MUTEX_LOCK_SCHED(&q->lock);
  starpu_worker_relax_off();
  struct starpu_task *t = NULL;
  unsigned impl = 0;
  long i = q->choose(q, w, &impl);
  if (i >= 0) {
    t = tg_central_remove(q, (size_t)i);
    starpu_task_set_implementation(t, impl);
  } else {
    __atomic_store_n(&q->waiting[w], 1, __ATOMIC_RELAXED);
  }
  STARPU_PTHREAD_MUTEX_UNLOCK_SCHED(&q->lock);
  return t;
}
