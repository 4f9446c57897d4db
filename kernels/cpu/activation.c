/*
 * Activations and their backward passes, elementwise on (rows, cols)
 * matrices with leading dimensions:
 *   ReLU:  y = max(x, 0),  dx = dy where x > 0, else 0 (a select, as in
 *          PyTorch's threshold_backward: NaN in dy is not spread where x <= 0)
 *   GELU, tanh approximation:  y = 0.5 x (1 + tanh(u)),
 *          u = sqrt(2/pi) (x + 0.044715 x^3).
 *
 * GELU is evaluated through the identity 0.5 (1 + tanh(u)) = s,
 * s = sigmoid(2u) = 1 / (1 + exp(-2u)): the same function, but without the
 * cancellation of 1 + tanh(u) for negative x (at x = -5, 1 + tanhf(u) keeps
 * only ~3 correct digits; x * s keeps full relative precision).  The
 * derivative, analytically:
 *   gelu'(x) = s + 2 x s (1 - s) u',   u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * with 1 - s computed as exp(-2u) * s while that is the accurate form.  For
 * |x| > 20, gelu'(x) is exactly 1 or 0 in float and is returned as such (the
 * formula would form 0 * inf there).
 *
 * In-place use (Y == X with ldy == ldx, dX == dY) is allowed: the ReLU row
 * loops load a block of VB floats into a local array before storing it, so no
 * restrict is needed and the result does not depend on aliasing.  The blocks
 * have a constant trip count because GCC 12 at -O2 (the "very-cheap" vector
 * cost model) only vectorises such loops.  GELU uses exp_approx (below)
 * instead of expf, so it vectorises too (no vector libm at -O2).
 *
 * GELU is about 40 operations per element with a division: in SSE2 it cost
 * the d4 fc layer (1024 x 1024 outputs, one core) a large fraction of its
 * GEMM's time (before and after the clones:
 * bench/results/2026-11-24-cpu-perf.md, issue 16's cloned kernels).  Its row
 * loops are therefore cloned for AVX-512 and AVX2
 * (simd_clones.h), and this file is compiled without contraction
 * (CMakeLists.txt), so every variant gives the baseline's bits.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fast_exp.h"
#include "simd_clones.h"
#include "taskgrad/kernels_cpu.h"

enum { VB = 16 }; /* one AVX-512 vector */

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

/* max(x, 0), letting NaN through (as torch.relu does) */
static inline float relu(float x) { return x < 0.0f ? 0.0f : x; }

static inline void relu_fwd_row(int n, const float *x, float *y) {
  int c = 0;
  for (; c + VB <= n; c += VB) {
    float t[VB];
    for (int j = 0; j < VB; j++) t[j] = x[c + j];
    for (int j = 0; j < VB; j++) y[c + j] = relu(t[j]);
  }
  for (; c < n; c++) y[c] = relu(x[c]);
}

static inline void relu_bwd_row(int n, const float *x, const float *dy,
                                float *dx) {
  int c = 0;
  for (; c + VB <= n; c += VB) {
    float tx[VB], tdy[VB];
    for (int j = 0; j < VB; j++) tx[j] = x[c + j];
    for (int j = 0; j < VB; j++) tdy[j] = dy[c + j];
    for (int j = 0; j < VB; j++) dx[c + j] = tx[j] > 0.0f ? tdy[j] : 0.0f;
  }
  for (; c < n; c++) dx[c] = x[c] > 0.0f ? dy[c] : 0.0f;
}

/* e^x clamped to [-87, 88] (GELU only needs e^(-2u), which saturates long
 * before); see fast_exp.h */
TG_ROW_INLINE float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  return tg_exp_core(x);
}

TG_ROW_INLINE float gelu(float x) {
  float u = GELU_K0 * x * (1.0f + GELU_K1 * x * x);
  float s = 1.0f / (1.0f + exp_approx(-2.0f * u));
  /* far left, exp(-2u) overflows: s is 0 and gelu (minus) zero, as with
   * expf = inf */
  s = -2.0f * u > 88.0f ? 0.0f : s;
  return x * s;
}

/* gelu'(x); branch-free so that it vectorises.  Beyond |x| > 20 the exact
 * values are 1 and 0 (the formula would form 0 * inf for large negative x). */
TG_ROW_INLINE float gelu_deriv(float x) {
  float x2 = x * x;
  float u = GELU_K0 * x * (1.0f + GELU_K1 * x2);
  float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
  float e = exp_approx(-2.0f * u);
  float s = 1.0f / (1.0f + e);
  float oms = e < 1.0f ? e * s : 1.0f - s; /* 1 - s without cancellation */
  float d = s + 2.0f * x * s * oms * du;
  d = x > 20.0f ? 1.0f : d;
  return x < -20.0f ? 0.0f : d;
}

void tg_cpu_relu_fwd(int rows, int cols,
                     const float *X, int ldx, // (rows, ldx)
                     float *Y, int ldy)       // (rows, ldy)
{
  for (int r = 0; r < rows; r++)
    relu_fwd_row(cols, X + (size_t)r * ldx, Y + (size_t)r * ldy);
}

void tg_cpu_relu_bwd(int rows, int cols,
                     const float *X, int ldx,   // (rows, ldx) forward input
                     const float *dY, int lddy, // (rows, lddy)
                     float *dX, int lddx)       // (rows, lddx)
{
  for (int r = 0; r < rows; r++)
    relu_bwd_row(cols, X + (size_t)r * ldx, dY + (size_t)r * lddy,
                 dX + (size_t)r * lddx);
}

TG_SIMD_CLONES
void tg_cpu_gelu_fwd(int rows, int cols,
                     const float *X, int ldx, // (rows, ldx)
                     float *Y, int ldy)       // (rows, ldy)
{
  for (int r = 0; r < rows; r++) {
    const float *x = X + (size_t)r * ldx;
    float *y = Y + (size_t)r * ldy;
    int c = 0;
    for (; c + VB <= cols; c += VB) {
      float t[VB];
      for (int j = 0; j < VB; j++) t[j] = x[c + j];
      for (int j = 0; j < VB; j++) y[c + j] = gelu(t[j]);
    }
    for (; c < cols; c++) y[c] = gelu(x[c]);
  }
}

TG_SIMD_CLONES
void tg_cpu_gelu_bwd(int rows, int cols,
                     const float *X, int ldx,   // (rows, ldx) forward input
                     const float *dY, int lddy, // (rows, lddy)
                     float *dX, int lddx)       // (rows, lddx)
{
  for (int r = 0; r < rows; r++) {
    const float *x = X + (size_t)r * ldx;
    const float *dy = dY + (size_t)r * lddy;
    float *dx = dX + (size_t)r * lddx;
    int c = 0;
    for (; c + VB <= cols; c += VB) {
      float tx[VB], tdy[VB];
      for (int j = 0; j < VB; j++) tx[j] = x[c + j];
      for (int j = 0; j < VB; j++) tdy[j] = dy[c + j];
      for (int j = 0; j < VB; j++) dx[c + j] = tdy[j] * gelu_deriv(tx[j]);
    }
    for (; c < cols; c++) dx[c] = dy[c] * gelu_deriv(x[c]);
  }
}
