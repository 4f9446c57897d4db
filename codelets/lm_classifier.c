/*
 * Tied LM-head classifier codelet: logits = lnf wte[:V]^T, softmax
 * cross-entropy against the targets, and (training) the gradients of lnf and
 * wte, processed in row chunks so that only a (chunk, V) block of logits
 * exists at a time (a STARPU_SCRATCH workspace), never the whole (n, Vp)
 * matrix.  The padded vocabulary rows V..Vp-1 never enter the softmax.
 *
 * tg_lm_classifier_dlogits_insert is the split form (kernels/cpu/
 * lm_classifier.c): the same codelet writes the micro-batch's whole dlogits
 * into a tensor of the caller instead of a scratch, and does not touch dwte;
 * the caller adds dlogits^T lnf into dwte with a GEMM task of its own:
 * tg_gemm on the whole dwte, or tg_lm_classifier_dwte on a row block of it
 * (the GEMM over a column range of dlogits), so that on many workers the
 * micro-batches' increments of different blocks run at once instead of one
 * after the other (bench/results/2026-11-24-many-core.md).
 */
#include <math.h>
#include <stdio.h>

#include "codelet_common.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

typedef struct tg_lmc_args {
  uint32_t shape;
  int V, chunk, backward, keep;
  float scale, grad_scale;
  int lowp_scratch; /* keep form: buffer 6 is the bf16 kernel's scratch */
} tg_lmc_args;

/* buffers: lnf, wte, targets, loss, scratch [, dlnf, dwte];
 * keep: lnf, wte, targets, loss, dlogits, dlnf */
static void tg_lm_classifier_cpu(void *buffers[], void *cl_arg) {
  const tg_lmc_args *a = cl_arg;
  if (a->keep && a->lowp_scratch && STARPU_MATRIX_GET_ELEMSIZE(buffers[0]) == 2) {
    /* native bf16 (kKeep below): lnf, wte and dlogits as they are */
    tg_cpu_classifier_dlogits_lowp(
        TG_ROWS(buffers[0]), TG_COLS(buffers[0]), a->V, a->chunk, TG_HPTR(buffers[0]),
        TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_IPTR(buffers[2]), a->scale, a->grad_scale,
        TG_PTR(buffers[5]), TG_LD(buffers[5]), TG_PTR(buffers[3]), TG_HPTR(buffers[4]),
        TG_COLS(buffers[4]), TG_VPTR(buffers[6]));
    return;
  }
  if (a->keep) {
    tg_cpu_classifier_dlogits(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), a->V, a->chunk,
                              TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
                              TG_IPTR(buffers[2]), a->scale, a->grad_scale,
                              TG_PTR(buffers[5]), TG_LD(buffers[5]), TG_PTR(buffers[3]),
                              TG_PTR(buffers[4]), TG_COLS(buffers[4]));
    return;
  }
  tg_cpu_classifier(TG_ROWS(buffers[0]), TG_COLS(buffers[0]), a->V, a->chunk,
                    TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
                    TG_IPTR(buffers[2]), a->scale, a->grad_scale, a->backward,
                    a->backward ? TG_PTR(buffers[5]) : NULL,
                    a->backward ? TG_LD(buffers[5]) : 0,
                    a->backward ? TG_PTR(buffers[6]) : NULL, TG_PTR(buffers[3]),
                    TG_VPTR(buffers[4]));
}

