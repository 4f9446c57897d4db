/*
 * The backends' start and stop (the runtime, the worker pair, the
 * emulator).  The rows register themselves (OPS_ROWS in each row file).
 */
#include "ops_table.h"

#include "pair.h"

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
