/*
 * taskgrad mixed precision (bf16, fp16): an umbrella over the three layers'
 * headers, so that code written against the single header still compiles:
 *   precision_kernels.h   conversions and CPU kernels (kernels layer; the
 *                         scheme's design note is there)
 *   precision_codelets.h  the tasks (codelets layer)
 *   precision_mode.h      training precision, TF32 mode, loss scaler (base)
 * and, in a CUDA build, the CUDA kernels (kernels_cuda_precision.h).
 */
#ifndef TASKGRAD_PRECISION_H
#define TASKGRAD_PRECISION_H

#include "taskgrad/precision_codelets.h"
#include "taskgrad/precision_kernels.h"
#include "taskgrad/precision_mode.h"

#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

#endif
