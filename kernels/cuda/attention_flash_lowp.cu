/*
 * taskgrad layer 1: causal flash attention on the bf16 tensor cores (WMMA),
 * bf16 q, k, v, out, dout and dqkv, f32 lse: the kernels of the attention
 * kind `flash` on CUDA (codelets/attention.c), with the chunked kernels'
 * contract (layout, lse, dqkv written; attention.cu's note).
 *
 * Design note
 * -----------
 * The gemm path (attention_gemm_lowp.cu) writes a sequence's (NH, T, T)
 * scores to memory and reads them back several times: on an H100 that
 * traffic, not its products, is its cost
 * (bench/results/2026-11-27-h100-native-bf16.md).  Here the scores live in
 * shared memory only, a 64 x 64 tile at a time, and the blocks above the
 * diagonal are skipped, as in FlashAttention-2:
 *   forward, a block per (64 queries, head, sequence), a warp per 16 query
 *     rows: for each key tile up to the diagonal, S = Q K^T (WMMA, f32),
 *     the online softmax in f32 (running max m and sum l per row, the
 *     output accumulator rescaled by exp(m_old - m_new)), P rounded to
 *     bf16, O += P V (WMMA); out = O / l in bf16, lse = m + log l.
 *   backward, D = rowsum(dout * out) first (f32 from the bf16 values); then
 *     a block per (64 keys, head, sequence) accumulates dV += P^T dO and
 *     dK += dS^T Q over the query tiles from the diagonal down, and a block
 *     per (64 queries, head, sequence) dQ += dS K over the key tiles up to
 *     the diagonal, with P = exp(scale S - lse) and dS = P (dP - D) in f32
 *     (dP = dO V^T), rounded to bf16 for the products.  Each output is
 *     accumulated in f32 by one block, in registers (WMMA accumulator
 *     fragments, which need no rescaling here), and written once:
 *     deterministic, no atomics.
 * Rounding points: P and dS in bf16 before their products (as the gemm
 * path and FlashAttention-2); the products sum in f32; each output is
 * rounded to bf16 once.  The score scale multiplies the f32 products.
 * Measured on an H100 at first (bench/results/2026-11-27-h100-measured-2.md)
 * these kernels ran at 8.5 TFLOP/s, slower than the gemm path: the forward's
 * softmax had each lane walk one row's columns, so that the 16 lanes of a
 * column read and wrote words 256 bytes apart (one bank: 32-way conflicts),
 * and every unpadded (64, 64) or (64, HS) tile put 8 rows of a fragment in
 * the same banks, and the backward loaded and stored its accumulators from
 * shared memory around every product.  Now the softmax walks a row at a
 * time with the lanes across its columns, the tiles' rows are padded by 16
 * bytes (kLdS, kLdP, Ld<HS>) and the backward keeps its accumulators in
 * registers; not measured on a GPU since.
 * WMMA fragments are read and written element by element only through
 * shared memory (their register layout is unspecified; the forward's O,
 * rescaled per row, lives there), which tests/cuda_emu/include/mma.h
 * emulates.
 * Every fragment load and store is at a multiple of 32 bytes from the
 * dynamic shared buffer (tile offsets are multiples of 16 elements), which
 * starts at the window's base, the kernels having no static shared memory:
 * WMMA's 256-bit alignment.
 * Head sizes 16, 32, 64 and 128 (cudaErrorNotSupported otherwise: the
 * codelet then takes the gemm path).  Shared memory: up to 120.5 KiB
 * (hs 128, the backward; 88.5 KiB at hs 64, two blocks an SM), opted in.  Scratch: D, (b T, NH) floats
 * (tg_attn_flash_scratch_floats).  Never allocates or synchronises.
 */
#include <mma.h>

#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "attention_gemm.cuh"
#include "cuda_common.cuh"
#include "scratch_sizes.h"
#include "lowp.cuh"


