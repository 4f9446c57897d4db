/*
 * Task fusion: several tasks submitted as one (issue 23, "fewer, fuller
 * tasks").
 *
 * Between tg_fuse_begin() and tg_fuse_end(), tg_submit (common.c) hands
 * each task it builds to the thread's open group (tg_fuse_submit) instead
 * of StarPU.  At the end the
 * group becomes one task of the codelet tg_fused: its buffers are the union
 * of the parts' (a handle once, with the mode of the whole sequence: written
 * first, W; read first and written later, RW), and its function runs the
 * parts' own functions one after the other, each on its own buffers, with
 * tg_task_current() showing it its own task.  On a CUDA worker the parts
 * queue their kernels on the worker's one stream, in order, as their tasks
 * would; the kernels and their order are the same, so are the bits.
 *
 * Why: on one GPU a step is one chain of dependent tasks, and each task
 * costs the GPU StarPU's driver time besides its kernels (fetching its
 * buffers, queueing it): GPT-2 124M's step spent 2.65 of 14.9 ms idle
 * between 168 tasks in the simulation (bench/results/2026-11-27-fusion.md).
 * A transformer block's forward is 7 tasks and its backward 5; fused, 1
 * each.  The price is the overlap between tasks of one group, which a GPU
 * running one chain does not have, and which CPU workers do: graphs fuse
 * only where it pays (graphs/gpt.c, run.fused_blocks).
 *
 * A task joins the group if its modes are plain (R, W, RW, SCRATCH, or
 * RW | COMMUTE, which the fused task keeps where every part's access to the
 * handle commutes and turns into RW otherwise; not REDUX, whose reduction
 * StarPU arranges per task), it is pinned where the
 * group is (or neither is), some worker kind runs every part, and the union
 * stays within TG_FUSE_MAX_BUFFERS; otherwise the group so far is submitted
 * and the task after it, alone.  A group of one task is submitted as it is.
 *
 * Views of packed tensors (tg_tensor_pack, tensor.h): a part's view
 * counts as its whole in the union, read-write where the part writes it
 * (the rest of the whole is kept), and the part's function gets an
 * interface of the view's range inside the whole's buffer on the worker's
 * node.  A task that names views outside a group is a fused task of one
 * part, so that StarPU only ever sees wholes.
 *
 * The cost: a history of its own ("taskgrad_fused"), footprinted by its
 * parts'.  In the SimGrid build, that history where it was calibrated for
 * the task, else the sum of the parts' costs (each its calibrated history or
 * its roofline, launch included), so that an uncalibrated fused task is
 * never cheaper than its parts on the GPU itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codelet_common.h"
#include "device_memory.h"
#include "taskgrad/tensor.h"

#define TG_FUSE_MAX_PARTS 32
#define TG_FUSE_MAX_BUFFERS 64

/* One part in the fused task's argument block, followed by its buffer map
 * (nbuf ints: the part's buffer i is the fused task's map[i]), its modes,
 * its handles and its own arguments (argsize bytes, then its name). */
typedef struct tg_fuse_part {
  struct starpu_codelet *cl;
  double flops;
  size_t argsize, namelen, bytes; /* bytes: this record, padded */
  int nbuf;
} tg_fuse_part;

typedef struct tg_fuse_head {
  uint32_t shape; /* tg_footprint's key slot (unused: tg_fused_footprint) */
  int nparts;
} tg_fuse_head;

#define TG_ALIGN(x) (((x) + 15) & ~(size_t)15)

static size_t tg_fuse_part_bytes(int nbuf, size_t argsize, size_t namelen) {
  return TG_ALIGN(sizeof(tg_fuse_part)) + TG_ALIGN(nbuf * sizeof(int)) +
         TG_ALIGN(nbuf * sizeof(enum starpu_data_access_mode)) +
         TG_ALIGN(nbuf * sizeof(starpu_data_handle_t)) + TG_ALIGN(argsize + namelen);
}

