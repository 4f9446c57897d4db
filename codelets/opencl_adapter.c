/*
 * OpenCL entry point for every codelet: the CPU function on mapped buffers.
 *
 * Design note
 * -----------
 * taskgrad has no OpenCL kernels.  Its OpenCL workers exist to give a
 * machine without a GPU extra memory nodes ("emulated accelerators", PoCL's
 * pthread devices, tg_runtime_config.emulated_devices): StarPU then
 * allocates device buffers, copies data between nodes, prefetches, evicts
 * and merges reductions across nodes exactly as it would for GPUs, and a
 * graph's data-movement bugs show up on a laptop.
 *
 * So every codelet gets one OpenCL implementation, written once here: the
 * entry point maps each of the task's cl_mem buffers on the worker's queue
 * (a blocking map: the pointers are valid when it returns), hands the
 * codelet's CPU entry point interfaces that describe the mapped memory, and
 * unmaps them, waiting for the queue to finish, before StarPU may copy or
 * free the buffers.  The CPU entry is the one TG_CODELET built, so the
 * low-precision adapter (lowp_adapter.c) runs inside it on mapped memory
 * too, and the results are those of the CPU worker bit for bit (same
 * kernels, same operands).
 *
 * A device buffer is a cl_mem (dev_handle) and a byte offset into it: a
 * sub-matrix of a partitioned handle shares its parent's cl_mem, with the
 * parent's leading dimension.  The mapped region runs from the offset to the
 * last element, so rows keep their ld.  StarPU leaves `ptr` 0 on OpenCL
 * nodes; the views put the mapped address in ptr and dev_handle, offset 0.
 *
 * Map flags follow the access mode: read-only buffers are mapped for
 * reading (PoCL then need not write them back), all others (W, RW, SCRATCH,
 * a REDUX contribution) for reading and writing.
 */
#include <starpu.h>

#ifdef STARPU_USE_OPENCL
#include <string.h>

#include "codelet_common.h"

/* the bytes of buffer `buf` from its first element to its last, and its
 * offset into its cl_mem; 0 for an interface this adapter does not know */
static size_t tg_ocl_extent(void *buf, size_t *offset) {
  enum starpu_data_interface_id id = *(enum starpu_data_interface_id *)buf;
  if (id == STARPU_MATRIX_INTERFACE_ID) {
    const struct starpu_matrix_interface *m = buf;
    *offset = m->offset;
    if (m->nx == 0 || m->ny == 0) return 0;
    return ((size_t)(m->ny - 1) * m->ld + m->nx) * m->elemsize;
  }
  if (id == STARPU_VECTOR_INTERFACE_ID) {
    const struct starpu_vector_interface *v = buf;
    *offset = v->offset;
    return (size_t)v->nx * v->elemsize;
  }
  if (id == STARPU_VARIABLE_INTERFACE_ID) {
    const struct starpu_variable_interface *v = buf;
    *offset = v->offset;
    return v->elemsize;
  }
  TG_FATAL("OpenCL adapter: buffer with data interface %d (matrix, vector or variable only)",
           (int)id);
}

static cl_mem tg_ocl_mem(void *buf) {
  /* dev_handle sits at the same place in the three interfaces */
  return (cl_mem)((struct starpu_matrix_interface *)buf)->dev_handle;
}

/* a copy of interface `buf` that points at host address p */
static void tg_ocl_view(void *view, const void *buf, void *p) {
  enum starpu_data_interface_id id = *(const enum starpu_data_interface_id *)buf;
  if (id == STARPU_MATRIX_INTERFACE_ID) {
    struct starpu_matrix_interface *m = view;
    *m = *(const struct starpu_matrix_interface *)buf;
    m->ptr = m->dev_handle = (uintptr_t)p;
    m->offset = 0;
  } else if (id == STARPU_VECTOR_INTERFACE_ID) {
    struct starpu_vector_interface *v = view;
    *v = *(const struct starpu_vector_interface *)buf;
    v->ptr = v->dev_handle = (uintptr_t)p;
    v->offset = 0;
  } else {
    struct starpu_variable_interface *v = view;
    *v = *(const struct starpu_variable_interface *)buf;
    v->ptr = v->dev_handle = (uintptr_t)p;
    v->offset = 0;
  }
}

