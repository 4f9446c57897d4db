/*
 * taskgrad layer 1: the tied classifier on bf16 logits, softmax, loss and
 * dlogits in one kernel, in place (the approach of llm.c's fused
 * classifier), for 16-bit training on CUDA workers.
 *
 * Design note
 * -----------
 * tg_cuda_classifier_lowp (lm_classifier_lowp.cu) writes f32 logits, reads
 * them in the softmax and writes bf16 dlogits to a second buffer: 4 + 4 + 2
 * bytes per logit before the two backward GEMMs.  Here, per chunk of rows:
 *   1. the forward GEMM writes the logits once, in bf16 (f32 sums,
 *      tg_cuda_gemm_lowp with a bf16 C), into the dlogits buffer itself;
 *   2. tg_cuda_fused_classifier_bf16, one block per row (the last rows
 *      first, as llm.c: the GEMM wrote them last): pass 1 reads the row
 *      from its end down with 128-bit loads (8 bf16) and keeps, per thread, an online
 *      maximum and sum of exp(x - max) in f32 over the columns [0, V) other
 *      than the label (the padded columns never enter); a block reduction
 *      gives m and s_o, then with x_l (read before any write, a barrier
 *      between) M = max(m, x_l), s_o = s_o exp(m - M), e_l = exp(x_l - M),
 *      s = s_o + e_l.  Pass 2 reads the row again (from L2) and writes, in
 *      place and 128 bits at a time, bf16(scale e_c / s) for c != l,
 *      bf16(-scale s_o / s) for the label (scale (p_l - 1) without the
 *      cancellation, as tg_cuda_softmax_xent) and 0 for the columns [V, ld).
 *      The row loss -log p_l = log1p(s_o / e_l) (log(s) - (x_l - M) when e_l
 *      underflows) goes, unscaled and f32, to losses[row] when losses is not
 *      NULL, and scale times it is added to *loss_acc when that is not NULL
 *      (one atomicAdd per row: the last bits of the sum depend on the order).
 *      A label outside [0, V) gives a zero row and a NaN loss, as the CPU
 *      kernel does.
 *   3. backward: dlnf_c = grad_scale dl wte[:V] (f32 sums; rounded once
 *      when dlnf is 16-bit) and, fused form, dwte[:V] += grad_scale dl^T
 *      lnf_c (f32, in place) on those bf16 dlogits; V, not Vp, is the GEMMs'
 *      extent, so the padded rows of wte are never read.
 * Bytes per logit before the backward GEMMs: 2 (GEMM) + 2 + 2 + 2 (two
 * reads, one write).  The rounding points differ from the f32-logits path:
 * the logits themselves are rounded to bf16 before the softmax, as in llm.c.
 *
 * Shapes and requirements: dl (rows, ld) bf16, ld a multiple of 8 and dl
 * 16-byte aligned (the vector accesses); V <= ld.  For the classifier: lnf
 * (n, ldl) bf16; wte (Vp, C) bf16 contiguous, rows [0, V) used; dl holds all
 * n rows (whole, the split form: the caller's (n, ldd) dlogits, padding
 * columns zeroed) or one chunk's (fused form: a (chunk, ldd) block reused);
 * work: chunk * C floats when backward and dlnf16, else unused.  Never
 * allocates or synchronises; *status keeps the cuBLAS status of a failed
 * GEMM.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "cuda_common.cuh"
#include "lowp.cuh"

namespace {

constexpr int kBlock = 512; /* threads per row */

__device__ __forceinline__ float lo16(unsigned u) { return tg_lowp::from_low<true>((uint16_t)(u & 0xffffu)); }
__device__ __forceinline__ float hi16(unsigned u) { return tg_lowp::from_low<true>((uint16_t)(u >> 16)); }
__device__ __forceinline__ unsigned pack16(float a, float b) {
  return (unsigned)tg_lowp::to_low<true>(a) | (unsigned)tg_lowp::to_low<true>(b) << 16;
}

/* the 8 values of a 128-bit vector, in column order */
__device__ __forceinline__ void unpack8(const uint4 &q, float *v) {
  v[0] = lo16(q.x); v[1] = hi16(q.x); v[2] = lo16(q.y); v[3] = hi16(q.y);
  v[4] = lo16(q.z); v[5] = hi16(q.z); v[6] = lo16(q.w); v[7] = hi16(q.w);
}

