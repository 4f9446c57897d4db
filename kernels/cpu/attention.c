/*
 * Causal multi-head self-attention, GPT-2 / llm.c layout (attention_forward
 * and attention_backward of llm.c's train_gpt2.c).  For token row i (sequence
 * i / T, position t = i % T) and head h (hs = C / NH, C % NH == 0 assumed):
 *   q = qkv[i][h*hs ..], k = qkv[i][C + h*hs ..], v = qkv[i][2C + h*hs ..];
 *   s(t, t2) = q_t . k_t2 / sqrt(hs) for t2 <= t;  p = softmax over t2;
 *   out[i][h*hs ..] = sum_t2 p(t, t2) v_t2.
 *
 * Naive (the reference): loops over (sequence, head, t), materialising the
 * probabilities `att` (b, NH, T, T), zero above the diagonal.  Its backward
 * keeps one row of datt = dP in the T-float scratch and uses the softmax
 * backward in O(T) per row: dS = P * (dP - sum(P * dP)).
 *
 * Chunked (flash-attention 2): per (sequence, head), query chunks of `c` rows
 * against key chunks of `c` keys, aligned with them, so that key chunks left
 * of the query chunk are entirely visible, the diagonal one is masked
 * elementwise and those to its right are skipped (half the work).  Products
 * go to OpenBLAS (cblas_sgemm, row-major):
 *   forward   per query chunk, over key chunks 0 .. diagonal:
 *             S = scale Q K^T (mq x mk);  online softmax per row (running
 *             max m, running sum l, the accumulator row rescaled by
 *             exp(m_old - m) when m moves);  acc += P V.  Finally
 *             out = acc / l and lse = m + log(l).
 *   backward  key chunks outer, query chunks from the diagonal on inner:
 *             P = exp(scale Q K^T - lse), dV += P^T dO, dP = dO V^T,
 *             dS = P * (dP - D) with D = rowsum(dO * O) once per row,
 *             dQ += scale dS K, dK += scale dS^T Q, accumulated in dqkv.
 * Operand layout, measured on OpenBLAS 0.3.21 (SkylakeX small-matrix
 * kernels, 64^3 products): A B^T is clearly slower than A B, and a B
 * operand read in place from qkv (row stride 3C floats, a multiple of 1 KiB
 * for C = 256) clearly slower than a packed one.  So each head's operands are
 * copied once: K^T and V^T (per chunk, leading dimension c) make
 * Q K^T and dO V^T plain products, and V, K, Q, dO are packed rows; the
 * forward accumulates a query chunk's output in a packed (c, hs) block.  Q as
 * the A operand of the forward stays in place (its stride costs little).
 * dqkv is written without a zeroing pass: the first product into each block
 * uses beta = 0 (every query chunk meets key chunk 0 first; every key chunk
 * meets its diagonal query chunk first), which also overwrites NaN.
 * Masked (future) entries are exact zeros in P and dS, and skipped chunks
 * are never read, so out(t), lse(t) and dq(t) do not depend, bit for bit,
 * on the (finite) values at later positions.
 *
 * Scratch (tg_attention_chunked_scratch_floats): forward c^2 + 2c + 3c*hs +
 * 2*T*hs (T rounded up to whole chunks for K^T), backward 2c^2 + 2T +
 * 6c*hs + hs + 3*T*hs: linear in T, never T^2 (the 16-bit kernels' blocks
 * included, below).
 *
 * Elementwise work: the chunked kernels use exp_le0(), a Cephes-style expf
 * (range reduction to [-ln2/2, ln2/2], degree-6 polynomial, 2^n built in the
 * exponent bits; <= 1.5 ulp on [-87, 0]) without calls or branches, so that
 * the fixed-length VB blocks below are vectorised at -O2, where libm's expf
 * is a call per element.  Row maxima and sums run in VB lanes (GCC does not
 * vectorise a float reduction without -ffast-math), partial blocks through
 * padded copies.  The per-chunk-pair functions are compiled for AVX-512,
 * AVX2 and the SSE2 baseline (target_clones, chosen at load time): the
 * library is built for baseline x86-64.  The naive kernels use libm's expf:
 * they are the reference.
 *
 * Measured (one core, OPENBLAS_CORETYPE=SkylakeX, b 8, T 256, C 256, NH 4,
 * chunk 64): the products are most of the forward's and backward's time
 * (`bin/cpu-kernels` measures these kernels).
 *
 * Single-threaded, like every CPU kernel (StarPU runs one per core and
 * OpenBLAS is pinned to one thread).
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fast_exp.h"
#include "simd_clones.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"

enum { VB = 16 }; /* block of the vectorised loops: one AVX-512 vector */