namespace {

using namespace nvcuda;
typedef __nv_bfloat16 bf16_t;
constexpr int kB = 64;        /* queries or keys per tile */
constexpr int kThreads = 128; /* 4 warps, 16 rows each */
/* Leading dimensions in shared memory, padded by 16 bytes a row: a WMMA
 * fragment's rows then start in different banks (unpadded, 64 floats or
 * 64 bf16 a row put 8 of its rows in the same banks); 16 rows stay a
 * multiple of 32 bytes apart */
constexpr int kLdS = kB + 4;               /* f32 (64, 64) scores: S, dP */
constexpr int kLdP = kB + 8;               /* bf16 (64, 64): P, dS */
template <int HS> struct Ld {
  static constexpr int h = HS + 8;         /* bf16 (64, HS): Q, K, V, dO */
  static constexpr int o = HS + 4;         /* f32 (64, HS) accumulators */
};

__device__ __forceinline__ uint16_t to_bf(float x) { return tg_lowp::to_low<true>(x); }

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::col_major> FragAT;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::col_major> FragBT;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

/* rows [r0, r0 + 64) of one head of a (T, ld) bf16 matrix into a (64, HS)
 * tile (ld Ld<HS>::h), zero past T: eight values a load where the rows
 * are 16-byte aligned (the tile's are: (HS + 8) * 2 bytes), one otherwise */
template <int HS>
__device__ void load_tile(uint16_t *dst, const uint16_t *src, size_t ld, int r0, int T) {
  if ((((uintptr_t)src | (ld * sizeof *src)) & 15) == 0) { /* uniform over the block */
    constexpr int kVec = 8, kPerRow = HS / kVec;
    for (int i = threadIdx.x; i < kB * kPerRow; i += kThreads) {
      const int r = i / kPerRow, c = (i % kPerRow) * kVec;
      tg_copy16(dst + r * Ld<HS>::h + c, r0 + r < T ? src + (size_t)(r0 + r) * ld + c : NULL);
    }
    return;
  }
  for (int i = threadIdx.x; i < kB * HS; i += kThreads) {
    const int r = i / HS, c = i % HS;
    dst[r * Ld<HS>::h + c] = r0 + r < T ? src[(size_t)(r0 + r) * ld + c] : (uint16_t)0;
  }
}

/* dst (16, 64) f32 (ld kLdS) = the warp's 16 rows of X times the 64 rows
 * of Y transposed: X Y^T (X, Y: bf16 tiles, ld Ld<HS>::h) */
template <int HS>
__device__ void rows_times_t(float *dst, const uint16_t *X, const uint16_t *Y) {
  for (int j = 0; j < kB / 16; j++) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < HS / 16; k++) {
      FragA a;
      FragBT bt;
      wmma::load_matrix_sync(a, (const bf16_t *)X + k * 16, Ld<HS>::h);
      wmma::load_matrix_sync(bt, (const bf16_t *)Y + (size_t)j * 16 * Ld<HS>::h + k * 16,
                             Ld<HS>::h);
      wmma::mma_sync(acc, a, bt, acc);
    }
    wmma::store_matrix_sync(dst + j * 16, acc, kLdS, wmma::mem_row_major);
  }
}

/* acc[j], the (16, 16) f32 fragments of a warp's (16, HS) accumulator, in
 * registers, += A (16, 64) bf16 (ld kLdP; its transpose when AT: A is then
 * the (64, 16) column block at A, ld kLdP) times B (64, HS) bf16 (ld
 * Ld<HS>::h).  The backward's accumulators need no rescaling: they stay in
 * registers through its loop. */
