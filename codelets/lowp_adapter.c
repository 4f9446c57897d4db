/*
 * Low-precision storage for every f32 codelet (bf16, fp16 activations).
 *
 * Design note
 * -----------
 * Mixed-precision training stores activations and activation gradients in a
 * 2-byte type but computes in fp32 (layer-norm statistics, softmax, GELU,
 * attention, the GEMMs' accumulation).  Rather than a second, 16-bit copy of
 * every kernel, a task whose buffers include 2-byte matrices runs its f32
 * kernel through this adapter:
 *
 *   1. tg_submit (codelets/common.c) sees 2-byte matrix buffers and
 *      opts->lowp = TG_BF16 or TG_F16; it appends a STARPU_SCRATCH workspace
 *      large enough for f32 copies of those buffers, and a trailer after the
 *      codelet's arguments (magic, lowp, number of real buffers);
 *   2. the codelet's entry point (TG_CODELET wraps every cpu/cuda function)
 *      finds the trailer, widens each 2-byte input (mode R or RW) into its
 *      f32 copy in the workspace (exact), hands the f32 function matrix
 *      interfaces that describe the copies (ld = cols, 4-byte elements), and
 *      rounds each 2-byte output (mode W or RW) back, to nearest even, after
 *      the function.
 *
 * The rounding points are those of a GPU kernel that loads 16-bit values,
 * computes in f32 registers and stores 16-bit results: inputs exact, one
 * rounding per stored output.  On CUDA the conversions are kernels on the
 * worker's stream, queued before and after the f32 kernels on the same
 * stream, so the task stays asynchronous.  The workspace is per worker
 * (SCRATCH), so the 16-bit tensors alone stay alive between tasks: what is
 * kept for the backward pass is half the f32 size.
 *
 * A 2-byte buffer in STARPU_REDUX mode is refused at submission (the
 * reduction codelets add floats), as is a 2-byte buffer without opts->lowp.
 * Codelets that take 16-bit buffers natively (codelets/precision.c,
 * codelets/gemm_lowp.c) submit with tg_submit_native and skip all this.
 */
#include <string.h>

#include "codelet_common.h"
#include "taskgrad/precision.h"
#include "taskgrad/precision_kernels.h"

#define TG_LOWP_MAGIC 0x7467206c6f777021ull /* "tg lowp!" */
#define TG_LOWP_ALIGN 16                    /* floats: 64-byte aligned copies */

typedef struct tg_lowp_trailer {
  uint64_t magic;
  int32_t lowp;  /* TG_BF16 or TG_F16 */
  int32_t nbuf;  /* buffers before the workspace */
} tg_lowp_trailer;

size_t tg_lowp_trailer_size(void) { return sizeof(tg_lowp_trailer); }

void tg_lowp_trailer_write(void *dst, int lowp, int nbuf) {
  tg_lowp_trailer t = {.magic = TG_LOWP_MAGIC, .lowp = lowp, .nbuf = nbuf};
  memcpy(dst, &t, sizeof t);
}

int tg_lowp_of_task(const struct starpu_task *task, int *nbuf) {
  tg_lowp_trailer t;
  if (!task || !task->cl_arg || task->cl_arg_size < sizeof t) return 0;
  memcpy(&t, (const char *)task->cl_arg + task->cl_arg_size - sizeof t, sizeof t);
  if (t.magic != TG_LOWP_MAGIC) return 0;
  if (nbuf) *nbuf = t.nbuf;
  return t.lowp;
}

static size_t tg_lowp_floats(int rows, int cols) {
  size_t n = (size_t)rows * cols;
  return (n + TG_LOWP_ALIGN - 1) / TG_LOWP_ALIGN * TG_LOWP_ALIGN;
}

static int tg_is_lowp_matrix(starpu_data_handle_t h) {
  return h && starpu_data_get_interface_id(h) == STARPU_MATRIX_INTERFACE_ID &&
         starpu_matrix_get_elemsize(h) == 2;
}

