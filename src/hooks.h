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

#include "taskgrad/runtime.h"

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

/* Start-up hooks: tg_init runs each registered fn, in the order of
 * registration, with the configuration it was given (gaps not yet filled),
 * after checking the environment and before starting StarPU (no worker
 * runs yet: a hook may time kernels on this thread).  A negative return
 * (with tg_fail's message) makes tg_init fail with it.  The codelets layer
 * registers the GEMM back end's choice this way, from a constructor
 * (codelets/gemm_choice.c), so every program that calls tg_init gets it. */
typedef int (*tg_init_hook_fn)(const tg_runtime_config *cfg);
/* Registers fn (once); TG_FATAL past 8 hooks. */
void tg_at_init(tg_init_hook_fn fn);

#endif
