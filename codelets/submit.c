/*
 * The last step of every submission: a task built and checked
 * (codelets/common.c's tg_submit, routed by fuse.c's tg_fuse_submit) goes
 * to StarPU.  And the running task as a codelet function sees it (a fused
 * task's part, else StarPU's).  A file of its own so that fuse.c and
 * common.c both call it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codelet_common.h"
#include "hooks.h"

int tg_task_set_buffers(struct starpu_task *task, int n, const starpu_data_handle_t *h,
                        const enum starpu_data_access_mode *modes) {
  task->nbuffers = n;
  if (n > STARPU_NMAXBUFS) {
    /* StarPU frees these arrays with the task */
    task->dyn_handles = malloc(n * sizeof *task->dyn_handles);
    task->dyn_modes = malloc(n * sizeof *task->dyn_modes);
    if (!task->dyn_handles || !task->dyn_modes) return -ENOMEM;
  }
  for (int i = 0; i < n; i++) {
    STARPU_TASK_SET_HANDLE(task, h[i], i);
    STARPU_TASK_SET_MODE(task, modes[i], i);
  }
  return 0;
}

int tg_task_submit_built(struct starpu_task *task) {
  const char *op = task->cl->name;
  int pinned = task->execute_on_a_specific_worker;
  tg_run_submit_hooks(task); /* the plugins' (src/hooks.h) */
  int rc = starpu_task_submit(task);
  if (rc != 0) {
    /* the task was not submitted: StarPU did not take ownership */
    task->destroy = 0;
    starpu_task_destroy(task);
    if (rc == -ENODEV)
      return tg_fail(ENODEV, "%s: no worker can run this task (no %s implementation for the workers at hand)",
                     op, pinned ? "matching" : "suitable");
    return tg_fail(rc < 0 ? -rc : EIO, "%s: starpu_task_submit failed (%s)", op,
                   strerror(rc < 0 ? -rc : EIO));
  }
  return 0;
}

/* the task whose part a fused task is running (codelets/fuse.c), else
 * StarPU's */
static __thread struct starpu_task *tg_current_part;

struct starpu_task *tg_task_current(void) {
  return tg_current_part ? tg_current_part : starpu_task_get_current();
}

void tg_task_current_set(struct starpu_task *part) { tg_current_part = part; }