int tg_lowp_plan(const char *op, int nbuf, const starpu_data_handle_t *h,
                 const enum starpu_data_access_mode *modes, int lowp, size_t *bytes) {
  size_t floats = 0;
  for (int i = 0; i < nbuf; i++) {
    if (!tg_is_lowp_matrix(h[i])) continue;
    if (lowp != TG_BF16 && lowp != TG_F16)
      return tg_fail(EINVAL, "%s: buffer %d has 2-byte elements but the task names no "
                     "low-precision type (tg_task_opts.lowp = TG_BF16 or TG_F16)", op, i);
    if (modes[i] & STARPU_REDUX)
      return tg_fail(EINVAL, "%s: buffer %d: a %s buffer cannot be a StarPU reduction "
                     "target (gradients accumulate in f32)", op, i, tg_dtype_name(lowp));
    floats += tg_lowp_floats((int)starpu_matrix_get_ny(h[i]), (int)starpu_matrix_get_nx(h[i]));
  }
  *bytes = floats * sizeof(float);
  return 0;
}

/* The f32 view of buffer i in the workspace at `ws`; returns the floats it
 * takes. */
static size_t tg_lowp_view(struct starpu_matrix_interface *view,
                           const struct starpu_matrix_interface *src, float *ws) {
  *view = *src;
  view->ptr = view->dev_handle = (uintptr_t)ws;
  view->offset = 0;
  view->ld = src->nx;
  view->elemsize = sizeof(float);
  view->allocsize = (size_t)src->nx * src->ny * sizeof(float);
  return tg_lowp_floats((int)src->ny, (int)src->nx);
}

static int tg_lowp_buffer(void *buf) {
  const struct starpu_matrix_interface *m = buf;
  return m->id == STARPU_MATRIX_INTERFACE_ID && m->elemsize == 2;
}

/* Widens (to_lowp == 0) or rounds (to_lowp != 0) one buffer m <-> its f32
 * copy (ld = cols), on the CPU or queued on a CUDA stream (ctx). */
typedef void (*tg_lowp_convert_fn)(tg_dtype lowp, const struct starpu_matrix_interface *m,
                                   float *copy, int to_lowp, void *ctx);

/* keep: a mask of 2-byte buffers handed to fn as they are, neither widened
 * nor rounded (a CPU function that uses them natively, below); their f32
 * copies' room goes, in one block after the widened copies, to fn as its
 * workspace: buffers[nbuf] becomes a vector of that many floats. */
static void tg_lowp_run(void *buffers[], void *cl_arg, void (*fn)(void *[], void *),
                        tg_lowp_convert_fn convert, void *ctx, unsigned keep) {
  struct starpu_task *task = tg_task_current();
  int nbuf = 0;
  tg_dtype lowp = (tg_dtype)tg_lowp_of_task(task, &nbuf);
  if (!lowp) {
    fn(buffers, cl_arg);
    return;
  }
  struct starpu_matrix_interface views[TG_MAX_BUFFERS];
  struct starpu_vector_interface spare;
  void *bufs[TG_MAX_BUFFERS + 1];
  if (nbuf > TG_MAX_BUFFERS) TG_FATAL("lowp adapter: %d buffers", nbuf);
  float *ws = TG_VPTR(buffers[nbuf]);
  size_t kept = 0;
  for (int i = 0; i < nbuf; i++) {
    bufs[i] = buffers[i];
    if (!tg_lowp_buffer(buffers[i])) continue;
    if ((keep >> i) & 1) { /* as it is; fn reads or writes it in 16 bits */
      const struct starpu_matrix_interface *m = buffers[i];
      kept += tg_lowp_floats((int)m->ny, (int)m->nx);
      continue;
    }
    float *copy = ws;
    ws += tg_lowp_view(&views[i], buffers[i], copy);
    if (STARPU_TASK_GET_MODE(task, i) & STARPU_R) convert(lowp, buffers[i], copy, 0, ctx);
    bufs[i] = &views[i];
  }
  bufs[nbuf] = buffers[nbuf];
  if (keep) {
    spare = *(struct starpu_vector_interface *)buffers[nbuf];
    spare.ptr = spare.dev_handle = (uintptr_t)ws;
    spare.offset = 0;
    spare.nx = kept;
    spare.elemsize = sizeof(float);
    spare.allocsize = kept * sizeof(float);
    bufs[nbuf] = &spare;
  }
  fn(bufs, cl_arg); /* on CUDA: queues its kernels on the same stream */
  for (int i = 0; i < nbuf; i++)
    if (bufs[i] != buffers[i] && (STARPU_TASK_GET_MODE(task, i) & STARPU_W))
      convert(lowp, buffers[i], (float *)views[i].ptr, 1, ctx);
}