#ifdef TG_HAVE_CUDA
static void tg_lm_classifier_cuda(void *buffers[], void *cl_arg) {
  const tg_lmc_args *a = cl_arg;
  if (a->keep) {
    TG_CUDA_CHECK(tg_cuda_classifier_dlogits(
        starpu_cublas_get_local_handle(), TG_ROWS(buffers[0]), TG_COLS(buffers[0]), a->V,
        a->chunk, TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
        TG_IPTR(buffers[2]), a->scale, a->grad_scale, TG_PTR(buffers[5]),
        TG_LD(buffers[5]), TG_PTR(buffers[3]), TG_PTR(buffers[4]), TG_COLS(buffers[4]),
        starpu_cuda_get_local_stream()));
    return;
  }
  TG_CUDA_CHECK(tg_cuda_classifier(
      starpu_cublas_get_local_handle(), TG_ROWS(buffers[0]), TG_COLS(buffers[0]), a->V,
      a->chunk, TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[1]),
      TG_IPTR(buffers[2]), a->scale, a->grad_scale, a->backward,
      a->backward ? TG_PTR(buffers[5]) : NULL,
      a->backward ? TG_LD(buffers[5]) : 0, a->backward ? TG_PTR(buffers[6]) : NULL,
      TG_PTR(buffers[3]), TG_VPTR(buffers[4]), starpu_cuda_get_local_stream()));
}

/* The room the adapter's workspace has (at least): f32 copies of the
 * task's 2-byte matrices among its first nbuf buffers */
static size_t tg_lmc_room(void *buffers[], int nbuf) {
  size_t room = 0;
  for (int i = 0; i < nbuf; i++) {
    const struct starpu_matrix_interface *m = buffers[i];
    if (m->id == STARPU_MATRIX_INTERFACE_ID && m->elemsize == 2) room += (size_t)m->nx * m->ny;
  }
  return room;
}

/* bf16 logits (lm_classifier_bf16.cu), as llm.c: the forward GEMM writes
 * them once in bf16 into the split form's dlogits (all rows at once, the
 * whole buffer being there) or into the fused form's scratch (a (chunk,
 * V rounded up to 8) bf16 block, half of its room), one kernel turns them
 * into bf16 dlogits in place, then the backward GEMMs; a 16-bit dlnf's f32
 * sums in the workspace.  1 where it does not apply (rows of the dlogits
 * not 8-aligned, no room for those sums): tg_cuda_classifier_lowp below. */
static int tg_lm_classifier_cuda_bf16(void *buffers[], const tg_lmc_args *a, int n, int C,
                                      int dlnf16, float *ws, size_t room) {
  uint16_t *dl = a->keep ? TG_HPTR(buffers[4]) : (uint16_t *)TG_VPTR(buffers[4]);
  const int ldd = a->keep ? (int)TG_LD(buffers[4]) : (a->V + 7) / 8 * 8;
  int chunk = a->keep ? n : a->chunk;
  if (dlnf16 && (size_t)chunk * C > room) chunk = a->chunk;
  if (ldd % 8 != 0 || ((uintptr_t)dl & 15) != 0 || (dlnf16 && (size_t)chunk * C > room))
    return 1;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_classifier_bf16(
      starpu_cublas_get_local_handle(), n, C, a->V, chunk, TG_HPTR(buffers[0]),
      TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_IPTR(buffers[2]), a->scale, a->grad_scale,
      a->backward, a->backward ? (void *)STARPU_MATRIX_GET_PTR(buffers[5]) : NULL,
      a->backward ? TG_LD(buffers[5]) : 0, dlnf16,
      a->backward && !a->keep ? TG_PTR(buffers[6]) : NULL, TG_PTR(buffers[3]), dl, ldd,
      a->keep, dlnf16 ? ws : NULL, starpu_cuda_get_local_stream(), &s);
  tg_cuda_launch_check(e, s, "tg_lm_classifier");
  return 0;
}

/* bf16 lnf and wte (and dlogits, split): the tensor cores
 * (lm_classifier_lowp.cu).  The fused form's logits go to its scratch, the
 * split form's to the workspace (the room of dlogits' f32 copy); the rest
 * of the workspace holds the rounded dlogits block and a 16-bit dlnf's f32
 * sums.  fp16, or a chunk too large for the room, goes to the adapter. */
