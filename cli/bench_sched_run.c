/*
 * taskgrad bench sched: running (bench_sched.h).  Every measurement is a
 * subprocess of this same binary (/proc/self/exe bench mlp|gpt --sched NAME
 * ...), with its stdout captured whole and the end of its stderr kept for
 * messages, killed after a timeout; its output is scraped for the step
 * times ("taskgrad median step ms: M (min A, max B)", which bench gpt and
 * bench mlp --per-step print), the workers' idle share, the tasks and the
 * bytes moved.
 */
#define _GNU_SOURCE /* strcasestr */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_sched.h"
#include "cli.h"

#define OUT_MAX (4 << 20)

/* ---- subprocesses ---- */

void sched_child_free(child_result *r) {
  free(r->out);
  r->out = NULL;
}

const char *sched_last_err_line(const child_result *r, char *buf, size_t n) {
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

int sched_run_child(char *const argv[], const char *home, int calibrate, int timeout_s,
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
    tg_cli_exec_self(argv);
    fprintf(stderr, "taskgrad: error: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  tg_cli_forward_signals(pid); /* SIGINT/SIGTERM end the run in progress too */
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
  tg_cli_forward_signals(0); /* after a signal: exits 128 + it, the run ended */
  if (WIFEXITED(status)) r->exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r->signal = WTERMSIG(status);
  return 0;
}

/* ---- parsing a bench run's output ---- */

typedef struct run_parse {
  int have_step;
  double step_ms, min_ms, max_ms; /* min/max: bench gpt, bench mlp --per-step */
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

/* ---- one scheduler ---- */

void sched_describe_failure(const child_result *r, char *why, size_t n) {
  char line[512];
  sched_last_err_line(r, line, sizeof line);
  const char *msg = line;
  if (!strncmp(msg, "taskgrad: error: ", 17)) msg += 17;
  if (r->timed_out) snprintf(why, n, "timed out");
  else if (r->signal) snprintf(why, n, "killed by signal %d%s%.200s", r->signal, *msg ? ": " : "", msg);
  else if (r->exit_code != 0)
    snprintf(why, n, "exit status %d%s%.200s", r->exit_code, *msg ? ": " : "", msg);
  else snprintf(why, n, "no step time in the output");
}

int sched_policy_of(const char *entry, char *policy, size_t size) {
  snprintf(policy, size, "%s", entry);
  char *plus = strstr(policy, "+nopri");
  if (!plus || plus[6]) return 0;
  *plus = '\0';
  return 1;
}

void sched_measure(sched_row *row, const char *model, char **pass, int npass, int steps,
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
  char sched[128];
  const int nopri = sched_policy_of(row->name, sched, sizeof sched);
  argv[a++] = "--sched";
  argv[a++] = sched;
  if (nopri) argv[a++] = "--no-priorities";
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
    if (sched_run_child(argv, home, 0, timeout_s, &r) < 0) {
      snprintf(row->why, sizeof row->why, "cannot start a subprocess: %s", strerror(errno));
      return;
    }
    run_parse p;
    parse_run(r.out, &p);
    if (r.exit_code != 0 || !p.have_step) {
      sched_describe_failure(&r, row->why, sizeof row->why);
      sched_child_free(&r);
      return;
    }
    sched_child_free(&r);
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

