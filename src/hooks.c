/*
 * Submission hooks (src/hooks.h).
 *
 * Design note: a fixed table of slots, each read and written atomically,
 * rather than a list under a lock: every submitted task runs the hooks, a
 * plugin adds or removes its hook rarely (at the start and end of its
 * window), and a task submitted by another thread (the data loader's) while
 * a hook is added or removed sees either the old or the new slot, both
 * valid functions or NULL.  Slots keep their order, so hooks run in the
 * order they were added unless a removal left a hole that a later one fills.
 */
#include <errno.h>

#include "check.h"
#include "hooks.h"

static tg_submit_hook_fn tg_hooks[TG_MAX_SUBMIT_HOOKS];

int tg_add_submit_hook(tg_submit_hook_fn fn) {
  for (int i = 0; i < TG_MAX_SUBMIT_HOOKS; i++)
    if (__atomic_load_n(&tg_hooks[i], __ATOMIC_ACQUIRE) == fn) return 0;
  for (int i = 0; i < TG_MAX_SUBMIT_HOOKS; i++) {
    tg_submit_hook_fn empty = NULL;
    if (__atomic_compare_exchange_n(&tg_hooks[i], &empty, fn, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return 0;
  }
  return tg_fail(ENOSPC, "tg_add_submit_hook: %d hooks registered already",
                 TG_MAX_SUBMIT_HOOKS);
}

void tg_remove_submit_hook(tg_submit_hook_fn fn) {
  for (int i = 0; i < TG_MAX_SUBMIT_HOOKS; i++) {
    tg_submit_hook_fn expected = fn;
    __atomic_compare_exchange_n(&tg_hooks[i], &expected, NULL, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
  }
}

void tg_run_submit_hooks(struct starpu_task *task) {
  for (int i = 0; i < TG_MAX_SUBMIT_HOOKS; i++) {
    tg_submit_hook_fn fn = __atomic_load_n(&tg_hooks[i], __ATOMIC_ACQUIRE);
    if (fn) fn(task);
  }
}
