/*
 * taskgrad layer 1: CUDA causal multi-head self-attention (GPT-2, llm.c
 * layout), the device twins of tg_cpu_attention_naive_* and
 * tg_cpu_attention_chunked_* in kernels_cpu.h.
 *
 * Layout (read kernels_cpu.h): n = b * T rows; qkv (n, ldqkv >= 3C) holds
 * q | k | v side by side, head h using columns h*hs .. h*hs + hs - 1 of each
 * third (hs = C / NH); out, dout (n, C) with ldo / lddo, the same way; dqkv
 * like qkv with lddqkv; att (b, NH, T, T) contiguous; lse and the
 * backward's D are (n, NH) contiguous: element (s*T + t) * NH + h.
 * Scores are s(t, t2) = scale * q_t . k_t2, scale = 1 / sqrtf(hs), causal
 * (t2 <= t); lse(t) = log sum_t2 exp(s(t, t2)) (natural log, of the scaled
 * scores), so that P(t, t2) = exp(s(t, t2) - lse(t)).
 * Backward (dP = dO V^T, dS = P * (dP - D), D_t = sum_t2 P dP = dO_t . O_t):
 *   dq_t = scale * sum_t2 dS(t, t2) k_t2,  dk_t2 = scale * sum_t dS(t, t2) q_t,
 *   dv_t2 = sum_t P(t, t2) dO_t.   dqkv is written (every element of the 3C
 * columns of the n rows), never accumulated.
 * Launchers: b, T, C or NH <= 0 do nothing; C % NH != 0, or a grid that does
 * not fit, is cudaErrorInvalidValue.  Never allocate or synchronise; kernels
 * whose dynamic shared memory exceeds 48 KiB get the opt-in attribute
 * (cudaFuncSetAttribute, a host-side setting, no synchronisation).
 *
 * Naive (the reference; 256 threads = 8 warps per block)
 * -----
 * forward: one block per (sequence s, head h, query t), heaviest t first.
 *   q_t goes to shared memory; thread per key t2 <= t computes the dot
 *   product and writes the scaled score into att(s, h, t, t2) (global: the
 *   row is the output anyway, so shared memory does not grow with T); att
 *   above the diagonal is written 0 (as llm.c).  Block max, exp in place,
 *   block sum, normalise in place (att = exp(s - max) * (1 / sum), llm.c's
 *   order).  __syncthreads() then makes the row visible to the block; out_t
 *   = sum_t2 att v_t2 with warp w taking t2 = w, w + 8, ... and lanes the
 *   channels d (coalesced v rows), the 8 warp partials combined in a fixed
 *   order through shared memory.
 * backward, three kernels, no scratch (the `scratch` argument is unused and
 *   may be NULL):
 *   1. D: block per (s, h, t): D_t = sum_t2 att(t, t2) (dout_t . v_t2),
 *      stored TEMPORARILY in dqkv(row t, q column h*hs) -- the first element
 *      of the q gradient slot of that (row, head), which kernel 3 later
 *      overwrites; this is how the three kernels share D without scratch.
 *   2. dk, dv: block per (s, h, key t2), heaviest (small t2) first; queries
 *      t = t2 .. T-1 in chunks of 256: thread per t computes dP = att(t,t2)
 *      * (dout_t . v_t2 - D_t) and att(t, t2) into shared memory, then warps
 *      over t and lanes over d accumulate dk += dP q_t, dv += att dout_t
 *      into per-warp shared accumulators, combined in a fixed order.
 *   3. dq: block per (s, h, t); reads its own D (before any write of the
 *      block), then keys t2 <= t in chunks of 256 likewise:
 *      dq = scale * sum dP(t, t2) k_t2; writes the whole q slot.
 *   Deterministic (no atomics).
 *
 * Chunked (flash-attention 2 style, FP32 CUDA cores, 128 threads = 4 warps)
 * -------
 * Tiles of kFT = 32 queries x 32 keys; the `chunk` argument of the CPU
 * version does not change the CUDA tiling (results agree up to rounding for
 * any chunk) and is ignored.  Warp w owns tile rows w, w + 4, ..., w + 28
 * (8 rows); per-lane register accumulators over channels d = lane + 32 q,
 * q < DPL, a template parameter: DPL = 1, 2, 4, 8 covers hs <= 256 (GPT-2:
 * hs = 64, DPL = 2); larger heads are cudaErrorInvalidValue.  Shared-memory
 * rows read by one lane each (lane = key or query index) use an odd stride
 * hsp = hs | 1 (bank-conflict free); rows read by all lanes at once
 * (broadcast) use stride hs.  Rows and keys >= T (partial last tile) are
 * loaded as zeros and masked.
 * forward: block per (s, h, query tile qt), heaviest (last) tile first.
 *   Q tile in shared memory; for key tiles kt = 0 .. qt: K, V tiles to
 *   shared memory; lane j computes S(i, j) for its warp's 8 rows; mask
 *   (kt == qt and j > i, or key >= T) to -inf; online softmax per row with
 *   warp max / warp sum (the row lives across the 32 lanes): m' = max(m,
 *   rowmax), alpha = exp(m - m'), l = alpha l + sum p, O = alpha O + P V
 *   (P(i, j) broadcast from lane j by __shfl_sync, V rows read by lanes over
 *   d).  A row always has key 0 of the diagonal tile unmasked, so m' is
 *   finite (guarded anyway).  out = O / l, lse = m + log l.  Scratch unused
 *   (may be NULL).
 * backward: scratch = D (n, NH) = rowsum(dout * out) per (row, head), one
 *   warp each (kernel 1); tg_cuda_attention_chunked_scratch_floats() =
 *   b * T * NH.  P = exp(scale q.k - lse) is recomputed from lse in both
 *   following kernels (no atomics anywhere, deterministic):
 *   2. dK, dV: block per (s, h, key tile kt), heaviest (first) tile first;
 *      K, V tiles stay in shared memory, warp w owns key rows w + 4 m, lane =
 *      query; for query tiles qt = kt .. last: Q, dO, lse, D tiles to shared
 *      memory, lane i computes P(i, j) and dS(i, j) = P (dO_i . v_j - D_i) for
 *      its warp's 8 keys, then for each query i2 (broadcast from lane i2)
 *      dV_j += P dO_i2, dK_j += dS q_i2 in registers.  Writes k and v slots.
 *   3. dQ: block per (s, h, query tile qt); Q, dO tiles in shared memory,
 *      warp w owns query rows, lane = key; for key tiles kt = 0 .. qt: K, V
 *      to shared memory, P and dS as above, dQ_i += dS k_j2 in registers.
 *      Writes the q slot.
 * Tensor cores (TF32 wmma / mma.sync for S = Q K^T, O += P V and the
 * backward products) and larger query tiles are later optimisations; the
 * current kernels are bound by shared-memory loads (one broadcast + one
 * per-lane load per FMA pair in the dot products).
 */
