/*
 * Fused GPT-2 classifier: LM head tied to the token embedding, softmax and
 * cross-entropy, forward and backward, over `chunk` rows at a time so that
 * only a (chunk, V) block of logits ever exists (the full (n, V) logits of a
 * GPT-2 micro-batch, V = 50257, would be hundreds of MB).
 *
 * Per chunk of rows_c <= chunk rows (the last chunk may be partial), all in
 * the caller's scratch (rows_c, V):
 *   1. logits = lnf_chunk (rows_c, C) wte[:V]^T                  one GEMM
 *   2. tg_cpu_softmax_xent in place: dlogits = scale * (p - onehot(t)) and
 *      the chunk's loss
 *   3. backward only:
 *        dlnf_chunk (rows_c, C) = dlogits wte[:V]          one GEMM, beta 0
 *        dwte[:V] (V, C) += dlogits^T lnf_chunk            one GEMM, beta 1
 * so one GEMM per chunk forward and three with the backward, each a single
 * call of tg_cpu_gemm_in in the classifier's shape class (the back end
 * chosen for it, gemm_libs.h; it also takes care of the degenerate shapes
 * C == 0 and V == 0).  Only the first V rows of wte (Vp, C) are read
 * or updated: the padded rows never enter the softmax and get no gradient.
 *
 * Step 2 reuses kernels/cpu/softmax_xent.c, so the numerics are the same by
 * construction: max-subtracted, sum of exp in double, the loss row as
 * log(sum) - (x_t - max) in double, the target entry of dlogits without
 * cancellation, and an out-of-range target never used as an index (NaN loss,
 * zero gradient row).  Without backward its dlogits pass is wasted work, but
 * it is O(V) per row against 2 C V flops per row in the GEMM (under 1%).
 * Likewise glibc's scalar expf: measured at a small share of the forward
 * GEMM's time per row (C = 768, V = 50257, one core of the 2-core
 * development VM), so a vectorised exp was not worth its code.
 * Each chunk's loss comes back as a float (one rounding, relative 6e-8), the
 * chunks are summed in double and added to *loss_acc once per call.
 *
 * Chunk size.  The dwte GEMM reads and writes all of dwte[:V] (V * C floats,
 * 154 MB for GPT-2 small) once per chunk for 2 * rows_c * V * C flops, so
 * small chunks make it memory-bound (same VM: its GFLOP/s fall with the
 * chunk's rows, where the other two GEMMs' stay the same at any size);
 * chunks of a few hundred rows keep it compute-bound, at a scratch of
 * rows_c * V floats (51 MB for 256 rows).  The caller picks the trade-off.
 *
 * Split form (tg_cpu_classifier_dlogits).  The fused kernel holds dwte for
 * its whole run, so two micro-batches' classifier tasks that add into the
 * same dwte in place (StarPU's commute access on one memory node) run one
 * after the other: at GPT-2 124M, B=4 T=64, one worker waited out the other's
 * classifier in every step (bench/results/2026-11-24-cpu-perf.md, issue 16's
 * classifier split).  The split form does steps 1, 2 and the dlnf GEMM, keeps
 * the whole (n, Vd) dlogits for the caller (chunk r0 at row r0, the padding
 * columns V..Vd-1 zeroed) and leaves dwte += grad_scale dlogits^T lnf to a
 * separate GEMM task, a third of the flops, which holds dwte alone.  The
 * price is n * Vd floats per micro-batch instead of a chunk's scratch.
 */
#include "taskgrad/gemm_libs.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"

/* The chunk loop of both entry points.  Chunk r0's dlogits go to
 * dl + r0 * ldd when keep (the caller's (n, ldd) matrix), else to dl itself
 * (a (chunk, V) scratch reused by every chunk, ldd = V); dwte is updated per
 * chunk unless it is NULL. */
static void classifier_chunks(int n, int C, int V, int chunk, const float *lnf, int ldl,
                              const float *wte, const int32_t *targets, float scale,
                              float grad_scale, int backward, float *dlnf, int lddl,
                              float *dwte, float *loss_acc, float *dl, int ldd, int keep) {
  double total = 0.0; /* sum of the chunk losses, already scaled */
  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int rows = n - r0 < chunk ? n - r0 : chunk;
    const float *l = lnf + (size_t)r0 * ldl; /* (rows, C) */
    float *d = keep ? dl + (size_t)r0 * ldd : dl; /* (rows, ldd) */

    /* logits (rows, V) = lnf_chunk (rows, C) wte[:V]^T */
    tg_cpu_gemm_in(TG_GEMM_CLASSIFIER, 0, 1, rows, V, C, 1.0f, l, ldl, wte, C, 0.0f, d,
                   ldd);
    /* in place: d becomes dlogits (rows, V) */
    float part = 0.0f;
    tg_cpu_softmax_xent(rows, V, d, ldd, targets + r0, scale, d, ldd, &part);
    total += (double)part;

    if (backward) {
      /* dlnf_chunk (rows, C) = dlogits (rows, V) wte[:V] (V, C) */
      tg_cpu_gemm_in(TG_GEMM_CLASSIFIER, 0, 0, rows, C, V, grad_scale, d, ldd, wte, C,
                     0.0f, dlnf + (size_t)r0 * lddl, lddl);
      /* dwte[:V] (V, C) += dlogits^T (V, rows) lnf_chunk (rows, C) */
      if (dwte)
        tg_cpu_gemm_in(TG_GEMM_CLASSIFIER, 1, 0, V, C, rows, grad_scale, d, ldd, l, ldl,
                       1.0f, dwte, C);
    }
  }
  *loss_acc = (float)((double)*loss_acc + total);
}

