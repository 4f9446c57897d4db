/*
 * taskgrad's own StarPU scheduling policies (plugins/sched_*.c).
 *
 *   tg-critpath   one central ready queue ordered by task priority (the
 *                 graph builders derive priorities from the critical path);
 *                 among the top-priority ready tasks a worker takes the one
 *                 whose input data already lies on its memory node.
 *   tg-memaware   priority order, but when the worker's memory node is
 *                 nearly full it takes the ready task that allocates the
 *                 least new memory there (see plugins/sched_memaware.c).
 *
 * StarPU does not know these names: the application (the CLI does) looks
 * the policy up and passes the object in tg_runtime_config.sched_policy,
 * which tg_init hands to starpu_init() (starpu_conf.sched_policy):
 *   rc.sched_policy = tg_sched_policy_requested(rc.sched);
 * Plugins layer: the runtime (base) never names these policies.  Both
 * policies support a single scheduling context (taskgrad's), any mix of CPU
 * and CUDA workers.
 * With StarPU 1.4, STARPU_SCHED_LIB=libtaskgrad.so also makes them known to
 * StarPU by name, in any program.
 */
#ifndef TASKGRAD_SCHED_H
#define TASKGRAD_SCHED_H

#include <starpu.h>

#include "taskgrad/starpu_version.h"

#ifdef __cplusplus
extern "C" {
#endif

extern struct starpu_sched_policy tg_sched_critpath_policy;
extern struct starpu_sched_policy tg_sched_memaware_policy;

/* The policy called `name`, or NULL when name is NULL or not one of ours. */
struct starpu_sched_policy *tg_sched_policy_find(const char *name);
/* The policy of ours named by `name` when given, else by STARPU_SCHED;
 * NULL when the name is not one of ours (then StarPU looks it up). */
struct starpu_sched_policy *tg_sched_policy_requested(const char *name);
/* Our policies' names, NULL-terminated. */
const char *const *tg_sched_policy_names(void);

#if TG_STARPU_AT_LEAST(1, 4)
/* The hooks of StarPU 1.4's STARPU_SCHED_LIB (plugins/sched_critpath.c):
 * libtaskgrad.so serves its policies to any StarPU 1.4 program. */
struct starpu_sched_policy *starpu_get_sched_lib_policy(const char *name);
struct starpu_sched_policy **starpu_get_sched_lib_policies(void);
#endif

#ifdef __cplusplus
}
#endif
#endif
