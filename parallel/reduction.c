/*
 * How gradients are summed: StarPU reductions (STARPU_REDUX) on a tensor,
 * and the deterministic switch that makes the graphs use a fixed-order tree
 * instead (graphs/reduce.c).
 *
 * Design note: both sit above the codelets: the REDUX methods are the
 * accumulate and zero-fill codelets.  The deterministic setting is part of
 * the configuration the base was started with (tg_runtime_current(), which
 * tg_set_deterministic changes): state belongs to the base, and this layer
 * only reads it.
 */
#include <starpu.h>

#include "taskgrad/codelets.h"
#include "taskgrad/parallel.h"
#include "taskgrad/runtime.h"
#include "taskgrad/starpu_version.h"
#include "taskgrad/tensor.h"

void tg_tensor_enable_reduction(tg_tensor *t) {
#if TG_STARPU_AT_LEAST(1, 4)
  /* 1.4's merge method is RW|COMMUTE (codelets/elementwise.c) */
  starpu_data_set_reduction_methods(t->handle, &tg_accumulate_redux_cl, &tg_fill_zero_cl);
#else
  starpu_data_set_reduction_methods(t->handle, &tg_accumulate_cl, &tg_fill_zero_cl);
#endif
}

int tg_deterministic(void) { return tg_runtime_current()->deterministic; }
