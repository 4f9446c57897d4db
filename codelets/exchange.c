/*
 * The exchange codelets of sharded data parallelism: tg_sum_tree (the
 * fixed-tree sum of n gradients) and tg_gather_rows (the stacking of a
 * parameter's row blocks).  Buffers: out (W) first, then in[0 .. n-1] (R).
 *
 * Design note
 * -----------
 * - Up to TG_EXCHANGE_MAX + 1 buffers, more than StarPU's STARPU_NMAXBUFS
 *   (8 in Debian's build): tg_submit gives such tasks dyn_handles, and the
 *   OpenCL adapter sizes its arrays for TG_MAX_TASK_BUFFERS.
 * - Neither goes through the low-precision adapter: the codelets are
 *   declared with TG_CODELET_ENTRIES (no tg_lowp_cpu wrapper) and submitted
 *   with tg_submit_native.  The sum is f32 only (a 2-byte buffer is refused); the
 *   gather copies bytes of any element size (f32, bf16, fp16), so 16-bit
 *   blocks stay 16-bit with no rounding.
 * - The sum's order is the midpoint tree of graphs/reduce.c (see
 *   tg_cpu_sum_tree), on every device, so a sharded step's gradient sums
 *   have the bits of the deterministic micro-batch sums.
 * - The gather's blocks follow tg_split_start (the split of
 *   starpu_matrix_filter_vertical_block), each checked at submission.
 * - cl_arg: the shape key (n, and the element size for the gather: the
 *   matrix footprint holds only the sizes) and n.
 * - The gather may read one more buffer after its inputs, a gate
 *   (tg_gather_rows_after_insert): only so that StarPU starts it, and so
 *   moves its inputs, once the gate's last writer is done.  The kernels
 *   never touch it (they read n from cl_arg).
 */
#include <errno.h>
#include <stdio.h>

#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/tensor.h"

#if defined(TG_HAVE_CUDA) && TG_EXCHANGE_MAX > TG_CUDA_SUM_TREE_MAX
#error "tg_cuda_sum_tree takes fewer inputs than TG_EXCHANGE_MAX"
#endif

typedef struct tg_exchange_args {
  uint32_t shape;
  int n;
} tg_exchange_args;

/* the inputs' pointers and leading dimensions (buffers 1 .. n) */
static int tg_exchange_inputs(void *buffers[], const void *cl_arg, const void **in, int *ld,
                              int *rows) {
  const tg_exchange_args *a = cl_arg;
  for (int i = 0; i < a->n; i++) {
    in[i] = (const void *)STARPU_MATRIX_GET_PTR(buffers[1 + i]);
    ld[i] = TG_LD(buffers[1 + i]);
    if (rows) rows[i] = TG_ROWS(buffers[1 + i]);
  }
  return a->n;
}

static void tg_sum_tree_cpu(void *buffers[], void *cl_arg) {
  const void *in[TG_EXCHANGE_MAX];
  int ld[TG_EXCHANGE_MAX];
  int n = tg_exchange_inputs(buffers, cl_arg, in, ld, NULL);
  tg_cpu_sum_tree(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), n, (const float *const *)in, ld,
                  TG_PTR(buffers[0]), TG_LD(buffers[0]));
}

static void tg_gather_rows_cpu(void *buffers[], void *cl_arg) {
  const void *in[TG_EXCHANGE_MAX];
  int ld[TG_EXCHANGE_MAX], rows[TG_EXCHANGE_MAX];
  int n = tg_exchange_inputs(buffers, cl_arg, in, ld, rows);
  tg_cpu_gather_rows(TG_COLS(buffers[0]), STARPU_MATRIX_GET_ELEMSIZE(buffers[0]), n, in, rows,
                     ld, (void *)STARPU_MATRIX_GET_PTR(buffers[0]), TG_LD(buffers[0]));
}

#ifdef TG_HAVE_CUDA
static void tg_sum_tree_cuda(void *buffers[], void *cl_arg) {
  const void *in[TG_EXCHANGE_MAX];
  int ld[TG_EXCHANGE_MAX];
  int n = tg_exchange_inputs(buffers, cl_arg, in, ld, NULL);
  TG_CUDA_CHECK(tg_cuda_sum_tree(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), n,
                                 (const float *const *)in, ld, TG_PTR(buffers[0]),
                                 TG_LD(buffers[0]), starpu_cuda_get_local_stream()));
}

static void tg_gather_rows_cuda(void *buffers[], void *cl_arg) {
  const void *in[TG_EXCHANGE_MAX];
  int ld[TG_EXCHANGE_MAX], rows[TG_EXCHANGE_MAX];
  int n = tg_exchange_inputs(buffers, cl_arg, in, ld, rows);
  TG_CUDA_CHECK(tg_cuda_gather_rows(TG_COLS(buffers[0]), STARPU_MATRIX_GET_ELEMSIZE(buffers[0]),
                                    n, in, rows, ld, (void *)STARPU_MATRIX_GET_PTR(buffers[0]),
                                    TG_LD(buffers[0]), starpu_cuda_get_local_stream()));
}
#endif

