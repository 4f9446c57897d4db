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
 * Step times:
 *  - gpt: one run of 'bench gpt --steps N', which times each step itself and
 *    prints "taskgrad median step ms: M (min A, max B)"; those are the row.
 *  - mlp: 'bench mlp --per-step' waits for each step and prints the same
 *    line (by default bench mlp pipelines its steps and prints the mean).
 *    The median is the element n/2 of the sorted times in both.
 * Idle % is the mean over the workers of the per-worker idle column (for mlp,
 * the mean over the workers); tasks and bytes moved are totals over the N
 * measured steps.
 */
#define _GNU_SOURCE /* strcasestr */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define SCHED_MAX 64
#define SCHED_NAME_MAX 64
#define PASS_MAX 64
#define OUT_MAX (4 << 20)

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
         "Step times: gpt: median, min and max of the N steps of one run; mlp\n"
         "(bench mlp --per-step): the median, min and max of the N steps.\n"
         "A scheduler whose run fails is reported as failed; the others go on.\n"
         "Exit status: 0; 1 if every scheduler failed; 2 on bad flags or when\n"
         "gnuplot is missing (after writing the CSV).\n",
         default_scheds);
}

/* ---- subprocesses ---- */

typedef struct child_result {
  char *out;         /* stdout, NUL-terminated */
  char err[1024];    /* last part of stderr */
  int exit_code;     /* -1: killed by a signal or not started */
  int signal;
  int timed_out;
} child_result;

static void child_result_free(child_result *r) {
  free(r->out);
  r->out = NULL;
}

/* The last non-empty line of the captured stderr, for messages. */
static const char *last_err_line(const child_result *r, char *buf, size_t n) {
  const char *s = r->err;
  const char *best = NULL;
  size_t best_len = 0;
  while (*s) {
    size_t len = strcspn(s, "\n");
    if (len > 0) {
      best = s;
      best_len = len;
    }
    s += len;
    if (*s == '\n') s++;
  }
  if (!best) {
    buf[0] = 0;
    return buf;
  }
  if (best_len >= n) best_len = n - 1;
  memcpy(buf, best, best_len);
  buf[best_len] = 0;
  return buf;
}

static double now_s(void) { return tg_cli_now(); }

/* Runs argv (argv[0] is the program) with STARPU_HOME=home and, if calibrate,
 * STARPU_CALIBRATE=1 (otherwise STARPU_CALIBRATE unset: StarPU's default),
 * capturing stdout and stderr; kills it after timeout_s.  Returns 0 if it
 * ran (whatever its status), -1 if it could not be started. */
