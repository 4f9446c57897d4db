/*
 * Bias: forward Y(r, :) += b and its gradient db = beta * db + column sums of
 * dY (the gradient of sum(W .* (Y + 1 b^T)) with respect to b).
 *
 * Both walk rows contiguously, in blocks of VB floats whose inner loop has a
 * constant trip count, because GCC 12 at -O2 (the "very-cheap" vector cost
 * model) only vectorises such loops.  Y and b, dY and db are distinct buffers
 * (restrict).
 *
 * bias_grad sums over the batch (rows), often hundreds of terms: it sums in
 * double, over column tiles of TILE accumulators kept on the stack (2 KiB),
 * so that the result is the correctly rounded float of an almost exact sum
 * while the inner loop stays contiguous and vectorised (float -> double
 * conversions).  beta == 0 means db is write-only (NaN in it is ignored).
 * Both are cloned for AVX-512 and AVX2 (simd_clones.h; compiled without
 * contraction): each column's sum keeps its order, so the bits are the
 * baseline's.
 */
#include "simd_clones.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"

enum { VB = 8, TILE = 256 }; /* TILE is a multiple of VB */

TG_ROW_INLINE void add_row(int n, float *restrict y, const float *restrict b) {
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) y[c + j] += b[c + j];
  for (; c < n; c++) y[c] += b[c];
}

TG_ROW_INLINE void sum_row(int n, double *restrict acc,
                           const float *restrict x) {
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) acc[c + j] += (double)x[c + j];
  for (; c < n; c++) acc[c] += (double)x[c];
}

/* d = beta * d + acc, each rounded once; beta 0: d write-only */
TG_ROW_INLINE void store_sums(int w, const double *restrict acc, float beta,
                              float *restrict d) {
  if (beta == 0.0f)
    for (int j = 0; j < w; j++) d[j] = (float)acc[j];
  else
    for (int j = 0; j < w; j++) d[j] = (float)((double)beta * (double)d[j] + acc[j]);
}

TG_SIMD_CLONES
void tg_cpu_bias_add(int rows, int cols,
                     float *Y, int ldy,  // (rows, ldy)
                     const float *b)     // (cols)
{
  for (int r = 0; r < rows; r++) add_row(cols, Y + (size_t)r * ldy, b);
}

TG_SIMD_CLONES
void tg_cpu_bias_grad(int rows, int cols,
                      const float *dY, int ldy, // (rows, ldy)
                      float beta,
                      float *db)                // (cols)
{
  double acc[TILE];
  for (int c0 = 0; c0 < cols; c0 += TILE) {
    int w = cols - c0 < TILE ? cols - c0 : TILE;
    for (int j = 0; j < w; j++) acc[j] = 0.0;
    for (int r = 0; r < rows; r++) sum_row(w, acc, dY + (size_t)r * ldy + c0);
    store_sums(w, acc, beta, db + c0);
  }
}

/* tg_cpu_bias_grad on 16-bit dY (precision_kernels.h): each row's tile
 * widened (exactly) into a stack buffer, then the same double sums in the
 * same order, so the bits are those of tg_cpu_bias_grad on the widened dY */
TG_SIMD_CLONES
void tg_cpu_bias_grad_lowp(tg_dtype lowp, int rows, int cols,
                           const uint16_t *dY, int ldy, // (rows, ldy) 16-bit
                           float beta,
                           float *db)                   // (cols)
{
  double acc[TILE];
  float row[TILE];
  for (int c0 = 0; c0 < cols; c0 += TILE) {
    int w = cols - c0 < TILE ? cols - c0 : TILE;
    for (int j = 0; j < w; j++) acc[j] = 0.0;
    for (int r = 0; r < rows; r++) {
      const uint16_t *src = dY + (size_t)r * ldy + c0;
      if (lowp == TG_BF16) tg_bf16_to_f32_n((size_t)w, src, row);
      else tg_f16_to_f32_n((size_t)w, src, row);
      sum_row(w, acc, row);
    }
    store_sums(w, acc, beta, db + c0);
  }
}
