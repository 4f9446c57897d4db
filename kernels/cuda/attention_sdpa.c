/*
 * taskgrad layer 1: the cudnn attention kind on a CUDA worker, cuDNN's
 * fused attention first and the gemm kind's bf16 kernels where cuDNN says
 * no.  Plain C (the emulator compiles it too, where cuDNN is absent, so the
 * op table's cuda-emu case runs the fallback).
 *
 * Design note
 * -----------
 * tg_cuda_attention_cudnn_fwd / _bwd (attention_cudnn.cpp, or its stub in
 * a build without the cuDNN frontend) return cudaErrorNotSupported with
 * nothing queued when cuDNN is missing, cannot be loaded, refuses the
 * shape or wants more workspace than the scratch holds.  Then the task
 * runs what the gemm kind runs in bf16 (codelets/attention.c,
 * tg_attn_bf16_path): the cuBLAS kernels of attention_gemm_lowp.cu when
 * the scratch holds their (NH, T, T) scores, else the flash kernels for
 * their head sizes; fp16 has neither, so *path stays 0 and the caller
 * widens to f32 (the gemm kind's f32 kernels).  The fallback is here, in
 * the kernel layer, rather than in the codelet so that the emulator's test
 * runs exactly this decision.
 */
#include <stdio.h>

#include "taskgrad/kernels_cuda_precision.h"
#include "scratch_sizes.h"

/* which fallback the scratch and shape allow: TG_SDPA_GEMM, TG_SDPA_FLASH or 0 */
static int fallback(tg_dtype lowp, int b, int T, int C, int NH, size_t scratch_floats) {
  if (lowp != TG_BF16) return 0;
  if (tg_attn_gemm_lowp_fits(b, T, NH) &&
      scratch_floats >= tg_attn_gemm_lowp_scratch_floats(b, T, NH))
    return TG_SDPA_GEMM;
  return tg_cuda_attention_flash_lowp_supported(C, NH) ? TG_SDPA_FLASH : 0;
}

cudaError_t tg_cuda_attention_sdpa_fwd(cublasHandle_t handle, tg_dtype lowp, int b, int T, int C,
                                       int NH, const uint16_t *qkv, int ldqkv, uint16_t *out,
                                       int ldo, float *lse, float *scratch,
                                       size_t scratch_floats, cudaStream_t stream, int *path,
                                       cublasStatus_t *status, char *why, size_t whylen) {
  *path = 0;
  *status = CUBLAS_STATUS_SUCCESS;
  cudaError_t e = tg_cuda_attention_cudnn_fwd(lowp, b, T, C, NH, qkv, ldqkv, out, ldo, lse,
                                              scratch, scratch_floats, stream, why, whylen);
  if (e != cudaErrorNotSupported) {
    if (e == cudaSuccess) *path = TG_SDPA_CUDNN;
    return e;
  }
  switch (fallback(lowp, b, T, C, NH, scratch_floats)) {
  case TG_SDPA_GEMM:
    *path = TG_SDPA_GEMM;
    return tg_cuda_attention_gemm_fwd_lowp(handle, b, T, C, NH, qkv, ldqkv, out, ldo, lse,
                                           scratch, stream, status);
  case TG_SDPA_FLASH:
    *path = TG_SDPA_FLASH;
    return tg_cuda_attention_flash_fwd_lowp(b, T, C, NH, qkv, ldqkv, out, ldo, lse, stream);
  }
  return cudaErrorNotSupported;
}

cudaError_t tg_cuda_attention_sdpa_bwd(cublasHandle_t handle, tg_dtype lowp, int b, int T, int C,
                                       int NH, const uint16_t *qkv, int ldqkv,
                                       const uint16_t *out, int ldo, const float *lse,
                                       const uint16_t *dout, int lddo, uint16_t *dqkv,
                                       int lddqkv, float *scratch, size_t scratch_floats,
                                       cudaStream_t stream, int *path, cublasStatus_t *status,
                                       char *why, size_t whylen) {
  *path = 0;
  *status = CUBLAS_STATUS_SUCCESS;
  cudaError_t e = tg_cuda_attention_cudnn_bwd(lowp, b, T, C, NH, qkv, ldqkv, out, ldo, lse,
                                              dout, lddo, dqkv, lddqkv, scratch, scratch_floats,
                                              stream, why, whylen);
  if (e != cudaErrorNotSupported) {
    if (e == cudaSuccess) *path = TG_SDPA_CUDNN;
    return e;
  }
  switch (fallback(lowp, b, T, C, NH, scratch_floats)) {
  case TG_SDPA_GEMM:
    *path = TG_SDPA_GEMM;
    return tg_cuda_attention_gemm_bwd_lowp(handle, b, T, C, NH, qkv, ldqkv, out, ldo, lse, dout,
                                           lddo, dqkv, lddqkv, scratch, stream, status);
  case TG_SDPA_FLASH:
    *path = TG_SDPA_FLASH;
    return tg_cuda_attention_flash_bwd_lowp(b, T, C, NH, qkv, ldqkv, out, ldo, lse, dout, lddo,
                                            dqkv, lddqkv, scratch, stream);
  }
  return cudaErrorNotSupported;
}
