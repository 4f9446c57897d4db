/*
 * The add_round codelet: one level of the ranks' reduce-scatter by
 * recursive halving (parallel/halving.c, kernel: tg_cpu_add_round).
 * Buffers: a (R), then as asked recv (R), out (W), send (W); all (rows, 1)
 * contiguous columns, a and out f32, recv and send in the message type.
 *
 * Design note
 * -----------
 * - v = a[a_off, a_off + n) + recv (or a's range alone), then v's range
 *   [out_off, out_off + rows(out)) goes to out in f32 and the range
 *   [send_off, send_off + rows(send)) to send, rounded to the message type.
 *   At one level of the halving that is: the partner's half added to the
 *   half this rank keeps, the half it will keep next kept in f32, the half
 *   it will give next rounded into the next message.
 * - Submitted natively (no low-precision adapter): the codelet takes its
 *   16-bit buffers itself, as tg_convert does; the message type is in the
 *   arguments, since StarPU's handles know only the element size.
 * - cl_arg: the shape key (message type, which buffers), the message type,
 *   the buffer flags and the offsets.
 */
#include <errno.h>
#include <stdio.h>

#include "codelet_common.h"
#include "taskgrad/precision_codelets.h"
#include "taskgrad/precision_kernels.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

typedef struct tg_add_round_args {
  uint32_t shape;
  int comm, has_recv, has_out, has_send;
  int a_off, n, out_off, send_off;
} tg_add_round_args;

/* the kernel's pointers from the buffers, in submission order */
typedef struct tg_add_round_bufs {
  const float *a;
  const void *recv;
  float *out;
  void *send;
  size_t out_len, send_len;
} tg_add_round_bufs;

static tg_add_round_bufs tg_add_round_unpack(void *buffers[], const tg_add_round_args *x) {
  tg_add_round_bufs b = {.a = TG_PTR(buffers[0]) + x->a_off};
  int k = 1;
  if (x->has_recv) b.recv = (const void *)STARPU_MATRIX_GET_PTR(buffers[k++]);
  if (x->has_out) {
    b.out_len = (size_t)TG_ROWS(buffers[k]);
    b.out = TG_PTR(buffers[k++]);
  }
  if (x->has_send) {
    b.send_len = (size_t)TG_ROWS(buffers[k]);
    b.send = (void *)STARPU_MATRIX_GET_PTR(buffers[k]);
  }
  return b;
}

static void tg_add_round_cpu(void *buffers[], void *cl_arg) {
  const tg_add_round_args *x = cl_arg;
  tg_add_round_bufs b = tg_add_round_unpack(buffers, x);
  tg_cpu_add_round((tg_dtype)x->comm, (size_t)x->n, b.a, b.recv, b.out, (size_t)x->out_off,
                   b.out_len, b.send, (size_t)x->send_off, b.send_len);
}

#ifdef TG_HAVE_CUDA
static void tg_add_round_cuda(void *buffers[], void *cl_arg) {
  const tg_add_round_args *x = cl_arg;
  tg_add_round_bufs b = tg_add_round_unpack(buffers, x);
  TG_CUDA_CHECK(tg_cuda_add_round((tg_dtype)x->comm, (size_t)x->n, b.a, b.recv, b.out,
                                  (size_t)x->out_off, b.out_len, b.send,
                                  (size_t)x->send_off, b.send_len,
                                  starpu_cuda_get_local_stream()));
}
#endif

/* Not TG_CODELET: no low-precision adapter around it. */
TG_CODELET_ENTRIES(add_round, tg_add_round_cpu, tg_add_round_cuda);

static size_t tg_comm_bytes(tg_dtype comm) { return comm == TG_F32 ? sizeof(float) : 2; }

/* h a contiguous (rows, 1) column of es-byte elements; its rows in *rows */
static int tg_add_round_column(const char *name, starpu_data_handle_t h, size_t es, int *rows) {
  static const char op[] = "tg_add_round";
  char what[32];
  int cols;
  snprintf(what, sizeof what, "%s: %s", op, name);
  TG_TRY(tg_shape_any(h, what, rows, &cols));
  TG_TRY(tg_expect(h, op, name, *rows, 1, es));
  return tg_expect_contiguous(h, op, name);
}

/* off + len within [0, n) */
static int tg_add_round_range(const char *what, int off, int len, int n) {
  if (off < 0 || len < 0 || off > n - len)
    return tg_fail(EINVAL, "tg_add_round: %s rows [%d, %d) outside the sum's %d rows", what,
                   off, off + len, n);
  return 0;
}

int tg_add_round_insert(tg_dtype comm, starpu_data_handle_t a, int a_off, int n,
                        starpu_data_handle_t recv, starpu_data_handle_t out, int out_off,
                        starpu_data_handle_t send, int send_off, const tg_task_opts *opts) {
  if (comm != TG_F32 && comm != TG_BF16 && comm != TG_F16)
    return tg_fail(EINVAL, "tg_add_round: messages in %s (f32, bf16 or fp16)",
                   tg_dtype_name(comm));
  if (!a) return tg_fail(EINVAL, "tg_add_round: missing input a");
  if (!out && !send) return tg_fail(EINVAL, "tg_add_round: neither out nor send");
  int arows, rows;
  TG_TRY(tg_add_round_column("a", a, sizeof(float), &arows));
  if (n < 1) return tg_fail(EINVAL, "tg_add_round: %d rows to sum", n);
  TG_TRY(tg_add_round_range("a's", a_off, n, arows));
  starpu_data_handle_t h[4] = {a};
  enum starpu_data_access_mode md[4] = {STARPU_R};
  int nb = 1;
  if (recv) {
    TG_TRY(tg_add_round_column("recv", recv, tg_comm_bytes(comm), &rows));
    if (rows != n) return tg_fail(EINVAL, "tg_add_round: recv has %d rows, not %d", rows, n);
    h[nb] = recv;
    md[nb++] = STARPU_R;
  }
  if (out) {
    TG_TRY(tg_add_round_column("out", out, sizeof(float), &rows));
    TG_TRY(tg_add_round_range("out's", out_off, rows, n));
    h[nb] = out;
    md[nb++] = STARPU_W;
  }
  if (send) {
    TG_TRY(tg_add_round_column("send", send, tg_comm_bytes(comm), &rows));
    TG_TRY(tg_add_round_range("send's", send_off, rows, n));
    h[nb] = send;
    md[nb++] = STARPU_W;
  }
  for (int i = 1; i < nb; i++)
    for (int k = 0; k < i; k++)
      if (h[i] == h[k]) return tg_fail(EINVAL, "tg_add_round: a buffer passed twice");
  tg_add_round_args args = {.comm = comm, .has_recv = recv != NULL, .has_out = out != NULL,
                            .has_send = send != NULL, .a_off = a_off, .n = n,
                            .out_off = out_off, .send_off = send_off};
  int key[4] = {comm, args.has_recv, args.has_out, args.has_send};
  args.shape = tg_hash_ints(key, 4);
  return tg_submit_native(&tg_add_round_cl, nb, h, md, &args, sizeof args,
                          recv ? (double)n : 0.0, opts);
}
