/*
 * Fused linear layer kernels: a GEMM with its elementwise epilogue in the
 * same call, so the epilogue reads the GEMM's output while it is still in the
 * core's cache, and a training step has one task per layer instead of three.
 *
 * Forward: the bias is written into Z first and the GEMM accumulates onto it
 * (beta = 1), which costs one write pass instead of a read-modify-write pass
 * after the GEMM; then the activation maps Z to H.  Backward to the input:
 * the GEMM writes dX, then the activation derivative multiplies it in place.
 * Row-blocking the GEMM to keep blocks in L1/L2 was measured slower (OpenBLAS
 * repacks W for every block), so the whole micro-batch is one GEMM.
 */
#include "taskgrad/kernels_cpu.h"

enum { ACT_RELU = 0, ACT_GELU = 1, ACT_NONE = 2 };

void tg_cpu_linear_fwd(int rows, int in, int out,
                       const float *X, int ldx,  /* (rows, in) */
                       const float *W, int ldw,  /* (out, in) */
                       const float *b,           /* (out) or NULL */
                       int act,
                       float *Z, int ldz,        /* (rows, out) */
                       float *H, int ldh) {      /* (rows, out) */
  if (rows <= 0 || out <= 0) return;
  float beta = 0.0f;
  if (b) {
    for (int r = 0; r < rows; r++) {
      float *z = Z + (size_t)r * ldz;
      for (int c = 0; c < out; c++) z[c] = b[c];
    }
    beta = 1.0f;
  }
  tg_cpu_gemm(0, 1, rows, out, in, 1.0f, X, ldx, W, ldw, beta, Z, ldz);
  if (act == ACT_RELU)
    tg_cpu_relu_fwd(rows, out, Z, ldz, H, ldh);
  else if (act == ACT_GELU)
    tg_cpu_gelu_fwd(rows, out, Z, ldz, H, ldh);
}

void tg_cpu_linear_bwd_data(int rows, int in, int out,
                            const float *dZ, int lddz,     /* (rows, out) */
                            const float *W, int ldw,       /* (out, in) */
                            int act,
                            const float *Zprev, int ldzp,  /* (rows, in) */
                            float *dX, int lddx) {         /* (rows, in) */
  if (rows <= 0 || in <= 0) return;
  tg_cpu_gemm(0, 0, rows, in, out, 1.0f, dZ, lddz, W, ldw, 0.0f, dX, lddx);
  /* the activation kernels allow dX == dY (in place) */
  if (act == ACT_RELU)
    tg_cpu_relu_bwd(rows, in, Zprev, ldzp, dX, lddx, dX, lddx);
  else if (act == ACT_GELU)
    tg_cpu_gelu_bwd(rows, in, Zprev, ldzp, dX, lddx, dX, lddx);
}
