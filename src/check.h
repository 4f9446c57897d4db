/*
 * Check macros used across taskgrad.  Every StarPU, CUDA and cuBLAS status is
 * checked in every build type (never through assert alone).
 *
 *  TG_TRY(expr)          in functions returning int: propagate a negative
 *                        result (the message is already set).
 *  TG_STARPU(expr)       in functions returning int: a StarPU call's non-zero
 *                        result becomes a message naming the call and place.
 *  TG_CUDA_CHECK(expr)   inside codelets (which cannot return errors): print
 *  TG_CUBLAS_CHECK(expr) what failed and where, then abort.
 */
#ifndef TASKGRAD_CHECK_H
#define TASKGRAD_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "taskgrad/runtime.h"

#define TG_TRY(expr)                                                        \
  do {                                                                      \
    int tg_try_rc_ = (expr);                                                \
    if (tg_try_rc_ < 0) return tg_try_rc_;                                  \
  } while (0)

#define TG_STARPU(expr)                                                     \
  do {                                                                      \
    int tg_sp_rc_ = (expr);                                                 \
    if (tg_sp_rc_ != 0) {                                                   \
      int tg_sp_code_ = tg_sp_rc_ < 0 ? -tg_sp_rc_ : EIO;                   \
      return tg_fail(tg_sp_code_, "%s failed (%s) at %s:%d", #expr,         \
                     strerror(tg_sp_code_), __FILE__, __LINE__);            \
    }                                                                       \
  } while (0)

#define TG_FATAL(...)                                                       \
  do {                                                                      \
    fprintf(stderr, "taskgrad: fatal: ");                                   \
    fprintf(stderr, __VA_ARGS__);                                           \
    fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                      \
    abort();                                                                \
  } while (0)

#ifdef TG_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#define TG_CUDA_CHECK(expr)                                                 \
  do {                                                                      \
    cudaError_t tg_cu_rc_ = (expr);                                         \
    if (tg_cu_rc_ != cudaSuccess)                                           \
      TG_FATAL("CUDA call %s failed: %s", #expr,                            \
               cudaGetErrorString(tg_cu_rc_));                              \
  } while (0)
#define TG_CUBLAS_CHECK(expr)                                               \
  do {                                                                      \
    cublasStatus_t tg_cb_rc_ = (expr);                                      \
    if (tg_cb_rc_ != CUBLAS_STATUS_SUCCESS)                                 \
      TG_FATAL("cuBLAS call %s failed: status %d", #expr, (int)tg_cb_rc_);  \
  } while (0)
#endif

#endif
