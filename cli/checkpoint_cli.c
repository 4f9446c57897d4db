/*
 * What `train gpt` and `train mlp` share around checkpoints: the
 * --checkpoint directory, created and checked before any work (writable,
 * the temporaries of killed writers removed, and no checkpoint there that
 * this run would overwrite without continuing it); the SIGINT/SIGTERM
 * handler that only records the signal, so that the run finishes the step
 * in progress, writes a checkpoint and stops at the next safe point of
 * whatever phase it is in (a handler cannot do that itself: the state lives
 * in StarPU's buffers), while a second signal ends the process at once;
 * signals forwarded to a child the command waits for; and the loss scaler's
 * state as checkpoints store it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "taskgrad/parallel.h"

volatile sig_atomic_t tg_cli_signal = 0;

/* The first SIGINT/SIGTERM is recorded; a second one (either) gets the
 * default action: the user who presses Ctrl-C twice does not wait for the
 * checkpoint.  Whatever is half written then is a temporary file that the
 * next run removes (tg_atomic_remove_stale); the previous file stays. */
static void on_signal(int sig) {
  if (tg_cli_signal) {
    signal(sig, SIG_DFL);
    raise(sig); /* delivered when the handler returns */
    return;
  }
  tg_cli_signal = sig;
}

static void handle_signals(void (*fn)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
    tg_cli_die("cannot install the SIGINT/SIGTERM handler: %s", strerror(errno));
}

void tg_cli_catch_signals(void) { handle_signals(on_signal); }

int tg_cli_signalled(int ranks) {
  if (ranks > 1 && !tg_dist_all_ok(!tg_cli_signal) && !tg_cli_signal) tg_cli_signal = SIGTERM;
  return tg_cli_signal != 0;
}

int tg_cli_interrupted(const char *phase) {
  int sig = tg_cli_signal;
  if (!sig) return 0;
  if (phase && tg_cli_is_root())
    fprintf(stderr, "taskgrad: %s: stopped during %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            phase);
  return 128 + sig;
}

void tg_cli_end_on_signals(void) {
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
}

static volatile sig_atomic_t forward_to;
static void forward(int sig) {
  if (forward_to > 0) kill((pid_t)forward_to, sig);
  tg_cli_signal = sig;
}

void tg_cli_forward_signals(pid_t child) {
  forward_to = child > 0 ? child : 0;
  if (child > 0) {
    handle_signals(forward);
    return;
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  /* the child is gone: this process ends as it would have */
  if (tg_cli_signal) exit(128 + tg_cli_signal);
}

/* 1 when a and b are the same directory */
static int same_dir(const char *a, const char *b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void tg_cli_checkpoint_dir(const char *dir, const char *resume, const char *file,
                           int (*exists)(const char *dir)) {
  if (tg_make_dirs(dir) != 0) tg_cli_die("--checkpoint: %s", tg_last_error());
  if (access(dir, W_OK | X_OK) != 0)
    tg_cli_die("--checkpoint: cannot write into directory '%s'", dir);
  int have = exists(dir);
  if (have < 0) tg_cli_die_last("--checkpoint");
  if (have && !(resume && same_dir(dir, resume)))
    tg_cli_die("--checkpoint %s already holds a checkpoint (%s/%s) that this run would "
               "overwrite: give --resume %s to continue it, or remove it or choose another "
               "directory", dir, dir, file, dir);
  int removed = tg_checkpoint_remove_stale(dir);
  if (removed < 0) tg_cli_die_last("--checkpoint");
  if (removed)
    fprintf(stderr, "taskgrad: removed %d temporary file%s of killed runs from %s\n", removed,
            removed > 1 ? "s" : "", dir);
}

tg_loss_scaler_state tg_cli_scaler_state(const tg_loss_scaler *s) {
  if (!s->enabled) return (tg_loss_scaler_state){.scale = 1.0f};
  return (tg_loss_scaler_state){.scale = s->scale, .window = s->window,
                                .clean_steps = s->clean, .skipped_steps = s->skipped};
}

void tg_cli_scaler_restore(tg_loss_scaler *s, const tg_loss_scaler_state *st) {
  if (!s->enabled || st->window <= 0) return; /* saved without scaling */
  /* the resumed run goes on with the scale the interrupted one had; the
   * window is the command line's */
  s->scale = st->scale;
  s->clean = (int)st->clean_steps;
  s->skipped = (long)st->skipped_steps;
}