/* ---- naive (reference) -------------------------------------------------- */

void tg_cpu_attention_naive_fwd(int b, int T, int C, int NH,
                                const float *qkv, int ldqkv, // (b*T, ldqkv)
                                float *att,                  // (b, NH, T, T)
                                float *out, int ldo)         // (b*T, ldo)
{
  if (b <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  for (int s = 0; s < b; s++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + (size_t)(s * T + t) * ldqkv + h * hs;
        float *a = att + (((size_t)s * NH + h) * T + t) * T;
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + (size_t)(s * T + t2) * ldqkv + C + h * hs;
          float d = 0.0f;
          for (int j = 0; j < hs; j++) d += q[j] * k[j];
          d *= scale;
          a[t2] = d;
          if (d > mx) mx = d;
        }
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          float e = expf(a[t2] - mx);
          a[t2] = e;
          sum += e;
        }
        float inv = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
        for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;

        float *o = out + (size_t)(s * T + t) * ldo + h * hs;
        for (int j = 0; j < hs; j++) o[j] = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = qkv + (size_t)(s * T + t2) * ldqkv + 2 * C + h * hs;
          float p = a[t2];
          for (int j = 0; j < hs; j++) o[j] += p * v[j];
        }
      }
}

void tg_cpu_attention_naive_bwd(int b, int T, int C, int NH,
                                const float *qkv, int ldqkv, // (b*T, ldqkv)
                                const float *att,            // (b, NH, T, T)
                                const float *dout, int lddo, // (b*T, lddo)
                                float *dqkv, int lddqkv,     // (b*T, lddqkv)
                                float *scratch)              // (T)
{
  if (b <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  for (int i = 0; i < b * T; i++)
    memset(dqkv + (size_t)i * lddqkv, 0, sizeof(float) * 3 * (size_t)C);
  float *datt = scratch; /* (T): dL/dP of one row */
  for (int s = 0; s < b; s++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const size_t it = (size_t)(s * T + t);
        const float *q = qkv + it * ldqkv + h * hs;
        const float *a = att + (((size_t)s * NH + h) * T + t) * T;
        const float *dO = dout + it * lddo + h * hs;
        float *dq = dqkv + it * lddqkv + h * hs;
        /* out = sum P v:  dv_t2 += P dO,  dP(t2) = dO . v_t2 */
        for (int t2 = 0; t2 <= t; t2++) {
          const size_t i2 = (size_t)(s * T + t2);
          const float *v = qkv + i2 * ldqkv + 2 * C + h * hs;
          float *dv = dqkv + i2 * lddqkv + 2 * C + h * hs;
          float d = 0.0f, p = a[t2];
          for (int j = 0; j < hs; j++) {
            d += dO[j] * v[j];
            dv[j] += p * dO[j];
          }
          datt[t2] = d;
        }
        /* softmax: dS(t2) = P(t2) (dP(t2) - sum_t3 P(t3) dP(t3)) */
        float dot = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * datt[t2];
        /* S = scale q . k:  dq += scale dS k_t2,  dk_t2 += scale dS q */
        for (int t2 = 0; t2 <= t; t2++) {
          const size_t i2 = (size_t)(s * T + t2);
          const float *k = qkv + i2 * ldqkv + C + h * hs;
          float *dk = dqkv + i2 * lddqkv + C + h * hs;
          float ds = a[t2] * (datt[t2] - dot) * scale;
          for (int j = 0; j < hs; j++) {
            dq[j] += ds * k[j];
            dk[j] += ds * q[j];
          }
        }
      }
}

/* ---- chunked (flash) ---------------------------------------------------- */

/* the chunk actually used: chunk < 1 or > T means one chunk of T rows */
static int eff_chunk(int T, int chunk) {
  return (chunk < 1 || chunk > T) ? T : chunk;
}

static size_t scratch16_fwd(size_t c, size_t hs);
static size_t scratch16_bwd(size_t t, size_t c, size_t hs);

size_t tg_attention_chunked_scratch_floats(int T, int C, int NH, int chunk) {
  if (T <= 0 || C <= 0 || NH <= 0) return 0;
  const size_t c = (size_t)eff_chunk(T, chunk), hs = (size_t)(C / NH);
  const size_t t = (size_t)T, tp = (t + c - 1) / c * c; /* T in whole chunks */
  /* forward: S, m, l, the output accumulator, K^T and V of one head */
  size_t fwd = c * c + 2 * c + c * hs + tp * hs + t * hs + scratch16_fwd(c, hs);
  /* backward: P, dP, D, L, K^T, V^T, K of one key chunk, Q and dO */
  size_t bwd = 2 * c * c + 2 * t + 3 * c * hs + 2 * t * hs + scratch16_bwd(t, c, hs);
  return fwd > bwd ? fwd : bwd;
}

/* Lower clamp of exp_le0's argument: e^-87 ~ 1.6e-38 is still normal.  It
 * is read through a volatile once per block so that GCC cannot propagate the
 * constant into the clamp: folding `x < -87 ? -87 : x` into the arithmetic
 * that follows leaves a branch, which stops the vectoriser. */
static const volatile float exp_lo = -87.0f;

/* e^x for x <= 0 (fast_exp.h), the argument clamped below at lo (exp_lo):
 * -inf gives ~1.6e-38; NaN stays NaN. */
TG_ROW_INLINE float exp_le0(float x, float lo) {
  x = x < lo ? lo : x;
  return tg_exp_core(x);
}

/* Horizontal reductions of a VB-lane accumulator as a tree of halvings,
 * written out level by level so that the wide levels are vectorised (a
 * sequential sum of the lanes costs as much as the vector work on a 64-entry
 * row). */
_Static_assert(VB == 16, "the lane reductions below are written for 16");
TG_ROW_INLINE float lane_sum(float *lane) {
  for (int j = 0; j < 8; j++) lane[j] += lane[j + 8];
  for (int j = 0; j < 4; j++) lane[j] += lane[j + 4];
  return (lane[0] + lane[2]) + (lane[1] + lane[3]);
}
TG_ROW_INLINE float fmax2(float a, float b) { return a > b ? a : b; }
TG_ROW_INLINE float lane_max(float *lane) {
  for (int j = 0; j < 8; j++) lane[j] = fmax2(lane[j], lane[j + 8]);
  for (int j = 0; j < 4; j++) lane[j] = fmax2(lane[j], lane[j + 4]);
  return fmax2(fmax2(lane[0], lane[2]), fmax2(lane[1], lane[3]));
}

/* max over n >= 1 entries; the partial last block through a copy padded
 * with -inf */
TG_ROW_INLINE float row_max(int n, const float *restrict x) {
  float lane[VB];
  for (int j = 0; j < VB; j++) lane[j] = -INFINITY;
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) lane[j] = fmax2(x[c + j], lane[j]);
  if (c < n) {
    float t[VB];
    for (int j = 0; j < VB; j++) t[j] = -INFINITY;
    for (int j = 0; j < n - c; j++) t[j] = x[c + j];
    for (int j = 0; j < VB; j++) lane[j] = fmax2(t[j], lane[j]);
  }
  return lane_max(lane);
}