static int tg_lm_classifier_cuda_native(void *buffers[], void *cl_arg, tg_dtype lowp,
                                        float *ws) {
  const tg_lmc_args *a = cl_arg;
  const int nbuf = a->keep ? 6 : a->backward ? 7 : 5;
  if (lowp != TG_BF16 || !tg_is16(buffers[0]) || !tg_is16(buffers[1]) ||
      (a->keep && !tg_is16(buffers[4])))
    return 1;
  const int n = TG_ROWS(buffers[0]), C = TG_COLS(buffers[0]);
  const int dlnf16 = a->backward && tg_is16(buffers[5]);
  const size_t room = tg_lmc_room(buffers, nbuf);
  if (tg_lm_classifier_cuda_bf16(buffers, a, n, C, dlnf16, ws, room) == 0) return 0;
  const size_t logit_floats = (size_t)a->chunk * (((size_t)a->V + 7) / 8 * 8);
  float *logits = a->keep ? ws : TG_VPTR(buffers[4]);
  float *work = a->keep ? ws + logit_floats : ws;
  size_t need = tg_cuda_classifier_lowp_scratch_floats(C, a->V, a->chunk, !a->keep, dlnf16) +
                (a->keep ? logit_floats : 0);
  if (need > room) return 1;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_classifier_lowp(
      starpu_cublas_get_local_handle(), n, C, a->V, a->chunk, TG_HPTR(buffers[0]),
      TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_IPTR(buffers[2]), a->scale, a->grad_scale,
      a->backward, a->backward ? (void *)STARPU_MATRIX_GET_PTR(buffers[5]) : NULL,
      a->backward ? TG_LD(buffers[5]) : 0, dlnf16,
      a->backward && !a->keep ? TG_PTR(buffers[6]) : NULL, TG_PTR(buffers[3]), logits,
      a->keep ? TG_HPTR(buffers[4]) : NULL, a->keep ? TG_COLS(buffers[4]) : 0, work,
      starpu_cuda_get_local_stream(), &s);
  tg_cuda_launch_check(e, s, "tg_lm_classifier");
  return 0;
}
#endif

double tg_lm_classifier_scratch_traffic(const struct starpu_task *task) {
  if (!task || task->cl != &tg_lm_classifier_cl || !task->cl_arg ||
      task->cl_arg_size < sizeof(tg_lmc_args))
    return 0;
  const tg_lmc_args *a = task->cl_arg;
  const double n = (double)starpu_matrix_get_ny(STARPU_TASK_GET_HANDLE(task, 0));
  const double C = (double)starpu_matrix_get_nx(STARPU_TASK_GET_HANDLE(task, 0));
  const double chunks = ceil(n / a->chunk);
  /* bytes per logit: the f32 block written by the logits GEMM, read and
   * written by the softmax, read by the dlnf GEMM (and the dwte GEMM, fused
   * f32); with bf16 dlogits (lm_classifier_lowp.cu) the softmax writes them
   * rounded, in 16 bits, and the two GEMMs read those: 4 + 4 + 2 + 2 + 2 */
  const int lowp = tg_lowp_of_task(task, NULL) == TG_BF16 &&
                   starpu_matrix_get_elemsize(STARPU_TASK_GET_HANDLE(task, 0)) == 2;
  double per = !a->backward ? 12 : lowp ? 14 : a->keep ? 16 : 20;
  double bytes = per * n * a->V;
  /* the fused form reads and writes dwte once per chunk, where its buffer
   * counts it once */
  if (a->backward && !a->keep) bytes += (chunks - 1) * 2.0 * 4.0 * a->V * C;
  return bytes;
}

/* the split form's lnf, wte and dlogits, when all three are bf16 and the
 * CPU multiplies bf16 natively (tg_lowp_cpu_keep); the fused form's
 * scratch is not 2-byte, so it never qualifies and is widened */
static const unsigned kKeep = 1u << 0 | 1u << 1 | 1u << 4;
TG_CODELET_NATIVE(lm_classifier, tg_lm_classifier_cpu, kKeep, tg_lm_classifier_cuda,
                  tg_lm_classifier_cuda_native);

int tg_lm_classifier_insert(int V, int chunk, float scale, starpu_data_handle_t lnf,
                            starpu_data_handle_t wte, starpu_data_handle_t targets,
                            starpu_data_handle_t dlnf, starpu_data_handle_t dwte,
                            tg_accum dwte_accum, starpu_data_handle_t loss,
                            tg_accum loss_accum, const tg_task_opts *opts) {
  return tg_lm_classifier_scaled_insert(V, chunk, scale, 1.0f, lnf, wte, targets, dlnf, dwte,
                                        dwte_accum, loss, loss_accum, opts);
}

