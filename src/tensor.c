/*
 * Tensors: StarPU matrix handles in row-major form (nx = cols, ny = rows,
 * ld = cols).  Host tensors are pinned (starpu_malloc after starpu_init) and
 * live on main RAM; temporaries have no home node, so StarPU allocates them
 * on the memory node of the worker that first writes them and frees them
 * after tg_tensor_release()'s asynchronous unregistration.
 *
 * Base layer: no codelet here.  The REDUX setup of a tensor
 * (tg_tensor_enable_reduction) needs the accumulate and fill codelets, so
 * it lives in the parallel layer (parallel/reduction.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "check.h"
#include "device_memory.h"
#include "taskgrad/tensor.h"

size_t tg_dtype_size(tg_dtype dtype) {
  switch (dtype) {
  case TG_F32: return sizeof(float);
  case TG_I32: return sizeof(int32_t);
  case TG_BF16:
  case TG_F16: return sizeof(uint16_t);
  }
  return 0;
}

const char *tg_dtype_name(tg_dtype dtype) {
  switch (dtype) {
  case TG_F32: return "f32";
  case TG_I32: return "i32";
  case TG_BF16: return "bf16";
  case TG_F16: return "f16";
  }
  return "?";
}

static int tg_check_shape(int rows, int cols, tg_dtype dtype) {
  if (rows <= 0 || cols <= 0)
    return tg_fail(EINVAL, "tensor shape (%d, %d) must be positive", rows, cols);
  if (tg_dtype_size(dtype) == 0)
    return tg_fail(EINVAL, "unknown dtype %d", (int)dtype);
  return 0;
}

/* starpu_malloc_flags's flags for a host tensor of `bytes` (alloc and free) */
static int tg_host_flags(size_t bytes) {
#ifdef TG_SIMGRID
  /* No kernel runs in simulation, so a big host tensor's content never
   * matters: StarPU maps one small file over and over ("folded") instead of
   * taking RAM.  Without it the attention buffers of every (layer,
   * micro-batch), host tensors, took about 50 GB for GPT 350M fp32 on 8
   * simulated GPUs.  Small ones (loss, overflow flag: read by the host) stay
   * real memory. */
  if (bytes >= ((size_t)1 << 20)) return STARPU_MALLOC_PINNED | STARPU_MALLOC_SIMULATION_FOLDED;
#endif
  (void)bytes;
  return STARPU_MALLOC_PINNED; /* what starpu_malloc uses */
}

int tg_tensor_alloc(tg_tensor *t, int rows, int cols, tg_dtype dtype) {
  memset(t, 0, sizeof *t);
  TG_TRY(tg_check_shape(rows, cols, dtype));
  size_t bytes = (size_t)rows * (size_t)cols * tg_dtype_size(dtype);
  void *p = NULL;
  int flags = tg_host_flags(bytes);
  if (starpu_malloc_flags(&p, bytes, flags) != 0 || p == NULL)
    return tg_fail(ENOMEM, "starpu_malloc of %zu bytes for a (%d, %d) tensor failed",
                   bytes, rows, cols);
  if (!(flags & STARPU_MALLOC_SIMULATION_FOLDED)) memset(p, 0, bytes);
  starpu_matrix_data_register(&t->handle, STARPU_MAIN_RAM, (uintptr_t)p,
                              (uint32_t)cols, (uint32_t)cols, (uint32_t)rows,
                              tg_dtype_size(dtype));
  t->rows = rows;
  t->cols = cols;
  t->dtype = dtype;
  t->host = p;
  return 0;
}

int tg_tensor_temp(tg_tensor *t, int rows, int cols, tg_dtype dtype) {
  memset(t, 0, sizeof *t);
  TG_TRY(tg_check_shape(rows, cols, dtype));
  starpu_matrix_data_register(&t->handle, -1, 0, (uint32_t)cols, (uint32_t)cols,
                              (uint32_t)rows, tg_dtype_size(dtype));
  t->rows = rows;
  t->cols = cols;
  t->dtype = dtype;
  return 0;
}

