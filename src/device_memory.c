/*
 * Device memory guard: refuse a task graph that StarPU 1.3 could livelock on.
 *
 * Design note
 * -----------
 * StarPU 1.3.10 allocates a buffer on a memory node in
 * _starpu_allocate_memory_on_node; when the node is full it reclaims what it
 * can evict and, failing that, returns -ENOMEM, and the data request is put
 * back and retried by the worker's progress loop, with no bound and no
 * error.  If nothing on the node can ever be evicted, the worker spins at
 * full CPU for good (seen with 3 PoCL devices, STARPU_LIMIT_OPENCL_MEM=2,
 * tests/test_emulated_livelock.c).
 *
 * What cannot be evicted is, first, the buffers of the task being fetched,
 * and second, STARPU_REDUX contributions: each worker that accumulates into
 * a REDUX handle keeps its own copy on its node until the reduction, which
 * registers every contribution as a temporary handle whose home is that
 * node (home copies are never evicted) and merges them in a tree of tasks
 * (dst RW, src R).  A merge that runs on a device holding its own
 * contribution needs two more copies there: with contributions of size S,
 * a device needs 3 S, and a limit between 2 S and 3 S hangs (measured: 3
 * devices at 2 MiB hang with S = 700 KiB and finish with S = 680 KiB; one
 * device, where no merge has two device operands, finishes with S = 1 MiB).
 * In a training step every gradient is a REDUX handle at once, so the
 * contributions of all of them are pinned together.
 *
 * A second stall needs no REDUX: the deterministic MLP step (plain RW/R
 * tasks) on 3 PoCL devices under dmda, dmdar or dmdas hangs the same way
 * with device limits of 3 and 4 MiB and finishes with 5 MiB, its largest
 * task needing 2.4 MiB (lws finished with 3 MiB; STARPU_PREFETCH=0 and
 * STARPU_OPENCL_PIPELINE=0 or 1 did not help).  Its exact cause is not
 * pinned down; the measurements fit "two tasks' buffers must fit at once"
 * (the task being fetched and the one holding its buffers on the node).
 * It is not the whole story: the same MLP under tg-memaware stalled once
 * with 5 MiB (tasks of 2.35 MiB, so two fit) on a heavily loaded machine,
 * and finished with 8 MiB.
 *
 * The guard runs at each submission (tg_submit, before StarPU sees the
 * task) against the smallest budget of the device nodes
 * (starpu_memory_get_total: the STARPU_LIMIT_OPENCL_MEM / _CUDA_MEM limit,
 * else the device's size), with T the largest task submitted so far (its
 * buffers' bytes):
 *   - without REDUX handles: 2 T <= budget;
 *   - with them: sum(REDUX handles) + 2 max(T, largest REDUX handle)
 *     <= budget.
 * Otherwise the submission fails with -ENOSPC and a message naming the
 * need, the limit and the way out (--deterministic reduces with plain
 * tasks; or a larger limit).  The bound comes from the causes and the
 * measurements above, it is no proof that StarPU cannot stall otherwise:
 * the runtime's watchdog (src/runtime.c) ends a run under a device memory
 * limit in which no task finishes for a while.  The check is cheap (a run
 * has a few hundred REDUX handles at most).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include <starpu.h>

#include "check.h"
#include "device_memory.h"
#include "hooks.h"

static pthread_mutex_t tg_dm_lock = PTHREAD_MUTEX_INITIALIZER;
static int tg_dm_ready = 0;
static long long tg_dm_budget = -1; /* bytes; -1: no device node */
static int tg_dm_node = -1;        /* the node with that budget */
static starpu_data_handle_t *tg_dm_redux;
static long long *tg_dm_redux_bytes; /* each handle's size when it was added */
static int tg_dm_nredux = 0, tg_dm_cap = 0;
static long long tg_dm_redux_sum = 0, tg_dm_redux_max = 0, tg_dm_task_max = 0;

static void tg_dm_reset(void) {
  pthread_mutex_lock(&tg_dm_lock);
  free(tg_dm_redux);
  free(tg_dm_redux_bytes);
  tg_dm_redux = NULL;
  tg_dm_redux_bytes = NULL;
  tg_dm_nredux = tg_dm_cap = 0;
  tg_dm_redux_sum = tg_dm_redux_max = tg_dm_task_max = 0;
  tg_dm_ready = 0;
  tg_dm_budget = -1;
  tg_dm_node = -1;
  pthread_mutex_unlock(&tg_dm_lock);
}

/* the smallest memory of the non-CPU nodes (called under the lock) */
static void tg_dm_scan(void) {
  unsigned n = starpu_memory_nodes_get_count();
  for (unsigned node = 0; node < n; node++) {
    if (starpu_node_get_kind(node) == STARPU_CPU_RAM) continue;
    starpu_ssize_t total = starpu_memory_get_total(node);
    if (total < 0) continue; /* unknown size: nothing to check */
    if (tg_dm_budget < 0 || total < tg_dm_budget) {
      tg_dm_budget = total;
      tg_dm_node = (int)node;
    }
  }
  tg_dm_ready = 1;
  tg_at_shutdown(tg_dm_reset);
}