template <int HS, bool AT>
__device__ void accumulate_regs(FragC (&acc)[HS / 16], const uint16_t *A, const uint16_t *B) {
  for (int j = 0; j < HS / 16; j++)
    for (int k = 0; k < kB / 16; k++) {
      FragB b;
      wmma::load_matrix_sync(b, (const bf16_t *)B + (size_t)k * 16 * Ld<HS>::h + j * 16,
                             Ld<HS>::h);
      if (AT) {
        FragAT a;
        wmma::load_matrix_sync(a, (const bf16_t *)A + (size_t)k * 16 * kLdP, kLdP);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      } else {
        FragA a;
        wmma::load_matrix_sync(a, (const bf16_t *)A + k * 16, kLdP);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
}

/* the same on an accumulator in shared memory (16 rows at acc_s, ld
 * Ld<HS>::o): the forward's, which its softmax rescales row by row */
template <int HS>
__device__ void accumulate_smem(float *acc_s, const uint16_t *A, const uint16_t *B) {
  FragC acc[HS / 16];
  for (int j = 0; j < HS / 16; j++)
    wmma::load_matrix_sync(acc[j], acc_s + j * 16, Ld<HS>::o, wmma::mem_row_major);
  accumulate_regs<HS, false>(acc, A, B);
  for (int j = 0; j < HS / 16; j++)
    wmma::store_matrix_sync(acc_s + j * 16, acc[j], Ld<HS>::o, wmma::mem_row_major);
}

template <int HS> struct FwdSmem {
  static constexpr size_t H = 2 * kB * Ld<HS>::h, O = 4 * kB * Ld<HS>::o; /* tile bytes */
  static constexpr size_t q = 0, k = q + H, v = k + H, s = v + H, p = s + 4 * kB * kLdS,
                          o = p + 2 * kB * kLdP, m = o + O, l = m + 4 * kB, bytes = l + 4 * kB;
};

template <int HS>
__global__ void __launch_bounds__(kThreads)
    flash_fwd(int T, int C, int NH, float scale, const uint16_t *__restrict__ qkv,
              size_t ldq, uint16_t *__restrict__ out, size_t ldo, float *__restrict__ lse) {
  extern __shared__ char smem[];
  typedef FwdSmem<HS> L;
  uint16_t *Qs = (uint16_t *)(smem + L::q), *Ks = (uint16_t *)(smem + L::k);
  uint16_t *Vs = (uint16_t *)(smem + L::v), *Ps = (uint16_t *)(smem + L::p);
  float *Ss = (float *)(smem + L::s), *Os = (float *)(smem + L::o);
  float *ms = (float *)(smem + L::m), *ls = (float *)(smem + L::l);
  const int q0 = blockIdx.x * kB, h = blockIdx.y, s = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r0 = warp * 16;
  const uint16_t *base = qkv + (size_t)s * T * ldq + (size_t)h * HS;
  load_tile<HS>(Qs, base, ldq, q0, T);
  for (int i = threadIdx.x; i < kB * Ld<HS>::o; i += kThreads) Os[i] = 0.0f;
  for (int i = threadIdx.x; i < kB; i += kThreads) {
    ms[i] = -INFINITY;
    ls[i] = 0.0f;
  }
  const int last = (min(q0 + kB, T) - 1) / kB; /* the diagonal key tile */
  for (int kt = 0; kt <= last; kt++) {
    const int k0 = kt * kB;
    __syncthreads(); /* the previous tile's K, V are no longer read */
    load_tile<HS>(Ks, base + C, ldq, k0, T);
    load_tile<HS>(Vs, base + 2 * C, ldq, k0, T);
    __syncthreads();
    rows_times_t<HS>(Ss + (size_t)r0 * kLdS, Qs + (size_t)r0 * Ld<HS>::h, Ks);
    __syncwarp();
    /* the online softmax, a row at a time, the lanes across its columns
     * (lane and lane + 32): consecutive words, no bank conflicts */
    for (int i = 0; i < 16; i++) {
      const int r = r0 + i, q = q0 + r;
      const float *srow = Ss + (size_t)r * kLdS;
      const bool ok0 = k0 + lane <= q && q < T, ok1 = k0 + lane + 32 <= q && q < T;
      const float s0 = srow[lane] * scale, s1 = srow[lane + 32] * scale;
      const float mt = tg_warp_max(fmaxf(ok0 ? s0 : -INFINITY, ok1 ? s1 : -INFINITY));
      const float mo = ms[r], mn = fmaxf(mo, mt);
      const float corr = mo == -INFINITY ? 0.0f : expf(mo - mn);
      const float p0 = ok0 ? expf(s0 - mn) : 0.0f, p1 = ok1 ? expf(s1 - mn) : 0.0f;
      Ps[(size_t)r * kLdP + lane] = to_bf(p0);
      Ps[(size_t)r * kLdP + lane + 32] = to_bf(p1);
      const float sum = tg_warp_sum(p0 + p1);
      for (int c = lane; c < HS; c += 32) Os[(size_t)r * Ld<HS>::o + c] *= corr;
      __syncwarp(); /* every lane has read ms[r] */
      if (lane == 0) {
        ms[r] = mn;
        ls[r] = ls[r] * corr + sum;
      }
    }
    __syncwarp();
    accumulate_smem<HS>(Os + (size_t)r0 * Ld<HS>::o, Ps + (size_t)r0 * kLdP, Vs);
    __syncwarp();
  }
  /* out = O / l, a row at a time: coalesced stores */
  for (int i = 0; i < 16; i++) {
    const int r = r0 + i, q = q0 + r;
    if (q >= T) break; /* uniform over the warp */
    const float inv = 1.0f / ls[r];
    uint16_t *o = out + ((size_t)s * T + q) * ldo + (size_t)h * HS;
    for (int c = lane; c < HS; c += 32) o[c] = to_bf(Os[(size_t)r * Ld<HS>::o + c] * inv);
    if (lane == 0) lse[((size_t)s * T + q) * NH + h] = ms[r] + logf(ls[r]);
  }
}

/* P = exp(scale S - lse), dS = P (dP - D) on the warp's 16 query rows
 * (tile rows r0.., queries q0 + row, keys k0 + col), rounded to bf16 */
__device__ void probs_grads(const float *Ss, const float *dPs, uint16_t *P16, uint16_t *dS16,
                            const float *lse_s, const float *D_s, int r0, int q0, int k0, int T,
                            float scale) {
  const int lane = threadIdx.x & 31;
  for (int i = lane; i < 16 * kB; i += 32) {
    const int r = r0 + i / kB, c = i % kB, q = q0 + r, k = k0 + c;
    const size_t e = (size_t)r * kLdS + c, e16 = (size_t)r * kLdP + c;
    const bool ok = k <= q && q < T && k < T;
    const float p = ok ? expf(Ss[e] * scale - lse_s[r]) : 0.0f;
    P16[e16] = to_bf(p);
    dS16[e16] = to_bf(ok ? p * (dPs[e] - D_s[r]) : 0.0f);
  }
}

/* The accumulators (a1, a2) live in registers through the loop and are
 * stored over the K, V, Q and dO tiles once the last of these is read. */
template <int HS> struct BwdSmem {
  static constexpr size_t H = 2 * kB * Ld<HS>::h, O = 4 * kB * Ld<HS>::o; /* tile bytes */
  static constexpr size_t k = 0, v = k + H, q = v + H, d = q + H, s = d + H,
                          dp = s + 4 * kB * kLdS, p = dp + 4 * kB * kLdS, ds = p + 2 * kB * kLdP,
                          lse = ds + 2 * kB * kLdP, dd = lse + 4 * kB, bytes = dd + 4 * kB,
                          a1 = 0, a2 = O;
  static_assert(2 * O <= 4 * H, "the accumulators fit over the four bf16 tiles");
};

/* the backward kernels' shared-memory tiles (acc1: dV or dQ, acc2: dK) */
template <int HS> struct BwdTiles {
  uint16_t *K, *V, *Q, *dO, *P16, *dS16;
  float *S, *dP, *acc1, *acc2, *lse, *D;
  __device__ explicit BwdTiles(char *smem) {
    typedef BwdSmem<HS> L;
    K = (uint16_t *)(smem + L::k);
    V = (uint16_t *)(smem + L::v);
    Q = (uint16_t *)(smem + L::q);
    dO = (uint16_t *)(smem + L::d);
    P16 = (uint16_t *)(smem + L::p);
    dS16 = (uint16_t *)(smem + L::ds);
    S = (float *)(smem + L::s);
    dP = (float *)(smem + L::dp);
    acc1 = (float *)(smem + L::a1);
    acc2 = (float *)(smem + L::a2);
    lse = (float *)(smem + L::lse);
    D = (float *)(smem + L::dd);
  }
  /* the warp's 16 query rows (tile row r0) of S = Q K^T and dP = dO V^T,
   * then their P and dS in bf16 */
  __device__ void probs(int r0, int q0, int k0, int T, float scale) {
    rows_times_t<HS>(S + (size_t)r0 * kLdS, Q + (size_t)r0 * Ld<HS>::h, K);
    rows_times_t<HS>(dP + (size_t)r0 * kLdS, dO + (size_t)r0 * Ld<HS>::h, V);
    __syncwarp();
    probs_grads(S, dP, P16, dS16, lse, D, r0, q0, k0, T, scale);
  }
};

/* the backward kernels' arguments */
struct BwdArgs {
  int T, C, NH;
  float scale;
  const uint16_t *qkv, *dout;
  const float *lse, *D;
  uint16_t *dqkv;
  size_t ldq, lddo, ldg;
};

/* the query rows' lse and D of tile q0 (0 past T) */
__device__ void load_rows(float *lse_s, float *D_s, const float *lse, const float *D, int q0,
                          int T, int NH, int h, size_t srow) {
  for (int i = threadIdx.x; i < kB; i += kThreads) {
    const bool in = q0 + i < T;
    lse_s[i] = in ? lse[(srow + q0 + i) * NH + h] : 0.0f;
    D_s[i] = in ? D[(srow + q0 + i) * NH + h] : 0.0f;
  }
}

/* DQ false: dK and dV of 64 keys, a block per (key tile, head, sequence),
 * over the query tiles from the diagonal down; DQ true: dQ of 64 queries,
 * a block per (query tile, head, sequence), over the key tiles up to the
 * diagonal */
template <int HS, bool DQ>
__global__ void __launch_bounds__(kThreads) flash_bwd(const BwdArgs a) {
  extern __shared__ char smem[];
  BwdTiles<HS> t(smem);
  const int x0 = blockIdx.x * kB, h = blockIdx.y, s = blockIdx.z; /* x0: k0 or q0 */
  const int T = a.T, C = a.C, r0 = (threadIdx.x >> 5) * 16;
  const size_t srow = (size_t)s * T, hc = (size_t)h * HS;
  const uint16_t *base = a.qkv + srow * a.ldq + hc, *dob = a.dout + srow * a.lddo + hc;
  /* the block's own tiles, loaded once: K and V, or Q, dO, lse and D */
  load_tile<HS>(DQ ? t.Q : t.K, base + (DQ ? 0 : C), a.ldq, x0, T);
  load_tile<HS>(DQ ? t.dO : t.V, DQ ? dob : base + 2 * C, DQ ? a.lddo : a.ldq, x0, T);
  if (DQ) load_rows(t.lse, t.D, a.lse, a.D, x0, T, a.NH, h, srow);
  FragC acc1[HS / 16], acc2[HS / 16]; /* the warp's 16 rows: dV or dQ, and dK */
  for (int j = 0; j < HS / 16; j++) {
    wmma::fill_fragment(acc1[j], 0.0f);
    wmma::fill_fragment(acc2[j], 0.0f);
  }
  const int first = DQ ? 0 : (int)blockIdx.x, end = DQ ? (int)blockIdx.x + 1 : (T + kB - 1) / kB;
  for (int y = first; y < end; y++) { /* the other tiles: keys (DQ) or queries */
    const int y0 = y * kB;
    __syncthreads();
    if (DQ) {
      load_tile<HS>(t.K, base + C, a.ldq, y0, T);
      load_tile<HS>(t.V, base + 2 * C, a.ldq, y0, T);
    } else {
      load_tile<HS>(t.Q, base, a.ldq, y0, T);
      load_tile<HS>(t.dO, dob, a.lddo, y0, T);
      load_rows(t.lse, t.D, a.lse, a.D, y0, T, a.NH, h, srow);
    }
    __syncthreads();
    t.probs(r0, DQ ? x0 : y0, DQ ? y0 : x0, T, a.scale);
    if (DQ) {
      __syncwarp();
      accumulate_regs<HS, false>(acc1, t.dS16 + (size_t)r0 * kLdP, t.K);
    } else {
      __syncthreads(); /* every query row's P and dS */
      /* the warp's 16 keys (columns r0.. of P and dS): dV, dK */
      accumulate_regs<HS, true>(acc1, t.P16 + r0, t.dO);
      accumulate_regs<HS, true>(acc2, t.dS16 + r0, t.Q);
    }
  }
  __syncthreads(); /* the tiles under acc1 and acc2 are read */
  for (int j = 0; j < HS / 16; j++) {
    wmma::store_matrix_sync(t.acc1 + (size_t)r0 * Ld<HS>::o + j * 16, acc1[j], Ld<HS>::o,
                            wmma::mem_row_major);
    if (!DQ)
      wmma::store_matrix_sync(t.acc2 + (size_t)r0 * Ld<HS>::o + j * 16, acc2[j], Ld<HS>::o,
                              wmma::mem_row_major);
  }
  __syncthreads();
  uint16_t *g = a.dqkv + srow * a.ldg + hc;
  for (int i = threadIdx.x; i < kB * HS; i += kThreads) {
    const int r = i / HS, c = i % HS, e = r * Ld<HS>::o + c;
    if (x0 + r >= T) continue;
    uint16_t *row = g + (size_t)(x0 + r) * a.ldg;
    if (DQ) {
      row[c] = to_bf(t.acc1[e] * a.scale);
    } else {
      row[C + c] = to_bf(t.acc2[e] * a.scale);
      row[2 * C + c] = to_bf(t.acc1[e]);
    }
  }
}

template <int HS>
cudaError_t fwd(int b, int T, int C, int NH, const uint16_t *qkv, int ldqkv, uint16_t *out,
                int ldo, float *lse, cudaStream_t stream) {
  const size_t bytes = FwdSmem<HS>::bytes;
  cudaError_t e = tg_smem_optin(flash_fwd<HS>, bytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((unsigned)((T + kB - 1) / kB), (unsigned)NH, (unsigned)b);
  flash_fwd<HS><<<grid, kThreads, bytes, stream>>>(T, C, NH, 1.0f / sqrtf((float)HS), qkv,
                                                   (size_t)ldqkv, out, (size_t)ldo, lse);
  return cudaGetLastError();
}

template <int HS>
cudaError_t bwd(int b, int T, int C, int NH, const uint16_t *qkv, int ldqkv, const float *lse,
                const uint16_t *dout, int lddo, const float *D, uint16_t *dqkv, int lddqkv,
                cudaStream_t stream) {
  const size_t bytes = BwdSmem<HS>::bytes;
  cudaError_t e = tg_smem_optin(flash_bwd<HS, false>, bytes);
  if (e == cudaSuccess) e = tg_smem_optin(flash_bwd<HS, true>, bytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((unsigned)((T + kB - 1) / kB), (unsigned)NH, (unsigned)b);
  const BwdArgs a = {T,   C,    NH, 1.0f / sqrtf((float)HS), qkv, dout, lse, D, dqkv,
                     (size_t)ldqkv, (size_t)lddo, (size_t)lddqkv};
  flash_bwd<HS, false><<<grid, kThreads, bytes, stream>>>(a);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  flash_bwd<HS, true><<<grid, kThreads, bytes, stream>>>(a);
  return cudaGetLastError();
}

/* 1 = nothing to do, 0 = go, -1 = invalid, -2 = head size not supported */
int flash_check(int b, int T, int C, int NH) {
  if (b <= 0 || T <= 0 || C <= 0 || NH <= 0) return 1;
  if (C % NH != 0) return -1;
  return tg_attn_flash_lowp_hs_ok(C / NH) ? 0 : -2;
}

cudaError_t check_status(int chk) {
  return chk == 1 ? cudaSuccess : chk == -2 ? cudaErrorNotSupported : cudaErrorInvalidValue;
}

} // namespace

extern "C" int tg_cuda_attention_flash_lowp_supported(int C, int NH) {
  return flash_check(1, 1, C, NH) == 0;
}

extern "C" cudaError_t tg_cuda_attention_flash_fwd_lowp(int b, int T, int C, int NH,
                                                        const uint16_t *qkv, int ldqkv,
                                                        uint16_t *out, int ldo, float *lse,
                                                        cudaStream_t stream) {
  const int chk = flash_check(b, T, C, NH);
  if (chk) return check_status(chk);
  switch (C / NH) {
  case 16: return fwd<16>(b, T, C, NH, qkv, ldqkv, out, ldo, lse, stream);
  case 32: return fwd<32>(b, T, C, NH, qkv, ldqkv, out, ldo, lse, stream);
  case 64: return fwd<64>(b, T, C, NH, qkv, ldqkv, out, ldo, lse, stream);
  default: return fwd<128>(b, T, C, NH, qkv, ldqkv, out, ldo, lse, stream);
  }
}

extern "C" cudaError_t tg_cuda_attention_flash_bwd_lowp(
    int b, int T, int C, int NH, const uint16_t *qkv, int ldqkv, const uint16_t *out, int ldo,
    const float *lse, const uint16_t *dout, int lddo, uint16_t *dqkv, int lddqkv,
    float *scratch, cudaStream_t stream) {
  const int chk = flash_check(b, T, C, NH);
  if (chk) return check_status(chk);
  const size_t rows_heads = (size_t)b * T * NH;
  cudaError_t e = tg_attn_gemm::rowdot_lowp(rows_heads, NH, C / NH, out, ldo, dout, lddo,
                                            scratch, stream);
  if (e != cudaSuccess) return e;
  switch (C / NH) {
  case 16: return bwd<16>(b, T, C, NH, qkv, ldqkv, lse, dout, lddo, scratch, dqkv, lddqkv, stream);
  case 32: return bwd<32>(b, T, C, NH, qkv, ldqkv, lse, dout, lddo, scratch, dqkv, lddqkv, stream);
  case 64: return bwd<64>(b, T, C, NH, qkv, ldqkv, lse, dout, lddo, scratch, dqkv, lddqkv, stream);
  default:
    return bwd<128>(b, T, C, NH, qkv, ldqkv, lse, dout, lddo, scratch, dqkv, lddqkv, stream);
  }
}