int tg_tensor_alloc_on_node(tg_tensor *t, int rows, int cols, tg_dtype dtype, unsigned node) {
  memset(t, 0, sizeof *t);
  TG_TRY(tg_check_shape(rows, cols, dtype));
  size_t bytes = (size_t)rows * (size_t)cols * tg_dtype_size(dtype);
  uintptr_t p = starpu_malloc_on_node(node, bytes);
  if (!p)
    return tg_fail(ENOMEM, "out of memory on memory node %u for a (%d, %d) %s tensor (%zu bytes)",
                   node, rows, cols, tg_dtype_name(dtype), bytes);
  starpu_matrix_data_register(&t->handle, (int)node, p, (uint32_t)cols, (uint32_t)cols,
                              (uint32_t)rows, tg_dtype_size(dtype));
  t->rows = rows;
  t->cols = cols;
  t->dtype = dtype;
  t->device = p;
  t->node = (int)node;
  return 0;
}

/* the handles tg_tensor_release recorded while held (tensor.h) */
static __thread int tg_release_held;
static __thread starpu_data_handle_t *tg_held;
static __thread int tg_nheld, tg_held_cap;

void tg_tensor_release_hold(void) { tg_release_held = 1; }

void tg_tensor_release_flush(void) {
  for (int i = 0; i < tg_nheld; i++) {
    tg_device_memory_forget(tg_held[i]);
    starpu_data_unregister_submit(tg_held[i]);
  }
  free(tg_held);
  tg_held = NULL;
  tg_nheld = tg_held_cap = tg_release_held = 0;
}

void tg_tensor_release(tg_tensor *t) {
  if (!t->handle) return;
  if (tg_tensor_view_of(t->handle, NULL)) { /* its pack's: only forgotten here */
    memset(t, 0, sizeof *t);
    return;
  }
  if (tg_release_held && !t->host && !t->device) {
    if (tg_nheld == tg_held_cap) {
      int cap = tg_held_cap ? 2 * tg_held_cap : 32;
      starpu_data_handle_t *grown = realloc(tg_held, cap * sizeof *grown);
      if (!grown) TG_FATAL("out of memory for held releases");
      tg_held = grown;
      tg_held_cap = cap;
    }
    tg_held[tg_nheld++] = t->handle;
    memset(t, 0, sizeof *t);
    return;
  }
  if (t->host || t->device) {
    /* StarPU 1.3 has no completion callback for an asynchronous
     * unregistration, so a host buffer is freed synchronously; host tensors
     * are long-lived, so this never runs inside a step. */
    tg_tensor_free(t);
    return;
  }
  tg_device_memory_forget(t->handle);
  starpu_data_unregister_submit(t->handle);
  memset(t, 0, sizeof *t);
}

void tg_tensor_free(tg_tensor *t) {
  if (!t->handle) return;
  if (tg_tensor_view_of(t->handle, NULL)) { /* its memory is the whole's */
    tg_device_memory_forget(t->handle); /* a refused REDUX access may have named it */
    free(starpu_data_get_user_data(t->handle));
    starpu_data_set_user_data(t->handle, NULL);
    starpu_data_unregister_no_coherency(t->handle);
    memset(t, 0, sizeof *t);
    return;
  }
  tg_device_memory_forget(t->handle);
  starpu_data_unregister(t->handle);
  /* the size tg_tensor_alloc gave starpu_malloc: StarPU 1.4 deprecates
   * the size-less starpu_free; starpu_free_flags is in 1.3 and 1.4 */
  if (t->host)
    starpu_free_flags(t->host, tg_tensor_numel(t) * tg_dtype_size(t->dtype),
                      tg_host_flags(tg_tensor_numel(t) * tg_dtype_size(t->dtype)));
  if (t->device)
    starpu_free_on_node((unsigned)t->node, t->device, tg_tensor_numel(t) * tg_dtype_size(t->dtype));
  memset(t, 0, sizeof *t);
}

/* A view's whole and its offset there, else the tensor's own handle */
static starpu_data_handle_t tg_tensor_home(const tg_tensor *t, size_t *offset) {
  starpu_data_handle_t whole = tg_tensor_view_of(t->handle, offset);
  if (whole) return whole;
  *offset = 0;
  return t->handle;
}

