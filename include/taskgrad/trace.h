/*
 * taskgrad trace plugin: records every task submitted through taskgrad's
 * codelets between tg_trace_begin() and tg_trace_end(), and writes a Chrome
 * trace-event JSON file (the {"traceEvents": [...]} format that Perfetto and
 * chrome://tracing open).
 *
 * The file has one track per StarPU worker (named after the worker), one
 * complete ("X") slice per task named "<codelet> <task name>" (just the
 * codelet name for unnamed tasks) with its start and duration in
 * microseconds since tg_trace_begin() and args {codelet, task, worker,
 * flops, buffers, and for a fused task (codelets.h: tg_fuse_begin) parts,
 * its parts' codelets in order}, and a "transfers" track with the bytes and transfers of every bus
 * between memory nodes in the window (counter events and a final instant
 * event).  StarPU 1.3 reports data transfers one by one only in its FxT
 * traces (a StarPU built --with-fxt): see README.md.
 *
 * Start StarPU with profiling on (tg_runtime_config.profiling = 1): task
 * start and end times come from StarPU's task profiling.  Can be used
 * together with the statistics plugin (stats.h), in any order.
 */
#ifndef TASKGRAD_TRACE_H
#define TASKGRAD_TRACE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording (waits for the tasks already submitted first).  Returns 0,
 * -EINVAL without profiling, -EBUSY when already recording. */
int tg_trace_begin(void);
/* Waits for every submitted task, stops recording and writes the JSON file
 * atomically (path.tmp.PID, then renamed to path).  Returns 0 or a negative
 * errno with tg_last_error() naming the path and the failing call; recording
 * stops either way. */
int tg_trace_end(const char *path);
/* Number of tasks recorded since tg_trace_begin() (for tests and reports). */
long tg_trace_ntasks(void);

#ifdef __cplusplus
}
#endif
#endif