/* Not TG_CODELET: no low-precision adapter around them. */
TG_CODELET_ENTRIES(sum_tree, tg_sum_tree_cpu, tg_sum_tree_cuda);
TG_CODELET_ENTRIES(gather_rows, tg_gather_rows_cpu, tg_gather_rows_cuda);

/* n in range, the handles present, none of the inputs out or another input */
static int tg_exchange_check(const char *op, int n, const starpu_data_handle_t *in,
                             starpu_data_handle_t out) {
  if (n < 1 || n > TG_EXCHANGE_MAX)
    return tg_fail(EINVAL, "%s: %d inputs, expected 1 to %d", op, n, TG_EXCHANGE_MAX);
  if (!in) return tg_fail(EINVAL, "%s: missing input array", op);
  if (!out) return tg_fail(EINVAL, "%s: missing output handle", op);
  for (int i = 0; i < n; i++) {
    if (in[i] == out) return tg_fail(EINVAL, "%s: in[%d] is the output handle", op, i);
    for (int k = 0; k < i; k++)
      if (in[k] == in[i])
        return tg_fail(EINVAL, "%s: in[%d] and in[%d] are the same handle", op, k, i);
  }
  return 0;
}

/* out (W), in[0 .. n-1] (R), then the gate (R) when there is one; the
 * callers keep n + (gate != NULL) <= TG_EXCHANGE_MAX */
static int tg_exchange_submit(struct starpu_codelet *cl, int n, const starpu_data_handle_t *in,
                              starpu_data_handle_t out, starpu_data_handle_t gate,
                              uint32_t shape, double flops, const tg_task_opts *opts) {
  starpu_data_handle_t h[TG_EXCHANGE_MAX + 1];
  enum starpu_data_access_mode md[TG_EXCHANGE_MAX + 1];
  h[0] = out;
  md[0] = STARPU_W;
  for (int i = 0; i < n; i++) {
    h[1 + i] = in[i];
    md[1 + i] = STARPU_R;
  }
  int nb = n + 1;
  if (gate) {
    h[nb] = gate;
    md[nb++] = STARPU_R;
  }
  tg_exchange_args args = {.shape = shape, .n = n};
  return tg_submit_native(cl, nb, h, md, &args, sizeof args, flops, opts);
}

int tg_sum_tree_insert(int n, const starpu_data_handle_t *in, starpu_data_handle_t out,
                       const tg_task_opts *opts) {
  static const char op[] = "tg_sum_tree";
  int rows, cols;
  TG_TRY(tg_exchange_check(op, n, in, out));
  TG_TRY(tg_shape_any(out, "tg_sum_tree: out", &rows, &cols));
  TG_TRY(tg_expect(out, op, "out", rows, cols, sizeof(float)));
  for (int i = 0; i < n; i++) {
    char what[16];
    snprintf(what, sizeof what, "in[%d]", i);
    TG_TRY(tg_expect(in[i], op, what, rows, cols, sizeof(float)));
  }
  int key[1] = {n};
  return tg_exchange_submit(&tg_sum_tree_cl, n, in, out, NULL, tg_hash_ints(key, 1),
                            (double)(n - 1) * rows * cols, opts);
}

int tg_gather_rows_after_insert(int n, const starpu_data_handle_t *in, starpu_data_handle_t out,
                                starpu_data_handle_t gate, const tg_task_opts *opts) {
  static const char op[] = "tg_gather_rows";
  int rows, cols;
  if (gate && n >= TG_EXCHANGE_MAX)
    return tg_fail(EINVAL, "%s: %d inputs and a gate, expected at most %d buffers in all", op, n,
                   TG_EXCHANGE_MAX);
  TG_TRY(tg_exchange_check(op, n, in, out));
  for (int i = -1; gate && i < n; i++)
    if (gate == (i < 0 ? out : in[i]))
      return tg_fail(EINVAL, "%s: the gate is one of the task's own buffers", op);
  TG_TRY(tg_shape(out, "tg_gather_rows: out", &rows, &cols)); /* 4 or 2 bytes */
  size_t es = starpu_matrix_get_elemsize(out);
  for (int j = 0; j < n; j++) {
    char what[16];
    int size;
    tg_split_start(rows, n, j, &size);
    snprintf(what, sizeof what, "in[%d]", j);
    TG_TRY(tg_expect(in[j], op, what, size, cols, es));
  }
  int key[2] = {n, (int)es};
  /* no flops: the roofline of a simulation costs it by its bytes */
  return tg_exchange_submit(&tg_gather_rows_cl, n, in, out, gate, tg_hash_ints(key, 2), 0.0,
                            opts);
}

int tg_gather_rows_insert(int n, const starpu_data_handle_t *in, starpu_data_handle_t out,
                          const tg_task_opts *opts) {
  return tg_gather_rows_after_insert(n, in, out, NULL, opts);
}
