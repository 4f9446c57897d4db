/*
 * taskgrad bench sched: runs one model's training step under each of a list
 * of StarPU scheduling policies and compares them: a CSV, a PNG bar chart
 * (gnuplot) and a Markdown table on stdout.
 *
 * Every measurement is a subprocess of this same binary (/proc/self/exe
 * bench mlp|gpt --sched NAME ...), so that each scheduler gets a fresh StarPU
 * and a scheduler that crashes, hangs or is unknown costs only its own row.
 * All runs share a perfmodel directory of their own (STARPU_HOME, default
 * <build>/sched-perfmodels), calibrated first by one dmda run with
 * STARPU_CALIBRATE=1 so that the dm* policies have models to work with.
 *
 * Step times: 'bench gpt --steps N' and 'bench mlp --per-step --steps N'
 * time each step from its submission until its last task has ended (so
 * that no interval holds part of the next step) and print "taskgrad median
 * step ms: M (min A, max B)"; the median is the element n/2 of the sorted
 * times.  A row's median is the median of its rounds' medians, its min and
 * max (the chart's bars) the fastest and slowest single step of all rounds.
 * Idle % is the mean over the workers of the per-worker idle column (for mlp,
 * the mean over the workers); tasks and bytes moved are totals over the N
 * measured steps.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_sched.h"
#include "cli.h"

static const char *const default_scheds =
    "eager,prio,ws,lws,dm,dmda,dmdar,dmdas,heteroprio,tg-critpath,tg-memaware";

static void bench_sched_usage(void) {
  printf("usage: taskgrad bench sched --model mlp|gpt [flags] [model flags]\n"
         "\n"
         "Runs the model's training step under each scheduling policy (each in\n"
         "its own process) and writes <out-dir>/sched-<model>.csv, a bar chart\n"
         "<out-dir>/sched-<model>.png (gnuplot) and a Markdown table on stdout.\n"
         "\n"
         "  --model NAME         mlp or gpt (required)\n"
         "  --schedulers LIST    comma-separated policies (default\n"
         "                       %s)\n"
         "  --steps N            measured steps, at least 5 (default 5)\n"
         "  --warmup N           unmeasured steps first (default 2)\n"
         "  --schedulers LIST accepts NAME+nopri: NAME with --no-priorities\n"
         "  --rounds R           passes over the scheduler list, interleaved so that\n"
         "                       a slow spell of the machine does not fall on one\n"
         "                       scheduler (default 3); a row's median is the\n"
         "                       median of its rounds' medians, min and max over all\n"
         "  --out-dir DIR        where the CSV and PNG go (default: .)\n"
         "  --perfmodel-dir DIR  STARPU_HOME of the runs (default: <dir of the\n"
         "                       taskgrad binary>/../sched-perfmodels)\n"
         "  --calibration-steps N  steps of the dmda run with STARPU_CALIBRATE=1\n"
         "                       that calibrates the perfmodels first (default 10)\n"
         "  --timeout SEC        limit of each subprocess run (default 600)\n"
         "\n"
         "Every other flag goes to 'taskgrad bench <model>' (e.g. --batch 2048,\n"
         "--hidden 512,256, --layers 4, --ncpus 2); not --sched, --quiet,\n"
         "--stats, --trace, --calibrate or --torch.\n"
         "\n"
         "Step times: each step timed until its last task ended (bench gpt,\n"
         "bench mlp --per-step); the chart's bars go from the fastest to the\n"
         "slowest single step of all rounds.\n"
         "A scheduler whose run fails is reported as failed; the others go on.\n"
         "Exit status: 0; 1 if every scheduler failed; 2 on bad flags or when\n"
         "gnuplot is missing (after writing the CSV).\n",
         default_scheds);
}


/* ---- flags and checks ---- */

