/*
 * taskgrad layer 1: bf16 / fp16 <-> f32 conversions as device functions
 * (round to nearest even one way, exact the other), shared by the precision
 * kernels (precision.cu, whose design note says why these agree with the
 * CPU bit for bit) and the fused 16-bit linear epilogues (linear_lowp.cu).
 * BF: bf16 when true, fp16 when false; 16-bit values are uint16_t patterns.
 */
#ifndef TASKGRAD_LOWP_CUH
#define TASKGRAD_LOWP_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace tg_lowp {

template <bool BF>
__device__ __forceinline__ uint16_t to_low(float x) {
  if (BF) return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return __half_as_ushort(__float2half_rn(x));
}

template <bool BF>
__device__ __forceinline__ float from_low(uint16_t h) {
  if (BF) return __bfloat162float(__ushort_as_bfloat16(h));
  return __half2float(__ushort_as_half(h));
}

} // namespace tg_lowp

#endif
