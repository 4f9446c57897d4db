/*
 * Shared codelet machinery: task submission, shape checks (the perfmodel
 * footprint: footprint.c).  See codelets/codelet_common.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codelet_common.h"
#include "device_memory.h"
#include "hooks.h"

/* Scratch handles by size (a handful of sizes per run), kept until
 * tg_shutdown: a handle handed out may be in a task about to be submitted,
 * so none is ever unregistered earlier. */
static struct tg_scratch_entry {
  size_t bytes;
  int pool;
  starpu_data_handle_t handle;
} *tg_scratches;
static int tg_nscratches = 0, tg_scratch_cap = 0;
static pthread_mutex_t tg_scratch_lock = PTHREAD_MUTEX_INITIALIZER;

static void tg_scratch_release_all(void) {
  pthread_mutex_lock(&tg_scratch_lock);
  for (int i = 0; i < tg_nscratches; i++) starpu_data_unregister(tg_scratches[i].handle);
  free(tg_scratches);
  tg_scratches = NULL;
  tg_nscratches = tg_scratch_cap = 0;
  pthread_mutex_unlock(&tg_scratch_lock);
}

starpu_data_handle_t tg_scratch(size_t bytes) { return tg_scratch_pool(bytes, 0); }

starpu_data_handle_t tg_scratch_pool(size_t bytes, int pool) {
  size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
  if (n == 0) n = 1;
  bytes = n * sizeof(float);
  starpu_data_handle_t h = NULL;
  pthread_mutex_lock(&tg_scratch_lock);
  for (int i = 0; i < tg_nscratches && !h; i++)
    if (tg_scratches[i].bytes == bytes && tg_scratches[i].pool == pool)
      h = tg_scratches[i].handle;
  if (!h) {
    if (tg_nscratches == tg_scratch_cap) {
      int cap = tg_scratch_cap ? 2 * tg_scratch_cap : 16;
      struct tg_scratch_entry *grown = realloc(tg_scratches, cap * sizeof *grown);
      if (!grown) TG_FATAL("out of memory for scratch handles");
      tg_scratches = grown;
      tg_scratch_cap = cap;
    }
    starpu_vector_data_register(&h, -1, 0, (uint32_t)n, sizeof(float));
    tg_scratches[tg_nscratches].bytes = bytes;
    tg_scratches[tg_nscratches].pool = pool;
    tg_scratches[tg_nscratches].handle = h;
    tg_nscratches++;
    tg_at_shutdown(tg_scratch_release_all);
  }
  pthread_mutex_unlock(&tg_scratch_lock);
  return h;
}

enum starpu_data_access_mode tg_accum_mode(tg_accum accum) {
  switch (accum) {
  case TG_OVERWRITE: return STARPU_W;
  case TG_ACCUMULATE: return STARPU_RW;
  case TG_REDUCE: return STARPU_REDUX;
  case TG_COMMUTE: return STARPU_RW | STARPU_COMMUTE;
  }
  return STARPU_RW;
}

static int tg_submit_task(struct starpu_codelet *cl, int nbuf,
                          const starpu_data_handle_t *handles,
                          const enum starpu_data_access_mode *modes, const void *args,
                          size_t argsize, double flops, const tg_task_opts *opts,
                          int adapt) {
  /* 2-byte buffers: the low-precision adapter's workspace becomes one more
   * buffer, and its trailer follows the arguments (lowp_adapter.c) */
  int lowp = opts ? (int)opts->lowp : 0;
  size_t ws = 0, trailer = 0;
  if (adapt) TG_TRY(tg_lowp_plan(cl->name, nbuf, handles, modes, lowp, &ws));
  if (nbuf > TG_MAX_TASK_BUFFERS || (ws && nbuf > TG_MAX_BUFFERS))
    return tg_fail(EINVAL, "%s: %d buffers, at most %d%s", cl->name, nbuf,
                   ws ? TG_MAX_BUFFERS : TG_MAX_TASK_BUFFERS,
                   ws ? " with 16-bit buffers through the low-precision adapter" : "");
  starpu_data_handle_t hx[TG_MAX_BUFFERS + 1];
  enum starpu_data_access_mode mx[TG_MAX_BUFFERS + 1];
  if (ws) {
    memcpy(hx, handles, nbuf * sizeof *hx);
    memcpy(mx, modes, nbuf * sizeof *mx);
    /* a pool of its own: a codelet's own scratch of the same size would
     * otherwise be the same handle, twice in one task (aliased) */
    hx[nbuf] = tg_scratch_pool(ws, TG_SCRATCH_LOWP);
    mx[nbuf] = STARPU_SCRATCH;
    handles = hx;
    modes = mx;
    trailer = tg_lowp_trailer_size();
  }
  /* before StarPU sees it: a task that cannot fit on a device would spin
   * (a CPU-only task never goes to one) */
  if (!(opts && opts->cpu_only))
    TG_TRY(tg_device_memory_check(cl->name, ws ? nbuf + 1 : nbuf, handles, modes));
  /* The task name, when given, is copied after the arguments (the caller's
   * string may be a stack buffer): StarPU frees that block with the task
   * (cl_arg_free), and cl_arg_size stays the arguments' size (plus the
   * trailer of an adapted task). */
  const char *name = opts ? opts->name : NULL;
  size_t namelen = name ? strlen(name) + 1 : 0;
  char *copy = malloc((argsize + trailer + namelen) ? argsize + trailer + namelen : 1);
  if (!copy) return tg_fail(ENOMEM, "%s: out of memory for task arguments", cl->name);
  if (argsize) memcpy(copy, args, argsize);
  if (trailer) tg_lowp_trailer_write(copy + argsize, lowp, nbuf);
  argsize += trailer;
  if (ws) nbuf++;
  if (name) memcpy(copy + argsize, name, namelen);
  struct starpu_task *task = starpu_task_create();
  if (!task) {
    free(copy);
    return tg_fail(ENOMEM, "%s: starpu_task_create failed", cl->name);
  }
  task->cl = cl;
  if (tg_task_set_buffers(task, nbuf, handles, modes) != 0) {
    free(copy);
    task->destroy = 0;
    starpu_task_destroy(task);
    return tg_fail(ENOMEM, "%s: out of memory for %d buffers", cl->name, nbuf);
  }
  task->cl_arg = copy;
  task->cl_arg_size = argsize;
  task->cl_arg_free = 1;
  task->flops = flops;
  if (opts) {
    task->priority = opts->priority;
    if (opts->worker >= 0) {
      task->execute_on_a_specific_worker = 1;
      task->workerid = (unsigned)opts->worker;
    }
    if (name) task->name = copy + argsize; /* unnamed: StarPU uses cl->name */
  }
  /* Deterministic mode promises the same bits run to run, but a GEMM on a GPU
   * rounds differently from one on a CPU: where CUDA workers exist, a task
   * that can run on them runs on nothing else, so its bits do not depend on
   * the scheduler's choice of worker kind (measured on an H100:
   * bench/results/2026-11-26-h100-measured.md).  The same placement with
   * no scheduler named (runtime.h: tg_cuda_tasks_stay_on_gpus). */
  if (opts && opts->cpu_only && !task->execute_on_a_specific_worker)
    task->where = STARPU_CPU; /* fails below with ENODEV without CPU workers */
  else if (opts && opts->device_only && !task->execute_on_a_specific_worker &&
           (cl->cuda_funcs[0] || cl->opencl_funcs[0]))
    task->where = (cl->cuda_funcs[0] ? STARPU_CUDA : 0) | (cl->opencl_funcs[0] ? STARPU_OPENCL : 0);
  else if ((tg_runtime_current()->deterministic || tg_cuda_tasks_stay_on_gpus()) &&
           !task->execute_on_a_specific_worker && cl->cuda_funcs[0] &&
           starpu_cuda_worker_get_count() > 0)
    task->where = STARPU_CUDA;
  return tg_fuse_submit(task); /* a fusion group's, views' fused task, or StarPU's */
}

