/*
 * taskgrad bench sched: reporting (bench_sched.h).  The rows as a CSV, a
 * Markdown table on stdout, and a PNG bar chart through gnuplot (a child
 * process fed the script and data on its stdin): a bar per scheduler at
 * its median step time, with the fastest and slowest single step as the
 * error bar.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_sched.h"

/* ---- output ---- */

int sched_write_csv(const char *path, const sched_row *rows, int n) {
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

void sched_print_table(const char *model, int steps, const sched_row *rows, int n) {
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

int sched_write_chart(const char *path, const char *model, int steps, const sched_row *rows,
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
          "(median of per-run medians of %d steps; bars: fastest to slowest step)'\n"
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