static int split_schedulers(const char *text, char names[][SCHED_NAME_MAX]) {
  if (!*text) tg_cli_die("--schedulers: empty list");
  int n = 0;
  const char *p = text;
  for (;;) {
    size_t len = strcspn(p, ",");
    if (len == 0) tg_cli_die("--schedulers: empty name in '%s'", text);
    if (len >= SCHED_NAME_MAX) tg_cli_die("--schedulers: name too long in '%s'", text);
    if (n == SCHED_MAX) tg_cli_die("--schedulers: at most %d names", SCHED_MAX);
    for (size_t i = 0; i < len; i++)
      if (!isalnum((unsigned char)p[i]) && p[i] != '-' && p[i] != '_' && p[i] != '+')
        tg_cli_die("--schedulers: bad name '%.*s' (letters, digits, -, _ and +nopri)",
                   (int)len, p);
    memcpy(names[n], p, len);
    names[n][len] = 0;
    /* before the calibration run: a name StarPU does not know would fail
     * its runs only after it */
    char policy[SCHED_NAME_MAX];
    sched_policy_of(names[n], policy, sizeof policy);
    tg_cli_check_sched_for("--schedulers", policy);
    n++;
    p += len;
    if (!*p) break;
    p++;
  }
  return n;
}


/* 0 if a file can be created in dir (access() says yes to root everywhere). */
static int dir_writable(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return -1;
  char probe[PATH_MAX];
  if (snprintf(probe, sizeof probe, "%s/.taskgrad-sched-XXXXXX", dir) >= (int)sizeof probe)
    return -1;
  int fd = mkstemp(probe);
  if (fd < 0) return -1;
  close(fd);
  unlink(probe);
  return 0;
}

/* Parent of the directory holding this binary + "/sched-perfmodels". */
static void default_perfmodel_dir(char *out, size_t n) {
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) tg_cli_die("cannot find the taskgrad binary (/proc/self/exe); use --perfmodel-dir");
  exe[len] = 0;
  for (int up = 0; up < 2; up++) {
    char *slash = strrchr(exe, '/');
    if (!slash) break;
    if (slash == exe) slash[1] = 0;
    else *slash = 0;
  }
  if (snprintf(out, n, "%s%ssched-perfmodels", exe,
               exe[strlen(exe) - 1] == '/' ? "" : "/") >= (int)n)
    tg_cli_die("perfmodel directory path too long; use --perfmodel-dir");
}


/* ---- the command ---- */

typedef struct sched_opts {
  const char *model, *sched_list, *out_dir, *perf_dir_flag;
  int steps, warmup, calib_steps, timeout_s, rounds;
  char *pass[PASS_MAX]; /* the model flags, for 'bench <model>' */
  int npass;
  char perf_dir[PATH_MAX], csv[PATH_MAX], png[PATH_MAX];
} sched_opts;

/* The flags; returns 1 after printing the help. */
static int parse_flags(int argc, char **argv, sched_opts *o) {
  *o = (sched_opts){.sched_list = default_scheds, .out_dir = ".", .steps = 5, .warmup = 2,
                    .calib_steps = 10, .timeout_s = 600, .rounds = 3};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      bench_sched_usage();
      return 1;
    } else if (!strcmp(a, "--model")) {
      o->model = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--schedulers")) {
      o->sched_list = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--steps")) {
      o->steps = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 5, 4096);
    } else if (!strcmp(a, "--rounds")) {
      o->rounds = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 50);
    } else if (!strcmp(a, "--warmup")) {
      o->warmup = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 0, 1000000);
    } else if (!strcmp(a, "--calibration-steps")) {
      o->calib_steps = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 1000000);
    } else if (!strcmp(a, "--timeout")) {
      o->timeout_s = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 86400);
    } else if (!strcmp(a, "--out-dir")) {
      o->out_dir = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--perfmodel-dir")) {
      o->perf_dir_flag = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--sched")) {
      tg_cli_die("'bench sched' takes --schedulers LIST, not --sched");
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "--stats") || !strcmp(a, "--trace") ||
               !strcmp(a, "--calibrate") || !strcmp(a, "--torch")) {
      tg_cli_die("%s cannot be used with 'bench sched'", a);
    } else {
      if (o->npass == PASS_MAX) tg_cli_die("too many model flags (at most %d)", PASS_MAX);
      o->pass[o->npass++] = argv[i];
    }
  }
  if (!o->model) tg_cli_die("'bench sched' needs --model mlp or --model gpt");
  if (strcmp(o->model, "mlp") && strcmp(o->model, "gpt"))
    tg_cli_die("--model: unknown model '%s' (known: mlp, gpt)", o->model);
  return 0;
}

