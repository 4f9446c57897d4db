/*
 * taskgrad layer 1: the cuDNN attention launchers in a build without the
 * cuDNN frontend's headers (TG_CUDNN=OFF, or scripts/fetch-cudnn-frontend
 * not run) and in the CUDA emulator: they refuse every problem with the
 * reason, nothing queued, so the cudnn kind runs the gemm kind's kernels
 * (attention_sdpa.c).  With the frontend, attention_cudnn.cpp defines them
 * and TG_HAVE_CUDNN leaves this file empty.
 */
#include "taskgrad/kernels_cuda_precision.h"

#ifndef TG_HAVE_CUDNN
#include <stdio.h>

static cudaError_t refuse(char *why, size_t whylen) {
  if (why && whylen) snprintf(why, whylen, "built without the cuDNN frontend");
  return cudaErrorNotSupported;
}

cudaError_t tg_cuda_attention_cudnn_fwd(tg_dtype lowp, int b, int T, int C, int NH,
                                        const uint16_t *qkv, int ldqkv, uint16_t *out, int ldo,
                                        float *lse, float *scratch, size_t scratch_floats,
                                        cudaStream_t stream, char *why, size_t whylen) {
  return refuse(why, whylen);
}

cudaError_t tg_cuda_attention_cudnn_bwd(tg_dtype lowp, int b, int T, int C, int NH,
                                        const uint16_t *qkv, int ldqkv, const uint16_t *out,
                                        int ldo, const float *lse, const uint16_t *dout,
                                        int lddo, uint16_t *dqkv, int lddqkv, float *scratch,
                                        size_t scratch_floats, cudaStream_t stream, char *why,
                                        size_t whylen) {
  return refuse(why, whylen);
}

void tg_cuda_attention_cudnn_release(void) {}
#else
typedef int tg_attention_cudnn_stub_unused; /* ISO C: no empty unit */
#endif