int tg_tensor_read(const tg_tensor *t, void *dst) {
  if (!t->handle) return tg_fail(EINVAL, "tg_tensor_read: empty tensor");
  size_t off;
  starpu_data_handle_t h = tg_tensor_home(t, &off);
  TG_STARPU(starpu_data_acquire(h, STARPU_R));
  const char *src = (const char *)starpu_data_get_local_ptr(h) + off;
  memcpy(dst, src, tg_tensor_numel(t) * tg_dtype_size(t->dtype));
  starpu_data_release(h);
  return 0;
}

int tg_tensor_write(tg_tensor *t, const void *src) {
  if (!t->handle) return tg_fail(EINVAL, "tg_tensor_write: empty tensor");
  size_t off;
  starpu_data_handle_t h = tg_tensor_home(t, &off);
  /* a view keeps the rest of its whole: read-write */
  TG_STARPU(starpu_data_acquire(h, h == t->handle ? STARPU_W : STARPU_RW));
  char *dst = (char *)starpu_data_get_local_ptr(h) + off;
  memcpy(dst, src, tg_tensor_numel(t) * tg_dtype_size(t->dtype));
  starpu_data_release(h);
  return 0;
}

/* ---- packed tensors ------------------------------------------------------ */

#define TG_PACK_ALIGN ((size_t)256)
#define TG_VIEW_MAGIC 0x76696577u /* "view" */

/* a view handle's user data (starpu_data_set_user_data) */
typedef struct tg_view_info {
  uint32_t magic;
  starpu_data_handle_t whole;
  size_t offset; /* bytes */
} tg_view_info;

starpu_data_handle_t tg_tensor_view_of(starpu_data_handle_t h, size_t *offset) {
  const tg_view_info *v = h ? starpu_data_get_user_data(h) : NULL;
  if (!v || v->magic != TG_VIEW_MAGIC) return NULL;
  if (offset) *offset = v->offset;
  return v->whole;
}

int tg_tensor_pack(tg_tensor *whole, int n, tg_tensor *const parts[], const int rows[],
                   const int cols[], const tg_dtype dtypes[]) {
  memset(whole, 0, sizeof *whole);
  if (n < 1) return tg_fail(EINVAL, "tg_tensor_pack: %d tensors", n);
  size_t bytes = 0, es = tg_dtype_size(dtypes[0]);
  for (int i = 0; i < n; i++) {
    TG_TRY(tg_check_shape(rows[i], cols[i], dtypes[i]));
    bytes = (bytes + TG_PACK_ALIGN - 1) / TG_PACK_ALIGN * TG_PACK_ALIGN +
            (size_t)rows[i] * (size_t)cols[i] * tg_dtype_size(dtypes[i]);
  }
  size_t total = (bytes + es - 1) / es;
  if (total > (size_t)INT32_MAX)
    return tg_fail(EINVAL, "tg_tensor_pack: %zu elements, at most %d in one pack", total,
                   INT32_MAX);
  TG_TRY(tg_tensor_alloc(whole, 1, (int)total, dtypes[0]));
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    off = (off + TG_PACK_ALIGN - 1) / TG_PACK_ALIGN * TG_PACK_ALIGN;
    tg_tensor *t = parts[i];
    memset(t, 0, sizeof *t);
    tg_view_info *v = malloc(sizeof *v);
    if (!v) {
      for (int k = 0; k < i; k++) tg_tensor_free(parts[k]);
      tg_tensor_free(whole);
      return tg_fail(ENOMEM, "tg_tensor_pack: out of memory");
    }
    *v = (tg_view_info){.magic = TG_VIEW_MAGIC, .whole = whole->handle, .offset = off};
    /* no home node and never given memory: StarPU sees only the whole */
    starpu_matrix_data_register(&t->handle, -1, 0, (uint32_t)cols[i], (uint32_t)cols[i],
                                (uint32_t)rows[i], tg_dtype_size(dtypes[i]));
    starpu_data_set_user_data(t->handle, v);
    t->rows = rows[i];
    t->cols = cols[i];
    t->dtype = dtypes[i];
    t->host = (char *)whole->host + off;
    off += (size_t)rows[i] * (size_t)cols[i] * tg_dtype_size(dtypes[i]);
  }
  return 0;
}