/* x = exp(x - sub) over n entries, returning their sum; the partial last
 * block goes through a padded copy so that it is vectorised too */
TG_ROW_INLINE float exp_row(int n, float *restrict x, float sub, float lo) {
  float lane[VB] = {0};
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) {
      float e = exp_le0(x[c + j] - sub, lo);
      x[c + j] = e;
      lane[j] += e;
    }
  if (c < n) {
    float t[VB];
    for (int j = 0; j < VB; j++) t[j] = lo;
    for (int j = 0; j < n - c; j++) t[j] = x[c + j] - sub;
    for (int j = 0; j < VB; j++) t[j] = exp_le0(t[j], lo);
    for (int j = 0; j < n - c; j++) {
      x[c + j] = t[j];
      lane[j] += t[j];
    }
  }
  return lane_sum(lane);
}

TG_ROW_INLINE void scale_row(int n, float *restrict x, float f) {
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) x[c + j] *= f;
  for (; c < n; c++) x[c] *= f;
}

TG_ROW_INLINE float dot_row(int n, const float *restrict x,
                            const float *restrict y) {
  float lane[VB] = {0};
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) lane[j] += x[c + j] * y[c + j];
  float sum = lane_sum(lane);
  for (; c < n; c++) sum += x[c] * y[c];
  return sum;
}

