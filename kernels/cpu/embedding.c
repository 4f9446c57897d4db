/*
 * GPT-2 token + position embedding (llm.c encoder_forward/backward).
 *
 * Forward: row i of the micro-batch is token position i % T, so
 *   X(i, :) = wte(tokens[i], :) + wpe(i % T, :).
 * Backward: the gradient of each row is scattered back into the two tables,
 *   dwte(tokens[i], :) += dX(i, :),   dwpe(i % T, :) += dX(i, :),
 * visiting rows in increasing i.  Two rows with the same token (or the same
 * position) add into the same table row, so a fixed order is what makes the
 * float sums bit-reproducible from run to run; rows are therefore never
 * reordered or split.  Table rows that no token references are not touched.
 *
 * wte (Vp, C) and wpe (maxT, C) are contiguous (leading dimension C), as in
 * llm.c's parameter buffer; tokens are validated upstream (the kernel has no
 * vocabulary size to check them against).  The row loops work on blocks of VB
 * floats with a constant trip count, which GCC 12 at -O2 vectorises: each
 * block is formed in a local array before it is stored, so the vectoriser
 * needs no run-time alias check (which the -O2 cost model would refuse).
 */
#include "taskgrad/kernels_cpu.h"

enum { VB = 8 };

/* y = a + b over n floats */
static inline void add_row(int n, const float *a, const float *b, float *y) {
  int c = 0;
  for (; c + VB <= n; c += VB) {
    float t[VB];
    for (int j = 0; j < VB; j++) t[j] = a[c + j] + b[c + j];
    for (int j = 0; j < VB; j++) y[c + j] = t[j];
  }
  for (; c < n; c++) y[c] = a[c] + b[c];
}

/* y += x over n floats */
static inline void acc_row(int n, float *y, const float *x) {
  int c = 0;
  for (; c + VB <= n; c += VB) {
    float t[VB];
    for (int j = 0; j < VB; j++) t[j] = y[c + j] + x[c + j];
    for (int j = 0; j < VB; j++) y[c + j] = t[j];
  }
  for (; c < n; c++) y[c] += x[c];
}

void tg_cpu_embedding_fwd(int n, int T, int C,
                          const int32_t *tokens, // (n)
                          const float *wte,      // (Vp, C)
                          const float *wpe,      // (maxT, C), maxT >= T
                          float *X, int ldx)     // (n, ldx)
{
  if (T <= 0) return;
  for (int i = 0; i < n; i++)
    add_row(C, wte + (size_t)tokens[i] * C, wpe + (size_t)(i % T) * C,
            X + (size_t)i * ldx);
}

void tg_cpu_embedding_bwd(int n, int T, int C,
                          const int32_t *tokens,     // (n)
                          const float *dX, int lddx, // (n, lddx)
                          float *dwte,               // (Vp, C), accumulated
                          float *dwpe)               // (maxT, C), accumulated
{
  if (T <= 0) return;
  for (int i = 0; i < n; i++) {
    const float *d = dX + (size_t)i * lddx;
    acc_row(C, dwte + (size_t)tokens[i] * C, d);
    acc_row(C, dwpe + (size_t)(i % T) * C, d);
  }
}