/* The checks both forms share: lnf (n, C), wte (Vp, C) contiguous, V in
 * [1, Vp], the targets, the loss accumulator and the gradient scale.  Also
 * clamps *chunk to n. */
static int tg_lmc_check(const char *op, int V, int *chunk, float grad_scale,
                        starpu_data_handle_t lnf, starpu_data_handle_t wte,
                        starpu_data_handle_t targets, starpu_data_handle_t loss,
                        tg_accum loss_accum, int *n, int *C, int *vp) {
  int wc;
  char what[64];
  snprintf(what, sizeof what, "%s: lnf", op);
  TG_TRY(tg_shape(lnf, what, n, C));
  snprintf(what, sizeof what, "%s: wte", op);
  TG_TRY(tg_shape(wte, what, vp, &wc));
  if (wc != *C) return tg_fail(EINVAL, "%s: lnf has %d columns, wte %d", op, *C, wc);
  TG_TRY(tg_expect_contiguous(wte, op, "wte"));
  if (V < 1 || V > *vp) return tg_fail(EINVAL, "%s: V = %d not in [1, %d]", op, V, *vp);
  if (*chunk < 1) return tg_fail(EINVAL, "%s: chunk must be >= 1 (got %d)", op, *chunk);
  TG_TRY(tg_expect(targets, op, "targets", *n, 1, sizeof(int32_t)));
  TG_TRY(tg_expect(loss, op, "loss", 1, 1, TG_FLOAT_SLOT));
  if (loss_accum == TG_OVERWRITE)
    return tg_fail(EINVAL, "%s: the loss is an accumulator (TG_ACCUMULATE, TG_REDUCE or TG_COMMUTE)", op);
  if (!(grad_scale > 0.0f) || isinf(grad_scale))
    return tg_fail(EINVAL, "%s: the gradient (loss) scale must be positive and finite, got %g",
                   op, grad_scale);
  if (*chunk > *n) *chunk = *n;
  return 0;
}

int tg_lm_classifier_scaled_insert(int V, int chunk, float scale, float grad_scale,
                                   starpu_data_handle_t lnf, starpu_data_handle_t wte,
                                   starpu_data_handle_t targets, starpu_data_handle_t dlnf,
                                   starpu_data_handle_t dwte, tg_accum dwte_accum,
                                   starpu_data_handle_t loss, tg_accum loss_accum,
                                   const tg_task_opts *opts) {
  const char *op = "tg_lm_classifier";
  int n, C, vp;
  TG_TRY(tg_lmc_check(op, V, &chunk, grad_scale, lnf, wte, targets, loss, loss_accum, &n, &C,
                      &vp));
  int backward = dlnf != NULL;
  if (backward) {
    TG_TRY(tg_expect(dlnf, op, "dlnf", n, C, TG_FLOAT_SLOT));
    TG_TRY(tg_expect(dwte, op, "dwte", vp, C, TG_FLOAT_SLOT));
    TG_TRY(tg_expect_contiguous(dwte, op, "dwte"));
    if (dwte_accum == TG_OVERWRITE)
      return tg_fail(EINVAL, "%s: dwte accumulates (TG_ACCUMULATE, TG_REDUCE or TG_COMMUTE)", op);
  }
  tg_lmc_args args = {.shape = 0, .V = V, .chunk = chunk, .backward = backward,
                      .keep = 0, .scale = scale, .grad_scale = grad_scale};
  int key[3] = {V, chunk, backward};
  args.shape = tg_hash_ints(key, 3);
  /* (chunk, V) for the CPU and f32 kernels, rows of V rounded up to 8 for
   * the bf16 CUDA one (aligned rows for cuBLAS) */
  size_t ldv = ((size_t)V + 7) / 8 * 8;
  starpu_data_handle_t h[7] = {lnf, wte, targets, loss,
                               tg_scratch((size_t)chunk * ldv * sizeof(float)), dlnf, dwte};
  enum starpu_data_access_mode md[7] = {STARPU_R, STARPU_R, STARPU_R,
                                        tg_accum_mode(loss_accum), STARPU_SCRATCH,
                                        STARPU_W, tg_accum_mode(dwte_accum)};
  double flops = 2.0 * n * (double)V * C * (backward ? 3 : 1);
  return tg_submit(&tg_lm_classifier_cl, backward ? 7 : 5, h, md, &args, sizeof args, flops,
                   opts);
}

