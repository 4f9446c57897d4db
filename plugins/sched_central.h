/*
 * The central ready queue shared by taskgrad's scheduling policies
 * (tg-critpath, tg-memaware): ready tasks sorted by priority, highest first,
 * FIFO among equals, under one lock; a worker only ever gets a task it can
 * execute (its first implementation for the worker, recorded on the task).
 * A policy supplies only its choice among the ready tasks.
 *
 * Wake-ups follow StarPU's eager policy: with non-blocking drivers (Debian's
 * build) an idle worker polls pop_task; one that found nothing it can
 * execute marks itself waiting and does not take the lock again until a
 * push of a task it can execute clears the mark; with blocking drivers a
 * push wakes a worker that can execute the task.
 *
 * Limits: one scheduling context (StarPU's per-context task counters of its
 * multi-context support are not maintained); no parallel (combined-worker)
 * tasks.  Priorities range over [-100, 100] unless the application set the
 * context's range.
 */
#ifndef TASKGRAD_SCHED_CENTRAL_H
#define TASKGRAD_SCHED_CENTRAL_H

#include <stddef.h>

#include <starpu.h>

typedef struct tg_central tg_central;

/* Under the queue's lock: the index of the task worker w should run next
 * and its implementation, or -1 when w can execute none of them. */
typedef long (*tg_central_choose)(tg_central *q, unsigned w, unsigned *impl);

struct tg_central {
  starpu_pthread_mutex_t lock;
  struct starpu_task **tasks; /* ready tasks, priority descending */
  size_t n, cap;              /* n is read without the lock (atomically) */
  int slack;                  /* 1/16 of the context's priority range */
  const char *name;           /* the policy, for messages */
  tg_central_choose choose;
  void *extra;                /* policy data, freed by tg_central_deinit */
  unsigned char waiting[STARPU_NMAXWORKERS]; /* found nothing at last pop */
};

void tg_central_init(unsigned ctx, const char *name, tg_central_choose choose,
                     void *extra);
void tg_central_deinit(unsigned ctx);
int tg_central_push(struct starpu_task *task);
struct starpu_task *tg_central_pop(unsigned ctx);

/* bytes of the buffers of `task` (read ones only when reads_only) that are
 * neither on `node` nor on their way there */
size_t tg_central_missing_bytes(struct starpu_task *task, unsigned node, int reads_only);

#endif