/* The part at p as a task of its own (never submitted): what its codelet's
 * functions, footprint and cost see.  *map gets its buffer map. */
static void tg_fuse_view(const tg_fuse_part *p, struct starpu_task *view, const int **map) {
  char *at = (char *)p + TG_ALIGN(sizeof *p);
  *map = (const int *)at;
  at += TG_ALIGN(p->nbuf * sizeof(int));
  enum starpu_data_access_mode *modes = (enum starpu_data_access_mode *)at;
  at += TG_ALIGN(p->nbuf * sizeof *modes);
  starpu_data_handle_t *handles = (starpu_data_handle_t *)at;
  at += TG_ALIGN(p->nbuf * sizeof *handles);
  memset(view, 0, sizeof *view);
  view->cl = p->cl;
  view->nbuffers = p->nbuf;
  view->dyn_handles = handles;
  view->dyn_modes = modes;
  view->cl_arg = p->argsize ? at : NULL;
  view->cl_arg_size = p->argsize;
  view->flops = p->flops;
  view->name = p->namelen ? at + p->argsize : NULL;
}

static const tg_fuse_part *tg_fuse_first(const void *cl_arg) {
  return (const tg_fuse_part *)((const char *)cl_arg + TG_ALIGN(sizeof(tg_fuse_head)));
}
static const tg_fuse_part *tg_fuse_next(const tg_fuse_part *p) {
  return (const tg_fuse_part *)((const char *)p + p->bytes);
}

enum { TG_FUSE_CPU, TG_FUSE_CUDA, TG_FUSE_OPENCL };

/* The interface of view h inside its whole's interface w on this worker's
 * node: the view's shape (its own registration), the whole's buffer from
 * the view's offset (an OpenCL buffer is a cl_mem and a byte offset) */
static void *tg_fuse_view_iface(starpu_data_handle_t h, size_t off, void *w, int kind,
                                struct starpu_matrix_interface *out) {
  const struct starpu_matrix_interface *whole = w;
  const struct starpu_matrix_interface *shape =
      starpu_data_get_interface_on_node(h, STARPU_MAIN_RAM);
  if (whole->id != STARPU_MATRIX_INTERFACE_ID || shape->id != STARPU_MATRIX_INTERFACE_ID)
    TG_FATAL("fused task: a view of a non-matrix buffer");
  *out = *shape;
  out->ld = shape->nx; /* a view is contiguous; StarPU sets ld only where it allocates */
  out->ptr = whole->ptr ? whole->ptr + off : 0;
  if (kind == TG_FUSE_OPENCL) {
    out->dev_handle = whole->dev_handle;
    out->offset = whole->offset + off;
  } else {
    out->dev_handle = whole->dev_handle ? whole->dev_handle + off : 0;
    out->offset = whole->offset;
  }
  out->allocsize = (size_t)shape->nx * shape->ny * shape->elemsize;
  return out;
}

static void tg_fused_run(void *buffers[], void *cl_arg, int kind) {
  const tg_fuse_head *h = cl_arg;
  const tg_fuse_part *p = tg_fuse_first(cl_arg);
  for (int k = 0; k < h->nparts; k++, p = tg_fuse_next(p)) {
    struct starpu_task view;
    const int *map;
    tg_fuse_view(p, &view, &map);
    void *bufs[TG_FUSE_MAX_BUFFERS];
    struct starpu_matrix_interface views[TG_FUSE_MAX_BUFFERS];
    for (int i = 0; i < p->nbuf; i++) {
      size_t off;
      starpu_data_handle_t hv = STARPU_TASK_GET_HANDLE(&view, i);
      bufs[i] = tg_tensor_view_of(hv, &off)
                    ? tg_fuse_view_iface(hv, off, buffers[map[i]], kind, &views[i])
                    : buffers[map[i]];
    }
    void (*fn)(void *[], void *) = kind == TG_FUSE_CPU    ? p->cl->cpu_funcs[0]
                                   : kind == TG_FUSE_CUDA ? p->cl->cuda_funcs[0]
                                                          : p->cl->opencl_funcs[0];
    if (!fn) TG_FATAL("fused task: %s has no function for this worker", p->cl->name);
    tg_task_current_set(&view);
    fn(bufs, view.cl_arg);
    tg_task_current_set(NULL);
  }
}