int tg_lm_classifier_dlogits_insert(int V, int chunk, float scale, float grad_scale,
                                    starpu_data_handle_t lnf, starpu_data_handle_t wte,
                                    starpu_data_handle_t targets, starpu_data_handle_t dlnf,
                                    starpu_data_handle_t dlogits, starpu_data_handle_t loss,
                                    tg_accum loss_accum, const tg_task_opts *opts) {
  const char *op = "tg_lm_classifier_dlogits";
  int n, C, vp, dn, vd;
  TG_TRY(tg_lmc_check(op, V, &chunk, grad_scale, lnf, wte, targets, loss, loss_accum, &n, &C,
                      &vp));
  TG_TRY(tg_expect(dlnf, op, "dlnf", n, C, TG_FLOAT_SLOT));
  TG_TRY(tg_shape(dlogits, "tg_lm_classifier_dlogits: dlogits", &dn, &vd));
  if (dn != n || vd < V)
    return tg_fail(EINVAL, "%s: dlogits is (%d, %d), wants (%d, V >= %d)", op, dn, vd, n, V);
  TG_TRY(tg_expect(dlogits, op, "dlogits", n, vd, TG_FLOAT_SLOT));
  TG_TRY(tg_expect_contiguous(dlogits, op, "dlogits"));
  /* all three bf16 on a CPU with native bf16 GEMMs: the bf16 kernel's
   * scratch (tg_lm_classifier_cpu), which the other paths ignore */
  int lowp_scratch = tg_cpu_gemm_bf16_native() && starpu_matrix_get_elemsize(lnf) == 2 &&
                     starpu_matrix_get_elemsize(wte) == 2 &&
                     starpu_matrix_get_elemsize(dlogits) == 2;
  tg_lmc_args args = {.shape = 0, .V = V, .chunk = chunk, .backward = 1, .keep = 1,
                      .scale = scale, .grad_scale = grad_scale, .lowp_scratch = lowp_scratch};
  int key[4] = {V, chunk, 1, 1};
  args.shape = tg_hash_ints(key, 4);
  starpu_data_handle_t h[7] = {
      lnf, wte, targets, loss, dlogits, dlnf,
      lowp_scratch ? tg_scratch(tg_cpu_classifier_lowp_scratch_floats(C, V, chunk) *
                                sizeof(float))
                   : NULL};
  enum starpu_data_access_mode md[7] = {STARPU_R, STARPU_R, STARPU_R, tg_accum_mode(loss_accum),
                                        STARPU_W, STARPU_W,        STARPU_SCRATCH};
  double flops = 2.0 * n * (double)V * C * 2;
  return tg_submit(&tg_lm_classifier_cl, lowp_scratch ? 7 : 6, h, md, &args, sizeof args,
                   flops, opts);
}

/* ---- the dwte increment on a row block --------------------------------------- */

typedef struct tg_lmc_dwte_args {
  uint32_t shape;
  int v0;
  float grad_scale, beta;
} tg_lmc_dwte_args;

/* buffers: dlogits (n, Vd), lnf (n, C), dwte_rows (Vb, C); bf16 dlogits
 * and lnf arrive as they are on a CPU with native bf16 GEMMs (kKeepDwte),
 * with the workspace after dwte_rows */
