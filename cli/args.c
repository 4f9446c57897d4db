/*
 * Flag parsing for the CLI.  Every value is parsed completely (no trailing
 * garbage, no overflow) and range-checked; the message names the flag.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "taskgrad/clock.h"
#include "taskgrad/parallel.h"

/* Under MPI the message names the rank, and the whole job ends: the other
 * ranks would otherwise wait for this one forever. */
noreturn void tg_cli_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (tg_dist_size() > 1)
    fprintf(stderr, "taskgrad: error (rank %d of %d): ", tg_dist_rank(), tg_dist_size());
  else
    fputs("taskgrad: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  tg_dist_abort(TG_EXIT_USAGE);
}

noreturn void tg_cli_die_last(const char *context) {
  tg_cli_die("%s: %s", context, tg_last_error());
}

const char *tg_cli_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) tg_cli_die("%s needs a value (see --help)", argv[*i]);
  return argv[++*i];
}

long tg_cli_int(const char *flag, const char *text, long min, long max) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end)
    tg_cli_die("%s: '%s' is not an integer", flag, text);
  if (v < min || v > max)
    tg_cli_die("%s: %ld is out of range [%ld, %ld]", flag, v, min, max);
  return v;
}

double tg_cli_double(const char *flag, const char *text, double min, double max) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || *end || v != v)
    tg_cli_die("%s: '%s' is not a number", flag, text);
  if (v < min || v > max) tg_cli_die("%s: %g is out of range [%g, %g]", flag, v, min, max);
  return v;
}

uint64_t tg_cli_u64(const char *flag, const char *text) {
  char *end;
  errno = 0;
  if (text[0] == '-') tg_cli_die("%s: '%s' must not be negative", flag, text);
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text || *end) tg_cli_die("%s: '%s' is not an integer", flag, text);
  return (uint64_t)v;
}

int tg_cli_int_list(const char *flag, const char *text, int *out, int max, long min,
                    long max_value) {
  int n = 0;
  const char *p = text;
  if (!*p) tg_cli_die("%s: empty list", flag);
  while (*p) {
    char item[32];
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= sizeof item) tg_cli_die("%s: bad list '%s'", flag, text);
    if (n == max) tg_cli_die("%s: at most %d values", flag, max);
    memcpy(item, p, len);
    item[len] = 0;
    out[n++] = (int)tg_cli_int(flag, item, min, max_value);
    p += len;
    if (*p == ',') {
      p++;
      if (!*p) tg_cli_die("%s: bad list '%s'", flag, text);
    }
  }
  return n;
}

size_t tg_cli_mib(size_t bytes) { return (bytes + (1u << 20) - 1) >> 20; }

size_t tg_cli_cpu_mem_limit_mib(void) {
  /* called after tg_init, which has refused a value that is not a number */
  const char *env = getenv("STARPU_LIMIT_CPU_MEM");
  if (!env || !*env) return SIZE_MAX;
  return (size_t)strtoll(env, NULL, 10);
}

void tg_cli_check_memory_limit(size_t needed, const char *what) {
  size_t mib = tg_cli_cpu_mem_limit_mib(), need_mib = tg_cli_mib(needed);
  /* no tg_shutdown here: the data loader's thread may be submitting tasks,
   * and tg_cli_die ends the process without tearing StarPU down */
  if (mib < need_mib) {
    tg_cli_die("STARPU_LIMIT_CPU_MEM=%zu MiB is below the %zu MiB that %s needs in "
               "StarPU-managed memory (activations in flight and reduction buffers); "
               "raise the limit or lower --batch", mib, need_mib, what);
  }
}

int tg_cli_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double tg_cli_now(void) {
  return tg_monotonic_us() * 1e-6;
}