static void tg_fused_cpu(void *b[], void *a) { tg_fused_run(b, a, TG_FUSE_CPU); }
#ifdef TG_HAVE_CUDA
static void tg_fused_cuda(void *b[], void *a) { tg_fused_run(b, a, TG_FUSE_CUDA); }
#endif
#ifdef STARPU_USE_OPENCL
static void tg_fused_opencl(void *b[], void *a) { tg_fused_run(b, a, TG_FUSE_OPENCL); }
#endif

/* the parts' footprints, each with its codelet's name */
static uint32_t tg_fused_footprint(struct starpu_task *task) {
  const tg_fuse_head *h = task->cl_arg;
  const tg_fuse_part *p = tg_fuse_first(task->cl_arg);
  uint32_t key = 0;
  for (int k = 0; k < h->nparts; k++, p = tg_fuse_next(p)) {
    struct starpu_task view;
    const int *map;
    tg_fuse_view(p, &view, &map);
    uint32_t fp = tg_footprint(&view);
    key = starpu_hash_crc32c_be(starpu_hash_crc32c_string(p->cl->name, fp), key);
  }
  return key;
}

#ifdef TG_SIMGRID
/* a real run's fused tasks (calibrated: scripts/gpu-check) record this
 * history, not their parts' */
static struct starpu_perfmodel tg_fused_hist = {
    .type = STARPU_HISTORY_BASED, .symbol = "taskgrad_fused", .footprint = tg_fused_footprint};

static double tg_fused_cost(struct starpu_task *task, struct starpu_perfmodel_arch *arch,
                            unsigned impl) {
  double us = tg_sim_history(&tg_fused_hist, task, arch, impl);
  if (us > 0) return us;
  const tg_fuse_head *h = task->cl_arg;
  const tg_fuse_part *p = tg_fuse_first(task->cl_arg);
  us = 0;
  for (int k = 0; k < h->nparts; k++, p = tg_fuse_next(p)) {
    struct starpu_task view;
    const int *map;
    tg_fuse_view(p, &view, &map);
    struct starpu_perfmodel *m = p->cl->model;
    if (!m || !m->arch_cost_function) TG_FATAL("fused task: %s has no cost", p->cl->name);
    us += m->arch_cost_function(&view, arch, impl);
  }
  return us;
}
static struct starpu_perfmodel tg_fused_model = {.type = STARPU_PER_ARCH,
                                                 .arch_cost_function = tg_fused_cost};
#else
static struct starpu_perfmodel tg_fused_model = {
    .type = STARPU_HISTORY_BASED, .symbol = "taskgrad_fused", .footprint = tg_fused_footprint};
#endif

struct starpu_codelet tg_fused_cl = {
    .cpu_funcs = {tg_fused_cpu},
    .cpu_funcs_name = {"tg_fused_cpu"},
    TG_CUDA_IMPL(tg_fused_cuda)
#ifdef STARPU_USE_OPENCL
    .opencl_funcs = {tg_fused_opencl},
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &tg_fused_model,
    .name = "tg_fused",
};

int tg_fused_parts(const struct starpu_task *task, const char **names, int max) {
  if (!task || task->cl != &tg_fused_cl || !task->cl_arg) return 0;
  const tg_fuse_head *h = task->cl_arg;
  const tg_fuse_part *p = tg_fuse_first(task->cl_arg);
  for (int k = 0; k < h->nparts && k < max; k++, p = tg_fuse_next(p)) names[k] = p->cl->name;
  return h->nparts;
}