static int run_child(char *const argv[], const char *home, int calibrate, int timeout_s,
                     child_result *r) {
  memset(r, 0, sizeof *r);
  r->exit_code = -1;
  int outp[2], errp[2];
  if (pipe(outp) < 0) return -1;
  if (pipe(errp) < 0) {
    close(outp[0]);
    close(outp[1]);
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(outp[0]);
    close(outp[1]);
    close(errp[0]);
    close(errp[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(outp[1], STDOUT_FILENO);
    dup2(errp[1], STDERR_FILENO);
    close(outp[0]);
    close(outp[1]);
    close(errp[0]);
    close(errp[1]);
    setenv("STARPU_HOME", home, 1);
    if (calibrate) setenv("STARPU_CALIBRATE", "1", 1);
    else unsetenv("STARPU_CALIBRATE");
    unsetenv("STARPU_SCHED");
    setenv("STARPU_SILENT", "1", 0);
    execv(argv[0], argv);
    fprintf(stderr, "taskgrad: error: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(outp[1]);
  close(errp[1]);
  size_t cap = 65536, len = 0, elen = 0;
  r->out = malloc(cap);
  if (!r->out) tg_cli_die("out of memory");
  struct pollfd fds[2] = {{.fd = outp[0], .events = POLLIN, .revents = 0},
                          {.fd = errp[0], .events = POLLIN, .revents = 0}};
  int open_fds = 2;
  double deadline = now_s() + timeout_s;
  while (open_fds > 0) {
    double left = deadline - now_s();
    if (left <= 0) {
      r->timed_out = 1;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, left > 1 ? 1000 : (int)(left * 1000) + 1);
    if (n < 0) {
      if (errno == EINTR) continue;
      kill(pid, SIGKILL);
      break;
    }
    for (int k = 0; k < 2; k++) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      ssize_t got = read(fds[k].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        close(fds[k].fd);
        fds[k].fd = -1;
        open_fds--;
        continue;
      }
      if (k == 0) {
        if (len + (size_t)got + 1 > cap && cap < OUT_MAX) {
          while (len + (size_t)got + 1 > cap && cap < OUT_MAX) cap *= 2;
          char *p = realloc(r->out, cap);
          if (!p) tg_cli_die("out of memory");
          r->out = p;
        }
        size_t take = (size_t)got;
        if (len + take + 1 > cap) take = cap - len - 1;
        memcpy(r->out + len, buf, take);
        len += take;
      } else {
        /* keep the last sizeof err - 1 bytes */
        size_t room = sizeof r->err - 1;
        if ((size_t)got >= room) {
          memcpy(r->err, buf + got - room, room);
          elen = room;
        } else {
          if (elen + (size_t)got > room) {
            size_t drop = elen + (size_t)got - room;
            memmove(r->err, r->err + drop, elen - drop);
            elen -= drop;
          }
          memcpy(r->err + elen, buf, (size_t)got);
          elen += (size_t)got;
        }
        r->err[elen] = 0;
      }
    }
  }
  for (int k = 0; k < 2; k++)
    if (fds[k].fd >= 0) close(fds[k].fd);
  r->out[len] = 0;
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 0;
  if (WIFEXITED(status)) r->exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r->signal = WTERMSIG(status);
  return 0;
}

/* ---- parsing a bench run's output ---- */

typedef struct run_parse {
  int have_step;
  double step_ms, min_ms, max_ms; /* min/max only from bench gpt */
  int have_minmax;
  double idle_pct; /* mean over workers, -1 if no worker table */
  long tasks;      /* -1 if unknown */
  double bytes;    /* 0 if no "bytes moved" line */
} run_parse;

static int tok_is_pct(const char *t) {
  size_t n = strlen(t);
  return n > 1 && t[n - 1] == '%';
}

/* "bytes moved: 123 bytes (...)" or "bytes moved: 1.5 MiB": the first number
 * after the words, times its unit. */
static int parse_bytes(const char *p, double *out) {
  p += strlen("bytes moved");
  while (*p && !isdigit((unsigned char)*p) && *p != '.') {
    if (*p == '\n') return -1;
    p++;
  }
  char *end;
  double v = strtod(p, &end);
  if (end == p) return -1;
  while (*end == ' ' || *end == '\t') end++;
  static const struct { const char *unit; double scale; } units[] = {
      {.unit = "KiB", .scale = 1024.0},          {.unit = "MiB", .scale = 1048576.0},
      {.unit = "GiB", .scale = 1073741824.0},    {.unit = "TiB", .scale = 1099511627776.0},
      {.unit = "kB", .scale = 1e3},              {.unit = "KB", .scale = 1e3},
      {.unit = "MB", .scale = 1e6},              {.unit = "GB", .scale = 1e9},
      {.unit = "TB", .scale = 1e12}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strncmp(end, units[i].unit, strlen(units[i].unit))) {
      v *= units[i].scale;
      break;
    }
  *out = v;
  return 0;
}

static void parse_run(const char *out, run_parse *p) {
  memset(p, 0, sizeof *p);
  p->idle_pct = -1;
  p->tasks = -1;
  enum { NONE, CODELETS, WORKERS } table = NONE;
  long codelet_tasks = 0, overhead_tasks = -1;
  int have_codelets = 0, nworkers = 0, have_bytes = 0;
  double idle_sum = 0;
  const char *s = out;
  while (*s) {
    size_t len = strcspn(s, "\n");
    char line[1024];
    size_t n = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, s, n);
    line[n] = 0;
    s += len;
    if (*s == '\n') s++;

    double a, b, c;
    long k;
    if (sscanf(line, "taskgrad median step ms: %lf (min %lf, max %lf)", &a, &b, &c) == 3) {
      p->have_step = p->have_minmax = 1;
      p->step_ms = a;
      p->min_ms = b;
      p->max_ms = c;
      continue;
    }
    if (sscanf(line, "step time: %lf ms", &a) == 1) {
      p->have_step = 1;
      p->step_ms = a;
      continue;
    }
    if (sscanf(line, "runtime overhead: %*f us per task (%ld tasks", &k) == 1) {
      overhead_tasks = k;
      continue;
    }
    const char *bm = strcasestr(line, "bytes moved");
    if (bm && !have_bytes) {
      double v;
      if (parse_bytes(bm, &v) == 0) {
        p->bytes = v;
        have_bytes = 1;
      }
    }
    /* the tables of tg_stats_print */
    char first[64] = "";
    sscanf(line, "%63s", first);
    if (!strcmp(first, "codelet") && strstr(line, "tasks")) {
      table = CODELETS;
      have_codelets = 1;
      continue;
    }
    if (!strcmp(first, "worker") && strstr(line, "idle")) {
      table = WORKERS;
      continue;
    }
    if (table == CODELETS) {
      char name[128];
      long count;
      char tail;
      if (sscanf(line, "%127s %ld %c", name, &count, &tail) == 3 && count >= 0)
        codelet_tasks += count;
      else
        table = NONE;
    } else if (table == WORKERS) {
      /* "CPU 0   16   26.3%   2.2%   71.5% ...": busy, then idle, are the
       * first two percentages (names contain spaces, columns may follow) */
      char *save = NULL, *tok;
      int npct = 0;
      double idle = -1;
      for (tok = strtok_r(line, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
        if (tok_is_pct(tok) && ++npct == 2) {
          idle = strtod(tok, NULL);
          break;
        }
      if (idle >= 0) {
        idle_sum += idle;
        nworkers++;
      } else {
        table = NONE;
      }
    }
  }
  if (nworkers > 0) p->idle_pct = idle_sum / nworkers;
  if (overhead_tasks >= 0) p->tasks = overhead_tasks;
  else if (have_codelets) p->tasks = codelet_tasks;
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
    n++;
    p += len;
    if (!*p) break;
    p++;
  }
  return n;
}

static int mkdir_p(const char *path) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char *q = buf + 1; *q; q++) {
    if (*q != '/') continue;
    *q = 0;
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) return -1;
    *q = '/';
  }
  if (mkdir(buf, 0755) < 0 && errno != EEXIST) return -1;
  struct stat st;
  return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
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

/* ---- one scheduler ---- */

typedef struct sched_row {
  const char *name;
  int ok;
  char why[256];
  double median_ms, min_ms, max_ms, idle_pct, bytes;
  long tasks;
} sched_row;

static void describe_failure(const child_result *r, char *why, size_t n) {
  char line[512];
  last_err_line(r, line, sizeof line);
  const char *msg = line;
  if (!strncmp(msg, "taskgrad: error: ", 17)) msg += 17;
  if (r->timed_out) snprintf(why, n, "timed out");
  else if (r->signal) snprintf(why, n, "killed by signal %d%s%.200s", r->signal, *msg ? ": " : "", msg);
  else if (r->exit_code != 0)
    snprintf(why, n, "exit status %d%s%.200s", r->exit_code, *msg ? ": " : "", msg);
  else snprintf(why, n, "no step time in the output");
}

static void measure(sched_row *row, const char *model, char **pass, int npass, int steps,
                    int warmup, const char *home, int timeout_s) {
  char steps_s[16], warm_s[16];
  int gpt = !strcmp(model, "gpt");
  int runs = 1;
  snprintf(steps_s, sizeof steps_s, "%d", steps);
  snprintf(warm_s, sizeof warm_s, "%d", warmup);
  char *argv[PASS_MAX + 16];
  int a = 0;
  argv[a++] = "/proc/self/exe";
  argv[a++] = "bench";
  argv[a++] = (char *)model;
  /* "NAME+nopri": the scheduler NAME with the graph's priorities off */
  char sched[128];
  snprintf(sched, sizeof sched, "%s", row->name);
  char *plus = strstr(sched, "+nopri");
  if (plus && plus[6] == 0) *plus = 0;
  argv[a++] = "--sched";
  argv[a++] = sched;
  if (plus) argv[a++] = "--no-priorities";
  argv[a++] = "--steps";
  argv[a++] = steps_s;
  argv[a++] = "--warmup";
  argv[a++] = warm_s;
  if (!gpt) argv[a++] = "--per-step";
  for (int i = 0; i < npass; i++) argv[a++] = pass[i];
  argv[a] = NULL;

  double idle_sum = 0, bytes = 0;
  long tasks = 0;
  int nidle = 0, have_tasks = 1;
  for (int k = 0; k < runs; k++) {
    child_result r;
    if (run_child(argv, home, 0, timeout_s, &r) < 0) {
      snprintf(row->why, sizeof row->why, "cannot start a subprocess: %s", strerror(errno));
      return;
    }
    run_parse p;
    parse_run(r.out, &p);
    if (r.exit_code != 0 || !p.have_step) {
      describe_failure(&r, row->why, sizeof row->why);
      child_result_free(&r);
      return;
    }
    child_result_free(&r);
    if (!p.have_minmax) {
      snprintf(row->why, sizeof row->why, "no min/max step time in the output");
      return;
    }
    row->median_ms = p.step_ms;
    row->min_ms = p.min_ms;
    row->max_ms = p.max_ms;
    if (p.idle_pct >= 0) {
      idle_sum += p.idle_pct;
      nidle++;
    }
    if (p.tasks >= 0) tasks += p.tasks;
    else have_tasks = 0;
    bytes += p.bytes;
  }
  row->idle_pct = nidle ? idle_sum / nidle : -1;
  row->tasks = have_tasks ? tasks : -1;
  row->bytes = bytes;
  row->ok = 1;
}

/* ---- output ---- */

static int write_csv(const char *path, const sched_row *rows, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "scheduler,median_ms,min_ms,max_ms,idle_pct,bytes_transferred,tasks\n");
  for (int i = 0; i < n; i++) {
    const sched_row *r = &rows[i];
    if (!r->ok) {
      fprintf(f, "%s,failed,,,,,\n", r->name);
      continue;
    }
    fprintf(f, "%s,%.3f,%.3f,%.3f,", r->name, r->median_ms, r->min_ms, r->max_ms);
    if (r->idle_pct >= 0) fprintf(f, "%.1f", r->idle_pct);
    fprintf(f, ",%.0f,", r->bytes);
    if (r->tasks >= 0) fprintf(f, "%ld", r->tasks);
    fputc('\n', f);
  }
  return fclose(f) == 0 ? 0 : -1;
}

