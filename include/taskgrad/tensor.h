/*
 * taskgrad tensors: 2-D row-major tensors backed by StarPU matrix handles.
 *
 * A (rows, cols) tensor is a StarPU matrix with nx = cols (the contiguous
 * dimension), ny = rows and ld = cols, so splitting a batch along its rows is
 * starpu_matrix_filter_vertical_block.
 *
 * Two kinds:
 *  - host tensors (parameters, optimizer state, batches, metrics) live in
 *    pinned main memory from starpu_malloc, registered on node STARPU_MAIN_RAM;
 *  - temporaries (activations, their gradients) are registered with no home
 *    node, so StarPU allocates them only where tasks use them, and are released
 *    with tg_tensor_release() as soon as their last task is submitted: StarPU
 *    frees them when that task ends, with no wait on the host.
 */
#ifndef TASKGRAD_TENSOR_H
#define TASKGRAD_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

#include "taskgrad/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_tensor {
  starpu_data_handle_t handle; /* NULL when the tensor is empty */
  int rows, cols;
  tg_dtype dtype;
  void *host; /* pinned buffer (rows * cols elements) or NULL for temporaries */
  uintptr_t device; /* tg_tensor_alloc_on_node: its buffer on that node, else 0 */
  int node;         /* tg_tensor_alloc_on_node: the home node, else 0 */
} tg_tensor;

/* A host tensor in pinned memory, zero-filled, registered on main RAM.
 * Call after tg_init(), so that the memory is really pinned. */
int tg_tensor_alloc(tg_tensor *t, int rows, int cols, tg_dtype dtype);
/* A tensor whose home is memory node `node` (a device's memory: sharded
 * data parallelism keeps each device's gradient contributions and weight
 * replica there, so that StarPU 1.3's partition switches, which run on the
 * home node, never bring them to main RAM).  Not initialised: its first
 * task must write it.  Host pointer NULL; freed by tg_tensor_free. */
int tg_tensor_alloc_on_node(tg_tensor *t, int rows, int cols, tg_dtype dtype, unsigned node);
/* A temporary with no home node. */
int tg_tensor_temp(tg_tensor *t, int rows, int cols, tg_dtype dtype);
/* End of life.  For a temporary it is asynchronous: StarPU unregisters and
 * frees the data once every task submitted on it has run, with no wait here.
 * A host tensor is freed synchronously (tg_tensor_free).  t is emptied. */
void tg_tensor_release(tg_tensor *t);
/* Held releases: between tg_tensor_release_hold() and
 * tg_tensor_release_flush(), tg_tensor_release() of a temporary only
 * records its handle, and the flush unregisters the recorded ones in order.
 * Task fusion (tg_fuse_begin, codelets.h) submits its tasks at the end of a
 * group, so a temporary released inside one must outlive that submission.
 * Per thread; holds do not nest. */
void tg_tensor_release_hold(void);
void tg_tensor_release_flush(void);
/* Synchronous end of life: waits for the tasks on t, then frees. */
void tg_tensor_free(tg_tensor *t);

/* Copy out / in through a blocking acquire (these synchronise with the tasks
 * on t, so never call them inside a step you want to stay asynchronous). */
int tg_tensor_read(const tg_tensor *t, void *dst);
int tg_tensor_write(tg_tensor *t, const void *src);
/* tg_tensor_enable_reduction (STARPU_REDUX on a tensor) names codelets:
 * it belongs to the parallel layer and is declared in parallel.h. */