/* x *= y - d */
TG_ROW_INLINE void mul_sub_row(int n, float *restrict x, const float *restrict y,
                            float d) {
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) x[c + j] *= y[c + j] - d;
  for (; c < n; c++) x[c] *= y[c] - d;
}

/* Forward, one (query chunk, key chunk) pair: the scores S (mq, mk) become
 * P = exp(S - m) with m the updated running max (masked entries, when diag,
 * exact zeros); l is updated and, unless this is the first key chunk, the
 * output rows are rescaled by exp(m_old - m). */
TG_SIMD_CLONES
static void fwd_softmax_block(int mq, int mk, int diag, int first,
                              float *S, int lds,  /* (mq, lds) */
                              float *m, float *l, /* (mq) */
                              float *O, int ldo,  /* (mq, ldo) */
                              int hs) {
  const float lo = exp_lo;
  for (int r = 0; r < mq; r++) {
    float *srow = S + (size_t)r * lds;
    const int n = diag ? r + 1 : mk; /* visible keys */
    float mx = row_max(n, srow);
    if (first) {
      l[r] = exp_row(n, srow, mx, lo);
      m[r] = mx;
    } else {
      float mnew = mx > m[r] ? mx : m[r];
      float corr = exp_le0(m[r] - mnew, lo);
      l[r] = l[r] * corr + exp_row(n, srow, mnew, lo);
      m[r] = mnew;
      if (corr != 1.0f) scale_row(hs, O + (size_t)r * ldo, corr);
    }
    for (int j = n; j < mk; j++) srow[j] = 0.0f;
  }
}

/* Backward: the scores S (mq, mk) become P = exp(S - L(row)), masked
 * entries exact zeros */
TG_SIMD_CLONES
static void bwd_probs_block(int mq, int mk, int diag,
                            float *S, int lds,   /* (mq, lds) */
                            const float *L) {    /* (mq) */
  const float lo = exp_lo;
  for (int r = 0; r < mq; r++) {
    float *srow = S + (size_t)r * lds;
    const int n = diag ? r + 1 : mk;
    exp_row(n, srow, L[r], lo);
    for (int j = n; j < mk; j++) srow[j] = 0.0f;
  }
}

/* Backward: P (mq, mk) becomes dS = P (dP - D(row)); masked entries of P
 * are zeros already and are left alone (dP may be anything there) */
TG_SIMD_CLONES
static void bwd_dsoftmax_block(int mq, int mk, int diag,
                               float *P, const float *dP, int ld, /* (mq, ld) */
                               const float *D) {                  /* (mq) */
  for (int r = 0; r < mq; r++)
    mul_sub_row(diag ? r + 1 : mk, P + (size_t)r * ld, dP + (size_t)r * ld,
                D[r]);
}

/* (rows, hs) rows of a strided matrix -> contiguous (rows, hs) */
static void pack_rows(int rows, int hs, const float *src, int lds,
                      float *restrict dst) {
  for (int t = 0; t < rows; t++)
    memcpy(dst + (size_t)t * hs, src + (size_t)t * lds, sizeof(float) * hs);
}

/* (rows, hs) rows of a strided matrix -> transposed (hs, ldd), rows <= ldd;
 * OpenBLAS's omatcopy (an extension to CBLAS) is about twice as fast as the
 * scalar loop */
static void pack_transposed(int rows, int hs, const float *src, int lds,
                            float *restrict dst, int ldd) {
#ifdef OPENBLAS_VERSION
  cblas_somatcopy(CblasRowMajor, CblasTrans, rows, hs, 1.0f, src, lds, dst,
                  ldd);
#else
  for (int t = 0; t < rows; t++) {
    const float *restrict x = src + (size_t)t * lds;
    for (int j = 0; j < hs; j++) dst[(size_t)j * ldd + t] = x[j];
  }
#endif
}

/* ---- 16-bit operands (io: TG_F32, or the type of the 16-bit tensors) ------
 * The 16-bit kernels read bf16 or fp16 qkv, out and dout and write out and
 * dqkv in that type.  Each head's rows are widened as they are packed
 * (tg_cpu_from_lowp) and the outputs rounded as they are written
 * (tg_cpu_to_lowp), from f32 blocks in the scratch: the low-precision
 * adapter's conversions around the f32 arithmetic of the f32 kernels, so the
 * bits of the f32 kernel on widened copies (the op table's ref checks it),
 * without those copies of whole tensors, which the adapter widens and rounds
 * beyond the cache (bench/results/2026-11-28-cpu-attention-bf16.md). */

