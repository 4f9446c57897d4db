/*
 * Each backend's start and stop (the runtime, the worker pair, the
 * emulator), defined in ops_table.c.  The rows register themselves
 * (OPS_ROWS, ops_harness.h).
 */
#ifndef TASKGRAD_OPS_TABLE_H
#define TASKGRAD_OPS_TABLE_H

#include "ops_harness.h"

/* 0, TG_TEST_SKIP when the backend's device is missing, or 1 */
int ops_backend_start(ops_backend b);
void ops_backend_stop(ops_backend b);

#ifdef OPS_EMU
/* tests/ops/emu.c: the emulator's own checks first, its launcher table last */
int emu_start(void);
void emu_stop(void);
#endif

#endif
