/*
 * The perfmodel footprint of every taskgrad task (codelet_common.h): the
 * arguments' `shape` key, the 16-bit storage of its buffers and StarPU's
 * footprint of their sizes.  A file of its own: the fused codelet
 * (fuse.c) footprints its parts with it, and common.c submits through
 * fuse.c.
 */
#include <string.h>

#include "codelet_common.h"

uint32_t tg_footprint(struct starpu_task *task) {
  uint32_t key = 0;
  if (task->cl_arg && task->cl_arg_size >= sizeof key)
    memcpy(&key, task->cl_arg, sizeof key);
  /* 16-bit storage costs conversions: its own history entries */
  int lowp = tg_lowp_of_task(task, NULL);
  if (lowp) key = starpu_hash_crc32c_be((uint32_t)lowp, key);
  return starpu_hash_crc32c_be(key, starpu_task_data_footprint(task));
}
