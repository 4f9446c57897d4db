/*
 * "tg-memaware": priority order, memory-frugal choices under memory pressure.
 *
 * Design.  The central ready queue of plugins/sched_central.h (shared with
 * tg-critpath): the ready tasks sorted by priority, highest first, FIFO
 * among equals; a worker only gets a task it can execute.
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
 * Limits: those of plugins/sched_central.h.
 */
#include <stdio.h>
#include <stdlib.h>

#include <starpu.h>

#include "check.h"
#include "sched_central.h"
#include "taskgrad/sched.h"

#define TG_MA_WINDOW 16
#define TG_MA_DEFAULT_PRESSURE 0.10

/* 1 when the free part of `node` is below the pressure threshold */
static int tg_ma_under_pressure(double pressure, unsigned node) {
  starpu_ssize_t total = starpu_memory_get_total(node);
  if (total <= 0) return 0; /* unknown or unlimited */
  starpu_ssize_t avail = starpu_memory_get_available(node);
  if (avail < 0) return 0;
  return (double)avail < pressure * (double)total;
}

static long tg_ma_choose(tg_central *q, unsigned w, unsigned *best_impl) {
  unsigned node = starpu_worker_get_memory_node(w);
  int frugal = tg_ma_under_pressure(*(const double *)q->extra, node);
  size_t best_bytes = 0;
  long best = -1;
  int ncand = 0;
  for (size_t i = 0; i < q->n; i++) {
    struct starpu_task *t = q->tasks[i];
    unsigned impl;
    if (!starpu_worker_can_execute_task_first_impl(w, t, &impl)) continue;
    if (!frugal) { /* plain priority order */
      *best_impl = impl;
      return (long)i;
    }
    /* any access mode: a written temporary or a reduction buffer is
     * allocated too */
    size_t bytes = tg_central_missing_bytes(t, node, 0);
    if (ncand == 0 || bytes < best_bytes) {
      best = (long)i;
      best_bytes = bytes;
      *best_impl = impl;
    }
    ncand++;
    if (best_bytes == 0 || ncand >= TG_MA_WINDOW) break;
  }
  return best;
}

static void tg_ma_init(unsigned ctx) {
  double *pressure = malloc(sizeof *pressure);
  if (!pressure) TG_FATAL("tg-memaware: out of memory");
  *pressure = TG_MA_DEFAULT_PRESSURE;
  const char *env = getenv("TG_MEMAWARE_PRESSURE");
  if (env && *env) {
    char *end;
    double p = strtod(env, &end);
    if (*end == '\0' && p >= 0 && p <= 1)
      *pressure = p;
    else
      fprintf(stderr, "taskgrad: tg-memaware: ignoring TG_MEMAWARE_PRESSURE='%s' "
              "(not a fraction in [0, 1])\n", env);
  }
  tg_central_init(ctx, "tg-memaware", tg_ma_choose, pressure);
}

struct starpu_sched_policy tg_sched_memaware_policy = {
    .init_sched = tg_ma_init,
    .deinit_sched = tg_central_deinit,
    .push_task = tg_central_push,
    .pop_task = tg_central_pop,
    .policy_name = "tg-memaware",
    .policy_description = "taskgrad: priority order; under memory pressure, the ready "
                          "task needing the least new memory on the node",
    .worker_type = STARPU_WORKER_LIST,
};
