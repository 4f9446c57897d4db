/*
 * Elementwise matrix utilities: fill (X = value), accumulate (dst += src) and
 * scale (X *= alpha), on row-major (rows, cols) matrices with leading
 * dimensions.  fill and accumulate are also the REDUX init and merge of the
 * reduction handles, so they run often, on small tiles.
 *
 * Only the `cols` leading floats of each row are touched; the padding between
 * rows (ld > cols) is neither read nor written.  Row offsets are computed in
 * size_t so that rows * ld may exceed INT_MAX.
 *
 * Vectorisation: GCC 12 at -O2 uses the "very-cheap" vector cost model, which
 * refuses every loop whose trip count is unknown (it would need a scalar
 * epilogue).  Each row is therefore walked in blocks of VB floats whose inner
 * loop has a constant trip count (vectorised at -O2), then a scalar tail.
 * accumulate's dst and src are distinct buffers (restrict); in-place uses of
 * fill and scale involve a single array.
 */
#include <math.h>
#include <string.h>

#include "taskgrad/kernels_cpu.h"

enum { VB = 8 }; /* floats per block: two SSE or one AVX register */

static inline void fill_row(int n, float *restrict x, float value) {
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) x[c + j] = value;
  for (; c < n; c++) x[c] = value;
}

static inline void accumulate_row(int n, float *restrict d,
                                  const float *restrict s) {
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) d[c + j] += s[c + j];
  for (; c < n; c++) d[c] += s[c];
}

static inline void scale_row(int n, float *restrict x, float alpha) {
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) x[c + j] *= alpha;
  for (; c < n; c++) x[c] *= alpha;
}

void tg_cpu_fill(int rows, int cols,
                 float *X, int ldx, // (rows, ldx)
                 float value) {
  /* +0.0f is all zero bits: glibc's memset (rep stosb) writes a large
   * gradient faster than the loop (one core;
   * bench/results/2026-11-24-cpu-perf.md, "Fill with zeros by memset") */
  if (value == 0.0f && !signbit(value) && rows > 0 && cols > 0) {
    if (ldx == cols) {
      memset(X, 0, (size_t)rows * cols * sizeof(float));
      return;
    }
    for (int r = 0; r < rows; r++) memset(X + (size_t)r * ldx, 0, (size_t)cols * sizeof(float));
    return;
  }
  for (int r = 0; r < rows; r++) fill_row(cols, X + (size_t)r * ldx, value);
}

void tg_cpu_accumulate(int rows, int cols,
                       float *dst, int ldd,       // (rows, ldd)
                       const float *src, int lds) // (rows, lds)
{
  for (int r = 0; r < rows; r++)
    accumulate_row(cols, dst + (size_t)r * ldd, src + (size_t)r * lds);
}

/* X *= alpha literally: alpha == 0 keeps NaN/Inf as NaN (use fill to zero). */
void tg_cpu_scale(int rows, int cols,
                  float *X, int ldx, // (rows, ldx)
                  float alpha) {
  for (int r = 0; r < rows; r++) scale_row(cols, X + (size_t)r * ldx, alpha);
}
