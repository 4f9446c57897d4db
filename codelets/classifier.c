/*
 * Classifier codelets: the fused softmax + cross-entropy (loss and dlogits
 * in one pass over the logits) and the accuracy count.  The scalar outputs
 * are (1, 1) float accumulators, so micro-batches can reduce them with
 * STARPU_REDUX and the host reads them only when it asks.
 */
#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"

typedef struct tg_xent_args {
  uint32_t shape;
  float scale;
} tg_xent_args;

static void tg_softmax_xent_cpu(void *buffers[], void *cl_arg) {
  const tg_xent_args *a = cl_arg;
  tg_cpu_softmax_xent(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                      TG_LD(buffers[0]), TG_IPTR(buffers[1]), a->scale,
                      TG_PTR(buffers[2]), TG_LD(buffers[2]), TG_PTR(buffers[3]));
}

static void tg_accuracy_cpu(void *buffers[], void *cl_arg) {
  tg_cpu_accuracy_count(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), TG_PTR(buffers[0]),
                        TG_LD(buffers[0]), TG_IPTR(buffers[1]), TG_PTR(buffers[2]));
}

#ifdef TG_HAVE_CUDA
static void tg_softmax_xent_cuda(void *buffers[], void *cl_arg) {
  const tg_xent_args *a = cl_arg;
  TG_CUDA_CHECK(tg_cuda_softmax_xent(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                                     TG_PTR(buffers[0]), TG_LD(buffers[0]),
                                     TG_IPTR(buffers[1]), a->scale, TG_PTR(buffers[2]),
                                     TG_LD(buffers[2]), TG_PTR(buffers[3]),
                                     starpu_cuda_get_local_stream()));
}

static void tg_accuracy_cuda(void *buffers[], void *cl_arg) {
  TG_CUDA_CHECK(tg_cuda_accuracy_count(TG_ROWS(buffers[0]), TG_COLS(buffers[0]),
                                       TG_PTR(buffers[0]), TG_LD(buffers[0]),
                                       TG_IPTR(buffers[1]), TG_PTR(buffers[2]),
                                       starpu_cuda_get_local_stream()));
}
#endif

TG_CODELET(softmax_xent, tg_softmax_xent_cpu, tg_softmax_xent_cuda);
TG_CODELET(accuracy, tg_accuracy_cpu, tg_accuracy_cuda);

static int tg_labels_check(starpu_data_handle_t logits, starpu_data_handle_t labels,
                           const char *op, int *rows, int *cols) {
  char what[64];
  snprintf(what, sizeof what, "%s: logits", op);
  TG_TRY(tg_shape(logits, what, rows, cols));
  return tg_expect(labels, op, "labels", *rows, 1, sizeof(int32_t));
}

int tg_softmax_xent_insert(starpu_data_handle_t logits,
                           starpu_data_handle_t labels, float scale,
                           starpu_data_handle_t dlogits,
                           starpu_data_handle_t loss, tg_accum loss_accum,
                           const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_labels_check(logits, labels, "tg_softmax_xent", &rows, &cols));
  TG_TRY(tg_expect(dlogits, "tg_softmax_xent", "dlogits", rows, cols, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(loss, "tg_softmax_xent", "loss", 1, 1, TG_FLOAT_SLOT));
  if (loss_accum == TG_OVERWRITE)
    return tg_fail(EINVAL, "tg_softmax_xent: the loss is an accumulator (TG_ACCUMULATE, TG_REDUCE or TG_COMMUTE)");
  tg_xent_args args = {.shape = 0, .scale = scale};
  starpu_data_handle_t h[4] = {logits, labels, dlogits, loss};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_R, STARPU_W,
                                        tg_accum_mode(loss_accum)};
  return tg_submit(&tg_softmax_xent_cl, 4, h, md, &args, sizeof args,
                   5.0 * rows * cols, opts);
}

int tg_accuracy_insert(starpu_data_handle_t logits, starpu_data_handle_t labels,
                       starpu_data_handle_t correct, tg_accum accum,
                       const tg_task_opts *opts) {
  int rows, cols;
  TG_TRY(tg_labels_check(logits, labels, "tg_accuracy", &rows, &cols));
  TG_TRY(tg_expect(correct, "tg_accuracy", "correct", 1, 1, TG_FLOAT_SLOT));
  if (accum == TG_OVERWRITE)
    return tg_fail(EINVAL, "tg_accuracy: the count is an accumulator (TG_ACCUMULATE, TG_REDUCE or TG_COMMUTE)");
  tg_xent_args args = {.shape = 0, .scale = 0.0f};
  starpu_data_handle_t h[3] = {logits, labels, correct};
  enum starpu_data_access_mode md[3] = {STARPU_R, STARPU_R, tg_accum_mode(accum)};
  return tg_submit(&tg_accuracy_cl, 3, h, md, &args, sizeof args,
                   (double)rows * cols, opts);
}
