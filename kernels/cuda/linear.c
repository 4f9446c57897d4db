/*
 * Fused linear layer on CUDA: cuBLAS GEMM, then the epilogue kernels on the
 * same stream (bias add and activation forward; activation backward in
 * place).  Composed from the tested elementwise launchers; a single fused
 * epilogue kernel (or a cuBLASLt epilogue) would save one pass over Z.
 */
#include "taskgrad/kernels_cuda.h"

enum { ACT_RELU = 0, ACT_GELU = 1, ACT_NONE = 2 };

cudaError_t tg_cuda_linear_fwd(cublasHandle_t handle, int rows, int in, int out,
                               const float *X, int ldx, const float *W, int ldw,
                               const float *b, int act, float *Z, int ldz,
                               float *H, int ldh, cudaStream_t stream,
                               cublasStatus_t *cublas_status) {
  *cublas_status = CUBLAS_STATUS_SUCCESS;
  if (rows <= 0 || out <= 0) return cudaSuccess;
  *cublas_status = tg_cuda_gemm(handle, 0, 1, rows, out, in, 1.0f, X, ldx, W, ldw,
                                0.0f, Z, ldz);
  if (*cublas_status != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
  cudaError_t e = cudaSuccess;
  if (b) e = tg_cuda_bias_add(rows, out, Z, ldz, b, stream);
  if (e != cudaSuccess) return e;
  if (act == ACT_RELU) return tg_cuda_relu_fwd(rows, out, Z, ldz, H, ldh, stream);
  if (act == ACT_GELU) return tg_cuda_gelu_fwd(rows, out, Z, ldz, H, ldh, stream);
  return cudaSuccess;
}

cudaError_t tg_cuda_linear_bwd_data(cublasHandle_t handle, int rows, int in,
                                    int out, const float *dZ, int lddz,
                                    const float *W, int ldw, int act,
                                    const float *Zprev, int ldzp, float *dX,
                                    int lddx, cudaStream_t stream,
                                    cublasStatus_t *cublas_status) {
  *cublas_status = CUBLAS_STATUS_SUCCESS;
  if (rows <= 0 || in <= 0) return cudaSuccess;
  *cublas_status = tg_cuda_gemm(handle, 0, 0, rows, in, out, 1.0f, dZ, lddz, W, ldw,
                                0.0f, dX, lddx);
  if (*cublas_status != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
  if (act == ACT_RELU)
    return tg_cuda_relu_bwd(rows, in, Zprev, ldzp, dX, lddx, dX, lddx, stream);
  if (act == ACT_GELU)
    return tg_cuda_gelu_bwd(rows, in, Zprev, ldzp, dX, lddx, dX, lddx, stream);
  return cudaSuccess;
}