/* ---- the group (one per thread) ------------------------------------------ */

static __thread int tg_fuse_open;
static __thread struct starpu_task *tg_parts[TG_FUSE_MAX_PARTS];
static __thread int tg_nparts;
static __thread starpu_data_handle_t tg_uh[TG_FUSE_MAX_BUFFERS];
static __thread enum starpu_data_access_mode tg_um[TG_FUSE_MAX_BUFFERS];
static __thread int tg_nu;
static __thread uint32_t tg_where;

static uint32_t tg_where_of(const struct starpu_task *t) {
  const struct starpu_codelet *cl = t->cl;
  uint32_t can = STARPU_CPU;
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID)
  can |= STARPU_CUDA;
#endif
#ifdef STARPU_USE_OPENCL
  can |= STARPU_OPENCL;
#endif
  uint32_t has = (cl->cpu_funcs[0] ? STARPU_CPU : 0) | (cl->cuda_funcs[0] ? STARPU_CUDA : 0) |
                 (cl->opencl_funcs[0] ? STARPU_OPENCL : 0);
  return can & has & (t->where ? (uint32_t)t->where : ~0u);
}

static int tg_plain(enum starpu_data_access_mode m) {
  return m == STARPU_R || m == STARPU_W || m == STARPU_RW || m == STARPU_SCRATCH ||
         m == (STARPU_RW | STARPU_COMMUTE);
}

/* The handle the fused task names for a part's h: a view's whole, else h;
 * *m becomes the access to it (a written view keeps the rest of its whole:
 * read-write; a view cannot be scratch: 0, the task cannot join) */
static starpu_data_handle_t tg_fuse_key(starpu_data_handle_t h, enum starpu_data_access_mode *m) {
  starpu_data_handle_t whole = tg_tensor_view_of(h, NULL);
  if (!whole) return h;
  if (*m == STARPU_SCRATCH) return NULL;
  if (*m & STARPU_W) *m = (enum starpu_data_access_mode)(STARPU_RW | (*m & STARPU_COMMUTE));
  return whole;
}

static int tg_task_has_views(const struct starpu_task *t) {
  for (unsigned i = 0; i < STARPU_TASK_GET_NBUFFERS(t); i++)
    if (tg_tensor_view_of(STARPU_TASK_GET_HANDLE(t, i), NULL)) return 1;
  return 0;
}

/* Adds t's buffers to the union (tg_uh, tg_um, tg_nu) if it can join;
 * 0 when it cannot (nothing changed) */
static int tg_fuse_join(struct starpu_task *t) {
  if (tg_nparts == TG_FUSE_MAX_PARTS) return 0;
  uint32_t where = tg_where_of(t);
  if (tg_nparts) {
    struct starpu_task *f = tg_parts[0];
    if (f->execute_on_a_specific_worker != t->execute_on_a_specific_worker ||
        (f->execute_on_a_specific_worker && f->workerid != t->workerid))
      return 0;
    where &= tg_where;
  }
  if (!where) return 0;
  starpu_data_handle_t uh[TG_FUSE_MAX_BUFFERS];
  enum starpu_data_access_mode um[TG_FUSE_MAX_BUFFERS];
  int nu = tg_nu;
  memcpy(uh, tg_uh, nu * sizeof *uh);
  memcpy(um, tg_um, nu * sizeof *um);
  int nbuf = (int)STARPU_TASK_GET_NBUFFERS(t);
  for (int i = 0; i < nbuf; i++) {
    enum starpu_data_access_mode m = STARPU_TASK_GET_MODE(t, i);
    if (!tg_plain(m)) return 0;
    starpu_data_handle_t h = tg_fuse_key(STARPU_TASK_GET_HANDLE(t, i), &m);
    if (!h) return 0;
    int j = 0;
    while (j < nu && uh[j] != h) j++;
    if (j == nu) {
      if (nu == TG_FUSE_MAX_BUFFERS) return 0;
      uh[nu] = h;
      um[nu++] = m;
    } else if ((um[j] == STARPU_SCRATCH) != (m == STARPU_SCRATCH)) {
      return 0;
    } else if (m != STARPU_SCRATCH) {
      /* the first access decides whether it is read; any, whether written;
       * commuting only if every access commutes (plain RW orders the
       * task after the others on the handle: stricter, still right) */
      int commute = (um[j] & STARPU_COMMUTE) && (m & STARPU_COMMUTE);
      um[j] = (enum starpu_data_access_mode)(((um[j] & STARPU_RW) | (m & STARPU_W)) |
                                             (commute ? STARPU_COMMUTE : 0));
    }
  }
  long long bytes = 0;
  for (int j = 0; j < nu; j++) bytes += (long long)starpu_data_get_size(uh[j]);
  if (!tg_device_memory_room(bytes)) return 0;
  memcpy(tg_uh, uh, nu * sizeof *uh);
  memcpy(tg_um, um, nu * sizeof *um);
  tg_nu = nu;
  tg_where = where;
  tg_parts[tg_nparts++] = t;
  return 1;
}

