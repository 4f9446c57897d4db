/*
 * The list of op families, in the order they run, and the backends' start
 * and stop.  A new family file adds its OPS_FAMILY name here.
 */
#include "ops_table.h"

#include "pair.h"

#define FAMILIES(X)                                                                  \
  X(gemm) X(bias) X(activation) X(classifier) X(optimizer) X(elementwise) X(linear)         \
  X(embedding) X(layernorm) X(residual) X(attention) X(lm_classifier) X(precision)          \
  X(gemm_lowp) X(opencl_adapter)

#define DECLARE(fam) extern const ops_family ops_family_##fam;
FAMILIES(DECLARE)
#define ADDRESS(fam) &ops_family_##fam,
const ops_family *const ops_families[] = {FAMILIES(ADDRESS)};
const int ops_nfamilies = (int)(sizeof ops_families / sizeof ops_families[0]);

int ops_backend_start(ops_backend b) {
  switch (b) {
  case OPS_CPU:
  case OPS_CUDA:
  case OPS_DEVICE:
    return pair_start(b);
  case OPS_CUDA_EMU:
#ifdef OPS_EMU
    return emu_start();
#else
    return 1;
#endif
  case OPS_REF:
  case OPS_LOWP: /* each case starts its own runtimes (ops_run_worker_counts) */
  case OPS_NBACKENDS:
    break;
  }
  return 0;
}

void ops_backend_stop(ops_backend b) {
  if (b == OPS_CPU || b == OPS_CUDA || b == OPS_DEVICE) tg_shutdown();
#ifdef OPS_EMU
  if (b == OPS_CUDA_EMU) emu_stop();
#endif
}
