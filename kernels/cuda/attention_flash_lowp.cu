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
 *     accumulated in f32 in shared memory by one block and written once:
 *     deterministic, no atomics.
 * Rounding points: P and dS in bf16 before their products (as the gemm
 * path and FlashAttention-2); the products sum in f32; each output is
 * rounded to bf16 once.  The score scale multiplies the f32 products.
 * WMMA fragments are used only through shared memory (their register
 * layout is unspecified), which tests/cuda_emu/include/mma.h emulates.
 * Every fragment load and store is at a multiple of 32 bytes from the
 * dynamic shared buffer (tile offsets are multiples of 16 elements), which
 * starts at the window's base, the kernels having no static shared memory:
 * WMMA's 256-bit alignment.
 * Head sizes 16, 32, 64 and 128 (cudaErrorNotSupported otherwise: the
 * codelet then takes the gemm path).  Shared memory: up to 176 KiB
 * (hs 128, the dK / dV kernel), opted in.  Scratch: D, (b T, NH) floats
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

__device__ __forceinline__ uint16_t to_bf(float x) { return tg_lowp::to_low<true>(x); }

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::col_major> FragAT;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::col_major> FragBT;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

/* rows [r0, r0 + 64) of one head of a (T, ld) bf16 matrix into a (64, HS)
 * tile, zero past T */
template <int HS>
__device__ void load_tile(uint16_t *dst, const uint16_t *src, size_t ld, int r0, int T) {
  for (int i = threadIdx.x; i < kB * HS; i += kThreads) {
    const int r = i / HS, c = i % HS;
    dst[i] = r0 + r < T ? src[(size_t)(r0 + r) * ld + c] : (uint16_t)0;
  }
}

/* dst (16, 64) f32 at ldd = the warp's 16 rows of X (ldx = HS) times the
 * 64 rows of Y (HS wide) transposed: X Y^T */
template <int HS>
__device__ void rows_times_t(float *dst, const uint16_t *X, const uint16_t *Y) {
  for (int j = 0; j < kB / 16; j++) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < HS / 16; k++) {
      FragA a;
      FragBT bt;
      wmma::load_matrix_sync(a, (const bf16_t *)X + k * 16, HS);
      wmma::load_matrix_sync(bt, (const bf16_t *)Y + (size_t)j * 16 * HS + k * 16, HS);
      wmma::mma_sync(acc, a, bt, acc);
    }
    wmma::store_matrix_sync(dst + j * 16, acc, kB, wmma::mem_row_major);
  }
}

/* acc (16, HS) f32 at lda = HS += A (16, 64) bf16 (ld 64; its transpose
 * when AT: A is then the (64, 16) column block at A, ld 64) times B (64,
 * HS) bf16 (ld HS) */
template <int HS, bool AT>
__device__ void accumulate(float *acc_s, const uint16_t *A, const uint16_t *B) {
  for (int j = 0; j < HS / 16; j++) {
    FragC acc;
    wmma::load_matrix_sync(acc, acc_s + j * 16, HS, wmma::mem_row_major);
    for (int k = 0; k < kB / 16; k++) {
      FragB b;
      wmma::load_matrix_sync(b, (const bf16_t *)B + (size_t)k * 16 * HS + j * 16, HS);
      if (AT) {
        FragAT a;
        wmma::load_matrix_sync(a, (const bf16_t *)A + (size_t)k * 16 * kB, kB);
        wmma::mma_sync(acc, a, b, acc);
      } else {
        FragA a;
        wmma::load_matrix_sync(a, (const bf16_t *)A + k * 16, kB);
        wmma::mma_sync(acc, a, b, acc);
      }
    }
    wmma::store_matrix_sync(acc_s + j * 16, acc, HS, wmma::mem_row_major);
  }
}

