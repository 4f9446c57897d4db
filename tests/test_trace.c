/*
 * Trace plugin and task names:
 *  - a task name given through tg_task_opts survives the caller's buffer
 *    (tg_submit copies it): the task is held back by an acquired handle
 *    until the buffer has been overwritten, and the trace must show the
 *    original name;
 *  - the trace and statistics windows nest in either order (they share the
 *    submit hook and the completion callback) and count the same tasks;
 *  - an unwritable trace path is an error naming the path, and leaves no
 *    temporary file behind.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "taskgrad/taskgrad.h"
#include "testutil.h"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

int main(void) {
  tg_runtime_config rc = tg_runtime_config_default();
  rc.ncpus = 2;
  rc.ncuda = 0;
  rc.profiling = 1;
  if (tg_init(&rc) < 0) {
    fprintf(stderr, "tg_init: %s\n", tg_last_error());
    return 1;
  }
  char path[256];
  snprintf(path, sizeof path, "/tmp/tg_test_trace_%ld.json", (long)getpid());
  tg_tensor t;
  CHECK(tg_tensor_alloc(&t, 8, 8, TG_F32) == 0, "%s", tg_last_error());

  /* a stack buffer name, overwritten before the task can run */
  CHECK(tg_trace_begin() == 0, "%s", tg_last_error());
  CHECK(tg_trace_begin() == -EBUSY, "a second tg_trace_begin must fail");
  tg_stats st;
  CHECK(tg_stats_begin() == 0, "%s", tg_last_error());
  CHECK(starpu_data_acquire(t.handle, STARPU_RW) == 0, "acquire");
  {
    char name[32];
    snprintf(name, sizeof name, "L7.m3.fwd");
    tg_task_opts o = {.priority = 0, .worker = -1, .name = name, .lowp = TG_F32};
    CHECK(tg_fill_insert(t.handle, 1.0f, &o) == 0, "%s", tg_last_error());
    snprintf(name, sizeof name, "XXXXXXXXXXXXXXXX");
    CHECK(tg_scale_insert(t.handle, 2.0f, NULL) == 0, "%s", tg_last_error());
    memset(name, 'Y', sizeof name - 1);
  }
  starpu_data_release(t.handle);
  CHECK(tg_stats_end(&st) == 0, "%s", tg_last_error());
  CHECK(st.tasks == 2, "stats counted %ld tasks, expected 2", st.tasks);
  /* tasks after the stats window ends still go into the trace */
  CHECK(tg_fill_insert(t.handle, 0.0f, &(tg_task_opts){.priority = 0, .worker = -1, .name = "after.stats", .lowp = TG_F32}) == 0, "%s",
        tg_last_error());
  CHECK(tg_trace_end(path) == 0, "%s", tg_last_error());
  char *json = slurp(path);
  CHECK(json != NULL, "cannot read %s", path);
  if (json) {
    CHECK(strstr(json, "\"traceEvents\"") != NULL, "no traceEvents");
    CHECK(strstr(json, "\"name\":\"tg_fill L7.m3.fwd\"") != NULL,
          "the task name did not survive its buffer:\n%s", json);
    CHECK(strstr(json, "\"name\":\"tg_scale\"") != NULL, "unnamed task: codelet name only");
    /* fill and scale each take the one tensor */
    CHECK(count(json, "\"buffers\":1}") == 3, "%d events with \"buffers\":1, expected 3",
          count(json, "\"buffers\":1}"));
    CHECK(strstr(json, "\"name\":\"tg_fill after.stats\"") != NULL, "task after stats");
    CHECK(strstr(json, "XXXX") == NULL && strstr(json, "YYYY") == NULL,
          "overwritten buffer leaked into the trace");
    CHECK(count(json, "\"ph\":\"X\"") == 3, "%d X events, expected 3",
          count(json, "\"ph\":\"X\""));
    CHECK(count(json, "\"name\":\"thread_name\"") == (int)starpu_worker_get_count() + 1,
          "one thread_name per worker plus the transfers track");
  }
  unlink(path);

  /* stats window around a trace window: the stats keep counting */
  CHECK(tg_stats_begin() == 0, "%s", tg_last_error());
  CHECK(tg_trace_begin() == 0, "%s", tg_last_error());
  CHECK(tg_fill_insert(t.handle, 3.0f, NULL) == 0, "%s", tg_last_error());
  CHECK(tg_trace_end("/nonexistent-dir/trace.json") < 0, "unwritable path must fail");
  CHECK(strstr(tg_last_error(), "/nonexistent-dir/trace.json") != NULL,
        "the error names the path: %s", tg_last_error());
  CHECK(tg_fill_insert(t.handle, 4.0f, NULL) == 0, "%s", tg_last_error());
  CHECK(tg_stats_end(&st) == 0, "%s", tg_last_error());
  CHECK(st.tasks == 2, "stats counted %ld tasks, expected 2", st.tasks);
  CHECK(st.bytes_moved >= 0 && st.transfers >= 0, "bytes moved");
  CHECK(tg_trace_end(path) < 0, "tg_trace_end without a trace must fail");

  tg_tensor_free(&t);
  tg_shutdown();
  return tg_test_finish("test_trace");
}
