/*
 * cuda_emu self-test kernels: each breaks one rule of CUDA on purpose, so
 * that test_ops_emu can check that the emulator reports it (naming
 * the kernel) instead of hanging or passing silently.  Compiled like the
 * real kernels (rewrite.cmake, stand-in headers); never part of taskgrad.
 */
#include <cuda_runtime.h>

#include "selftest.h"

namespace {

/* threads >= 64 skip the barrier: partial __syncthreads */
__global__ void partial_barrier_kernel(float *x) {
  if (threadIdx.x < 64) __syncthreads();
  x[threadIdx.x] = 1.0f;
}

/* odd and even threads at two different barriers */
__global__ void divergent_barrier_kernel(float *x) {
  if (threadIdx.x & 1)
    __syncthreads();
  else
    __syncthreads();
  x[threadIdx.x] = 1.0f;
}

/* a block of 48 threads: the second warp has 16 lanes, the mask names 32 */
__global__ void partial_warp_kernel(float *x) {
  x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}

/* lanes 16..31 return before a full-mask shuffle */
__global__ void exited_lane_kernel(float *x) {
  if ((threadIdx.x & 31) >= 16) return;
  x[threadIdx.x] = __shfl_sync(0xffffffffu, x[threadIdx.x], 0);
}

/* lanes 0..15 of warp 0 wait for their warp, lanes 16..31 wait at the
 * block barrier with warp 1: nobody can proceed */
__global__ void deadlock_kernel(float *x) {
  if (threadIdx.x < 16)
    __syncwarp();
  else
    __syncthreads();
  x[threadIdx.x] = 1.0f;
}

/* reads shared memory nobody wrote: the emulator's poison (NaN) shows */
__global__ void unwritten_shared_kernel(float *x) {
  __shared__ float s[64];
  extern __shared__ float dyn[];
  x[threadIdx.x] = s[threadIdx.x] + dyn[threadIdx.x];
}

/* missing __syncthreads between a write and another warp's read: the
 * shared-memory race ThreadSanitizer must report (run only on request) */
__global__ void race_kernel(float *x) {
  __shared__ float s[64];
  s[threadIdx.x] = x[threadIdx.x];
  x[threadIdx.x] = s[(threadIdx.x + 32) % 64];
}

/* a correct use of every collective, as a positive control */
__global__ void collectives_kernel(float *x) {
  __shared__ float s[64];
  const unsigned t = threadIdx.x, lane = t & 31;
  x += blockIdx.x * blockDim.x;
  float v = x[t];
  v += __shfl_xor_sync(0xffffffffu, v, 16);
  v += __shfl_down_sync(0xffffffffu, v, 1);
  const unsigned b = __ballot_sync(0xffffffffu, lane < 5);
  s[t] = v + (float)__popc(b);
  __syncthreads();
  const int any = __syncthreads_or(t == 63);
  const int cnt = __syncthreads_count(t < 10);
  x[t] = s[63 - t] + (float)any + (float)cnt + (float)__shfl_sync(0xffffffffu, lane, 3);
}

} // namespace

extern "C" cudaError_t tg_emu_selftest(tg_emu_selftest_case c, float *x) {
  switch (c) {
  case TG_EMU_PARTIAL_BARRIER: partial_barrier_kernel<<<2, 128, 0, 0>>>(x); break;
  case TG_EMU_DIVERGENT_BARRIER: divergent_barrier_kernel<<<1, 64, 0, 0>>>(x); break;
  case TG_EMU_PARTIAL_WARP: partial_warp_kernel<<<1, 48, 0, 0>>>(x); break;
  case TG_EMU_EXITED_LANE: exited_lane_kernel<<<1, 64, 0, 0>>>(x); break;
  case TG_EMU_DEADLOCK: deadlock_kernel<<<1, 64, 0, 0>>>(x); break;
  case TG_EMU_UNWRITTEN_SHARED: unwritten_shared_kernel<<<1, 64, 64 * sizeof(float), 0>>>(x); break;
  case TG_EMU_SMEM_NO_OPTIN: unwritten_shared_kernel<<<1, 64, 64 * 1024, 0>>>(x); break;
  case TG_EMU_RACE: race_kernel<<<1, 64, 0, 0>>>(x); break;
  case TG_EMU_COLLECTIVES: collectives_kernel<<<3, 64, 0, 0>>>(x); break;
  }
  return cudaGetLastError();
}