#include "taskgrad/kernels_cuda.h"
#include "attention_rowdot.h"
#include "scratch_sizes.h"
#include "cuda_common.cuh"


namespace {

/* ---- common ------------------------------------------------------------- */

/* checks common to all launchers: 1 = nothing to do, 0 = go, -1 = invalid */
int attn_check(int b, int T, int C, int NH) {
  if (b <= 0 || T <= 0 || C <= 0 || NH <= 0) return 1;
  if (C % NH != 0) return -1;
  return 0;
}

/* ---- naive --------------------------------------------------------------- */

constexpr int kNT = 256;      /* threads per naive block */
constexpr int kNW = kNT / 32; /* warps per naive block */

/* dot product of a shared vector and a global row, one thread */
__device__ __forceinline__ float dot_sg(const float *s, const float *g,
                                        int hs) {
  float acc = 0.0f;
  for (int d = 0; d < hs; ++d) acc += s[d] * g[d];
  return acc;
}

/* block per (s, h, t): att row and out row */
__global__ void __launch_bounds__(kNT)
    attn_naive_fwd_kernel(int T, int C, int NH, int hs, float scale,
                          const float *__restrict__ qkv, /* (n, ldqkv) */
                          size_t ldqkv,
                          float *att, /* (b, NH, T, T); read back after sync */
                          float *__restrict__ out, /* (n, ldo) */
                          size_t ldo) {
  extern __shared__ float smem[];
  float *sq = smem;         /* (hs) q_t */
  float *sacc = smem + hs;  /* (kNW, hs) per-warp out partials */
  __shared__ float sred[kNW];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned bid = blockIdx.x;
  const int t = T - 1 - (int)(bid % (unsigned)T); /* heaviest first */
  const unsigned sh = bid / (unsigned)T;            /* s * NH + h */
  const int h = (int)(sh % (unsigned)NH), s = (int)(sh / (unsigned)NH);
  const size_t row = (size_t)s * T + t;
  const float *kbase = qkv + (size_t)s * T * ldqkv + C + (size_t)h * hs;
  const float *vbase = kbase + C; /* key / value t2 at + t2 * ldqkv */
  float *arow = att + ((size_t)sh * T + t) * T; /* (T) */

  for (int d = tid; d < hs; d += kNT) sq[d] = qkv[row * ldqkv + (size_t)h * hs + d];
  __syncthreads();
  float lmax = -INFINITY;
  for (int t2 = tid; t2 <= t; t2 += kNT) {
    const float v = dot_sg(sq, kbase + (size_t)t2 * ldqkv, hs) * scale;
    arow[t2] = v;
    lmax = fmaxf(lmax, v);
  }
  for (int t2 = t + 1 + tid; t2 < T; t2 += kNT) arow[t2] = 0.0f;
  const float m = tg_group_max<kNT>(lmax, sred);
  float lsum = 0.0f;
  for (int t2 = tid; t2 <= t; t2 += kNT) { /* own elements only */
    const float e = expf(arow[t2] - m);
    arow[t2] = e;
    lsum += e;
  }
  const float inv = 1.0f / tg_group_sum<kNT>(lsum, sred);
  for (int t2 = tid; t2 <= t; t2 += kNT) arow[t2] *= inv;
  __syncthreads(); /* the att row, written by all threads, is visible */

  for (int d0 = 0; d0 < hs; d0 += 32) {
    const int d = d0 + lane;
    if (d < hs) {
      float acc = 0.0f;
      for (int t2 = warp; t2 <= t; t2 += kNW)
        acc += arow[t2] * vbase[(size_t)t2 * ldqkv + d];
      sacc[warp * hs + d] = acc;
    }
  }
  __syncthreads();
  for (int d = tid; d < hs; d += kNT) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kNW; ++w) o += sacc[w * hs + d];
    out[row * ldo + (size_t)h * hs + d] = o;
  }
}