/* room for any of the three interfaces */
typedef union tg_ocl_iface {
  struct starpu_matrix_interface m;
  struct starpu_vector_interface v;
  struct starpu_variable_interface s;
} tg_ocl_iface;

/* an adapted task's buffers and its workspace, or an exchange task's out
 * and inputs (codelets/exchange.c: more than STARPU_NMAXBUFS) */
#define TG_OCL_MAX_BUFFERS                                                  \
  (TG_MAX_TASK_BUFFERS > TG_MAX_BUFFERS + 1 ? TG_MAX_TASK_BUFFERS : TG_MAX_BUFFERS + 1)

#define TG_CL_CHECK(expr)                                                   \
  do {                                                                      \
    cl_int tg_cl_rc_ = (expr);                                              \
    if (tg_cl_rc_ != CL_SUCCESS)                                            \
      TG_FATAL("OpenCL call %s failed: %s (%d)", #expr,                     \
               starpu_opencl_error_string(tg_cl_rc_), (int)tg_cl_rc_);      \
  } while (0)

void tg_opencl_call(void *buffers[], void *cl_arg, void (*cpu_fn)(void *[], void *),
                    const struct starpu_codelet *cl) {
  /* A reduction's init function is called outside any task (StarPU 1.3's
   * _starpu_redux_init_data_replicate): codelets with fixed buffers take
   * their count and modes from the codelet, the others from the task. */
  const struct starpu_task *task = NULL;
  unsigned n = (unsigned)cl->nbuffers;
  if (cl->nbuffers == STARPU_VARIABLE_NBUFFERS) {
    task = tg_task_current();
    if (!task) TG_FATAL("OpenCL adapter: %s outside a task", cl->name);
    n = STARPU_TASK_GET_NBUFFERS(task);
  }
  if (n > TG_OCL_MAX_BUFFERS) TG_FATAL("OpenCL adapter: %u buffers", n);
  cl_command_queue queue;
  starpu_opencl_get_current_queue(&queue);
  tg_ocl_iface views[TG_OCL_MAX_BUFFERS]; /* 5 KiB with the two below */
  void *bufs[TG_OCL_MAX_BUFFERS];
  void *mapped[TG_OCL_MAX_BUFFERS];
  for (unsigned i = 0; i < n; i++) {
    size_t offset = 0, bytes = tg_ocl_extent(buffers[i], &offset);
    mapped[i] = NULL;
    bufs[i] = buffers[i];
    if (bytes == 0) continue; /* an empty matrix: nothing to map */
    enum starpu_data_access_mode mode = task ? STARPU_TASK_GET_MODE(task, i) : cl->modes[i];
    int read_only = (mode & ~(STARPU_COMMUTE | STARPU_SSEND | STARPU_LOCALITY)) == STARPU_R;
    cl_map_flags flags = read_only ? CL_MAP_READ : CL_MAP_READ | CL_MAP_WRITE;
    cl_int err = CL_SUCCESS;
    mapped[i] = clEnqueueMapBuffer(queue, tg_ocl_mem(buffers[i]), CL_TRUE, flags, offset,
                                   bytes, 0, NULL, NULL, &err);
    TG_CL_CHECK(err);
    if (!mapped[i]) TG_FATAL("OpenCL adapter: clEnqueueMapBuffer returned NULL");
    tg_ocl_view(&views[i], buffers[i], mapped[i]);
    bufs[i] = &views[i];
  }
  cpu_fn(bufs, cl_arg);
  for (unsigned i = 0; i < n; i++)
    if (mapped[i])
      TG_CL_CHECK(clEnqueueUnmapMemObject(queue, tg_ocl_mem(buffers[i]), mapped[i], 0, NULL,
                                          NULL));
  /* StarPU may copy or free the buffers once we return */
  TG_CL_CHECK(clFinish(queue));
}
#endif
