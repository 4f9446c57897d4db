/*
 * "tg-critpath": critical path first, then data locality.
 *
 * Design.  The central ready queue of plugins/sched_central.h: the ready
 * tasks sorted by priority, highest first, first-come first-served among
 * equal priorities (the graph builders give tasks near the start of
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
 * The queue, wake-ups and limits are those of plugins/sched_central.h.
 *
 * This file also holds the small registry of taskgrad's policies
 * (include/taskgrad/sched.h).
 */
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "sched_central.h"
#include "taskgrad/sched.h"

#define TG_CP_WINDOW 8

static long tg_cp_choose(tg_central *q, unsigned w, unsigned *best_impl) {
  unsigned node = starpu_worker_get_memory_node(w);
  size_t best_missing = 0;
  long best = -1;
  int ncand = 0, top = 0;
  for (size_t i = 0; i < q->n; i++) {
    struct starpu_task *t = q->tasks[i];
    if (ncand > 0 && t->priority < top - q->slack) break;
    unsigned impl;
    if (!starpu_worker_can_execute_task_first_impl(w, t, &impl)) continue;
    size_t missing = tg_central_missing_bytes(t, node, 1);
    if (ncand == 0) top = t->priority;
    if (ncand == 0 || missing < best_missing) {
      best = (long)i;
      best_missing = missing;
      *best_impl = impl;
    }
    ncand++;
    if (best_missing == 0 || ncand >= TG_CP_WINDOW) break;
  }
  return best;
}

static void tg_cp_init(unsigned ctx) { tg_central_init(ctx, "tg-critpath", tg_cp_choose, NULL); }

struct starpu_sched_policy tg_sched_critpath_policy = {
    .init_sched = tg_cp_init,
    .deinit_sched = tg_central_deinit,
    .push_task = tg_central_push,
    .pop_task = tg_central_pop,
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

struct starpu_sched_policy *tg_sched_policy_requested(const char *name) {
  return tg_sched_policy_find(name ? name : getenv("STARPU_SCHED"));
}

#if TG_STARPU_AT_LEAST(1, 4)
/* StarPU 1.4 finds policies by name in the library that STARPU_SCHED_LIB
 * names, through these two functions (dlsym), which 1.3 lacks: any StarPU
 * 1.4 program can then use ours without taskgrad's tg_init,
 *   STARPU_SCHED_LIB=libtaskgrad.so STARPU_SCHED=tg-critpath ./app
 * (STARPU_SCHED=help lists them too). */
static struct starpu_sched_policy *tg_sched_all[] = {&tg_sched_critpath_policy,
                                                     &tg_sched_memaware_policy, NULL};

struct starpu_sched_policy *starpu_get_sched_lib_policy(const char *name) {
  return tg_sched_policy_find(name);
}

struct starpu_sched_policy **starpu_get_sched_lib_policies(void) { return tg_sched_all; }
#endif