/* ---- row- and column-block splits -------------------------------------- */

/* by_cols: blocks of columns (nx) instead of rows (ny) */
static int tg_split_init(tg_tensor *t, int n, tg_split *s, int by_cols) {
  memset(s, 0, sizeof *s);
  if (n < 1 || n > TG_MAX_SPLIT || n > (by_cols ? t->cols : t->rows))
    return tg_fail(EINVAL, "cannot split a (%d, %d) tensor into %d %s blocks (at most %d)",
                   t->rows, t->cols, n, by_cols ? "column" : "row", TG_MAX_SPLIT);
  s->n = n;
  return 0;
}

/* Column blocks keep the whole's leading dimension, except the blocks of a
 * one-row matrix (a bias), which are contiguous: saying so (ld = nx) lets
 * the codelets that require contiguous buffers (the optimizers) take them. */
static void tg_filter_cols(void *parent, void *child, struct starpu_data_filter *f,
                           unsigned id, unsigned nparts) {
  starpu_matrix_filter_block(parent, child, f, id, nparts);
  struct starpu_matrix_interface *c = child;
  if (c->ny == 1) c->ld = c->nx;
}

/* Both filters size the blocks alike: the first (extent % n) blocks get one
 * element more, so a row split of W (out, in) and a column split of
 * b (1, out) or Z (rows, out) into n blocks cut `out` at the same places. */
static struct starpu_data_filter tg_block_filter(int n, int by_cols) {
  struct starpu_data_filter f;
  memset(&f, 0, sizeof f);
  f.filter_func = by_cols ? tg_filter_cols : starpu_matrix_filter_vertical_block;
  f.nchildren = (unsigned)n;
  return f;
}

int tg_tensor_split_static(tg_tensor *t, int n, tg_split *s) {
  TG_TRY(tg_split_init(t, n, s, 0));
  struct starpu_data_filter f = tg_block_filter(n, 0);
  starpu_data_partition(t->handle, &f);
  for (int i = 0; i < n; i++) s->parts[i] = starpu_data_get_sub_data(t->handle, 1, i);
  s->active = 3; /* static: only tg_split_free undoes it */
  return 0;
}

static int tg_split_plan_dim(tg_tensor *t, int n, tg_split *s, int by_cols) {
  TG_TRY(tg_split_init(t, n, s, by_cols));
  if (!t->host && !t->device)
    return tg_fail(EINVAL, "a split plan needs a tensor with a home node (tg_tensor_alloc)");
  struct starpu_data_filter f = tg_block_filter(n, by_cols);
  starpu_data_partition_plan(t->handle, &f, s->parts);
  return 0;
}

int tg_split_plan(tg_tensor *t, int n, tg_split *s) { return tg_split_plan_dim(t, n, s, 0); }

/* Views: child i is the (rows[i], cols[i]) matrix that starts at element
 * start[i] of a contiguous (n, 1) parent, with ld = cols[i]. */
typedef struct tg_view_layout {
  const int *rows, *cols;
  const size_t *start;
} tg_view_layout;

static void tg_filter_views(void *parent, void *child, struct starpu_data_filter *f,
                            unsigned id, unsigned nparts) {
  (void)nparts;
  const tg_view_layout *v = f->filter_arg_ptr;
  struct starpu_matrix_interface *p = parent, *c = child;
  size_t offset = v->start[id] * p->elemsize;
  c->id = p->id;
  c->nx = (uint32_t)v->cols[id];
  c->ny = (uint32_t)v->rows[id];
  c->ld = c->nx;
  c->elemsize = p->elemsize;
  c->allocsize = (size_t)c->nx * c->ny * c->elemsize;
  if (p->dev_handle) { /* allocated on this node: the child is inside */
    if (p->ptr) c->ptr = p->ptr + offset;
    c->dev_handle = p->dev_handle;
    c->offset = p->offset + offset;
  }
}

