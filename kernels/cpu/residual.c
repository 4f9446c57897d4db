/*
 * Residual connection: Y = A + B on (n, C) matrices with leading dimensions.
 *
 * Y may be A or B itself (in place, same leading dimension), the usual case
 * in a transformer block where the residual stream is updated where it lies.
 * Each block of VB floats is loaded into a local before it is stored, so no
 * restrict is needed and the result does not depend on aliasing; the
 * constant trip count lets GCC 12 at -O2 vectorise the block.
 */
#include "taskgrad/kernels_cpu.h"

enum { VB = 8 };

void tg_cpu_residual_fwd(int n, int C,
                         const float *A, int lda, // (n, lda)
                         const float *B, int ldb, // (n, ldb)
                         float *Y, int ldy)       // (n, ldy)
{
  for (int i = 0; i < n; i++) {
    const float *a = A + (size_t)i * lda, *b = B + (size_t)i * ldb;
    float *y = Y + (size_t)i * ldy;
    int c = 0;
    for (; c + VB <= C; c += VB) {
      float t[VB];
      for (int j = 0; j < VB; j++) t[j] = a[c + j] + b[c + j];
      for (int j = 0; j < VB; j++) y[c + j] = t[j];
    }
    for (; c < C; c++) y[c] = a[c] + b[c];
  }
}
