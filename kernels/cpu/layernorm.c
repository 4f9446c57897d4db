/*
 * LayerNorm over the C features of each row, GPT-2 / llm.c definitions:
 *   mean = sum x / C,  var = sum (x - mean)^2 / C (biased),
 *   rstd = 1 / sqrt(var + 1e-5),  norm = (x - mean) * rstd,
 *   y = norm * w + b,
 * with mean and rstd kept per row for the backward pass, which is llm.c's
 * layernorm_backward (dnorm = w * dy):
 *   db += dy;  dw += norm * dy;
 *   dx += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd
 * all accumulated (+=): dx is the residual stream's gradient and already
 * holds the skip path's contribution, dw and db sum over the rows.
 *
 * Numerics.  The statistics are two-pass with double accumulators, so a row
 * whose mean is large compared with its spread (x = 1000 + 0.01 u) is
 * normalised accurately, where the one-pass E[x^2] - E[x]^2 in float loses
 * every digit.  The same care is needed when the deviations x - mean are
 * formed in float: the float mean m_hi = (float)mean is off by up to half an
 * ulp of |mean|, which can be a large fraction of the spread.  The forward
 * pass therefore subtracts the mean as two floats, (x - m_hi) - m_lo with
 * m_lo = (float)(mean - m_hi); x - m_hi is exact when x is within a factor 2
 * of m_hi (Sterbenz), which is precisely the case where cancellation hurts.
 * The backward pass only has the saved float mean m, so its
 * norm' = (x - m) * rstd is off by the constant delta = (mean - m) * rstd;
 * since the true norm sums to zero over the row, delta = mean(norm') and is
 * removed (one more accumulator in the first sweep, mathematically a no-op).
 *
 * The row loops work on blocks of VB floats with VB separate accumulators
 * (a plain serial sum cannot be vectorised, as float addition is not
 * reassociated without -ffast-math).  The backward's are written with GCC's
 * vector extensions (v8f, v8d below): GCC 12 left them scalar as loops over
 * arrays of VB lanes, at -O2 and -O3, for the widening to double (a
 * vcvtss2sd and a vaddsd per element; 1.9x faster as vectors, the same
 * bits: bench/results/2026-11-28-cpu-micro-rows.md).  A vector type is
 * lowered to whatever the clone's instruction set has, lane by lane the
 * same IEEE operations as the scalar code.  Single-threaded:
 * StarPU runs one kernel per core.  The VB lanes are the same in every
 * variant of the AVX-512/AVX2 clones (simd_clones.h; this file is compiled
 * without contraction), so the sums and the results are the baseline's bit
 * for bit.
 */
#include <math.h>

#include "simd_clones.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"

enum { VB = 8 };

/* VB lanes of floats and of doubles.  LD8 / ST8 go through v8f_u, which
 * needs no alignment and may alias the floats; macros rather than functions,
 * so that no vector crosses a call (whose ABI would depend on the clone's
 * instruction set). */
typedef float v8f __attribute__((vector_size(VB * sizeof(float))));
typedef double v8d __attribute__((vector_size(VB * sizeof(double))));
typedef float v8f_u __attribute__((vector_size(VB * sizeof(float)), aligned(sizeof(float)),
                                   may_alias));
#define LD8(p) ((v8f) * (const v8f_u *)(p))
#define ST8(p, v) (*(v8f_u *)(p) = (v))
#define WIDE8(v) __builtin_convertvector((v), v8d)

/* s + the VB lanes of *acc, in lane order */
TG_ROW_INLINE double add_lanes(double s, const v8d *acc) {
  for (int j = 0; j < VB; j++) s += (*acc)[j];
  return s;
}

#define LN_EPS 1e-5

/* sum of the n floats of x, in double (the forward keeps its loops over
 * arrays of lanes: its sums written with v8d measured 1.3x slower, 117-127
 * -> 153-165 us for 1024 rows of 256 on one thread) */
TG_ROW_INLINE double row_sum(int n, const float *x) {
  double acc[VB] = {0};
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) acc[j] += (double)x[c + j];
  double s = 0.0;
  for (; c < n; c++) s += (double)x[c];
  for (int j = 0; j < VB; j++) s += acc[j];
  return s;
}

/* sum of ((x - mh) - ml)^2 over the n floats of x, in double */
TG_ROW_INLINE double row_sq_dev(int n, const float *x, float mh, float ml) {
  double acc[VB] = {0};
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) {
      float d = (x[c + j] - mh) - ml;
      acc[j] += (double)(d * d);
    }
  double s = 0.0;
  for (; c < n; c++) {
    float d = (x[c] - mh) - ml;
    s += (double)(d * d);
  }
  for (int j = 0; j < VB; j++) s += acc[j];
  return s;
}

TG_SIMD_CLONES
void tg_cpu_layernorm_fwd(int n, int C,
                          const float *X, int ldx, // (n, ldx)
                          const float *w,          // (C)
                          const float *b,          // (C)
                          float *Y, int ldy,       // (n, ldy)
                          float *mean,             // (n)
                          float *rstd)             // (n)
{
  if (C <= 0) return;
  for (int i = 0; i < n; i++) {
    const float *x = X + (size_t)i * ldx;
    float *y = Y + (size_t)i * ldy;
    double mu = row_sum(C, x) / C;
    float mh = (float)mu, ml = (float)(mu - (double)mh);
    double var = row_sq_dev(C, x, mh, ml) / C;
    float r = (float)(1.0 / sqrt(var + LN_EPS));
    /* every x is read before y is written: Y may be X (same ld) */
    int c = 0;
    for (; c + VB <= C; c += VB) {
      float t[VB];
      for (int j = 0; j < VB; j++)
        t[j] = ((x[c + j] - mh) - ml) * r * w[c + j] + b[c + j];
      for (int j = 0; j < VB; j++) y[c + j] = t[j];
    }
    for (; c < C; c++) y[c] = ((x[c] - mh) - ml) * r * w[c] + b[c];
    mean[i] = mh;
    rstd[i] = r;
  }
}