static void tg_lowp_convert_cpu(tg_dtype lowp, const struct starpu_matrix_interface *m,
                                float *copy, int to_lowp, void *ctx) {
  (void)ctx;
  if (to_lowp)
    tg_cpu_to_lowp(lowp, (int)m->ny, (int)m->nx, copy, (int)m->nx, (uint16_t *)m->ptr,
                   (int)m->ld);
  else
    tg_cpu_from_lowp(lowp, (int)m->ny, (int)m->nx, (const uint16_t *)m->ptr, (int)m->ld, copy,
                     (int)m->nx);
}

void tg_lowp_cpu(void *buffers[], void *cl_arg, void (*fn)(void *[], void *)) {
  tg_lowp_run(buffers, cl_arg, fn, tg_lowp_convert_cpu, NULL, 0);
}

/* keep, or 0 unless every buffer it names is 16-bit: the function gets its
 * 16-bit operands together */
static unsigned tg_lowp_keep_all(void *buffers[], int nbuf, unsigned keep) {
  for (int i = 0; keep && i < 32; i++)
    if ((keep >> i) & 1 && (i >= nbuf || !tg_lowp_buffer(buffers[i]))) keep = 0;
  return keep;
}

void tg_lowp_cpu_keep(void *buffers[], void *cl_arg, void (*fn)(void *[], void *),
                      unsigned keep) {
  struct starpu_task *task = tg_task_current();
  int nbuf = 0;
  if (tg_lowp_of_task(task, &nbuf) != TG_BF16 || !tg_cpu_gemm_bf16_native()) keep = 0;
  tg_lowp_run(buffers, cl_arg, fn, tg_lowp_convert_cpu, NULL,
              tg_lowp_keep_all(buffers, nbuf, keep));
}

void tg_lowp_cpu_keep16(void *buffers[], void *cl_arg, void (*fn)(void *[], void *),
                        unsigned keep) {
  int nbuf = 0;
  if (!tg_lowp_of_task(tg_task_current(), &nbuf)) keep = 0;
  tg_lowp_run(buffers, cl_arg, fn, tg_lowp_convert_cpu, NULL,
              tg_lowp_keep_all(buffers, nbuf, keep));
}

#ifdef TG_HAVE_CUDA
static void tg_lowp_convert_cuda(tg_dtype lowp, const struct starpu_matrix_interface *m,
                                 float *copy, int to_lowp, void *ctx) {
  cudaStream_t stream = *(cudaStream_t *)ctx;
  if (to_lowp)
    TG_CUDA_CHECK(tg_cuda_to_lowp(lowp, (int)m->ny, (int)m->nx, copy, (int)m->nx,
                                  (uint16_t *)m->ptr, (int)m->ld, stream));
  else
    TG_CUDA_CHECK(tg_cuda_from_lowp(lowp, (int)m->ny, (int)m->nx, (const uint16_t *)m->ptr,
                                    (int)m->ld, copy, (int)m->nx, stream));
}

void tg_lowp_cuda(void *buffers[], void *cl_arg, void (*fn)(void *[], void *)) {
  cudaStream_t stream = starpu_cuda_get_local_stream();
  tg_lowp_run(buffers, cl_arg, fn, tg_lowp_convert_cuda, &stream, 0);
}

void tg_lowp_cuda_native(void *buffers[], void *cl_arg, void (*fn)(void *[], void *),
                         tg_lowp_native_fn native) {
  int nbuf = 0;
  tg_dtype lowp = (tg_dtype)tg_lowp_of_task(tg_task_current(), &nbuf);
  if (lowp && native(buffers, cl_arg, lowp, TG_VPTR(buffers[nbuf])) == 0) return;
  tg_lowp_cuda(buffers, cl_arg, fn);
}
#endif