/* backward 1: D_t = sum_t2 att(t, t2) (dout_t . v_t2) -> dqkv(t, h*hs) */
__global__ void __launch_bounds__(kNT)
    attn_naive_bwd_d_kernel(int T, int C, int NH, int hs,
                            const float *__restrict__ qkv, /* (n, ldqkv) */
                            size_t ldqkv,
                            const float *__restrict__ att, /* (b,NH,T,T) */
                            const float *__restrict__ dout, /* (n, lddo) */
                            size_t lddo, float *dqkv, /* (n, lddqkv) */
                            size_t lddqkv) {
  extern __shared__ float smem[];
  float *sdo = smem; /* (hs) dout_t */
  __shared__ float sred[kNW];
  const int tid = threadIdx.x;
  const unsigned bid = blockIdx.x;
  const int t = T - 1 - (int)(bid % (unsigned)T);
  const unsigned sh = bid / (unsigned)T;
  const int h = (int)(sh % (unsigned)NH), s = (int)(sh / (unsigned)NH);
  const size_t row = (size_t)s * T + t;
  const float *vbase = qkv + (size_t)s * T * ldqkv + 2 * (size_t)C + (size_t)h * hs;
  const float *arow = att + ((size_t)sh * T + t) * T;
  for (int d = tid; d < hs; d += kNT) sdo[d] = dout[row * lddo + (size_t)h * hs + d];
  __syncthreads();
  float local = 0.0f;
  for (int t2 = tid; t2 <= t; t2 += kNT)
    local += arow[t2] * dot_sg(sdo, vbase + (size_t)t2 * ldqkv, hs);
  const float D = tg_group_sum<kNT>(local, sred);
  if (tid == 0) dqkv[row * lddqkv + (size_t)h * hs] = D;
}

/* backward 2: block per (s, h, key t2): dk_t2, dv_t2 */
__global__ void __launch_bounds__(kNT)
    attn_naive_bwd_kv_kernel(int T, int C, int NH, int hs, float scale,
                             const float *__restrict__ qkv, /* (n, ldqkv) */
                             size_t ldqkv,
                             const float *__restrict__ att, /* (b,NH,T,T) */
                             const float *__restrict__ dout, /* (n, lddo) */
                             size_t lddo,
                             float *dqkv, /* (n, lddqkv); D in the q slots */
                             size_t lddqkv) {
  extern __shared__ float smem[];
  float *sv = smem;                /* (hs) v_t2 */
  float *sacck = sv + hs;          /* (kNW, hs) */
  float *saccv = sacck + kNW * hs; /* (kNW, hs) */
  __shared__ float sdp[kNT], sa[kNT];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned bid = blockIdx.x;
  const int t2 = (int)(bid % (unsigned)T); /* small t2 = most queries: first */
  const unsigned sh = bid / (unsigned)T;
  const int h = (int)(sh % (unsigned)NH), s = (int)(sh / (unsigned)NH);
  const size_t base = (size_t)s * T, krow = base + t2;
  const size_t hoff = (size_t)h * hs;
  const float *acol = att + (size_t)sh * T * T + t2; /* att(t, t2) = acol[t*T] */
  for (int d = tid; d < hs; d += kNT) sv[d] = qkv[krow * ldqkv + 2 * (size_t)C + hoff + d];
  for (int k = tid; k < 2 * kNW * hs; k += kNT) sacck[k] = 0.0f; /* both */
  __syncthreads();
  for (int c0 = t2; c0 < T; c0 += kNT) {
    const int t = c0 + tid;
    float dp = 0.0f, a = 0.0f;
    if (t < T) {
      const size_t r = base + t;
      a = acol[(size_t)t * T];
      const float datt = dot_sg(sv, dout + r * lddo + hoff, hs);
      dp = a * (datt - dqkv[r * lddqkv + hoff]);
    }
    sdp[tid] = dp;
    sa[tid] = a;
    __syncthreads();
    const int cnt = min(kNT, T - c0);
    for (int d0 = 0; d0 < hs; d0 += 32) {
      const int d = d0 + lane;
      if (d < hs) {
        float ak = sacck[warp * hs + d], av = saccv[warp * hs + d];
        for (int k = warp; k < cnt; k += kNW) {
          const size_t r = base + c0 + k;
          ak += sdp[k] * qkv[r * ldqkv + hoff + d];
          av += sa[k] * dout[r * lddo + hoff + d];
        }
        sacck[warp * hs + d] = ak;
        saccv[warp * hs + d] = av;
      }
    }
    __syncthreads(); /* sdp / sa are overwritten by the next chunk */
  }
  for (int d = tid; d < hs; d += kNT) {
    float dk = 0.0f, dv = 0.0f;
#pragma unroll
    for (int w = 0; w < kNW; ++w) {
      dk += sacck[w * hs + d];
      dv += saccv[w * hs + d];
    }
    dqkv[krow * lddqkv + (size_t)C + hoff + d] = dk * scale;
    dqkv[krow * lddqkv + 2 * (size_t)C + hoff + d] = dv;
  }
}

