/*
 * taskgrad layer 1: GEMM with bf16 / fp16 operands on the CPU,
 * C(m, n) = alpha op(A) op(B) + beta C, fp32 accumulation (see precision.h).
 *
 * Design note
 * -----------
 * Where the CPU has AVX512-BF16 and the native path is on, bf16 calls go
 * to matmul_onednn.c first (oneDNN, no widening); what it declines, and fp16,
 * comes here.
 * OpenBLAS has no bf16 / fp16 GEMM we can rely on (sbgemm exists only in
 * some builds, and no fp16 at all), so the operands are widened to f32 one
 * tile at a time and multiplied with the fp32 kernel (tg_cpu_gemm, i.e.
 * cblas_sgemm).  That gives the GPU's rounding points exactly: inputs carry
 * only the low type's precision (the widening is exact), products and sums
 * are fp32, and a low-precision C is rounded once, after the whole k loop.
 *
 * Blocking: C is walked in TB x TB tiles; for each C tile the k dimension
 * runs in panels of TB, each panel widening one tile of A and one of B into
 * the workspace.  Tiles are widened in the operands' own layout and the
 * transpose flags go to sgemm, so the conversion reads memory sequentially.
 * An f32 C is accumulated in place (beta applied by the first panel's
 * sgemm); a low-precision C gets an f32 accumulator tile in the workspace,
 * loaded only when beta != 0 (beta == 0: C is write-only, sgemm with beta 0
 * ignores the accumulator's old contents).  The workspace is therefore at
 * most three TB x TB float tiles (768 KiB) whatever the problem size, and
 * the widening costs O(mk n / TB + kn m / TB) against the GEMM's O(mnk).
 */
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"

enum { TB = 256 }; /* tile edge */

static int imin(int a, int b) { return a < b ? a : b; }
/* tile edge used along a dimension of size d (at least 1: no zero-size tiles) */
static size_t edge(int d) { return d < 1 ? 1 : (size_t)imin(d, TB); }

size_t tg_cpu_gemm_lowp_work_floats(int m, int n, int k) {
  return edge(m) * edge(k) + edge(k) * edge(n) + edge(m) * edge(n);
}

void tg_cpu_gemm_lowp(tg_dtype lowp, int transa, int transb, int m, int n,
                      int k, float alpha,
                      const uint16_t *A, int lda, // (m, lda) or, transposed, (k, lda)
                      const uint16_t *B, int ldb, // (k, ldb) or, transposed, (n, ldb)
                      float beta, tg_dtype c_dtype,
                      void *C, int ldc,           // (m, ldc), f32 or lowp
                      float *work)                // tg_cpu_gemm_lowp_work_floats
{
  if (m <= 0 || n <= 0) return;
  /* bf16 on a CPU that multiplies it natively: no widening (matmul_onednn.c) */
  if (lowp == TG_BF16 && k > 0 && alpha != 0.0f &&
      tg_cpu_gemm_bf16(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
                       c_dtype != TG_F32, C, ldc) == 0)
    return;
  const int c_low = c_dtype != TG_F32;
  float *wa = work;                       // (mb, kb) or (kb, mb) tile of A
  float *wb = wa + edge(m) * edge(k);     // (kb, nb) or (nb, kb) tile of B
  float *wc = wb + edge(k) * edge(n);     // (mb, nb) accumulator for a lowp C
  for (int i0 = 0; i0 < m; i0 += TB) {
    const int mb = imin(TB, m - i0);
    for (int j0 = 0; j0 < n; j0 += TB) {
      const int nb = imin(TB, n - j0);
      float *acc = wc;
      int ldacc = nb;
      uint16_t *c16 = c_low ? (uint16_t *)C + (size_t)i0 * ldc + j0 : NULL;
      if (!c_low) {
        acc = (float *)C + (size_t)i0 * ldc + j0;
        ldacc = ldc;
      } else if (beta != 0.0f) {
        tg_cpu_from_lowp(lowp, mb, nb, c16, ldc, acc, ldacc);
      }
      if (k <= 0 || alpha == 0.0f) {
        /* C = beta C, A and B not read: tg_cpu_gemm's k == 0 path */
        tg_cpu_gemm(0, 0, mb, nb, 0, alpha, NULL, 1, NULL, 1, beta, acc, ldacc);
      } else {
        float b = beta;
        for (int p0 = 0; p0 < k; p0 += TB) {
          const int kb = imin(TB, k - p0);
          if (transa)
            tg_cpu_from_lowp(lowp, kb, mb, A + (size_t)p0 * lda + i0, lda, wa, mb);
          else
            tg_cpu_from_lowp(lowp, mb, kb, A + (size_t)i0 * lda + p0, lda, wa, kb);
          if (transb)
            tg_cpu_from_lowp(lowp, nb, kb, B + (size_t)j0 * ldb + p0, ldb, wb, kb);
          else
            tg_cpu_from_lowp(lowp, kb, nb, B + (size_t)p0 * ldb + j0, ldb, wb, nb);
          tg_cpu_gemm(transa, transb, mb, nb, kb, alpha, wa, transa ? mb : kb, wb,
                      transb ? kb : nb, b, acc, ldacc);
          b = 1.0f; /* later panels add to the first one's result */
        }
      }
      if (c_low) tg_cpu_to_lowp(lowp, mb, nb, acc, ldacc, c16, ldc);
    }
  }
}
