/*
 * taskgrad bench sched, private to cli/bench_sched*.c: bench_sched.c holds
 * the command (flags, checks, the calibration, the rounds over the
 * schedulers); bench_sched_run.c runs 'taskgrad bench <model>' as
 * subprocesses and scrapes their output into a row; bench_sched_report.c
 * writes the rows as a CSV, a Markdown table and a gnuplot chart.
 */
#ifndef TASKGRAD_CLI_BENCH_SCHED_H
#define TASKGRAD_CLI_BENCH_SCHED_H

#include <stddef.h>

#define SCHED_MAX 64
#define SCHED_NAME_MAX 64

/* A --schedulers entry "NAME" or "NAME+nopri" (NAME with the graph's
 * priorities off): NAME into policy (size bytes); 1 for +nopri. */
int sched_policy_of(const char *entry, char *policy, size_t size);
#define PASS_MAX 64

/* ---- running (bench_sched_run.c) ---- */

typedef struct child_result {
  char *out;         /* stdout, NUL-terminated */
  char err[1024];    /* last part of stderr */
  int exit_code;     /* -1: killed by a signal or not started */
  int signal;
  int timed_out;
} child_result;

void sched_child_free(child_result *r);
/* The last non-empty line of the captured stderr, for messages. */
const char *sched_last_err_line(const child_result *r, char *buf, size_t n);
/* Runs argv (argv[0] is the program) with STARPU_HOME=home and, if calibrate,
 * STARPU_CALIBRATE=1 (otherwise STARPU_CALIBRATE unset: StarPU's default),
 * capturing stdout and stderr; kills it after timeout_s.  Returns 0 if it
 * ran (whatever its status), -1 if it could not be started. */
int sched_run_child(char *const argv[], const char *home, int calibrate, int timeout_s,
                    child_result *r);
/* Why a run failed, in a few words and its last message. */
void sched_describe_failure(const child_result *r, char *why, size_t n);

typedef struct sched_row {
  const char *name;
  int ok;
  char why[256];
  double median_ms, min_ms, max_ms, idle_pct, bytes;
  long tasks;
} sched_row;

/* One run of 'bench <model> --sched row->name' with the model flags pass:
 * fills the row (ok = 1) or row->why. */
void sched_measure(sched_row *row, const char *model, char **pass, int npass, int steps,
                   int warmup, const char *home, int timeout_s);

/* ---- reporting (bench_sched_report.c) ---- */

int sched_write_csv(const char *path, const sched_row *rows, int n);
void sched_print_table(const char *model, int steps, const sched_row *rows, int n);
/* Returns 0 on success, 1 if gnuplot is not installed, -1 if it failed
 * (why says how). */
int sched_write_chart(const char *path, const char *model, int steps, const sched_row *rows,
                      int n, char *why, size_t why_n);

#endif
