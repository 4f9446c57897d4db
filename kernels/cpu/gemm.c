/*
 * GEMM: C(m, n) = alpha * op(A) * op(B) + beta * C, row-major, through
 * OpenBLAS's cblas_sgemm (CblasRowMajor), which is far faster than anything
 * hand-written here.  StarPU runs one kernel per worker core, so OpenBLAS is
 * expected to run single-threaded (OPENBLAS_NUM_THREADS=1 or
 * openblas_set_num_threads(1) in the runtime).
 *
 * Degenerate shapes are handled here rather than passed to cblas, whose
 * argument checks (lda >= max(1, cols), ...) would print an error for an
 * empty operand:
 *   m == 0 or n == 0:       nothing to do, no pointer is touched;
 *   k == 0 or alpha == 0:   C = beta * C (BLAS semantics: A and B are not
 *                           read), with beta == 0 writing zeros even over NaN.
 * For the general case with beta == 0, OpenBLAS itself ignores the old C (its
 * beta kernel zeroes C before accumulating); the tests check it with C filled
 * with NaN.
 */
#include <cblas.h>

#include "taskgrad/kernels_cpu.h"

/* C = beta * C on the (m, n) block, beta == 0 meaning C is write-only. */
static void scale_c(int m, int n, float beta,
                    float *C, int ldc) // (m, ldc)
{
  for (int i = 0; i < m; i++) {
    float *restrict c = C + (size_t)i * ldc;
    if (beta == 0.0f)
      for (int j = 0; j < n; j++) c[j] = 0.0f;
    else if (beta != 1.0f)
      for (int j = 0; j < n; j++) c[j] *= beta;
  }
}

void tg_cpu_gemm(int transa, int transb, int m, int n, int k, float alpha,
                 const float *A, int lda, // (m, lda) or, transposed, (k, lda)
                 const float *B, int ldb, // (k, ldb) or, transposed, (n, ldb)
                 float beta,
                 float *C, int ldc)       // (m, ldc)
{
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {
    scale_c(m, n, beta, C, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
              transb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B,
              ldb, beta, C, ldc);
}