int tg_split_plan_views(tg_tensor *t, int n, const int *rows, const int *cols, tg_split *s) {
  memset(s, 0, sizeof *s);
  size_t start[TG_MAX_SPLIT], end = 0;
  if (n < 1 || n > TG_MAX_SPLIT || t->cols != 1)
    return tg_fail(EINVAL, "cannot view a (%d, %d) tensor as %d matrices (a column of at most "
                   "%d)", t->rows, t->cols, n, TG_MAX_SPLIT);
  for (int i = 0; i < n; i++) {
    start[i] = end;
    end += (size_t)rows[i] * (size_t)cols[i];
  }
  if (end != (size_t)t->rows)
    return tg_fail(EINVAL, "%d views of %zu elements do not tile a tensor of %d", n, end,
                   t->rows);
  if (!t->host && !t->device)
    return tg_fail(EINVAL, "a split plan needs a tensor with a home node (tg_tensor_alloc)");
  tg_view_layout layout = {.rows = rows, .cols = cols, .start = start};
  struct starpu_data_filter f;
  memset(&f, 0, sizeof f);
  f.filter_func = tg_filter_views;
  f.nchildren = (unsigned)n;
  f.filter_arg_ptr = &layout; /* StarPU 1.3 and 1.4 call the filter during the plan only */
  starpu_data_partition_plan(t->handle, &f, s->parts);
  s->n = n;
  return 0;
}

int tg_split_plan_cols(tg_tensor *t, int n, tg_split *s) {
  return tg_split_plan_dim(t, n, s, 1);
}

void tg_split_readonly(tg_tensor *t, tg_split *s) {
  if (s->active == 1) return;
  if (s->active == 2) tg_split_join(t, s);
  starpu_data_partition_readonly_submit(t->handle, (unsigned)s->n, s->parts);
  s->active = 1;
}

void tg_split_write(tg_tensor *t, tg_split *s) {
  if (s->active == 2) return;
  if (s->active == 1)
    starpu_data_partition_readwrite_upgrade_submit(t->handle, (unsigned)s->n, s->parts);
  else
    starpu_data_partition_submit(t->handle, (unsigned)s->n, s->parts);
  s->active = 2;
}

void tg_split_join(tg_tensor *t, tg_split *s) {
  if (s->active != 1 && s->active != 2) return;
  /* -1: gather where StarPU sees fit, not necessarily in main RAM */
  starpu_data_unpartition_submit(t->handle, (unsigned)s->n, s->parts, -1);
  s->active = 0;
}

void tg_split_free(tg_tensor *t, tg_split *s) {
  if (s->n == 0 || !t->handle) return;
  if (s->active == 3) {
    starpu_data_unpartition(t->handle, STARPU_MAIN_RAM);
  } else {
    tg_split_join(t, s);
    starpu_data_partition_clean(t->handle, (unsigned)s->n, s->parts);
  }
  memset(s, 0, sizeof *s);
}

/* acquires (or, release, releases) every block of a static split in main RAM */
static int tg_split_acquire(const tg_split *s, enum starpu_data_access_mode mode, int release) {
  for (int i = 0; i < s->n; i++) {
    if (release) starpu_data_release(s->parts[i]);
    else TG_STARPU(starpu_data_acquire(s->parts[i], mode));
  }
  return 0;
}

int tg_tensor_read_split(const tg_tensor *t, const tg_split *s, void *dst) {
  if (!t->host || s->active != 3)
    return tg_fail(EINVAL, "tg_tensor_read_split: not a host tensor under a static split");
  TG_TRY(tg_split_acquire(s, STARPU_R, 0));
  memcpy(dst, t->host, tg_tensor_numel(t) * tg_dtype_size(t->dtype));
  return tg_split_acquire(s, STARPU_R, 1);
}

int tg_tensor_write_split(tg_tensor *t, const tg_split *s, const void *src) {
  if (!t->host || s->active != 3)
    return tg_fail(EINVAL, "tg_tensor_write_split: not a host tensor under a static split");
  TG_TRY(tg_split_acquire(s, STARPU_W, 0));
  memcpy(t->host, src, tg_tensor_numel(t) * tg_dtype_size(t->dtype));
  return tg_split_acquire(s, STARPU_W, 1);
}
