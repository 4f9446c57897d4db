/*
 * What `train gpt` and `train mlp` share around checkpoints: the
 * --checkpoint directory, created and checked before any work, and the
 * SIGINT/SIGTERM handler that only records the signal, so that the training
 * loop finishes the step in progress and writes a checkpoint before exiting
 * (a handler cannot do that itself: the state lives in StarPU's buffers);
 * and the loss scaler's state as checkpoints store it.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

volatile sig_atomic_t tg_cli_signal = 0;

static void on_signal(int sig) { tg_cli_signal = sig; }

void tg_cli_catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
    tg_cli_die("cannot install the SIGINT/SIGTERM handler: %s", strerror(errno));
}

void tg_cli_checkpoint_dir(const char *dir) {
  if (tg_make_dirs(dir) != 0) tg_cli_die("--checkpoint: %s", tg_last_error());
  if (access(dir, W_OK | X_OK) != 0)
    tg_cli_die("--checkpoint: cannot write into directory '%s'", dir);
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