int tg_submit(struct starpu_codelet *cl, int nbuf, const starpu_data_handle_t *handles,
              const enum starpu_data_access_mode *modes, const void *args, size_t argsize,
              double flops, const tg_task_opts *opts) {
  return tg_submit_task(cl, nbuf, handles, modes, args, argsize, flops, opts, 1);
}

int tg_submit_native(struct starpu_codelet *cl, int nbuf, const starpu_data_handle_t *handles,
                     const enum starpu_data_access_mode *modes, const void *args,
                     size_t argsize, double flops, const tg_task_opts *opts) {
  return tg_submit_task(cl, nbuf, handles, modes, args, argsize, flops, opts, 0);
}

int tg_shape_any(starpu_data_handle_t h, const char *what, int *rows, int *cols) {
  if (!h) return tg_fail(EINVAL, "%s: missing data handle", what);
  if (starpu_data_get_interface_id(h) != STARPU_MATRIX_INTERFACE_ID)
    return tg_fail(EINVAL, "%s: not a matrix handle", what);
  *rows = (int)starpu_matrix_get_ny(h);
  *cols = (int)starpu_matrix_get_nx(h);
  return 0;
}

int tg_shape(starpu_data_handle_t h, const char *what, int *rows, int *cols) {
  TG_TRY(tg_shape_any(h, what, rows, cols));
  size_t es = starpu_matrix_get_elemsize(h);
  if (es != sizeof(float) && es != 2)
    return tg_fail(EINVAL, "%s has %zu-byte elements, expected f32 (4) or bf16/f16 (2)",
                   what, es);
  return 0;
}

int tg_expect(starpu_data_handle_t h, const char *op, const char *what,
              int rows, int cols, size_t elemsize) {
  int r, c;
  char name[96];
  snprintf(name, sizeof name, "%s: %s", op, what);
  TG_TRY(tg_shape_any(h, name, &r, &c));
  if (r != rows || c != cols)
    return tg_fail(EINVAL, "%s: %s is (%d, %d), expected (%d, %d)", op, what, r, c,
                   rows, cols);
  size_t es = starpu_matrix_get_elemsize(h);
  if (elemsize == TG_FLOAT_SLOT ? es != sizeof(float) && es != 2 : es != elemsize)
    return tg_fail(EINVAL, "%s: %s has %zu-byte elements, expected %s", op, what, es,
                   elemsize == TG_FLOAT_SLOT ? "4 (f32) or 2 (bf16, f16)"
                   : elemsize == 2 ? "2" : "4");
  return 0;
}

int tg_expect_contiguous(starpu_data_handle_t h, const char *op, const char *what) {
  /* no copy in main memory yet (a temporary): StarPU allocates matrices
   * contiguous, and the local ld cannot be read */
  if (!starpu_data_test_if_allocated_on_node(h, STARPU_MAIN_RAM)) return 0;
  if (starpu_matrix_get_local_ld(h) != starpu_matrix_get_nx(h))
    return tg_fail(EINVAL, "%s: %s must be contiguous (leading dimension == columns)", op, what);
  return 0;
}