void tg_cpu_classifier(int n, int C, int V, int chunk,
                       const float *lnf, int ldl,   // (n, ldl)
                       const float *wte,            // (Vp, C), rows [0, V) used
                       const int32_t *targets,      // (n)
                       float scale, float grad_scale, int backward,
                       float *dlnf, int lddl,       // (n, lddl), written
                       float *dwte,                 // (Vp, C), rows [0, V) +=
                       float *loss_acc,             // (1)
                       float *scratch)              // (chunk, V)
{
  if (n <= 0 || chunk <= 0) return;
  classifier_chunks(n, C, V, chunk, lnf, ldl, wte, targets, scale, grad_scale, backward,
                    dlnf, lddl, backward ? dwte : NULL, loss_acc, scratch, V, 0);
}

void tg_cpu_classifier_dlogits(int n, int C, int V, int chunk,
                               const float *lnf, int ldl,  // (n, ldl)
                               const float *wte,           // (Vp, C), rows [0, V) used
                               const int32_t *targets,     // (n)
                               float scale, float grad_scale,
                               float *dlnf, int lddl,      // (n, lddl), written
                               float *loss_acc,            // (1)
                               float *dlogits, int Vd)     // (n, Vd), written
{
  if (n <= 0 || chunk <= 0) return;
  classifier_chunks(n, C, V, chunk, lnf, ldl, wte, targets, scale, grad_scale, 1, dlnf,
                    lddl, NULL, loss_acc, dlogits, Vd, 1);
  /* the padding columns: zero, so that dlogits^T lnf adds nothing to the
   * padded rows of a (Vd, C) gradient */
  for (int r = 0; r < n; r++)
    for (int v = V; v < Vd; v++) dlogits[(size_t)r * Vd + v] = 0.0f;
}

/* The split form with bf16 lnf, wte and dlogits (native bf16 GEMMs,
 * matmul_onednn.c): per chunk, the logits in f32 (scratch, (chunk, V)), the
 * softmax and loss as above, dlogits rounded to bf16 into the caller's
 * (n, Vd) matrix, and dlnf = grad_scale dlogits wte from those rounded
 * values, so that dlnf and the caller's dwte (the same dlogits^T lnf, on
 * tg_gemm_lowp) see one dlogits, as a bf16 autocast would. */
void tg_cpu_classifier_dlogits_lowp(int n, int C, int V, int chunk,
                                    const uint16_t *lnf, int ldl,  // (n, ldl) bf16
                                    const uint16_t *wte,           // (Vp, C) bf16
                                    const int32_t *targets,        // (n)
                                    float scale, float grad_scale,
                                    float *dlnf, int lddl,         // (n, lddl), written
                                    float *loss_acc,               // (1)
                                    uint16_t *dlogits, int Vd,     // (n, Vd) bf16, written
                                    float *scratch) // tg_cpu_classifier_lowp_scratch_floats
{
  if (n <= 0 || chunk <= 0) return;
  float *logits = scratch;                         /* (chunk, V) */
  float *work = scratch + (size_t)chunk * V;       /* tg_cpu_gemm_lowp's */
  double total = 0.0;
  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int rows = n - r0 < chunk ? n - r0 : chunk;
    uint16_t *d16 = dlogits + (size_t)r0 * Vd; /* (rows, Vd) */
    tg_cpu_gemm_lowp(TG_BF16, 0, 1, rows, V, C, 1.0f, lnf + (size_t)r0 * ldl, ldl, wte, C,
                     0.0f, TG_F32, logits, V, work);
    float part = 0.0f;
    tg_cpu_softmax_xent(rows, V, logits, V, targets + r0, scale, logits, V, &part);
    total += (double)part;
    tg_cpu_to_lowp(TG_BF16, rows, V, logits, V, d16, Vd);
    tg_cpu_gemm_lowp(TG_BF16, 0, 0, rows, C, V, grad_scale, d16, Vd, wte, C, 0.0f, TG_F32,
                     dlnf + (size_t)r0 * lddl, lddl, work);
  }
  *loss_acc = (float)((double)*loss_acc + total);
  for (int r = 0; r < n; r++)
    for (int v = V; v < Vd; v++) dlogits[(size_t)r * Vd + v] = 0;
}

size_t tg_cpu_classifier_lowp_scratch_floats(int C, int V, int chunk) {
  size_t a = tg_cpu_gemm_lowp_work_floats(chunk, V, C);
  size_t b = tg_cpu_gemm_lowp_work_floats(chunk, C, V);
  return (size_t)chunk * V + (a > b ? a : b);
}
