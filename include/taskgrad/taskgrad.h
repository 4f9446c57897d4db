/*
 * taskgrad: neural-network training steps as StarPU task graphs.
 * Umbrella header: the runtime, tensors, codelets (insert wrappers), CPU
 * kernels, data pipeline, MLP graph, statistics and trace plugins.  The CUDA kernels
 * (kernels_cuda.h) are included when taskgrad was built with CUDA.
 */
#ifndef TASKGRAD_TASKGRAD_H
#define TASKGRAD_TASKGRAD_H

#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/codelets.h"
#include "taskgrad/precision.h"
#include "taskgrad/data.h"
#include "taskgrad/mlp.h"
#include "taskgrad/stats.h"
#include "taskgrad/sched.h"
#include "taskgrad/trace.h"
#include "taskgrad/checkpoint.h"
#include "taskgrad/dist.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda.h"
#endif

#endif
