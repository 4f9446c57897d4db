/*
 * Fused linear layer kernels: a GEMM with its elementwise epilogue in the
 * same call, so the epilogue reads the GEMM's output while it is still in the
 * core's cache, and a training step has one task per layer instead of three.
 *
 * Forward: the GEMM adds the bias itself (tg_cpu_gemm_bias: in the
 * product's pass on oneDNN, else written into Z first and accumulated onto);
 * then the activation maps Z to H.  Backward to the input:
 * the GEMM writes dX, then the activation derivative multiplies it in place.
 * Row-blocking the GEMM to keep blocks in L1/L2 was measured slower (OpenBLAS
 * repacks W for every block), so the whole micro-batch is one GEMM.
 */
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"

enum { ACT_RELU = 0, ACT_GELU = 1, ACT_NONE = 2 };

/* Z = b row by row (the GEMM then adds onto it); the GEMM's beta */
static float fwd_bias(int rows, int out, const float *b, float *Z, int ldz) {
  if (!b) return 0.0f;
  for (int r = 0; r < rows; r++) {
    float *z = Z + (size_t)r * ldz;
    for (int c = 0; c < out; c++) z[c] = b[c];
  }
  return 1.0f;
}

static void fwd_act(int rows, int out, int act, const float *Z, int ldz, float *H, int ldh) {
  if (act == ACT_RELU)
    tg_cpu_relu_fwd(rows, out, Z, ldz, H, ldh);
  else if (act == ACT_GELU)
    tg_cpu_gelu_fwd(rows, out, Z, ldz, H, ldh);
}

/* dX *= act'(Zprev); the activation kernels allow dX == dY (in place) */
static void bwd_act(int rows, int in, int act, const float *Zprev, int ldzp, float *dX,
                    int lddx) {
  if (act == ACT_RELU)
    tg_cpu_relu_bwd(rows, in, Zprev, ldzp, dX, lddx, dX, lddx);
  else if (act == ACT_GELU)
    tg_cpu_gelu_bwd(rows, in, Zprev, ldzp, dX, lddx, dX, lddx);
}

void tg_cpu_linear_fwd(int rows, int in, int out,
                       const float *X, int ldx,  /* (rows, in) */
                       const float *W, int ldw,  /* (out, in) */
                       const float *b,           /* (out) or NULL */
                       int act,
                       float *Z, int ldz,        /* (rows, out) */
                       float *H, int ldh) {      /* (rows, out) */
  if (rows <= 0 || out <= 0) return;
  if (b)
    tg_cpu_gemm_bias(0, 1, rows, out, in, X, ldx, W, ldw, b, Z, ldz);
  else
    tg_cpu_gemm(0, 1, rows, out, in, 1.0f, X, ldx, W, ldw, 0.0f, Z, ldz);
  fwd_act(rows, out, act, Z, ldz, H, ldh);
}

void tg_cpu_linear_bwd_data(int rows, int in, int out,
                            const float *dZ, int lddz,     /* (rows, out) */
                            const float *W, int ldw,       /* (out, in) */
                            int act,
                            const float *Zprev, int ldzp,  /* (rows, in) */
                            float *dX, int lddx) {         /* (rows, in) */
  if (rows <= 0 || in <= 0) return;
  tg_cpu_gemm(0, 0, rows, in, out, 1.0f, dZ, lddz, W, ldw, 0.0f, dX, lddx);
  bwd_act(rows, in, act, Zprev, ldzp, dX, lddx);
}

/* The same two with 16-bit X (dZ) and W: the GEMM through tg_cpu_gemm_lowp
 * (native bf16 where the CPU has it, else widened in `work`), the epilogue
 * on the f32 Z, H, dX and Zprev as above. */
void tg_cpu_linear_fwd_lowp(tg_dtype lowp, int rows, int in, int out,
                            const uint16_t *X, int ldx, /* (rows, in) */
                            const uint16_t *W, int ldw, /* (out, in) */
                            const float *b, int act,    /* (out) or NULL */
                            float *Z, int ldz,          /* (rows, out) */
                            float *H, int ldh,          /* (rows, out) */
                            float *work) { /* tg_cpu_gemm_lowp_work_floats(rows, out, in) */
  if (rows <= 0 || out <= 0) return;
  float beta = fwd_bias(rows, out, b, Z, ldz);
  tg_cpu_gemm_lowp(lowp, 0, 1, rows, out, in, 1.0f, X, ldx, W, ldw, beta, TG_F32, Z, ldz,
                   work);
  fwd_act(rows, out, act, Z, ldz, H, ldh);
}

void tg_cpu_linear_bwd_data_lowp(tg_dtype lowp, int rows, int in, int out,
                                 const uint16_t *dZ, int lddz, /* (rows, out) */
                                 const uint16_t *W, int ldw,   /* (out, in) */
                                 int act,
                                 const float *Zprev, int ldzp, /* (rows, in) */
                                 float *dX, int lddx,          /* (rows, in) */
                                 float *work) { /* ..._work_floats(rows, in, out) */
  if (rows <= 0 || in <= 0) return;
  tg_cpu_gemm_lowp(lowp, 0, 0, rows, in, out, 1.0f, dZ, lddz, W, ldw, 0.0f, TG_F32, dX, lddx,
                   work);
  bwd_act(rows, in, act, Zprev, ldzp, dX, lddx);
}