template <int HS> struct FwdSmem {
  static constexpr size_t q = 0, k = q + 2 * kB * HS, v = k + 2 * kB * HS,
                          s = v + 2 * kB * HS, p = s + 4 * kB * kB, o = p + 2 * kB * kB,
                          m = o + 4 * kB * HS, l = m + 4 * kB, bytes = l + 4 * kB;
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
  for (int i = threadIdx.x; i < kB * HS; i += kThreads) Os[i] = 0.0f;
  for (int i = threadIdx.x; i < kB; i += kThreads) {
    ms[i] = -INFINITY;
    ls[i] = 0.0f;
  }
  const int last = (min(q0 + kB, T) - 1) / kB; /* the diagonal key tile */
  /* lane: row r0 + (lane & 15), columns [half * 32, half * 32 + 32) */
  const int r = r0 + (lane & 15), half = lane >> 4, q = q0 + r;
  for (int kt = 0; kt <= last; kt++) {
    const int k0 = kt * kB;
    __syncthreads(); /* the previous tile's K, V are no longer read */
    load_tile<HS>(Ks, base + C, ldq, k0, T);
    load_tile<HS>(Vs, base + 2 * C, ldq, k0, T);
    __syncthreads();
    rows_times_t<HS>(Ss + (size_t)r0 * kB, Qs + (size_t)r0 * HS, Ks);
    __syncwarp();
    const float *srow = Ss + (size_t)r * kB;
    float mt = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; c++)
      if (k0 + c <= q && q < T) mt = fmaxf(mt, srow[c] * scale);
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
    const float mo = ms[r], mn = fmaxf(mo, mt);
    const float corr = mo == -INFINITY ? 0.0f : expf(mo - mn);
    float sum = 0.0f;
    for (int c = half * 32; c < half * 32 + 32; c++) {
      const float p = k0 + c <= q && q < T ? expf(srow[c] * scale - mn) : 0.0f;
      sum += p;
      Ps[(size_t)r * kB + c] = to_bf(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    for (int c = half * (HS / 2); c < (half + 1) * (HS / 2); c++) Os[(size_t)r * HS + c] *= corr;
    __syncwarp();
    if (half == 0) {
      ms[r] = mn;
      ls[r] = ls[r] * corr + sum;
    }
    accumulate<HS, false>(Os + (size_t)r0 * HS, Ps + (size_t)r0 * kB, Vs);
    __syncwarp();
  }
  if (q < T) {
    const float inv = 1.0f / ls[r];
    uint16_t *o = out + ((size_t)s * T + q) * ldo + (size_t)h * HS;
    for (int c = half * (HS / 2); c < (half + 1) * (HS / 2); c++)
      o[c] = to_bf(Os[(size_t)r * HS + c] * inv);
    if (half == 0) lse[((size_t)s * T + q) * NH + h] = ms[r] + logf(ls[r]);
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
    const size_t e = (size_t)r * kB + c;
    const bool ok = k <= q && q < T && k < T;
    const float p = ok ? expf(Ss[e] * scale - lse_s[r]) : 0.0f;
    P16[e] = to_bf(p);
    dS16[e] = to_bf(ok ? p * (dPs[e] - D_s[r]) : 0.0f);
  }
}

template <int HS> struct BwdSmem {
  static constexpr size_t k = 0, v = k + 2 * kB * HS, q = v + 2 * kB * HS,
                          d = q + 2 * kB * HS, s = d + 2 * kB * HS, dp = s + 4 * kB * kB,
                          p = dp + 4 * kB * kB, ds = p + 2 * kB * kB, a1 = ds + 2 * kB * kB,
                          a2 = a1 + 4 * kB * HS, lse = a2 + 4 * kB * HS, dd = lse + 4 * kB,
                          bytes = dd + 4 * kB;
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
    rows_times_t<HS>(S + (size_t)r0 * kB, Q + (size_t)r0 * HS, K);
    rows_times_t<HS>(dP + (size_t)r0 * kB, dO + (size_t)r0 * HS, V);
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
  for (int i = threadIdx.x; i < kB * HS; i += kThreads) t.acc1[i] = t.acc2[i] = 0.0f;
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
      accumulate<HS, false>(t.acc1 + (size_t)r0 * HS, t.dS16 + (size_t)r0 * kB, t.K);
    } else {
      __syncthreads(); /* every query row's P and dS */
      /* the warp's 16 keys (columns r0.. of P and dS): dV, dK */
      accumulate<HS, true>(t.acc1 + (size_t)r0 * HS, t.P16 + r0, t.dO);
      accumulate<HS, true>(t.acc2 + (size_t)r0 * HS, t.dS16 + r0, t.Q);
    }
  }
  __syncthreads();
  uint16_t *g = a.dqkv + srow * a.ldg + hc;
  for (int i = threadIdx.x; i < kB * HS; i += kThreads) {
    const int r = i / HS, c = i % HS;
    if (x0 + r >= T) continue;
    uint16_t *row = g + (size_t)(x0 + r) * a.ldg;
    if (DQ) {
      row[c] = to_bf(t.acc1[i] * a.scale);
    } else {
      row[C + c] = to_bf(t.acc2[i] * a.scale);
      row[2 * C + c] = to_bf(t.acc1[i]);
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