static void print_table(const char *model, int steps, const sched_row *rows, int n) {
  printf("\nbench sched: %s, %d measured steps per scheduler\n\n", model, steps);
  printf("| scheduler | median ms | min ms | max ms | idle %% | bytes moved | tasks |\n");
  printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int i = 0; i < n; i++) {
    const sched_row *r = &rows[i];
    if (!r->ok) {
      printf("| %s | failed: %s | | | | | |\n", r->name, r->why);
      continue;
    }
    printf("| %s | %.2f | %.2f | %.2f | ", r->name, r->median_ms, r->min_ms, r->max_ms);
    if (r->idle_pct >= 0) printf("%.1f", r->idle_pct);
    printf(" | %.0f | ", r->bytes);
    if (r->tasks >= 0) printf("%ld", r->tasks);
    printf(" |\n");
  }
}

/* gnuplot single-quoted string: ' doubled */
static void gp_quote(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

/* Returns 0 on success, 1 if gnuplot is not installed, -1 if it failed. */
static int write_chart(const char *path, const char *model, int steps, const sched_row *rows,
                       int n, char *why, size_t why_n) {
  int in[2];
  if (pipe(in) < 0) {
    snprintf(why, why_n, "pipe: %s", strerror(errno));
    return -1;
  }
  FILE *errf = tmpfile();
  int errfd = errf ? fileno(errf) : -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, why_n, "fork: %s", strerror(errno));
    close(in[0]);
    close(in[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    close(in[0]);
    close(in[1]);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    if (errfd >= 0) dup2(errfd, STDERR_FILENO);
    execlp("gnuplot", "gnuplot", (char *)NULL);
    _exit(errno == ENOENT ? 127 : 126);
  }
  close(in[0]);
  signal(SIGPIPE, SIG_IGN);
  FILE *f = fdopen(in[1], "w");
  if (!f) {
    close(in[1]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    snprintf(why, why_n, "fdopen: %s", strerror(errno));
    return -1;
  }
  fprintf(f,
          "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "  set terminal pngcairo size 1000,560 font 'sans,10'\n"
          "} else {\n"
          "  set terminal png size 1000,560\n"
          "}\n"
          "set output ");
  gp_quote(f, path);
  fprintf(f,
          "\n"
          "set title 'taskgrad bench sched: %s training step by scheduling policy "
          "(median of per-run medians of %d steps; bars: min to max)'\n"
          "set ylabel 'step time (ms)'\n"
          "set style fill solid 0.6 border -1\n"
          "set boxwidth 0.6\n"
          "set xtics rotate by -30 nomirror\n"
          "set grid ytics\n"
          "set yrange [0:*]\n"
          "set xrange [-0.7:*]\n"
          "unset key\n"
          "$data << EOD\n",
          model, steps);
  int nok = 0;
  for (int i = 0; i < n; i++)
    if (rows[i].ok) {
      fprintf(f, "\"%s\" %.4f %.4f %.4f\n", rows[i].name, rows[i].median_ms, rows[i].min_ms,
              rows[i].max_ms);
      nok++;
    }
  fprintf(f,
          "EOD\n"
          "set xrange [-0.7:%f]\n"
          "plot $data using 0:2:xtic(1) with boxes lc rgb '#4477aa', \\\n"
          "     $data using 0:2:3:4 with yerrorbars lc rgb 'black' pt 7 ps 0.4 lw 1.5\n",
          nok - 0.3);
  fclose(f);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      snprintf(why, why_n, "waitpid: %s", strerror(errno));
      return -1;
    }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return 1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char buf[512] = "";
    if (errfd >= 0) {
      ssize_t got = pread(errfd, buf, sizeof buf - 1, 0);
      buf[got > 0 ? got : 0] = 0;
      for (char *q = buf; *q; q++)
        if (*q == '\n') *q = ' ';
    }
    snprintf(why, why_n, "gnuplot failed: %s", buf);
    if (errf) fclose(errf);
    return -1;
  }
  if (errf) fclose(errf);
  return 0;
}