/* The output directory, the perfmodel directory (created) and the paths
 * of the CSV and the chart. */
static void prepare_dirs(sched_opts *o) {
  if (dir_writable(o->out_dir) < 0)
    tg_cli_die("--out-dir: '%s' is not a writable directory", o->out_dir);
  if (o->perf_dir_flag) {
    if (snprintf(o->perf_dir, sizeof o->perf_dir, "%s", o->perf_dir_flag) >=
        (int)sizeof o->perf_dir)
      tg_cli_die("--perfmodel-dir: path too long");
  } else {
    default_perfmodel_dir(o->perf_dir, sizeof o->perf_dir);
  }
  if (tg_make_dirs(o->perf_dir) < 0 || dir_writable(o->perf_dir) < 0)
    tg_cli_die("cannot create or write the perfmodel directory '%s' (see --perfmodel-dir)",
               o->perf_dir);
  if (snprintf(o->csv, sizeof o->csv, "%s/sched-%s.csv", o->out_dir, o->model) >=
          (int)sizeof o->csv ||
      snprintf(o->png, sizeof o->png, "%s/sched-%s.png", o->out_dir, o->model) >=
          (int)sizeof o->png)
    tg_cli_die("--out-dir: path too long");
}

/* The model flags: 'bench <model> FLAGS --help' parses (and range-checks)
 * every flag before printing the help, without starting StarPU. */
static void check_model_flags(const sched_opts *o) {
  char *argv[PASS_MAX + 8];
  int a = 0;
  argv[a++] = "/proc/self/exe";
  argv[a++] = "bench";
  argv[a++] = (char *)o->model;
  for (int i = 0; i < o->npass; i++) argv[a++] = o->pass[i];
  argv[a++] = "--help";
  argv[a] = NULL;
  child_result r;
  if (sched_run_child(argv, o->perf_dir, 0, o->timeout_s, &r) < 0)
    tg_cli_die("cannot start a subprocess: %s", strerror(errno));
  if (r.exit_code != 0) {
    char line[512];
    sched_last_err_line(&r, line, sizeof line);
    /* the child's message, already "taskgrad: error: ..." */
    if (!strncmp(line, "taskgrad: error: ", 17)) fprintf(stderr, "%s\n", line);
    else fprintf(stderr, "taskgrad: error: model flags rejected by 'bench %s': %s\n", o->model, line);
    exit(TG_EXIT_USAGE);
  }
  sched_child_free(&r);
}

/* One dmda run with STARPU_CALIBRATE=1; returns 0, or 1 when it failed. */
static int calibrate(const sched_opts *o) {
  char calib_s[16];
  snprintf(calib_s, sizeof calib_s, "%d", o->calib_steps);
  char *argv[PASS_MAX + 16];
  int a = 0;
  argv[a++] = "/proc/self/exe";
  argv[a++] = "bench";
  argv[a++] = (char *)o->model;
  argv[a++] = "--sched";
  argv[a++] = "dmda";
  argv[a++] = "--steps";
  argv[a++] = calib_s;
  argv[a++] = "--warmup";
  argv[a++] = "0";
  argv[a++] = "--quiet";
  for (int i = 0; i < o->npass; i++) argv[a++] = o->pass[i];
  argv[a] = NULL;
  fprintf(stderr, "bench sched: calibrating the perfmodels in %s (dmda, %d steps)\n",
          o->perf_dir, o->calib_steps);
  child_result r;
  if (sched_run_child(argv, o->perf_dir, 1, o->timeout_s, &r) < 0)
    tg_cli_die("cannot start a subprocess: %s", strerror(errno));
  if (r.exit_code != 0) {
    char why[512], line[512];
    sched_last_err_line(&r, line, sizeof line);
    if (r.exit_code == TG_EXIT_USAGE && !strncmp(line, "taskgrad: error: ", 17)) {
      fprintf(stderr, "%s\n", line); /* a flag combination 'bench' rejects */
      exit(TG_EXIT_USAGE);
    }
    sched_describe_failure(&r, why, sizeof why);
    fprintf(stderr, "taskgrad: error: the calibration run failed: %s\n", why);
    return 1;
  }
  sched_child_free(&r);
  return 0;
}