/* adds h to the REDUX set unless it is there (under the lock) */
static int tg_dm_add_redux(starpu_data_handle_t h) {
  for (int i = 0; i < tg_dm_nredux; i++)
    if (tg_dm_redux[i] == h) return 0;
  if (tg_dm_nredux == tg_dm_cap) {
    int cap = tg_dm_cap ? 2 * tg_dm_cap : 64;
    starpu_data_handle_t *grown = realloc(tg_dm_redux, cap * sizeof *grown);
    if (!grown) return -ENOMEM;
    tg_dm_redux = grown;
    long long *bytes = realloc(tg_dm_redux_bytes, cap * sizeof *bytes);
    if (!bytes) return -ENOMEM;
    tg_dm_redux_bytes = bytes;
    tg_dm_cap = cap;
  }
  long long s = (long long)starpu_data_get_size(h);
  tg_dm_redux_bytes[tg_dm_nredux] = s;
  tg_dm_redux[tg_dm_nredux++] = h;
  tg_dm_redux_sum += s;
  if (s > tg_dm_redux_max) tg_dm_redux_max = s;
  return 0;
}

void tg_device_memory_forget(starpu_data_handle_t h) {
  pthread_mutex_lock(&tg_dm_lock);
  for (int i = 0; i < tg_dm_nredux; i++) {
    if (tg_dm_redux[i] != h) continue;
    /* a freed handle's contributions are gone, and its address may be
     * reused by an unrelated handle: drop it, recompute the largest */
    tg_dm_nredux--;
    tg_dm_redux[i] = tg_dm_redux[tg_dm_nredux];
    tg_dm_redux_bytes[i] = tg_dm_redux_bytes[tg_dm_nredux];
    /* sizes as recorded: other entries may be handles already gone */
    tg_dm_redux_sum = tg_dm_redux_max = 0;
    for (int k = 0; k < tg_dm_nredux; k++) {
      long long s = tg_dm_redux_bytes[k];
      tg_dm_redux_sum += s;
      if (s > tg_dm_redux_max) tg_dm_redux_max = s;
    }
    break;
  }
  pthread_mutex_unlock(&tg_dm_lock);
}

/* What a device must hold (under the lock) once a task of `task` bytes
 * joins: the REDUX contributions, plus room for two of the largest task */
static long long tg_dm_need(long long task) {
  long long big = task > tg_dm_task_max ? task : tg_dm_task_max;
  if (tg_dm_redux_max > big) big = tg_dm_redux_max;
  return tg_dm_redux_sum + 2 * big;
}

int tg_device_memory_room(long long bytes) {
  pthread_mutex_lock(&tg_dm_lock);
  if (!tg_dm_ready) tg_dm_scan();
  int room = tg_dm_budget < 0 || tg_dm_need(bytes) <= tg_dm_budget;
  pthread_mutex_unlock(&tg_dm_lock);
  return room;
}

static double tg_mib(long long b) { return (double)b / (1 << 20); }

int tg_device_memory_check(const char *op, int nbuf, const starpu_data_handle_t *h,
                           const enum starpu_data_access_mode *modes) {
  pthread_mutex_lock(&tg_dm_lock);
  if (!tg_dm_ready) tg_dm_scan();
  if (tg_dm_budget < 0) {
    pthread_mutex_unlock(&tg_dm_lock);
    return 0;
  }
  long long task = 0;
  for (int i = 0; i < nbuf; i++) {
    task += (long long)starpu_data_get_size(h[i]);
    if ((modes[i] & STARPU_REDUX) && tg_dm_add_redux(h[i]) < 0) {
      pthread_mutex_unlock(&tg_dm_lock);
      return tg_fail(ENOMEM, "%s: out of memory in the device memory guard", op);
    }
  }
  if (task > tg_dm_task_max) tg_dm_task_max = task;
  long long need = tg_dm_need(task), redux = tg_dm_redux_sum;
  long long budget = tg_dm_budget;
  int node = tg_dm_node;
  pthread_mutex_unlock(&tg_dm_lock);
  if (need <= budget) return 0;
  char name[32];
  starpu_memory_node_get_name(node, name, sizeof name);
  if (redux > 0)
    return tg_fail(ENOSPC,
                   "%s: the device memory of %s (%.1f MiB, STARPU_LIMIT_OPENCL_MEM or "
                   "STARPU_LIMIT_CUDA_MEM) is below the %.1f MiB that STARPU_REDUX "
                   "gradients need (%.1f MiB of contributions kept on each device until "
                   "they merge, plus room for two tasks): StarPU 1.3 would spin forever "
                   "allocating; use --deterministic (plain reduction tasks, evictable "
                   "data) or raise the limit",
                   op, name, tg_mib(budget), tg_mib(need), tg_mib(redux));
  return tg_fail(ENOSPC,
                 "%s: two tasks need %.1f MiB at once on a device and %s has %.1f MiB "
                 "(STARPU_LIMIT_OPENCL_MEM or STARPU_LIMIT_CUDA_MEM): StarPU 1.3 could "
                 "spin forever allocating; raise the limit or lower the batch",
                 op, tg_mib(need), name, tg_mib(budget));
}