/* backward 3: block per (s, h, query t): dq_t (overwrites the D stash) */
__global__ void __launch_bounds__(kNT)
    attn_naive_bwd_q_kernel(int T, int C, int NH, int hs, float scale,
                            const float *__restrict__ qkv, /* (n, ldqkv) */
                            size_t ldqkv,
                            const float *__restrict__ att, /* (b,NH,T,T) */
                            const float *__restrict__ dout, /* (n, lddo) */
                            size_t lddo, float *dqkv, /* (n, lddqkv) */
                            size_t lddqkv) {
  extern __shared__ float smem[];
  float *sdo = smem;       /* (hs) dout_t */
  float *sacc = sdo + hs;  /* (kNW, hs) */
  __shared__ float sdp[kNT];
  __shared__ float sD;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned bid = blockIdx.x;
  const int t = T - 1 - (int)(bid % (unsigned)T);
  const unsigned sh = bid / (unsigned)T;
  const int h = (int)(sh % (unsigned)NH), s = (int)(sh / (unsigned)NH);
  const size_t base = (size_t)s * T, row = base + t;
  const size_t hoff = (size_t)h * hs;
  const float *kbase = qkv + base * ldqkv + (size_t)C + hoff;
  const float *vbase = kbase + C;
  const float *arow = att + ((size_t)sh * T + t) * T;
  if (tid == 0) sD = dqkv[row * lddqkv + hoff]; /* read before any write */
  for (int d = tid; d < hs; d += kNT) sdo[d] = dout[row * lddo + hoff + d];
  for (int k = tid; k < kNW * hs; k += kNT) sacc[k] = 0.0f;
  __syncthreads();
  const float D = sD;
  for (int c0 = 0; c0 <= t; c0 += kNT) {
    const int t2 = c0 + tid;
    float dp = 0.0f;
    if (t2 <= t)
      dp = arow[t2] * (dot_sg(sdo, vbase + (size_t)t2 * ldqkv, hs) - D);
    sdp[tid] = dp;
    __syncthreads();
    const int cnt = min(kNT, t + 1 - c0);
    for (int d0 = 0; d0 < hs; d0 += 32) {
      const int d = d0 + lane;
      if (d < hs) {
        float acc = sacc[warp * hs + d];
        for (int k = warp; k < cnt; k += kNW)
          acc += sdp[k] * kbase[(size_t)(c0 + k) * ldqkv + d];
        sacc[warp * hs + d] = acc;
      }
    }
    __syncthreads();
  }
  for (int d = tid; d < hs; d += kNT) {
    float dq = 0.0f;
#pragma unroll
    for (int w = 0; w < kNW; ++w) dq += sacc[w * hs + d];
    dqkv[row * lddqkv + hoff + d] = dq * scale;
  }
}

/* ---- chunked (flash) ----------------------------------------------------- */

constexpr int kFT = 32;                /* tile: queries = keys = lanes */
constexpr int kFW = 4;                 /* warps per block */
constexpr int kFThreads = kFW * 32;
constexpr int kFR = kFT / kFW;         /* tile rows per warp (8) */
constexpr int kMaxHeadSize = 256;      /* DPL <= 8 */

/* blocks per SM asked of ptxas (__launch_bounds__), i.e. a register cap of
 * 65536 / (128 * that): 80 registers for DPL <= 2, 128 for 4, 255 for 8 --
 * the largest occupancy without spills (checked with -Xptxas -v).  Without
 * it ptxas picked 64-72 registers and spilled a little. */
constexpr int flash_min_blocks(int dpl) {
  return dpl <= 2 ? 6 : dpl <= 4 ? 4 : 2;
}

/* Loads rows [r0, r0 + kFT) of a (., ld) matrix's columns [0, hs) into a
 * (kFT, stride) shared tile, zeros for rows >= rend. */
__device__ __forceinline__ void load_tile(float *dst, int stride,
                                          const float *src, size_t ld, int r0,
                                          int rend, int hs) {
  const int total = kFT * hs;
  for (int idx = threadIdx.x; idx < total; idx += kFThreads) {
    const int i = idx / hs, d = idx - i * hs;
    const int r = r0 + i;
    dst[i * stride + d] = r < rend ? src[(size_t)r * ld + d] : 0.0f;
  }
}

template <int DPL>
__global__ void __launch_bounds__(kFThreads, flash_min_blocks(DPL))
    flash_fwd_kernel(int T, int C, int NH, int hs, float scale,
                     const float *__restrict__ qkv, /* (n, ldqkv) */
                     size_t ldqkv, float *__restrict__ out, /* (n, ldo) */
                     size_t ldo, float *__restrict__ lse /* (n, NH) */) {
  extern __shared__ float smem[];
  const int hsp = hs | 1;
  float *sQ = smem;            /* (kFT, hs)  broadcast reads */
  float *sK = sQ + kFT * hs;   /* (kFT, hsp) lane = key */
  float *sV = sK + kFT * hsp;  /* (kFT, hs)  lanes over d */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned nqt = (unsigned)((T + kFT - 1) / kFT);
  const unsigned bid = blockIdx.x;
  const int qt = (int)(nqt - 1 - bid % nqt); /* heaviest first */
  const unsigned sh = bid / nqt;
  const int h = (int)(sh % (unsigned)NH), s = (int)(sh / (unsigned)NH);
  const int q0 = qt * kFT;
  const float *Qg = qkv + (size_t)s * T * ldqkv + (size_t)h * hs; /* rows t */
  const float *Kg = Qg + C;
  const float *Vg = Qg + 2 * (size_t)C;

  load_tile(sQ, hs, Qg, ldqkv, q0, T, hs);
  float m_run[kFR], l_run[kFR], o[kFR][DPL];
#pragma unroll
  for (int m = 0; m < kFR; ++m) {
    m_run[m] = -INFINITY;
    l_run[m] = 0.0f;
#pragma unroll
    for (int q = 0; q < DPL; ++q) o[m][q] = 0.0f;
  }

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kFT;
    __syncthreads(); /* readers of the previous K, V tiles are done */
    load_tile(sK, hsp, Kg, ldqkv, k0, T, hs);
    load_tile(sV, hs, Vg, ldqkv, k0, T, hs);
    __syncthreads();

    float p[kFR]; /* S(i, lane), then P(i, lane) */
#pragma unroll
    for (int m = 0; m < kFR; ++m) p[m] = 0.0f;
    const float *kr = sK + lane * hsp;
    for (int d = 0; d < hs; ++d) {
      const float kv = kr[d];
#pragma unroll
      for (int m = 0; m < kFR; ++m) p[m] += sQ[(warp + kFW * m) * hs + d] * kv;
    }
    const bool diag = kt == qt;
    const bool key_ok = k0 + lane < T;
#pragma unroll
    for (int m = 0; m < kFR; ++m) {
      const int i = warp + kFW * m;
      float x = p[m] * scale;
      if (!key_ok || (diag && lane > i)) x = -INFINITY;
      const float mnew = fmaxf(m_run[m], tg_warp_max(x));
      const float mref = mnew == -INFINITY ? 0.0f : mnew;
      const float e = expf(x - mref);
      const float alpha = expf(m_run[m] - mref);
      l_run[m] = l_run[m] * alpha + tg_warp_sum(e);
      m_run[m] = mnew;
#pragma unroll
      for (int q = 0; q < DPL; ++q) o[m][q] *= alpha;
      p[m] = e;
    }
    for (int j = 0; j < kFT; ++j) {
      float vv[DPL];
#pragma unroll
      for (int q = 0; q < DPL; ++q) {
        const int d = lane + 32 * q;
        vv[q] = d < hs ? sV[j * hs + d] : 0.0f;
      }
#pragma unroll
      for (int m = 0; m < kFR; ++m) {
        const float pj = __shfl_sync(TG_FULL_MASK, p[m], j);
#pragma unroll
        for (int q = 0; q < DPL; ++q) o[m][q] += pj * vv[q];
      }
    }
  }

  const size_t base = (size_t)s * T;
