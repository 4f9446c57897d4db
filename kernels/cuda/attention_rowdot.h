/*
 * taskgrad layer 1, private to kernels/cuda: the attention backward's
 * D(row, h) = dout(row, head h) . out(row, head h), one warp per (row, head),
 * D (n, NH) contiguous; defined in attention.cu, used by both backward
 * paths (the flash kernels there and the cuBLAS one in attention_gemm.cu).
 */
#ifndef TASKGRAD_ATTENTION_ROWDOT_H
#define TASKGRAD_ATTENTION_ROWDOT_H

#include <stddef.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t tg_cuda_attention_rowdot(size_t rows_heads, int NH, int hs, const float *out,
                                     int ldo, const float *dout, int lddo, float *D,
                                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