/* ---- packed tensors: one StarPU buffer seen as several tensors ---------------
 * tg_tensor_pack allocates `whole`, a host tensor (1, total) holding n
 * tensors one after the other (each from a 256-byte boundary, for vector
 * loads and the tensor cores), and makes *parts[i] a (rows[i], cols[i])
 * view of its range, of type dtypes[i] (the whole's is the first's): a
 * tensor with its own shape, host pointer (written before any task, as a
 * host tensor's) and handle, which tasks name as usual.  StarPU moves and orders only the whole: a task that names views
 * is run by a fused task over their wholes (codelets/fuse.c), which hands
 * each part an interface of its range.  So a layer's parameters cost a task
 * one buffer instead of a dozen (StarPU's driver time is per buffer), at the
 * price of ordering every task on any part after every earlier writer of
 * any other.  A view's handle must never reach StarPU otherwise: no
 * partition, no REDUX (refused), no acquire (tg_tensor_read and _write go
 * through the whole).  Unlike tg_split_plan_views (below), whose blocks are
 * StarPU children, each a buffer of its own to every task that names it.
 * tg_tensor_release of a view only empties the tensor (the view
 * stays its pack's); tg_tensor_free frees it.  Free the views, then the
 * whole. */
int tg_tensor_pack(tg_tensor *whole, int n, tg_tensor *const parts[], const int rows[],
                   const int cols[], const tg_dtype dtypes[]);
/* For a view's handle: its whole's, and *offset its first byte there;
 * NULL for any other handle */
starpu_data_handle_t tg_tensor_view_of(starpu_data_handle_t h, size_t *offset);

/* ---- splitting a tensor into row (or column) blocks ---------------------------
 * Static: a permanent, synchronous partition made before any task touches
 * the tensor; the blocks are then used instead of the whole.
 * Asynchronous (a plan): blocks and whole alternate within the task graph:
 * tg_split_readonly() makes the blocks readable (the whole stays readable),
 * tg_split_write() makes them writable (the whole becomes invalid),
 * tg_split_join() makes the whole valid again.  Plans need a tensor with a
 * home node (tg_tensor_alloc): StarPU 1.3 cannot plan a partition of data
 * that has no memory yet.  tg_split_free() joins and drops the plan. */
#define TG_MAX_SPLIT 64
typedef struct tg_split {
  int n;                                    /* number of blocks */
  int active;                               /* 0 joined, 1 read-only, 2 written */
  starpu_data_handle_t parts[TG_MAX_SPLIT];
} tg_split;

int tg_tensor_split_static(tg_tensor *t, int n, tg_split *s);
int tg_split_plan(tg_tensor *t, int n, tg_split *s);
/* A plan over n blocks of columns (features) instead of rows: each block
 * keeps the whole's leading dimension.  Row and column splits into n blocks
 * cut at the same places (the first extent % n blocks one element larger),
 * so W (out, in) by rows matches b (1, out) and Z (rows, out) by columns. */
int tg_split_plan_cols(tg_tensor *t, int n, tg_split *s);
/* A plan of n views of a contiguous (sum of rows[i] * cols[i], 1) tensor:
 * view i is the (rows[i], cols[i]) matrix that follows view i - 1 (one flat
 * buffer that tasks see as several tensors: a gradient bucket). */
int tg_split_plan_views(tg_tensor *t, int n, const int *rows, const int *cols, tg_split *s);
void tg_split_readonly(tg_tensor *t, tg_split *s);
void tg_split_write(tg_tensor *t, tg_split *s);
void tg_split_join(tg_tensor *t, tg_split *s);
void tg_split_free(tg_tensor *t, tg_split *s);
/* The same for a tensor under a static split s (tg_tensor_split_static):
 * every block acquired in main RAM, then the whole host buffer copied. */
int tg_tensor_read_split(const tg_tensor *t, const tg_split *s, void *dst);
int tg_tensor_write_split(tg_tensor *t, const tg_split *s, const void *src);
/* Where block j of an extent split into n blocks starts, and (size) how
 * long it is: the cut of every split above. */
static inline int tg_split_start(int extent, int n, int j, int *size) {
  int q = extent / n, r = extent % n;
  if (size) *size = q + (j < r);
  return j * q + (j < r ? j : r);
}

static inline size_t tg_tensor_numel(const tg_tensor *t) {
  return (size_t)t->rows * (size_t)t->cols;
}

#ifdef __cplusplus
}
#endif
#endif