/* ---- the command ---- */

int tg_cmd_bench_sched(int argc, char **argv) {
  const char *model = NULL, *sched_list = default_scheds, *out_dir = ".";
  const char *perf_dir_flag = NULL;
  int steps = 5, warmup = 2, calib_steps = 10, timeout_s = 600, rounds = 3;
  char *pass[PASS_MAX];
  int npass = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      bench_sched_usage();
      return 0;
    } else if (!strcmp(a, "--model")) {
      model = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--schedulers")) {
      sched_list = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--steps")) {
      steps = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 5, 4096);
    } else if (!strcmp(a, "--rounds")) {
      rounds = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 50);
    } else if (!strcmp(a, "--warmup")) {
      warmup = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 0, 1000000);
    } else if (!strcmp(a, "--calibration-steps")) {
      calib_steps = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 1000000);
    } else if (!strcmp(a, "--timeout")) {
      timeout_s = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 86400);
    } else if (!strcmp(a, "--out-dir")) {
      out_dir = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--perfmodel-dir")) {
      perf_dir_flag = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--sched")) {
      tg_cli_die("'bench sched' takes --schedulers LIST, not --sched");
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "--stats") || !strcmp(a, "--trace") ||
               !strcmp(a, "--calibrate") || !strcmp(a, "--torch")) {
      tg_cli_die("%s cannot be used with 'bench sched'", a);
    } else {
      if (npass == PASS_MAX) tg_cli_die("too many model flags (at most %d)", PASS_MAX);
      pass[npass++] = argv[i];
    }
  }
  if (!model) tg_cli_die("'bench sched' needs --model mlp or --model gpt");
  if (strcmp(model, "mlp") && strcmp(model, "gpt"))
    tg_cli_die("--model: unknown model '%s' (known: mlp, gpt)", model);
  static char names[SCHED_MAX][SCHED_NAME_MAX];
  int nsched = split_schedulers(sched_list, names);
  if (dir_writable(out_dir) < 0)
    tg_cli_die("--out-dir: '%s' is not a writable directory", out_dir);
  char perf_dir[PATH_MAX];
  if (perf_dir_flag) {
    if (snprintf(perf_dir, sizeof perf_dir, "%s", perf_dir_flag) >= (int)sizeof perf_dir)
      tg_cli_die("--perfmodel-dir: path too long");
  } else {
    default_perfmodel_dir(perf_dir, sizeof perf_dir);
  }
  if (mkdir_p(perf_dir) < 0 || dir_writable(perf_dir) < 0)
    tg_cli_die("cannot create or write the perfmodel directory '%s' (see --perfmodel-dir)",
               perf_dir);
  char csv[PATH_MAX], png[PATH_MAX];
  if (snprintf(csv, sizeof csv, "%s/sched-%s.csv", out_dir, model) >= (int)sizeof csv ||
      snprintf(png, sizeof png, "%s/sched-%s.png", out_dir, model) >= (int)sizeof png)
    tg_cli_die("--out-dir: path too long");

  /* The model flags: 'bench <model> FLAGS --help' parses (and range-checks)
   * every flag before printing the help, without starting StarPU. */
  char *argv_chk[PASS_MAX + 8];
  int a = 0;
  argv_chk[a++] = "/proc/self/exe";
  argv_chk[a++] = "bench";
  argv_chk[a++] = (char *)model;
  for (int i = 0; i < npass; i++) argv_chk[a++] = pass[i];
  argv_chk[a++] = "--help";
  argv_chk[a] = NULL;
  child_result r;
  if (run_child(argv_chk, perf_dir, 0, timeout_s, &r) < 0)
    tg_cli_die("cannot start a subprocess: %s", strerror(errno));
  if (r.exit_code != 0) {
    char line[512];
    last_err_line(&r, line, sizeof line);
    /* the child's message, already "taskgrad: error: ..." */
    if (!strncmp(line, "taskgrad: error: ", 17)) fprintf(stderr, "%s\n", line);
    else fprintf(stderr, "taskgrad: error: model flags rejected by 'bench %s': %s\n", model, line);
    exit(TG_EXIT_USAGE);
  }
  child_result_free(&r);

  /* Calibration: one dmda run with STARPU_CALIBRATE=1. */
  char calib_s[16];
  snprintf(calib_s, sizeof calib_s, "%d", calib_steps);
  char *argv_cal[PASS_MAX + 16];
  a = 0;
  argv_cal[a++] = "/proc/self/exe";
  argv_cal[a++] = "bench";
  argv_cal[a++] = (char *)model;
  argv_cal[a++] = "--sched";
  argv_cal[a++] = "dmda";
  argv_cal[a++] = "--steps";
  argv_cal[a++] = calib_s;
  argv_cal[a++] = "--warmup";
  argv_cal[a++] = "0";
  argv_cal[a++] = "--quiet";
  for (int i = 0; i < npass; i++) argv_cal[a++] = pass[i];
  argv_cal[a] = NULL;
  fprintf(stderr, "bench sched: calibrating the perfmodels in %s (dmda, %d steps)\n", perf_dir,
          calib_steps);
  if (run_child(argv_cal, perf_dir, 1, timeout_s, &r) < 0)
    tg_cli_die("cannot start a subprocess: %s", strerror(errno));
  if (r.exit_code != 0) {
    char why[512], line[512];
    last_err_line(&r, line, sizeof line);
    if (r.exit_code == TG_EXIT_USAGE && !strncmp(line, "taskgrad: error: ", 17)) {
      fprintf(stderr, "%s\n", line); /* a flag combination 'bench' rejects */
      exit(TG_EXIT_USAGE);
    }
    describe_failure(&r, why, sizeof why);
    fprintf(stderr, "taskgrad: error: the calibration run failed: %s\n", why);
    return 1;
  }
  child_result_free(&r);

  /* rounds outer, schedulers inner: the machine's slow spells spread over
   * every scheduler instead of falling on the ones measured last */
  sched_row rows[SCHED_MAX];
  static double medians[SCHED_MAX][50];
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
      measure(&one, model, pass, npass, steps, warmup, perf_dir, timeout_s);
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

  if (write_csv(csv, rows, nsched) < 0)
    tg_cli_die("cannot write '%s': %s", csv, strerror(errno));
  print_table(model, steps, rows, nsched);
  printf("\nwrote %s\n", csv);
  if (nok == 0) {
    fflush(stdout);
    fprintf(stderr, "taskgrad: error: every scheduler failed; no chart written\n");
    return 1;
  }
  char why[768];
  int rc = write_chart(png, model, steps, rows, nsched, why, sizeof why);
  fflush(stdout);
  if (rc == 1)
    tg_cli_die("gnuplot not found: the CSV is written, but the chart needs gnuplot "
               "(apt-get install gnuplot-nox)");
  if (rc < 0) {
    fprintf(stderr, "taskgrad: error: writing the chart %s: %s\n", png, why);
    return 1;
  }
  printf("wrote %s\n", png);
  return 0;
}
