/*
 * Error reporting: a thread-local one-line message, so that library calls can
 * return a plain negative errno and the CLI can print what went wrong.
 */
#include <stdarg.h>
#include <stdio.h>

#include "taskgrad/runtime.h"

static _Thread_local char tg_error_message[512];

const char *tg_last_error(void) { return tg_error_message; }

int tg_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tg_error_message, sizeof tg_error_message, fmt, ap);
  va_end(ap);
  return code > 0 ? -code : code;
}