static size_t io_size(tg_dtype io) { return io == TG_F32 ? sizeof(float) : sizeof(uint16_t); }

/* element i of a buffer of type io */
static const void *io_at(const void *p, size_t i, tg_dtype io) {
  return (const char *)p + i * io_size(io);
}

/* (rows, hs) rows of a strided matrix of type io -> contiguous f32 */
static void pack_rows_io(tg_dtype io, int rows, int hs, const void *src, int lds,
                         float *restrict dst) {
  if (io == TG_F32) pack_rows(rows, hs, src, lds, dst);
  else tg_cpu_from_lowp(io, rows, hs, src, lds, dst, hs);
}

/* chunked_scratch's 16-bit blocks: forward a widened query chunk and key
 * chunk; backward dQ's f32 sums for the head, a key chunk's dK and dV sums
 * and its widened V, and a widened row of out */
static size_t scratch16_fwd(size_t c, size_t hs) { return 2 * c * hs; }
static size_t scratch16_bwd(size_t t, size_t c, size_t hs) { return t * hs + 3 * c * hs + hs; }

static void attention_chunked_fwd(tg_dtype io, int b, int T, int C, int NH, int chunk,
                                  const void *qkv, int ldqkv, void *out, int ldo,
                                  float *lse, float *scratch)
{
  if (b <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
  const int hs = C / NH;
  const int c = eff_chunk(T, chunk);
  const int nch = (T + c - 1) / c;
  const float scale = 1.0f / sqrtf((float)hs);
  float *S = scratch;                /* (c, c): scores, then probabilities */
  float *m = S + (size_t)c * c;      /* (c): running row max */
  float *l = m + c;                  /* (c): running row sum of exp(S - m) */
  float *Oa = l + c;                 /* (c, hs): output rows, unnormalised */
  float *KT = Oa + (size_t)c * hs;   /* (nch, hs, c): K^T chunk by chunk */
  float *Vp = KT + (size_t)nch * hs * c; /* (T, hs) */
  float *Qw = Vp + (size_t)T * hs;   /* 16-bit: (c, hs) the query chunk widened */
  float *Kw = Qw + (size_t)c * hs;   /* 16-bit: (c, hs) a key chunk widened */
  for (int s = 0; s < b; s++)
    for (int h = 0; h < NH; h++) {
      const size_t q = (size_t)s * T * ldqkv + (size_t)h * hs;
      const void *Q = io_at(qkv, q, io), *K = io_at(qkv, q + C, io);   /* (T, hs) */
      const void *V = io_at(qkv, q + 2 * (size_t)C, io);              /* (T, hs) */
      const size_t o = (size_t)s * T * ldo + (size_t)h * hs;           /* out (T, hs) */
      for (int k0 = 0; k0 < T; k0 += c) {
        const int rows = T - k0 < c ? T - k0 : c;
        float *dst = KT + (size_t)(k0 / c) * hs * c;
        const void *Kc = io_at(K, (size_t)k0 * ldqkv, io);
        if (io == TG_F32) {
          pack_transposed(rows, hs, Kc, ldqkv, dst, c);
        } else {
          pack_rows_io(io, rows, hs, Kc, ldqkv, Kw);
          pack_transposed(rows, hs, Kw, hs, dst, c);
        }
      }
      pack_rows_io(io, T, hs, V, ldqkv, Vp);
      for (int q0 = 0; q0 < T; q0 += c) {
        const int mq = T - q0 < c ? T - q0 : c;
        const float *Qc = io_at(Q, (size_t)q0 * ldqkv, io);
        int ldq = ldqkv;
        if (io != TG_F32) {
          pack_rows_io(io, mq, hs, Qc, ldqkv, Qw);
          Qc = Qw;
          ldq = hs;
        }
        /* key chunks k0 < q0 are fully visible, k0 == q0 is the diagonal
         * one (then mk == mq), later ones are skipped */
        for (int k0 = 0; k0 <= q0; k0 += c) {
          const int diag = k0 == q0;
          const int mk = diag ? mq : c;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, mk, hs,
                      scale, Qc, ldq, KT + (size_t)(k0 / c) * hs * c, c,
                      0.0f, S, c);
          fwd_softmax_block(mq, mk, diag, k0 == 0, S, c, m, l, Oa, hs, hs);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, hs, mk,
                      1.0f, S, c, Vp + (size_t)k0 * hs, hs,
                      k0 == 0 ? 0.0f : 1.0f, Oa, hs);
        }
        for (int r = 0; r < mq; r++) {
          scale_row(hs, Oa + (size_t)r * hs, 1.0f / l[r]);
          if (io == TG_F32)
            memcpy((float *)out + o + (size_t)(q0 + r) * ldo, Oa + (size_t)r * hs,
                   sizeof(float) * hs);
          lse[(size_t)(s * T + q0 + r) * NH + h] = m[r] + logf(l[r]);
        }
        if (io != TG_F32)
          tg_cpu_to_lowp(io, mq, hs, Oa, hs, (uint16_t *)out + o + (size_t)q0 * ldo, ldo);
      }
    }
}