static void tg_fuse_clear(void) {
  tg_nparts = tg_nu = 0;
  tg_where = 0;
}

static void tg_fuse_discard(void) {
  for (int k = 0; k < tg_nparts; k++) {
    tg_parts[k]->destroy = 0;
    starpu_task_destroy(tg_parts[k]);
  }
  tg_fuse_clear();
}

/* Submits the group so far: its task alone (unless it names views), or the
 * fused task of all. */
static int tg_fuse_flush(void) {
  if (tg_nparts == 0) return 0;
  if (tg_nparts == 1 && !tg_task_has_views(tg_parts[0])) {
    struct starpu_task *t = tg_parts[0];
    tg_fuse_clear();
    return tg_task_submit_built(t);
  }
  size_t total = TG_ALIGN(sizeof(tg_fuse_head));
  for (int k = 0; k < tg_nparts; k++) {
    struct starpu_task *t = tg_parts[k];
    total += tg_fuse_part_bytes((int)STARPU_TASK_GET_NBUFFERS(t), t->cl_arg_size,
                                t->name ? strlen(t->name) + 1 : 0);
  }
  char *block = aligned_alloc(16, TG_ALIGN(total));
  struct starpu_task *task = block ? starpu_task_create() : NULL;
  if (!task) {
    free(block);
    tg_fuse_discard();
    return tg_fail(ENOMEM, "tg_fused: out of memory for a fused task");
  }
  memset(block, 0, TG_ALIGN(total));
  tg_fuse_head *head = (tg_fuse_head *)block;
  head->nparts = tg_nparts;
  char *at = block + TG_ALIGN(sizeof *head);
  double flops = 0;
  int priority = tg_parts[0]->priority;
  for (int k = 0; k < tg_nparts; k++) {
    struct starpu_task *t = tg_parts[k];
    int nbuf = (int)STARPU_TASK_GET_NBUFFERS(t);
    size_t namelen = t->name ? strlen(t->name) + 1 : 0;
    tg_fuse_part *p = (tg_fuse_part *)at;
    *p = (tg_fuse_part){.cl = t->cl, .flops = t->flops, .argsize = t->cl_arg_size,
                        .namelen = namelen, .nbuf = nbuf,
                        .bytes = tg_fuse_part_bytes(nbuf, t->cl_arg_size, namelen)};
    char *q = at + TG_ALIGN(sizeof *p);
    int *map = (int *)q;
    q += TG_ALIGN(nbuf * sizeof(int));
    enum starpu_data_access_mode *modes = (enum starpu_data_access_mode *)q;
    q += TG_ALIGN(nbuf * sizeof *modes);
    starpu_data_handle_t *handles = (starpu_data_handle_t *)q;
    q += TG_ALIGN(nbuf * sizeof *handles);
    for (int i = 0; i < nbuf; i++) {
      handles[i] = STARPU_TASK_GET_HANDLE(t, i);
      modes[i] = STARPU_TASK_GET_MODE(t, i);
      enum starpu_data_access_mode m = modes[i];
      starpu_data_handle_t key = tg_fuse_key(handles[i], &m);
      int j = 0;
      while (tg_uh[j] != key) j++;
      map[i] = j;
    }
    if (t->cl_arg_size) memcpy(q, t->cl_arg, t->cl_arg_size);
    if (namelen) memcpy(q + t->cl_arg_size, t->name, namelen);
    at += p->bytes;
    flops += t->flops > 0 ? t->flops : 0;
    if (t->priority > priority) priority = t->priority;
  }
  task->cl = &tg_fused_cl;
  if (tg_task_set_buffers(task, tg_nu, tg_uh, tg_um) != 0) {
    free(block);
    task->destroy = 0;
    starpu_task_destroy(task);
    tg_fuse_discard();
    return tg_fail(ENOMEM, "tg_fused: out of memory for %d buffers", tg_nu);
  }
  task->cl_arg = block;
  task->cl_arg_size = total;
  task->cl_arg_free = 1;
  task->flops = flops;
  task->priority = priority;
  task->where = tg_where;
  if (tg_parts[0]->execute_on_a_specific_worker) {
    task->execute_on_a_specific_worker = 1;
    task->workerid = tg_parts[0]->workerid;
  }
  /* the first part's name (inside the block, which lives as long as the task) */
  const tg_fuse_part *first = tg_fuse_first(block);
  if (first->namelen) {
    struct starpu_task view;
    const int *map;
    tg_fuse_view(first, &view, &map);
    task->name = view.name;
  }
  int rc = tg_device_memory_check("tg_fused", tg_nu, tg_uh, tg_um);
  tg_fuse_discard(); /* the parts: copied into the block */
  if (rc) {
    task->destroy = 0;
    starpu_task_destroy(task);
    return rc;
  }
  return tg_task_submit_built(task);
}

