/*
 * cuda_emu: stand-in for the CUDA runtime header, for test_ops_emu only.
 *
 * Design note
 * -----------
 * The kernels of kernels/cuda are compiled as C++ by the host compiler and
 * run on CPU threads (one pthread per CUDA thread, see emu_runtime.cpp).
 * This header gives
 *   - C code (gemm_cublas.c, ...) the runtime types and the few host calls
 *     the launchers make (cudaGetLastError, cudaMemsetAsync,
 *     cudaMemcpy2DAsync);
 *   - C++ code, through cuda_emu.h, the device dialect: __global__,
 *     __shared__, threadIdx, __syncthreads, warp shuffles, atomics, launches.
 * "Device" memory is host memory: a device pointer is a host pointer.
 * Streams are accepted and ignored: every launch runs to completion before
 * it returns, so work on one stream is in order, as CUDA guarantees.
 * The host functions are renamed tg_emu_* by macros, so that a build that
 * also links the real libcudart (the CUDA build) has no clashing symbols.
 */
#ifndef TG_CUDA_EMU_RUNTIME_H
#define TG_CUDA_EMU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorUnknown = 999,
} cudaError_t;

typedef struct tg_emu_stream *cudaStream_t;

typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
} cudaFuncAttribute;

#define cudaGetLastError tg_emu_cudaGetLastError
#define cudaPeekAtLastError tg_emu_cudaPeekAtLastError
#define cudaGetErrorString tg_emu_cudaGetErrorString
#define cudaMemsetAsync tg_emu_cudaMemsetAsync
#define cudaMemcpy2DAsync tg_emu_cudaMemcpy2DAsync

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes,
                            cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream);

/* The message of the last failed launch ("" if none): which kernel, which
 * barrier or shuffle, which threads.  Not a CUDA function. */
const char *tg_emu_last_message(void);
/* Clears the error state between test cases. */
void tg_emu_reset(void);
/* 1: run launches on one pthread per CUDA thread, 0: on fibers, -1: the
 * default (fibers, or threads under a sanitizer or TG_EMU_THREADS=1).
 * Sanitizer builds always use threads. */
void tg_emu_use_threads(int on);

#ifdef __cplusplus
} /* extern "C" */
#include "cuda_emu.h"
#endif
#endif
