/*
 * --trace FILE.json and --stats for every command: the path is checked
 * before any work starts, the trace and statistics windows span the whole
 * run between tg_init and tg_shutdown.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "taskgrad/parallel.h"
#include "taskgrad/sched.h"
#include "taskgrad/stats.h"
#include "taskgrad/trace.h"

tg_cli_instrumentation tg_cli_instr = {.trace = NULL, .stats = 0};

/* 1 when tg_cli_instrument_begin opened the statistics window */
static int tg_instr_stats;

void tg_cli_instrument_check(tg_runtime_config *rc) {
  /* the runtime does not know taskgrad's policies by name: plugins come in
   * from above */
  rc->sched_policy = tg_sched_policy_requested(rc->sched);
  if (tg_cli_instr.trace || tg_cli_instr.stats) rc->profiling = 1;
  if (tg_cli_instr.trace) tg_cli_check_output("--trace", tg_cli_instr.trace);
  /* against the command's other files (its tg_cli_paths_check) */
  tg_cli_path_out("--trace", tg_cli_instr.trace);
}

void tg_cli_check_output(const char *flag, const char *path) {
  if (!*path) tg_cli_die("%s: empty file name", flag);
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    tg_cli_die("%s: '%s' is a directory, not a file name", flag, path);
  /* the directory must exist and be writable: the file is written there
   * (a temporary file renamed over the path) */
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - path) >= sizeof dir) tg_cli_die("%s: path too long", flag);
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    tg_cli_die("%s: directory '%s' of '%s' does not exist", flag, dir, path);
  if (access(dir, W_OK | X_OK) != 0)
    tg_cli_die("%s: directory '%s' is not writable (%s)", flag, dir, strerror(errno));
}

static void tg_instrument_start(int stats) {
  if (tg_cli_instr.trace && tg_trace_begin() < 0) tg_cli_die_last("--trace");
  tg_instr_stats = 0;
  if (stats) {
    if (tg_stats_begin() < 0) tg_cli_die_last("--stats");
    tg_instr_stats = 1;
  }
}

void tg_cli_instrument_begin(const tg_runtime_config *rc) {
  (void)rc; /* see cli.h */
  tg_instrument_start(tg_cli_instr.stats);
}

void tg_cli_instrument_begin_bench(const tg_runtime_config *rc) {
  (void)rc;
  tg_instrument_start(0);
}

void tg_cli_instrument_end(const tg_runtime_config *rc) {
  (void)rc;
  if (tg_cli_instr.trace) {
    long n = tg_trace_ntasks();
    if (tg_trace_end(tg_cli_instr.trace) < 0) tg_cli_die_last("--trace");
    fprintf(stderr, "taskgrad: trace of %ld tasks written to %s\n", n, tg_cli_instr.trace);
  }
  if (tg_instr_stats) {
    tg_stats st;
    if (tg_stats_end(&st) < 0) tg_cli_die_last("--stats");
    tg_instr_stats = 0;
    fprintf(stderr, "taskgrad: statistics of the run (%ld tasks, %.2f s):\n", st.tasks,
            st.wall_us * 1e-6);
    tg_stats_print(&st, stderr);
  }
}

int tg_cli_mpi_check(tg_runtime_config *rc) {
  if (!tg_dist_launched()) return 0;
  if (!tg_dist_available())
    tg_cli_die("started by an MPI launcher, but this taskgrad was built without "
               "StarPU-MPI (install libopenmpi-dev and reconfigure)");
  rc->mpi = 1;
  return 1;
}

int tg_cli_is_root(void) { return tg_dist_rank() == 0; }