/* a task with views that cannot be a fused task (tg_fuse_join refused it
 * alone): destroyed, and the error */
static int tg_fuse_refuse(struct starpu_task *task) {
  const char *op = task->cl->name;
  task->destroy = 0;
  starpu_task_destroy(task);
  return tg_fail(EINVAL, "%s: a view of a packed tensor in a task that cannot be fused (a "
                 "scratch or reduction access, more than %d buffers, or no room on the "
                 "devices)", op, TG_FUSE_MAX_BUFFERS);
}

static int tg_fuse_take(struct starpu_task *task) {
  if (tg_fuse_join(task)) return 0;
  TG_TRY(tg_fuse_flush());
  if (tg_fuse_join(task)) return 0; /* it starts the next group */
  return tg_task_has_views(task) ? tg_fuse_refuse(task) : tg_task_submit_built(task);
}

int tg_fuse_submit(struct starpu_task *task) {
  if (tg_fuse_open) return tg_fuse_take(task);
  if (!tg_task_has_views(task)) return tg_task_submit_built(task);
  /* a group of its own, which submits a fused task of one part */
  if (!tg_fuse_join(task)) return tg_fuse_refuse(task);
  return tg_fuse_flush();
}

int tg_fuse_begin(void) {
  if (tg_fuse_open) return tg_fail(EINVAL, "tg_fuse_begin: a group is already open");
  tg_fuse_open = 1;
  tg_fuse_clear();
  tg_tensor_release_hold();
  return 0;
}

int tg_fuse_end(int submit) {
  if (!tg_fuse_open) return tg_fail(EINVAL, "tg_fuse_end: no group is open");
  tg_fuse_open = 0;
  int rc = 0;
  if (submit) rc = tg_fuse_flush();
  else tg_fuse_discard();
  tg_tensor_release_flush(); /* after the tasks that use them */
  return rc;
}