__global__ void __launch_bounds__(kBlock)
    fused_classifier_kernel(int V, size_t ld, uint16_t *dl, /* (rows, ld) in place */
                            const int32_t *__restrict__ labels, float scale,
                            float *__restrict__ losses, float *__restrict__ loss_acc) {
  __shared__ float sh[kBlock / 32];
  /* the last rows first: the forward GEMM wrote them last, so they are the
   * likeliest to be in L2 still (llm.c's order) */
  const size_t row = gridDim.x - 1 - blockIdx.x;
  uint4 *x = (uint4 *)(dl + row * ld);
  const int nvec = (int)(ld / 8), vvec = (V + 7) / 8; /* vectors in the row, with logits */
  const int32_t label = labels[row];
  const bool bad = label < 0 || label >= V;
  float m = -INFINITY, s = 0.0f; /* online, columns other than the label */
  /* from the end of the row down, so that its start, which pass 2 reads
   * first, is the most recently loaded */
  for (int i = vvec - 1 - (int)threadIdx.x; i >= 0; i -= kBlock) {
    float v[8];
    unpack8(x[i], v);
    for (int j = 0; j < 8; j++) {
      const int c = i * 8 + j;
      if (c >= V || c == label) continue;
      if (v[j] > m) {
        s *= expf(m - v[j]);
        m = v[j];
      }
      s += expf(v[j] - m);
    }
  }
  const float xl = bad ? 0.0f : tg_lowp::from_low<true>(dl[row * ld + label]);
  float M = tg_group_max<kBlock>(m, sh);
  M = fmaxf(M, xl);
  /* every thread read x_l before this reduction's barriers; writes follow */
  const float so = tg_group_sum<kBlock>(m == -INFINITY ? 0.0f : s * expf(m - M), sh);
  const float el = expf(xl - M), sum = so + el, f = scale / sum, dlab = -scale * so / sum;
  for (int i = threadIdx.x; i < nvec; i += kBlock) {
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (i < vvec && !bad) {
      unpack8(x[i], v);
      for (int j = 0; j < 8; j++) {
        const int c = i * 8 + j;
        v[j] = c >= V ? 0.0f : c == label ? dlab : expf(v[j] - M) * f;
      }
    }
    x[i] = make_uint4(pack16(v[0], v[1]), pack16(v[2], v[3]), pack16(v[4], v[5]),
                      pack16(v[6], v[7]));
  }
  if (threadIdx.x == 0) {
    const float loss = bad ? NAN : el > 0.0f ? log1pf(so / el) : logf(sum) - (xl - M);
    if (losses) losses[row] = loss;
    if (loss_acc) atomicAdd(loss_acc, scale * loss);
  }
}

} // namespace

extern "C" cudaError_t tg_cuda_fused_classifier_bf16(int rows, int V, uint16_t *dl, int ld,
                                                     const int32_t *targets, float scale,
                                                     float *losses, float *loss_acc,
                                                     cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (V <= 0 || ld < V || ld % 8 != 0 || ((uintptr_t)dl & 15) != 0 || !targets)
    return cudaErrorInvalidValue;
  fused_classifier_kernel<<<(unsigned)rows, kBlock, 0, stream>>>(V, (size_t)ld, dl, targets,
                                                                   scale, losses, loss_acc);
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_classifier_bf16(
    cublasHandle_t handle, int n, int C, int V, int chunk, const uint16_t *lnf, int ldl,
    const uint16_t *wte, const int32_t *targets, float scale, float grad_scale, int backward,
    void *dlnf, int lddl, int dlnf16, float *dwte, float *loss_acc, uint16_t *dl, int ldd,
    int whole, float *work, cudaStream_t stream, cublasStatus_t *status) {
  *status = CUBLAS_STATUS_SUCCESS;
  if (n <= 0) return cudaSuccess;
  if (chunk <= 0 || C < 0 || V <= 0 || !dl || ldd < V || ldd % 8 != 0 ||
      ((uintptr_t)dl & 15) != 0 || (backward && !dlnf) || (backward && dlnf16 && !work))
    return cudaErrorInvalidValue;
  cudaStream_t hs = NULL;
  if (tg_cublas_status(cublasGetStream(handle, &hs), status) != cudaSuccess)
    return cudaErrorUnknown;
  if (hs != stream) return cudaErrorInvalidValue;
  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int rows = n - r0 < chunk ? n - r0 : chunk;
    const uint16_t *lnf_c = lnf + (size_t)r0 * (size_t)ldl;
    uint16_t *d = whole ? dl + (size_t)r0 * (size_t)ldd : dl; /* (rows, ldd) */
    /* logits (rows, V) bf16, f32 sums, written once */
    cudaError_t e = tg_cublas_status(tg_cuda_gemm_lowp(handle, TG_BF16, 0, 1, rows, V, C, 1.0f,
                                                       lnf_c, ldl, wte, C, 0.0f, TG_BF16, d,
                                                       ldd),
                                     status);
    if (e == cudaSuccess)
      e = tg_cuda_fused_classifier_bf16(rows, V, d, ldd, targets + r0, scale, NULL, loss_acc,
                                        stream);
    if (e != cudaSuccess) return e;
    if (!backward) continue;
    /* dlnf_c (rows, C) = grad_scale d wte[:V], into dlnf or, 16-bit, work */
    void *out = dlnf16 ? (void *)work : (void *)((float *)dlnf + (size_t)r0 * (size_t)lddl);
    e = tg_cublas_status(tg_cuda_gemm_lowp(handle, TG_BF16, 0, 0, rows, C, V, grad_scale, d,
                                           ldd, wte, C, 0.0f, TG_F32, out, dlnf16 ? C : lddl),
                         status);
    if (e == cudaSuccess && dlnf16)
      e = tg_cuda_to_lowp(TG_BF16, rows, C, work, C,
                          (uint16_t *)dlnf + (size_t)r0 * (size_t)lddl, lddl, stream);
    /* dwte[:V] (V, C) += grad_scale d^T lnf_c, f32 */
    if (e == cudaSuccess && dwte)
      e = tg_cublas_status(tg_cuda_gemm_lowp(handle, TG_BF16, 1, 0, V, C, rows, grad_scale, d,
                                             ldd, lnf_c, ldl, 1.0f, TG_F32, dwte, C),
                           status);
    if (e != cudaSuccess) return e;
  }
  return cudaGetLastError();
}