static void tg_lm_classifier_dwte_cpu(void *buffers[], void *cl_arg) {
  const tg_lmc_dwte_args *a = cl_arg;
  if (STARPU_MATRIX_GET_ELEMSIZE(buffers[0]) == 2) {
    tg_cpu_gemm_lowp(TG_BF16, 1, 0, TG_ROWS(buffers[2]), TG_COLS(buffers[2]),
                     TG_ROWS(buffers[0]), a->grad_scale, TG_HPTR(buffers[0]) + a->v0,
                     TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_LD(buffers[1]), a->beta,
                     TG_F32, TG_PTR(buffers[2]), TG_LD(buffers[2]), TG_VPTR(buffers[3]));
    return;
  }
  tg_cpu_gemm(1, 0, TG_ROWS(buffers[2]), TG_COLS(buffers[2]), TG_ROWS(buffers[0]),
              a->grad_scale, TG_PTR(buffers[0]) + a->v0, TG_LD(buffers[0]),
              TG_PTR(buffers[1]), TG_LD(buffers[1]), a->beta, TG_PTR(buffers[2]),
              TG_LD(buffers[2]));
}

#ifdef TG_HAVE_CUDA
static void tg_lm_classifier_dwte_cuda(void *buffers[], void *cl_arg) {
  const tg_lmc_dwte_args *a = cl_arg;
  TG_CUBLAS_CHECK(tg_cuda_gemm(starpu_cublas_get_local_handle(), 1, 0, TG_ROWS(buffers[2]),
                               TG_COLS(buffers[2]), TG_ROWS(buffers[0]), a->grad_scale,
                               TG_PTR(buffers[0]) + a->v0, TG_LD(buffers[0]),
                               TG_PTR(buffers[1]), TG_LD(buffers[1]), a->beta,
                               TG_PTR(buffers[2]), TG_LD(buffers[2])));
}
#endif

static const unsigned kKeepDwte = 1u << 0 | 1u << 1;
TG_CODELET_KEEP(lm_classifier_dwte, tg_lm_classifier_dwte_cpu, kKeepDwte,
                tg_lm_classifier_dwte_cuda);

int tg_lm_classifier_dwte_insert(int v0, float grad_scale, starpu_data_handle_t dlogits,
                                 starpu_data_handle_t lnf, starpu_data_handle_t dwte_rows,
                                 tg_accum accum, const tg_task_opts *opts) {
  const char *op = "tg_lm_classifier_dwte";
  int n, vd, ln, C, vb, wc;
  TG_TRY(tg_shape(dlogits, "tg_lm_classifier_dwte: dlogits", &n, &vd));
  TG_TRY(tg_shape(lnf, "tg_lm_classifier_dwte: lnf", &ln, &C));
  TG_TRY(tg_shape(dwte_rows, "tg_lm_classifier_dwte: dwte_rows", &vb, &wc));
  if (ln != n) return tg_fail(EINVAL, "%s: dlogits has %d rows, lnf %d", op, n, ln);
  if (wc != C) return tg_fail(EINVAL, "%s: lnf has %d columns, dwte_rows %d", op, C, wc);
  if (v0 < 0 || vb > vd - v0)
    return tg_fail(EINVAL, "%s: rows %d .. %d of dwte are outside dlogits' %d columns", op, v0,
                   v0 + vb - 1, vd);
  if (!(grad_scale > 0.0f) || isinf(grad_scale))
    return tg_fail(EINVAL, "%s: the gradient (loss) scale must be positive and finite, got %g",
                   op, grad_scale);
  TG_TRY(tg_expect(dlogits, op, "dlogits", n, vd, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(lnf, op, "lnf", n, C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(dwte_rows, op, "dwte_rows", vb, C, TG_FLOAT_SLOT));
  tg_lmc_dwte_args args = {.shape = 0, .v0 = v0, .grad_scale = grad_scale,
                           .beta = accum == TG_OVERWRITE ? 0.0f : 1.0f};
  starpu_data_handle_t h[3] = {dlogits, lnf, dwte_rows};
  enum starpu_data_access_mode md[3] = {STARPU_R, STARPU_R, tg_accum_mode(accum)};
  return tg_submit(&tg_lm_classifier_dwte_cl, 3, h, md, &args, sizeof args,
                   2.0 * n * (double)vb * C, opts);
}
