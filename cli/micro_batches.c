/*
 * --micro-batches auto (see micro_batches.h).
 *
 * Design note: micro-batches are what spreads one step over several
 * workers (each is an independent chain of tasks), so one micro-batch per
 * worker fills them; more would only shrink the GEMMs.  Under MPI every
 * rank must use the same count (the gradient tree and the loaders assume
 * it), so the count is the largest one every rank accepts, found with one
 * agreement per candidate (the candidates are the same on every rank: they
 * depend on the batch only).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "micro_batches.h"
#include "taskgrad/parallel.h"
#include "taskgrad/runtime.h"

int tg_cli_micro_batches_arg(const char *flag, const char *text, int max) {
  if (!strcmp(text, "auto")) return 0;
  if (!*text || strspn(text, "0123456789") != strlen(text))
    tg_cli_die("%s: '%s' is neither a count nor 'auto'", flag, text);
  return (int)tg_cli_int(flag, text, 1, max);
}

void tg_cli_check_gpt_micro(int batch, int micro, int attn_splits) {
  if (batch % micro) tg_cli_die("--micro-batches %d does not divide --batch %d", micro, batch);
  if (attn_splits && (batch / micro) % attn_splits)
    tg_cli_die("--attn-splits %d does not divide the %d sequences of a micro-batch", attn_splits,
               batch / micro);
}

int tg_cli_auto_micro_batches(int batch, int nranks, int must_divide, int min_size) {
  int part = batch / nranks;
  int workers = tg_ncpu_workers() + tg_ncuda_workers() + tg_nopencl_workers();
  if (workers < 1) workers = 1;
  int chosen = 1;
  for (int m = part; m > 1; m--) {
    if ((must_divide && part % m) || part / m < min_size) continue;
    /* collective when distributed: every rank tries the same m in turn */
    if (tg_dist_all_ok(m <= workers)) {
      chosen = m;
      break;
    }
  }
  const char *unit = must_divide ? "sequences" : "samples";
  if (tg_cli_is_root() && nranks > 1)
    fprintf(stderr, "taskgrad: --micro-batches auto: %d (%d per rank: %d workers, %d %s)\n",
            chosen * nranks, chosen, workers, part, unit);
  else if (tg_cli_is_root())
    fprintf(stderr, "taskgrad: --micro-batches auto: %d (%d workers, batch of %d %s)\n", chosen,
            workers, part, unit);
  return chosen * nranks;
}

int tg_cli_gpt_auto_micro_batches(int batch, int T, int C, tg_precision precision,
                                  int nranks) {
  int w = tg_ncpu_workers(), min_seqs = 1;
  if (!tg_precision_lowp(precision) && tg_ncuda_workers() + tg_nopencl_workers() == 0 &&
      w <= 4 && C / 32 >= w)
    min_seqs = (TG_GPT_AUTO_MIN_ROWS + T - 1) / T;
  if (min_seqs > 1 && tg_cli_is_root())
    fprintf(stderr, "taskgrad: --micro-batches auto: f32 activations on CPU workers, %d rows (%d "
            "sequences of %d tokens) or more per micro-batch where the batch allows\n",
            TG_GPT_AUTO_MIN_ROWS, min_seqs, T);
  return tg_cli_auto_micro_batches(batch, nranks, 1, min_seqs);
}