void tg_cpu_attention_chunked_fwd(int b, int T, int C, int NH, int chunk,
                                  const float *qkv, int ldqkv, float *out, int ldo,
                                  float *lse, float *scratch) {
  attention_chunked_fwd(TG_F32, b, T, C, NH, chunk, qkv, ldqkv, out, ldo, lse, scratch);
}

void tg_cpu_attention_chunked_fwd16(tg_dtype lowp, int b, int T, int C, int NH, int chunk,
                                    const uint16_t *qkv, int ldqkv, uint16_t *out, int ldo,
                                    float *lse, float *scratch) {
  attention_chunked_fwd(lowp, b, T, C, NH, chunk, qkv, ldqkv, out, ldo, lse, scratch);
}

static void attention_chunked_bwd(tg_dtype io, int b, int T, int C, int NH, int chunk,
                                  const void *qkv, int ldqkv, const void *out, int ldo,
                                  const float *lse, const void *dout, int lddo,
                                  void *dqkv, int lddqkv, float *scratch)
{
  if (b <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
  const int hs = C / NH;
  const int c = eff_chunk(T, chunk);
  const float scale = 1.0f / sqrtf((float)hs);
  const int wide = io == TG_F32;
  float *P = scratch;               /* (c, c): P, then dS */
  float *dP = P + (size_t)c * c;    /* (c, c) */
  float *D = dP + (size_t)c * c;    /* (T): rowsum(dO * O) of this head */
  float *L = D + T;                 /* (T): lse of this head */
  float *KTc = L + T;               /* (hs, c): K^T of the key chunk */
  float *VTc = KTc + (size_t)hs * c; /* (hs, c): V^T of the key chunk */
  float *Kc = VTc + (size_t)hs * c; /* (c, hs): K of the key chunk */
  float *Qp = Kc + (size_t)c * hs;  /* (T, hs) */
  float *dOp = Qp + (size_t)T * hs; /* (T, hs) */
  float *dQs = dOp + (size_t)T * hs; /* 16-bit: (T, hs) dQ's sums */
  float *dKs = dQs + (size_t)T * hs; /* 16-bit: (c, hs) the key chunk's dK sums */
  float *dVs = dKs + (size_t)c * hs; /* 16-bit: (c, hs) and dV sums */
  float *Vw = dVs + (size_t)c * hs;  /* 16-bit: (c, hs) the key chunk's V widened */
  float *Ow = Vw + (size_t)c * hs;   /* 16-bit: (hs) a row of out widened */
  for (int s = 0; s < b; s++)
    for (int h = 0; h < NH; h++) {
      const size_t i0 = (size_t)s * T;
      const size_t q = i0 * ldqkv + (size_t)h * hs, dq = i0 * lddqkv + (size_t)h * hs;
      const void *Q = io_at(qkv, q, io), *K = io_at(qkv, q + C, io);  /* (T, hs) */
      const void *V = io_at(qkv, q + 2 * (size_t)C, io);              /* (T, hs) */
      /* where dQ, dK and dV are summed: in dqkv (f32), else in the scratch */
      float *dQ = wide ? (float *)dqkv + dq : dQs;
      float *dK = wide ? (float *)dqkv + dq + C : NULL;
      float *dV = wide ? (float *)dqkv + dq + 2 * (size_t)C : NULL;
      const int lds = wide ? lddqkv : hs;
      pack_rows_io(io, T, hs, Q, ldqkv, Qp);
      pack_rows_io(io, T, hs, io_at(dout, i0 * lddo + (size_t)h * hs, io), lddo, dOp);
      const void *Oh = io_at(out, i0 * ldo + (size_t)h * hs, io);
      for (int t = 0; t < T; t++) {
        const float *orow = (const float *)Oh + (size_t)t * ldo;
        if (!wide) {
          pack_rows_io(io, 1, hs, io_at(Oh, (size_t)t * ldo, io), ldo, Ow);
          orow = Ow;
        }
        D[t] = dot_row(hs, dOp + (size_t)t * hs, orow);
        L[t] = lse[(i0 + t) * NH + h];
      }
      for (int k0 = 0; k0 < T; k0 += c) {
        const int mk = T - k0 < c ? T - k0 : c;
        const void *Kk = io_at(K, (size_t)k0 * ldqkv, io), *Vk = io_at(V, (size_t)k0 * ldqkv, io);
        if (wide) {
          pack_transposed(mk, hs, Kk, ldqkv, KTc, c);
          pack_transposed(mk, hs, Vk, ldqkv, VTc, c);
          pack_rows(mk, hs, Kk, ldqkv, Kc);
        } else {
          pack_rows_io(io, mk, hs, Kk, ldqkv, Kc);
          pack_transposed(mk, hs, Kc, hs, KTc, c);
          pack_rows_io(io, mk, hs, Vk, ldqkv, Vw);
          pack_transposed(mk, hs, Vw, hs, VTc, c);
        }
        float *dKc = wide ? dK + (size_t)k0 * lddqkv : dKs;
        float *dVc = wide ? dV + (size_t)k0 * lddqkv : dVs;
        for (int q0 = k0; q0 < T; q0 += c) {
          const int mq = T - q0 < c ? T - q0 : c;
          const int diag = q0 == k0; /* then mk == mq */
          const float *Qc = Qp + (size_t)q0 * hs;
          const float *dOc = dOp + (size_t)q0 * hs;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, mk, hs,
                      scale, Qc, hs, KTc, c, 0.0f, P, c);
          bwd_probs_block(mq, mk, diag, P, c, L + q0);
          /* dV_k += P^T dO_q */
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, mk, hs, mq,
                      1.0f, P, c, dOc, hs, diag ? 0.0f : 1.0f, dVc, lds);
          /* dP = dO_q V_k^T */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, mk, hs,
                      1.0f, dOc, hs, VTc, c, 0.0f, dP, c);
          bwd_dsoftmax_block(mq, mk, diag, P, dP, c, D + q0);
          /* dQ_q += scale dS K_k;  dK_k += scale dS^T Q_q */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, hs, mk,
                      scale, P, c, Kc, hs, k0 == 0 ? 0.0f : 1.0f,
                      dQ + (size_t)q0 * lds, lds);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, mk, hs, mq,
                      scale, P, c, Qc, hs, diag ? 0.0f : 1.0f, dKc, lds);
        }
        if (!wide) { /* the key chunk's dK and dV are complete */
          uint16_t *d16 = (uint16_t *)dqkv + dq + (size_t)k0 * lddqkv;
          tg_cpu_to_lowp(io, mk, hs, dKs, hs, d16 + C, lddqkv);
          tg_cpu_to_lowp(io, mk, hs, dVs, hs, d16 + 2 * (size_t)C, lddqkv);
        }
      }
      if (!wide) tg_cpu_to_lowp(io, T, hs, dQs, hs, (uint16_t *)dqkv + dq, lddqkv);
    }
}

void tg_cpu_attention_chunked_bwd(int b, int T, int C, int NH, int chunk,
                                  const float *qkv, int ldqkv, const float *out, int ldo,
                                  const float *lse, const float *dout, int lddo, float *dqkv,
                                  int lddqkv, float *scratch) {
  attention_chunked_bwd(TG_F32, b, T, C, NH, chunk, qkv, ldqkv, out, ldo, lse, dout, lddo, dqkv,
                        lddqkv, scratch);
}

void tg_cpu_attention_chunked_bwd16(tg_dtype lowp, int b, int T, int C, int NH, int chunk,
                                    const uint16_t *qkv, int ldqkv, const uint16_t *out,
                                    int ldo, const float *lse, const uint16_t *dout, int lddo,
                                    uint16_t *dqkv, int lddqkv, float *scratch) {
  attention_chunked_bwd(lowp, b, T, C, NH, chunk, qkv, ldqkv, out, ldo, lse, dout, lddo, dqkv,
                        lddqkv, scratch);
}
