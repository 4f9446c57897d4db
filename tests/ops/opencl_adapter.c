/*
 * Row opencl_adapter (codelets/opencl_adapter.c; not an op), device backend only
 * (was test_emulated_offsets): the OpenCL adapter on sub-matrices that live inside
 * their parent's device buffer (a cl_mem plus a byte offset, the parent's
 * leading dimension).
 *
 * A (7, 33) tensor is scaled once on the emulated device, so that its buffer
 * is allocated there; partitioned then into 3 column blocks and 2 row
 * blocks (StarPU derives the children's device interfaces from the
 * parent's: same cl_mem, non-zero offsets); each child is scaled by its own
 * factor on the device.  The test checks that the offsets really are
 * non-zero (else it would not test what it says), and that every element
 * got exactly its block's factor: an adapter that ignored the offset or the
 * leading dimension would scale the wrong elements.  The tg_scale kernel is
 * exact for powers of two.  The other backends have no OpenCL adapter;
 * every other row's device case runs through it too.
 */
#include "pair.h"

#define ROWS 7
#define COLS 33

/* the children's split along one dimension: column blocks (nx) or row
 * blocks (ny) */
static void check_split(int ocl, unsigned node, int by_rows) {
  tg_tensor t;
  float x[ROWS * COLS], y[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) x[i] = (float)(i % 17) - 8.0f;
  if (tg_tensor_alloc(&t, ROWS, COLS, TG_F32) != 0 || tg_tensor_write(&t, x) != 0)
    die("tensor");
  tg_task_opts on_dev = {.worker = ocl, .lowp = TG_F32};
  if (tg_scale_insert(t.handle, 2.0f, &on_dev) != 0) die("scale on the device");
  const int nchild = by_rows ? 2 : 3;
  struct starpu_data_filter f = {
      .filter_func = by_rows ? starpu_matrix_filter_vertical_block : starpu_matrix_filter_block,
      .nchildren = (unsigned)nchild,
  };
  starpu_data_partition(t.handle, &f);
  int nonzero = 0;
  for (int c = 0; c < nchild; c++) {
    starpu_data_handle_t h = starpu_data_get_sub_data(t.handle, 1, c);
    if (tg_scale_insert(h, (float)(4 << c), &on_dev) != 0) die("scale a child");
    starpu_task_wait_for_all();
    const struct starpu_matrix_interface *m = starpu_data_get_interface_on_node(h, node);
    nonzero += m && m->offset != 0;
  }
  starpu_data_unpartition(t.handle, STARPU_MAIN_RAM);
  if (tg_tensor_read(&t, y) != 0) die("read");
  int wrong = 0;
  for (int r = 0; r < ROWS; r++)
    for (int col = 0; col < COLS; col++) {
      /* StarPU's block filters give the remainder to the first blocks */
      int n = by_rows ? ROWS : COLS, i = by_rows ? r : col, block = 0, start = 0;
      for (int c = 0; c < nchild; c++) {
        int len = n / nchild + (c < n % nchild);
        if (i >= start && i < start + len) block = c;
        start += len;
      }
      float want = x[r * COLS + col] * 2.0f * (float)(4 << block);
      wrong += memcmp(&want, &y[r * COLS + col], sizeof want) != 0;
    }
  const char *what = by_rows ? "row blocks" : "column blocks";
  CHECK(nonzero == nchild - 1, "%s: %d children with a non-zero device offset, expected %d "
        "(the case is not exercised)", what, nonzero, nchild - 1);
  CHECK(wrong == 0, "%s: %d of %d elements wrong", what, wrong, ROWS * COLS);
  printf("%s: %d children at non-zero offsets, %d wrong elements\n", what, nonzero, wrong);
  tg_tensor_free(&t);
}

static void opencl_adapter_device(void) {
  int ocl = g_cuda_worker;
  unsigned node = starpu_worker_get_memory_node((unsigned)ocl);
  check_split(ocl, node, 0);
  check_split(ocl, node, 1);
}

/* not an op: the adapter every device case runs through, on sub-matrices */
static const ops_row rows[] = {
    {.name = "opencl_adapter",
     .doc = "(not an op) the OpenCL adapter on sub-matrices at an offset in their parent",
     .buffers = "",
     .covers = "",
     .run = {[OPS_DEVICE] = opencl_adapter_device},
     .why_not = {[OPS_REF] = "no OpenCL adapter without an emulated device",
                 [OPS_CPU] = "no OpenCL adapter without an emulated device",
                 [OPS_CUDA] = "no OpenCL adapter without an emulated device",
                 [OPS_CUDA_EMU] = "no OpenCL adapter without an emulated device",
                 [OPS_LOWP] = "no OpenCL adapter without an emulated device"}},
};

OPS_ROWS(rows)
