/*
 * Progress display.  On a terminal the bar is redrawn in place (carriage
 * return, no scrolling); in a log (stderr not a terminal) a plain line is
 * written every 10% so that logs stay short and readable.
 */
#include <stdio.h>
#include <unistd.h>

#include "cli.h"

void tg_progress_begin(tg_progress *p, const char *label, int total) {
  p->tty = isatty(fileno(stderr));
  p->total = total > 0 ? total : 1;
  p->last_decile = -1;
  p->start = tg_cli_now();
  p->label = label;
  p->unit = "samples/s";
  p->extra = NULL;
}

static void tg_format_eta(char *buf, size_t n, double s) {
  if (s < 0 || s > 359999) s = 0;
  if (s >= 60)
    snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    snprintf(buf, n, "%.0fs", s);
}

void tg_progress_update(tg_progress *p, int done, double loss, double acc,
                        double rate) {
  double frac = (double)done / p->total;
  double elapsed = tg_cli_now() - p->start;
  char eta[32], accs[32] = "";
  if (acc >= 0) snprintf(accs, sizeof accs, " acc %.4f", acc);
  tg_format_eta(eta, sizeof eta, done > 0 ? elapsed * (p->total - done) / done : 0);
  if (p->tty) {
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r%s [%s] %3d%% loss %.4f%s %.0f %s ETA %s%s \033[K", p->label, bar,
            (int)(frac * 100), loss, accs, rate, p->unit, eta, p->extra ? p->extra : "");
    fflush(stderr);
    return;
  }
  int decile = (int)(frac * 10);
  if (decile == p->last_decile) return;
  p->last_decile = decile;
  fprintf(stderr, "%s %3d%% loss %.4f%s %.0f %s ETA %s%s\n", p->label, (int)(frac * 100),
          loss, accs, rate, p->unit, eta, p->extra ? p->extra : "");
}

void tg_progress_end(tg_progress *p) {
  if (p->tty) fputc('\n', stderr);
}