#pragma unroll
  for (int m = 0; m < kFR; ++m) {
    const int t = q0 + warp + kFW * m;
    if (t >= T) continue;
    const float inv = 1.0f / l_run[m];
    float *orow = out + (base + t) * ldo + (size_t)h * hs;
#pragma unroll
    for (int q = 0; q < DPL; ++q) {
      const int d = lane + 32 * q;
      if (d < hs) orow[d] = o[m][q] * inv;
    }
    if (lane == 0) lse[(base + t) * NH + h] = m_run[m] + logf(l_run[m]);
  }
}

/* D(row, h) = dout(row, head h) . out(row, head h); one warp per (row, h) */
__global__ void __launch_bounds__(256)
    flash_bwd_d_kernel(size_t rows_heads, int NH, int hs,
                       const float *__restrict__ out, /* (n, ldo) */
                       size_t ldo, const float *__restrict__ dout, /* (n, lddo) */
                       size_t lddo, float *__restrict__ D /* (n, NH) */) {
  const int lane = threadIdx.x & 31;
  const size_t nwarps = (size_t)gridDim.x * (blockDim.x >> 5);
  for (size_t g = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
       g < rows_heads; g += nwarps) {
    const size_t row = g / (size_t)NH, h = g % (size_t)NH;
    const float *o = out + row * ldo + h * hs;
    const float *dO = dout + row * lddo + h * hs;
    float acc = 0.0f;
    for (int d = lane; d < hs; d += 32) acc += o[d] * dO[d];
    acc = tg_warp_sum(acc);
    if (lane == 0) D[g] = acc;
  }
}

