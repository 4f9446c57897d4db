/*
 * taskgrad: neural-network training steps as StarPU task graphs.
 * Umbrella header: every public header, by layer (DEVELOPERS.md, "Layers").
 * The CUDA kernels' headers need the CUDA toolkit's headers and are
 * included only when taskgrad was built with CUDA (TG_HAVE_CUDA, which the
 * CMake package and taskgrad.pc define then).  The build refuses a public
 * header missing here (cmake/layers.cmake).
 */
#ifndef TASKGRAD_TASKGRAD_H
#define TASKGRAD_TASKGRAD_H

/* base: runtime, tensors, files and readers, training precision */
#include "taskgrad/starpu_version.h"
#include "taskgrad/dtype.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "taskgrad/precision_mode.h"
#include "taskgrad/data.h"
#include "taskgrad/gpt_model.h"
#include "taskgrad/llmc.h"
#include "taskgrad/safetensors.h"
#include "taskgrad/checkpoint.h"
#include "taskgrad/clock.h"
#include "taskgrad/rng.h"
/* kernels */
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"
#include "taskgrad/gemm_libs.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#endif
/* codelets (and the simulated devices' cost model) */
#include "taskgrad/codelets.h"
#include "taskgrad/precision_codelets.h"
#include "taskgrad/gemm_choice.h"
#include "taskgrad/precision.h"
#include "taskgrad/sim.h"
/* parallel */
#include "taskgrad/parallel.h"
/* graphs */
#include "taskgrad/optim.h"
#include "taskgrad/mlp.h"
#include "taskgrad/gpt.h"
/* plugins */
#include "taskgrad/sched.h"
#include "taskgrad/stats.h"
#include "taskgrad/trace.h"
#include "taskgrad/widen16.h"

#endif