/* Every round of every scheduler into rows; returns the rows that did not
 * fail.  Rounds outer, schedulers inner: the machine's slow spells spread
 * over every scheduler instead of falling on the ones measured last.  A
 * row's median is the median of its rounds' medians, its min and max the
 * fastest and slowest single step of all its rounds. */
static int run_rounds(const sched_opts *o, char names[][SCHED_NAME_MAX], int nsched,
                      sched_row *rows) {
  static double medians[SCHED_MAX][50];
  int rounds = o->rounds;
  for (int i = 0; i < nsched; i++) {
    memset(&rows[i], 0, sizeof rows[i]);
    rows[i].name = names[i];
    rows[i].ok = 1;
    rows[i].min_ms = 1e300;
  }
  for (int round = 0; round < rounds; round++)
    for (int i = 0; i < nsched; i++) {
      sched_row *row = &rows[i], one;
      if (!row->ok) continue;
      memset(&one, 0, sizeof one);
      one.name = names[i];
      fprintf(stderr, "bench sched: round %d/%d, %s (%d/%d)...", round + 1, rounds, one.name,
              i + 1, nsched);
      double t0 = tg_cli_now();
      sched_measure(&one, o->model, (char **)o->pass, o->npass, o->steps, o->warmup,
                    o->perf_dir, o->timeout_s);
      if (!one.ok) {
        fprintf(stderr, " failed: %s\n", one.why);
        row->ok = 0;
        memcpy(row->why, one.why, sizeof row->why);
        continue;
      }
      fprintf(stderr, " median %.2f ms (%.1f s)\n", one.median_ms, tg_cli_now() - t0);
      medians[i][round] = one.median_ms;
      if (one.min_ms < row->min_ms) row->min_ms = one.min_ms;
      if (one.max_ms > row->max_ms) row->max_ms = one.max_ms;
      if (one.idle_pct >= 0) row->idle_pct += one.idle_pct / rounds;
      row->tasks += one.tasks;
      row->bytes += one.bytes;
    }
  int nok = 0;
  for (int i = 0; i < nsched; i++) {
    if (!rows[i].ok) continue;
    nok++;
    qsort(medians[i], rounds, sizeof medians[i][0], tg_cli_cmp_double);
    rows[i].median_ms = medians[i][rounds / 2];
  }
  return nok;
}

/* The CSV, the table and the chart; returns the exit status. */
static int report(const sched_opts *o, const sched_row *rows, int nsched, int nok) {
  if (sched_write_csv(o->csv, rows, nsched) < 0)
    tg_cli_die("cannot write '%s': %s", o->csv, strerror(errno));
  sched_print_table(o->model, o->steps, rows, nsched);
  printf("\nwrote %s\n", o->csv);
  if (nok == 0) {
    fflush(stdout);
    fprintf(stderr, "taskgrad: error: every scheduler failed; no chart written\n");
    return 1;
  }
  char why[768];
  int rc = sched_write_chart(o->png, o->model, o->steps, rows, nsched, why, sizeof why);
  fflush(stdout);
  if (rc == 1)
    tg_cli_die("gnuplot not found: the CSV is written, but the chart needs gnuplot "
               "(apt-get install gnuplot-nox)");
  if (rc < 0) {
    fprintf(stderr, "taskgrad: error: writing the chart %s: %s\n", o->png, why);
    return 1;
  }
  printf("wrote %s\n", o->png);
  return 0;
}

int tg_cmd_bench_sched(int argc, char **argv) {
  static sched_opts o;
  if (parse_flags(argc, argv, &o)) return 0;
  static char names[SCHED_MAX][SCHED_NAME_MAX];
  int nsched = split_schedulers(o.sched_list, names);
  prepare_dirs(&o);
  check_model_flags(&o);
  if (calibrate(&o)) return 1;
  sched_row rows[SCHED_MAX];
  int nok = run_rounds(&o, names, nsched, rows);
  return report(&o, rows, nsched, nok);
}