template <int DPL>
__global__ void __launch_bounds__(kFThreads, flash_min_blocks(DPL))
    flash_bwd_dkdv_kernel(int T, int C, int NH, int hs, float scale,
                          const float *__restrict__ qkv, /* (n, ldqkv) */
                          size_t ldqkv,
                          const float *__restrict__ lse, /* (n, NH) */
                          const float *__restrict__ dout, /* (n, lddo) */
                          size_t lddo,
                          const float *__restrict__ Dg, /* (n, NH) */
                          float *__restrict__ dqkv, /* (n, lddqkv) */
                          size_t lddqkv) {
  extern __shared__ float smem[];
  const int hsp = hs | 1;
  float *sK = smem;              /* (kFT, hs)  broadcast */
  float *sV = sK + kFT * hs;     /* (kFT, hs)  broadcast */
  float *sQ = sV + kFT * hs;     /* (kFT, hsp) lane = query; lanes over d */
  float *sO = sQ + kFT * hsp;    /* (kFT, hsp) dO, same */
  float *sL = sO + kFT * hsp;    /* (kFT) lse */
  float *sD = sL + kFT;          /* (kFT) D */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned nt = (unsigned)((T + kFT - 1) / kFT);
  const unsigned bid = blockIdx.x;
  const int kt = (int)(bid % nt); /* first key tile = most query tiles */
  const unsigned sh = bid / nt;
  const int h = (int)(sh % (unsigned)NH), s = (int)(sh / (unsigned)NH);
  const int k0 = kt * kFT;
  const size_t base = (size_t)s * T;
  const size_t hoff = (size_t)h * hs;
  const float *Qg = qkv + base * ldqkv + hoff;
  const float *Kg = Qg + C;
  const float *Vg = Qg + 2 * (size_t)C;
  const float *dOg = dout + base * lddo + hoff;

  load_tile(sK, hs, Kg, ldqkv, k0, T, hs);
  load_tile(sV, hs, Vg, ldqkv, k0, T, hs);
  float dk[kFR][DPL], dv[kFR][DPL];
#pragma unroll
  for (int m = 0; m < kFR; ++m)
#pragma unroll
    for (int q = 0; q < DPL; ++q) dk[m][q] = dv[m][q] = 0.0f;

  for (int qt = kt; qt < (int)nt; ++qt) {
    const int q0 = qt * kFT;
    __syncthreads(); /* readers of the previous Q, dO tiles are done */
    load_tile(sQ, hsp, Qg, ldqkv, q0, T, hs);
    load_tile(sO, hsp, dOg, lddo, q0, T, hs);
    if (threadIdx.x < kFT) {
      const int t = q0 + threadIdx.x;
      sL[threadIdx.x] = t < T ? lse[(base + t) * NH + h] : 0.0f;
      sD[threadIdx.x] = t < T ? Dg[(base + t) * NH + h] : 0.0f;
    }
    __syncthreads();

    float p[kFR], ds[kFR]; /* (key j = warp + 4m, query i = lane) */
#pragma unroll
    for (int m = 0; m < kFR; ++m) p[m] = ds[m] = 0.0f;
    const float *qr = sQ + lane * hsp;
    const float *dr = sO + lane * hsp;
    for (int d = 0; d < hs; ++d) {
      const float qv = qr[d], dov = dr[d];
#pragma unroll
      for (int m = 0; m < kFR; ++m) {
        const int j = warp + kFW * m;
        p[m] += sK[j * hs + d] * qv;   /* q_i . k_j */
        ds[m] += sV[j * hs + d] * dov; /* dO_i . v_j */
      }
    }
    const int qi = q0 + lane;
    const float L = sL[lane], Dv = sD[lane];
#pragma unroll
    for (int m = 0; m < kFR; ++m) {
      const int kj = k0 + warp + kFW * m;
      const bool ok = qi < T && kj <= qi; /* implies kj < T */
      const float pv = ok ? expf(p[m] * scale - L) : 0.0f;
      ds[m] = pv * (ds[m] - Dv);
      p[m] = pv;
    }
    for (int i2 = 0; i2 < kFT; ++i2) {
      float qv[DPL], dov[DPL];
#pragma unroll
      for (int q = 0; q < DPL; ++q) {
        const int d = lane + 32 * q;
        qv[q] = d < hs ? sQ[i2 * hsp + d] : 0.0f;
        dov[q] = d < hs ? sO[i2 * hsp + d] : 0.0f;
      }
#pragma unroll
      for (int m = 0; m < kFR; ++m) {
        const float pi = __shfl_sync(TG_FULL_MASK, p[m], i2);
        const float dsi = __shfl_sync(TG_FULL_MASK, ds[m], i2);
#pragma unroll
        for (int q = 0; q < DPL; ++q) {
          dv[m][q] += pi * dov[q];
          dk[m][q] += dsi * qv[q];
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < kFR; ++m) {
    const int kj = k0 + warp + kFW * m;
    if (kj >= T) continue;
    float *drow = dqkv + (base + kj) * lddqkv + hoff;
#pragma unroll
    for (int q = 0; q < DPL; ++q) {
      const int d = lane + 32 * q;
      if (d < hs) {
        drow[C + d] = dk[m][q] * scale;
        drow[2 * (size_t)C + d] = dv[m][q];
      }
    }
  }
}

template <int DPL>
__global__ void __launch_bounds__(kFThreads, flash_min_blocks(DPL))
    flash_bwd_dq_kernel(int T, int C, int NH, int hs, float scale,
                        const float *__restrict__ qkv, /* (n, ldqkv) */
                        size_t ldqkv,
                        const float *__restrict__ lse, /* (n, NH) */
                        const float *__restrict__ dout, /* (n, lddo) */
                        size_t lddo,
                        const float *__restrict__ Dg, /* (n, NH) */
                        float *__restrict__ dqkv, /* (n, lddqkv) */
                        size_t lddqkv) {
  extern __shared__ float smem[];
  const int hsp = hs | 1;
  float *sQ = smem;            /* (kFT, hs)  broadcast */
  float *sO = sQ + kFT * hs;   /* (kFT, hs)  dO, broadcast */
  float *sK = sO + kFT * hs;   /* (kFT, hsp) lane = key; lanes over d */
  float *sV = sK + kFT * hsp;  /* (kFT, hsp) lane = key */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned nt = (unsigned)((T + kFT - 1) / kFT);
  const unsigned bid = blockIdx.x;
  const int qt = (int)(nt - 1 - bid % nt); /* heaviest first */
  const unsigned sh = bid / nt;
  const int h = (int)(sh % (unsigned)NH), s = (int)(sh / (unsigned)NH);
  const int q0 = qt * kFT;
  const size_t base = (size_t)s * T;
  const size_t hoff = (size_t)h * hs;
  const float *Qg = qkv + base * ldqkv + hoff;
  const float *Kg = Qg + C;
  const float *Vg = Qg + 2 * (size_t)C;

  load_tile(sQ, hs, Qg, ldqkv, q0, T, hs);
  load_tile(sO, hs, dout + base * lddo + hoff, lddo, q0, T, hs);
  float L[kFR], Dv[kFR], dq[kFR][DPL];
#pragma unroll
  for (int m = 0; m < kFR; ++m) {
    const int t = q0 + warp + kFW * m;
    L[m] = t < T ? lse[(base + t) * NH + h] : 0.0f;
    Dv[m] = t < T ? Dg[(base + t) * NH + h] : 0.0f;
#pragma unroll
    for (int q = 0; q < DPL; ++q) dq[m][q] = 0.0f;
  }

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kFT;
    __syncthreads(); /* readers of the previous K, V tiles are done */
    load_tile(sK, hsp, Kg, ldqkv, k0, T, hs);
    load_tile(sV, hsp, Vg, ldqkv, k0, T, hs);
    __syncthreads();

    float sc[kFR], ds[kFR]; /* (query i = warp + 4m, key j = lane) */
#pragma unroll
    for (int m = 0; m < kFR; ++m) sc[m] = ds[m] = 0.0f;
    const float *kr = sK + lane * hsp;
    const float *vr = sV + lane * hsp;
    for (int d = 0; d < hs; ++d) {
      const float kv = kr[d], vv = vr[d];
#pragma unroll
      for (int m = 0; m < kFR; ++m) {
        const int i = warp + kFW * m;
        sc[m] += sQ[i * hs + d] * kv;
        ds[m] += sO[i * hs + d] * vv;
      }
    }
    const int kj = k0 + lane;
#pragma unroll
    for (int m = 0; m < kFR; ++m) {
      const int qi = q0 + warp + kFW * m;
      const bool ok = qi < T && kj <= qi; /* implies kj < T */
      const float pv = ok ? expf(sc[m] * scale - L[m]) : 0.0f;
      ds[m] = pv * (ds[m] - Dv[m]);
    }
    for (int j2 = 0; j2 < kFT; ++j2) {
      float kv[DPL];
#pragma unroll
      for (int q = 0; q < DPL; ++q) {
        const int d = lane + 32 * q;
        kv[q] = d < hs ? sK[j2 * hsp + d] : 0.0f;
      }
#pragma unroll
      for (int m = 0; m < kFR; ++m) {
        const float dsj = __shfl_sync(TG_FULL_MASK, ds[m], j2);
#pragma unroll
        for (int q = 0; q < DPL; ++q) dq[m][q] += dsj * kv[q];
      }
    }
  }

#pragma unroll
  for (int m = 0; m < kFR; ++m) {
    const int t = q0 + warp + kFW * m;
    if (t >= T) continue;
    float *drow = dqkv + (base + t) * lddqkv + hoff;
#pragma unroll
    for (int q = 0; q < DPL; ++q) {
      const int d = lane + 32 * q;
      if (d < hs) drow[d] = dq[m][q] * scale;
    }
  }
}

/* (b * NH * tiles) blocks, or 0 when it does not fit a 1-D grid */
unsigned grid_blocks(int b, int NH, int tiles) {
  const size_t g = (size_t)b * (size_t)NH * (size_t)tiles;
  return g <= (size_t)INT_MAX ? (unsigned)g : 0u;
}

template <int DPL>
cudaError_t flash_fwd_launch(int b, int T, int C, int NH, int hs, float scale,
                             const float *qkv, size_t ldqkv, float *out,
                             size_t ldo, float *lse, cudaStream_t stream) {
  const int nt = (T + kFT - 1) / kFT;
  const unsigned grid = grid_blocks(b, NH, nt);
  if (!grid) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (size_t)kFT * (2 * hs + (hs | 1));
  cudaError_t e = tg_smem_optin(flash_fwd_kernel<DPL>, smem);
  if (e != cudaSuccess) return e;
  flash_fwd_kernel<DPL><<<grid, kFThreads, smem, stream>>>(
      T, C, NH, hs, scale, qkv, ldqkv, out, ldo, lse);
  return cudaGetLastError();
}

template <int DPL>
cudaError_t flash_bwd_launch(int b, int T, int C, int NH, int hs, float scale,
                             const float *qkv, size_t ldqkv, const float *lse,
                             const float *dout, size_t lddo, const float *D,
                             float *dqkv, size_t lddqkv, cudaStream_t stream) {
  const int nt = (T + kFT - 1) / kFT;
  const unsigned grid = grid_blocks(b, NH, nt);
  if (!grid) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) *
                      ((size_t)kFT * (2 * hs + 2 * (hs | 1)) + 2 * kFT);
  cudaError_t e = tg_smem_optin(flash_bwd_dkdv_kernel<DPL>, smem);
  if (e != cudaSuccess) return e;
  flash_bwd_dkdv_kernel<DPL><<<grid, kFThreads, smem, stream>>>(
      T, C, NH, hs, scale, qkv, ldqkv, lse, dout, lddo, D, dqkv, lddqkv);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const size_t smem_q = sizeof(float) * (size_t)kFT * (2 * hs + 2 * (hs | 1));
  e = tg_smem_optin(flash_bwd_dq_kernel<DPL>, smem_q);
  if (e != cudaSuccess) return e;
  flash_bwd_dq_kernel<DPL><<<grid, kFThreads, smem_q, stream>>>(
      T, C, NH, hs, scale, qkv, ldqkv, lse, dout, lddo, D, dqkv, lddqkv);
  return cudaGetLastError();
}

} // namespace

