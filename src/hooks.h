/*
 * Runtime extension points used by plugins (layer 4).  The codelet layer
 * calls tg_submit_hook on every task just before submitting it, when set, so
 * that a plugin can attach callbacks (statistics, traces) without the lower
 * layers knowing about it.
 */
#ifndef TASKGRAD_HOOKS_H
#define TASKGRAD_HOOKS_H

#include <starpu.h>

extern void (*tg_submit_hook)(struct starpu_task *task);

/* Runs fn in tg_shutdown(), after the last task and before starpu_shutdown
 * (e.g. to unregister data that layers above the runtime registered). */
void tg_at_shutdown(void (*fn)(void));

#endif
