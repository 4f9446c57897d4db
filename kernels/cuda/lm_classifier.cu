/*
 * taskgrad layer 1: CUDA fused classifier (LM head tied to wte), the device
 * twin of tg_cpu_classifier in kernels_cpu.h.
 *
 * Design note
 * -----------
 * Shapes: lnf (n, C) with ldl; wte (Vp, C) contiguous (ld C), of which only
 * the first V rows are used (padded rows never enter the softmax and their
 * gradient is never touched); targets (n) int32 in [0, V); dlnf (n, C) with
 * lddl; dwte (Vp, C) contiguous; loss_acc (1) device scalar; scratch
 * chunk * V floats of device memory, used as a (rows, V) block with ld V.
 *
 * For each chunk of rows [r0, r0 + rows), rows = min(chunk, n - r0), the
 * last chunk possibly partial:
 *   1. logits(rows, V) = lnf_c wte[:V]^T  -> scratch   (cuBLAS, beta 0)
 *   2. tg_cuda_softmax_xent (softmax_xent.cu) in place on scratch:
 *        scratch = scale * (softmax - onehot(targets)),
 *        *loss_acc += scale * sum_rows -log p(target)
 *      (one warp per row up to 1024 columns, else one 256-thread block per
 *      row, max-subtracted, log1p form of the loss; see that file).  The
 *      loss goes to *loss_acc through one float atomicAdd per CUDA block and
 *      chunk, so its last bits depend on block scheduling (the CPU adds once
 *      per call); the gradients are deterministic.  In forward-only mode the
 *      gradient is still written to scratch (a (chunk, V) write that is not
 *      needed; a loss-only kernel would save it).
 *   3. if backward:
 *        dlnf_c(rows, C) = dlogits wte[:V]         (cuBLAS, beta 0: written)
 *        dwte[:V](V, C) += dlogits^T lnf_c          (cuBLAS, beta 1)
 * All GEMMs go through tg_cuda_gemm (row-major on column-major cuBLAS, plain
 * FP32 math).  The cuBLAS handle must be bound to `stream` (StarPU's
 * starpu_cublas_get_local_handle() is, for starpu_cuda_get_local_stream());
 * a handle bound to another stream would race with the softmax kernel, so it
 * is rejected with cudaErrorInvalidValue.  A cuBLAS failure is returned as
 * cudaErrorUnknown.  chunk <= 0 with n > 0 is cudaErrorInvalidValue (there is
 * no scratch to work in).  Zero sizes (n, or V) do nothing useful: n == 0
 * returns at once; V == 0 leaves the loss unchanged and writes dlnf = 0.
 * Never allocates or synchronises.
 *
 * tg_cuda_classifier_dlogits is the split form of kernels/cpu/lm_classifier.c:
 * the same chunks without the dwte GEMM, the dlogits of every chunk kept in
 * the caller's (n, Vd) matrix and its padding columns zeroed by tg_cuda_fill.
 */
#include "taskgrad/kernels_cuda.h"

/* The chunk loop of both entry points: chunk r0's dlogits go to
 * dl + r0 * ldd when keep (the caller's (n, ldd) matrix), else to dl itself
 * (scratch, ldd = V); dwte is updated per chunk unless it is NULL. */
static cudaError_t classifier_chunks(cublasHandle_t handle, int n, int C, int V, int chunk,
                                     const float *lnf, int ldl, const float *wte,
                                     const int32_t *targets, float scale, float grad_scale,
                                     int backward, float *dlnf, int lddl, float *dwte,
                                     float *loss_acc, float *dl, int ldd, int keep,
                                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (chunk <= 0 || C < 0 || V < 0) return cudaErrorInvalidValue;
  cudaStream_t hs = NULL;
  if (cublasGetStream(handle, &hs) != CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  if (hs != stream) return cudaErrorInvalidValue;

  for (int r0 = 0; r0 < n; r0 += chunk) {
    const int rows = n - r0 < chunk ? n - r0 : chunk;
    const float *lnf_c = lnf + (size_t)r0 * (size_t)ldl; /* (rows, ldl) */
    float *d = keep ? dl + (size_t)r0 * (size_t)ldd : dl;  /* (rows, ldd) */
    /* logits(rows, V) = lnf_c(rows, C) wte[:V](V, C)^T */
    if (tg_cuda_gemm(handle, 0, 1, rows, V, C, 1.0f, lnf_c, ldl, wte, C, 0.0f,
                     d, ldd) != CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
    cudaError_t e = tg_cuda_softmax_xent(rows, V, d, ldd, targets + r0,
                                         scale, d, ldd, loss_acc, stream);
    if (e != cudaSuccess) return e;
    if (!backward) continue;
    /* dlnf_c(rows, C) = dlogits(rows, V) wte[:V](V, C) */
    if (tg_cuda_gemm(handle, 0, 0, rows, C, V, grad_scale, d, ldd, wte, C, 0.0f,
                     dlnf + (size_t)r0 * (size_t)lddl, lddl) !=
        CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
    /* dwte[:V](V, C) += dlogits(rows, V)^T lnf_c(rows, C) */
    if (dwte && tg_cuda_gemm(handle, 1, 0, V, C, rows, grad_scale, d, ldd, lnf_c, ldl,
                             1.0f, dwte, C) != CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_classifier(
    cublasHandle_t handle, int n, int C, int V, int chunk,
    const float *lnf,        /* (n, ldl) */
    int ldl, const float *wte, /* (Vp, C), rows [0, V) used */
    const int32_t *targets,  /* (n) */
    float scale, float grad_scale, int backward,
    float *dlnf,             /* (n, lddl), written when backward */
    int lddl, float *dwte,   /* (Vp, C), rows [0, V) accumulated */
    float *loss_acc,         /* (1) */
    float *scratch,          /* (chunk, V) */
    cudaStream_t stream) {
  return classifier_chunks(handle, n, C, V, chunk, lnf, ldl, wte, targets, scale, grad_scale,
                           backward, dlnf, lddl, backward ? dwte : NULL, loss_acc, scratch, V,
                           0, stream);
}

extern "C" cudaError_t tg_cuda_classifier_dlogits(
    cublasHandle_t handle, int n, int C, int V, int chunk,
    const float *lnf, int ldl, /* (n, ldl) */
    const float *wte,          /* (Vp, C), rows [0, V) used */
    const int32_t *targets,    /* (n) */
    float scale, float grad_scale,
    float *dlnf, int lddl,     /* (n, lddl), written */
    float *loss_acc,           /* (1) */
    float *dlogits, int Vd,    /* (n, Vd), written; columns V..Vd-1 zero */
    cudaStream_t stream) {
  if (Vd < V) return cudaErrorInvalidValue;
  cudaError_t e = classifier_chunks(handle, n, C, V, chunk, lnf, ldl, wte, targets, scale,
                                    grad_scale, 1, dlnf, lddl, NULL, loss_acc, dlogits, Vd, 1,
                                    stream);
  if (e != cudaSuccess || n <= 0 || Vd == V) return e;
  return tg_cuda_fill(n, Vd - V, dlogits + V, Vd, 0.0f, stream);
}