/* ---- launchers ------------------------------------------------------------ */

extern "C" cudaError_t tg_cuda_attention_naive_fwd(int b, int T, int C, int NH,
                                                   const float *qkv, int ldqkv,
                                                   float *att, float *out,
                                                   int ldo,
                                                   cudaStream_t stream) {
  const int chk = attn_check(b, T, C, NH);
  if (chk) return chk > 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const unsigned grid = grid_blocks(b, NH, T);
  if (!grid) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (size_t)(1 + kNW) * hs;
  cudaError_t e = tg_smem_optin(attn_naive_fwd_kernel, smem);
  if (e != cudaSuccess) return e;
  attn_naive_fwd_kernel<<<grid, kNT, smem, stream>>>(
      T, C, NH, hs, scale, qkv, (size_t)ldqkv, att, out, (size_t)ldo);
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_attention_naive_bwd(
    int b, int T, int C, int NH, const float *qkv, int ldqkv, const float *att,
    const float *dout, int lddo, float *dqkv, int lddqkv, float *scratch,
    cudaStream_t stream) {
  (void)scratch; /* unused: D travels in dqkv's q slots (see the note) */
  const int chk = attn_check(b, T, C, NH);
  if (chk) return chk > 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const unsigned grid = grid_blocks(b, NH, T);
  if (!grid) return cudaErrorInvalidValue;

  const size_t smem_d = sizeof(float) * (size_t)hs;
  cudaError_t e = tg_smem_optin(attn_naive_bwd_d_kernel, smem_d);
  if (e != cudaSuccess) return e;
  attn_naive_bwd_d_kernel<<<grid, kNT, smem_d, stream>>>(
      T, C, NH, hs, qkv, (size_t)ldqkv, att, dout, (size_t)lddo, dqkv,
      (size_t)lddqkv);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;

  const size_t smem_kv = sizeof(float) * (size_t)(1 + 2 * kNW) * hs;
  e = tg_smem_optin(attn_naive_bwd_kv_kernel, smem_kv);
  if (e != cudaSuccess) return e;
  attn_naive_bwd_kv_kernel<<<grid, kNT, smem_kv, stream>>>(
      T, C, NH, hs, scale, qkv, (size_t)ldqkv, att, dout, (size_t)lddo, dqkv,
      (size_t)lddqkv);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;

  const size_t smem_q = sizeof(float) * (size_t)(1 + kNW) * hs;
  e = tg_smem_optin(attn_naive_bwd_q_kernel, smem_q);
  if (e != cudaSuccess) return e;
  attn_naive_bwd_q_kernel<<<grid, kNT, smem_q, stream>>>(
      T, C, NH, hs, scale, qkv, (size_t)ldqkv, att, dout, (size_t)lddo, dqkv,
      (size_t)lddqkv);
  return cudaGetLastError();
}

/* D for attention_gemm.cu's backward (attention_rowdot.h) */
extern "C" cudaError_t tg_cuda_attention_rowdot(size_t rows_heads, int NH, int hs,
                                                const float *out, int ldo, const float *dout,
                                                int lddo, float *D, cudaStream_t stream) {
  if (rows_heads == 0) return cudaSuccess;
  flash_bwd_d_kernel<<<tg_cuda_blocks((rows_heads + 7) / 8, 1), 256, 0, stream>>>(
      rows_heads, NH, hs, out, (size_t)ldo, dout, (size_t)lddo, D);
  return cudaGetLastError();
}

extern "C" size_t tg_cuda_attention_chunked_scratch_floats(int b, int T, int C,
                                                           int NH, int chunk) {
  (void)C;
  (void)chunk;
  return tg_attn_flash_scratch_floats(b, T, NH); /* D (n, NH), backward only */
}

extern "C" cudaError_t tg_cuda_attention_chunked_fwd(
    int b, int T, int C, int NH, int chunk, const float *qkv, int ldqkv,
    float *out, int ldo, float *lse, float *scratch, cudaStream_t stream) {
  (void)chunk;
  (void)scratch; /* the forward needs none */
  const int chk = attn_check(b, T, C, NH);
  if (chk) return chk > 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t lq = (size_t)ldqkv, lo = (size_t)ldo;
  if (hs <= 32)
    return flash_fwd_launch<1>(b, T, C, NH, hs, scale, qkv, lq, out, lo, lse,
                               stream);
  if (hs <= 64)
    return flash_fwd_launch<2>(b, T, C, NH, hs, scale, qkv, lq, out, lo, lse,
                               stream);
  if (hs <= 128)
    return flash_fwd_launch<4>(b, T, C, NH, hs, scale, qkv, lq, out, lo, lse,
                               stream);
  if (hs <= kMaxHeadSize)
    return flash_fwd_launch<8>(b, T, C, NH, hs, scale, qkv, lq, out, lo, lse,
                               stream);
  return cudaErrorInvalidValue;
}

extern "C" cudaError_t tg_cuda_attention_chunked_bwd(
    int b, int T, int C, int NH, int chunk, const float *qkv, int ldqkv,
    const float *out, int ldo, const float *lse, const float *dout, int lddo,
    float *dqkv, int lddqkv, float *scratch, cudaStream_t stream) {
  (void)chunk;
  const int chk = attn_check(b, T, C, NH);
  if (chk) return chk > 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int hs = C / NH;
  if (hs > kMaxHeadSize) return cudaErrorInvalidValue;
  const float scale = 1.0f / sqrtf((float)hs);
  float *D = scratch; /* (n, NH) */
  cudaError_t e = tg_cuda_attention_rowdot((size_t)b * (size_t)T * (size_t)NH, NH, hs, out,
                                           ldo, dout, lddo, D, stream);
  if (e != cudaSuccess) return e;
  const size_t lq = (size_t)ldqkv, ldd = (size_t)lddo, ldg = (size_t)lddqkv;
  if (hs <= 32)
    return flash_bwd_launch<1>(b, T, C, NH, hs, scale, qkv, lq, lse, dout, ldd,
                               D, dqkv, ldg, stream);
  if (hs <= 64)
    return flash_bwd_launch<2>(b, T, C, NH, hs, scale, qkv, lq, lse, dout, ldd,
                               D, dqkv, ldg, stream);
  if (hs <= 128)
    return flash_bwd_launch<4>(b, T, C, NH, hs, scale, qkv, lq, lse, dout, ldd,
                               D, dqkv, ldg, stream);
  return flash_bwd_launch<8>(b, T, C, NH, hs, scale, qkv, lq, lse, dout, ldd,
                             D, dqkv, ldg, stream);
}
