/*
 * taskgrad layer 1: CUDA token + position embedding (GPT-2, llm.c
 * definitions), the device twins of tg_cpu_embedding_fwd / _bwd in
 * kernels_cpu.h.
 *
 * Design note
 * -----------
 * Rows: n = b * T token rows, row i holds token t = i % T; wte (Vp, C) and
 * wpe (maxT, C) are contiguous (leading dimension C), X / dX have ldx / lddx.
 *
 * forward: X(i, c) = wte(tokens[i], c) + wpe(i % T, c), a tg_map2d() functor
 *   (coalesced along c).  Token ids are trusted (the token readers check
 *   them against V); the launcher does not know Vp.
 *
 * backward, deterministic without float atomics and without scratch:
 *   dwpe(t, c) += dX(t, c), dX(t + T, c), dX(t + 2T, c), ...  one thread per
 *     (t, c) (tg_map2d over (min(T, n), C)) keeping the running value in a
 *     register and adding the rows in increasing order -- the same float
 *     operations, in the same order, as the CPU loop over i.
 *   dwte(v, c) += dX(i, c) for the rows i with tokens[i] == v, in increasing
 *     i: a scatter whose collisions (repeated tokens) must be serialised.
 *     The vocabulary is split into kParts = 64 residue classes v % 64; block
 *     (x, p) owns the classes p and channels [x * 256, x * 256 + 256) (grid-
 *     stride over channel blocks), so every (v, c) is updated by exactly one
 *     thread.  Each warp scans all n tokens, 32 at a time: lane l loads
 *     tokens[i0 + l], __ballot_sync marks those of class p, and the warp
 *     walks the set bits in increasing order (__ffs), broadcasting the token
 *     with __shfl_sync; each lane then does dwte(v, c) += dX(i, c) for its
 *     channel c (coalesced 128-byte row segments).  So, per (v, c), the
 *     additions happen one after the other in increasing i: the result is
 *     bit-identical to the CPU loop.  Cost: a warp scans n / 32 token
 *     words (L1/L2 resident) and performs ~n / 64 dependent read-modify-
 *     writes; the 64 classes run in parallel.  Negative token ids are skipped
 *     (they belong to no class); ids >= Vp would write out of bounds (the
 *     readers reject them).
 * Zero sizes launch nothing.  Launchers never allocate or synchronise.
 */
#include "taskgrad/kernels_cuda.h"
#include "cuda_common.cuh"

namespace {

constexpr int kParts = 64;         /* residue classes of token ids */
constexpr int kChanThreads = 256;  /* channels per dwte block */

struct EmbeddingFwdOp {
  const int32_t *tokens; /* (n) */
  const float *wte;      /* (Vp, C) */
  const float *wpe;      /* (maxT, C) */
  float *X;              /* (n, ldx) */
  size_t T, C, ldx;
  __device__ void operator()(size_t r, size_t c) const {
    const size_t tok = (size_t)tokens[r];
    X[r * ldx + c] = wte[tok * C + c] + wpe[(r % T) * C + c];
  }
};

/* rows = min(T, n) positions, cols = C */
struct EmbeddingBwdPosOp {
  const float *dX; /* (n, lddx) */
  float *dwpe;     /* (maxT, C) */
  size_t n, T, C, lddx;
  __device__ void operator()(size_t t, size_t c) const {
    float acc = dwpe[t * C + c];
    for (size_t i = t; i < n; i += T) acc += dX[i * lddx + c];
    dwpe[t * C + c] = acc;
  }
};

__global__ void __launch_bounds__(kChanThreads)
    embedding_bwd_wte_kernel(int n, int C,
                             const int32_t *__restrict__ tokens, /* (n) */
                             const float *__restrict__ dX, /* (n, lddx) */
                             size_t lddx,
                             float *__restrict__ dwte /* (Vp, C) */) {
  const int part = (int)blockIdx.y; /* token class: v % kParts == part */
  const int lane = threadIdx.x & 31;
  for (int c0 = blockIdx.x * kChanThreads; c0 < C;
       c0 += gridDim.x * kChanThreads) { /* uniform over the block */
    const int c = c0 + (int)threadIdx.x;
    const bool active = c < C;
    for (int i0 = 0; i0 < n; i0 += 32) { /* uniform over the warp */
      const int i = i0 + lane;
      const int32_t tok = i < n ? tokens[i] : -1;
      unsigned mask =
          __ballot_sync(TG_FULL_MASK, tok >= 0 && tok % kParts == part);
      while (mask) { /* set bits in increasing row order */
        const int k = __ffs(mask) - 1;
        mask &= mask - 1;
        const int32_t v = __shfl_sync(TG_FULL_MASK, tok, k);
        if (active) {
          float *w = dwte + (size_t)v * (size_t)C + c;
          *w += dX[(size_t)(i0 + k) * lddx + c];
        }
      }
    }
  }
}

} // namespace

extern "C" cudaError_t tg_cuda_embedding_fwd(int n, int T, int C,
                                             const int32_t *tokens,
                                             const float *wte,
                                             const float *wpe, float *X,
                                             int ldx, cudaStream_t stream) {
  if (n <= 0 || C <= 0 || T <= 0) return cudaSuccess;
  return tg_map2d(n, C,
                  EmbeddingFwdOp{tokens, wte, wpe, X, (size_t)T, (size_t)C,
                                 (size_t)ldx},
                  stream);
}

extern "C" cudaError_t tg_cuda_embedding_bwd(int n, int T, int C,
                                             const int32_t *tokens,
                                             const float *dX, int lddx,
                                             float *dwte, float *dwpe,
                                             cudaStream_t stream) {
  if (n <= 0 || C <= 0 || T <= 0) return cudaSuccess;
  const unsigned cblocks = (unsigned)((C + kChanThreads - 1) / kChanThreads);
  const dim3 grid(cblocks < 65535u ? cblocks : 65535u, kParts);
  embedding_bwd_wte_kernel<<<grid, kChanThreads, 0, stream>>>(
      n, C, tokens, dX, (size_t)lddx, dwte);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const int positions = T < n ? T : n;
  return tg_map2d(positions, C,
                  EmbeddingBwdPosOp{dX, dwpe, (size_t)n, (size_t)T, (size_t)C,
                                    (size_t)lddx},
                  stream);
}