TG_SIMD_CLONES
void tg_cpu_layernorm_bwd(int n, int C,
                          const float *dY, int lddy, // (n, lddy)
                          const float *X, int ldx,   // (n, ldx)
                          const float *w,            // (C)
                          const float *mean,         // (n)
                          const float *rstd,         // (n)
                          float *dX, int lddx,       // (n, lddx), accumulated
                          float *dw,                 // (C), accumulated
                          float *db)                 // (C), accumulated
{
  if (C <= 0) return;
  for (int i = 0; i < n; i++) {
    const float *x = X + (size_t)i * ldx, *dy = dY + (size_t)i * lddy;
    float *dx = dX + (size_t)i * lddx;
    const float m = mean[i], r = rstd[i];

    /* sweep 1: sums of dnorm, dnorm * norm' and norm' */
    v8d s_dn = {0}, s_dnn = {0}, s_n = {0};
    int c = 0;
    for (; c + VB <= C; c += VB) {
      v8f nr = (LD8(x + c) - m) * r, dn = LD8(w + c) * LD8(dy + c);
      s_dn += WIDE8(dn);
      s_dnn += WIDE8(dn * nr);
      s_n += WIDE8(nr);
    }
    double sdn = 0.0, sdnn = 0.0, sn = 0.0;
    for (; c < C; c++) {
      float nr = (x[c] - m) * r, dn = w[c] * dy[c];
      sdn += (double)dn;
      sdnn += (double)(dn * nr);
      sn += (double)nr;
    }
    sdn = add_lanes(sdn, &s_dn);
    sdnn = add_lanes(sdnn, &s_dnn);
    sn = add_lanes(sn, &s_n);
    double delta = sn / C;      /* norm = norm' - delta */
    double dn_mean = sdn / C;   /* mean(dnorm) */
    /* mean(dnorm * norm) = mean(dnorm * norm') - delta * mean(dnorm) */
    double dnn_mean = sdnn / C - delta * dn_mean;
    const float fdelta = (float)delta, fdm = (float)dn_mean,
                fdnn = (float)dnn_mean;

    /* sweep 2: accumulate db, dw, dx */
    c = 0;
    for (; c + VB <= C; c += VB) {
      v8f g = LD8(dy + c);
      v8f nr = (LD8(x + c) - m) * r - fdelta, dn = LD8(w + c) * g;
      v8f tb = LD8(db + c) + g, tw = LD8(dw + c) + nr * g;
      v8f tx = LD8(dx + c) + (dn - fdm - nr * fdnn) * r;
      ST8(db + c, tb);
      ST8(dw + c, tw);
      ST8(dx + c, tx);
    }
    for (; c < C; c++) {
      float g = dy[c];
      float nr = (x[c] - m) * r - fdelta, dn = w[c] * g;
      db[c] += g;
      dw[c] += nr * g;
      dx[c] += (dn - fdm - nr * fdnn) * r;
    }
  }
}

/* x[0..n) = the nearest values of type t (TG_BF16 or TG_F16), in blocks
 * through the vectorised row conversions (precision.c): the bits of the
 * scalar tg_f32_to_bf16 and tg_bf16_to_f32, several times faster than one
 * call per element. */
static void round_in_place(tg_dtype t, int n, float *x) {
  uint16_t low[256];
  for (int j = 0; j < n; j += 256) {
    int len = n - j < 256 ? n - j : 256;
    tg_cpu_to_lowp(t, 1, len, x + j, len, low, len);
    tg_cpu_from_lowp(t, 1, len, low, len, x + j, len);
  }
}

/* The residual add fused with the LayerNorm after it (see
 * tg_cpu_residual_layernorm_fwd in precision_kernels.h): row by row, so the
 * sum is still in cache when the LayerNorm reads it, through the same two
 * functions as the separate tasks, and so with their bits. */
void tg_cpu_residual_layernorm_fwd(tg_dtype sum_type, int n, int C,
                                   const float *A, int lda, // (n, lda)
                                   const float *B, int ldb, // (n, ldb)
                                   float *Y, int ldy,       // (n, ldy) A + B
                                   const float *w,          // (C)
                                   const float *b,          // (C)
                                   float *Z, int ldz,       // (n, ldz) LN(Y)
                                   float *mean,             // (n)
                                   float *rstd)             // (n)
{
  for (int i = 0; i < n; i++) {
    float *y = Y + (size_t)i * ldy;
    tg_cpu_residual_fwd(1, C, A + (size_t)i * lda, lda, B + (size_t)i * ldb, ldb, y, ldy);
    if (sum_type == TG_BF16 || sum_type == TG_F16) round_in_place(sum_type, C, y);
    tg_cpu_layernorm_fwd(1, C, y, ldy, w, b, Z + (size_t)i * ldz, ldz, mean + i, rstd + i);
  }
}
