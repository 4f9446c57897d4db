/*
 * Runtime extension points for the layers above (plugins, tests).
 *
 * Submission hooks: the codelet layer runs tg_run_submit_hooks on every
 * task just before submitting it, so that a plugin (statistics, traces)
 * can attach callbacks without the lower layers knowing about it.  The
 * plugins register and remove their hooks here, in the base, so that
 * neither the codelets nor the base name a plugin.
 */
#ifndef TASKGRAD_HOOKS_H
#define TASKGRAD_HOOKS_H

#include <starpu.h>

typedef void (*tg_submit_hook_fn)(struct starpu_task *task);

/* the most hooks registered at once */
#define TG_MAX_SUBMIT_HOOKS 8

/* Registers fn (once: registering it again does nothing).  0, or -ENOSPC
 * with a message when TG_MAX_SUBMIT_HOOKS are registered already. */
int tg_add_submit_hook(tg_submit_hook_fn fn);
/* Removes fn (nothing when it is not registered). */
void tg_remove_submit_hook(tg_submit_hook_fn fn);
/* Calls every registered hook on task (src/hooks.c; codelets/common.c). */
void tg_run_submit_hooks(struct starpu_task *task);

/* Runs fn in tg_shutdown(), after the last task and before starpu_shutdown
 * (e.g. to unregister data that layers above the runtime registered). */
void tg_at_shutdown(void (*fn)(void));

#endif
