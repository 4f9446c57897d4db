/*
 * taskgrad train gpt: trains a GPT-2 model (llm.c checkpoint and token
 * formats) as a StarPU task graph.
 *
 * Each step prints "step N loss X.XXXXXX" with the step's time and tokens/s
 * (reading the loss waits for the step: that is the only host wait per
 * step).  With no --init-from and no --data it is a demonstration: the KJV
 * token files are prepared if missing, a small model is initialised and
 * trained (about 9 minutes on 2 cores) with a progress bar, and a sample is printed.
 *
 * tg_cmd_train_gpt runs named steps: setting up (train_gpt_setup.c: model,
 * data, StarPU and the graph, loaders), the training loop, stopping on a
 * signal or finishing (validation, summary, --save, --sample), teardown.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "taskgrad/checkpoint.h"
#include "taskgrad/gpt.h"
#include "taskgrad/parallel.h"
#include "taskgrad/safetensors.h"
#include "gpt_run_options.h"
#include "train_gpt.h"

static void gpt_usage(void) {
  fputs("usage: taskgrad train gpt [flags]\n"
       "\n"
       "Trains a GPT-2 model (llm.c formats) and prints 'step N loss X' per step.\n"
       "With neither --init-from nor --data: prepares the KJV data (Debian's\n"
       "bible-kjv) if missing, trains a small byte-level model and prints a\n"
       "sample: about 9 minutes on 2 CPU cores (525 s measured on a shared\n"
       "2-core machine), less with more cores.\n"
       "\n"
       "  --init-from FILE     llm.c GPT-2 checkpoint (version 3, fp32), or a\n"
       "                       Hugging Face GPT-2: a .safetensors file with its\n"
       "                       config.json beside it, or a folder holding both\n"
       "  --data FILE          llm.c token file for training\n"
       "  --val FILE           token file for validation\n"
       "  --steps N            optimizer steps (default 20)\n"
       "  --lr X               learning rate (default 3e-4)\n"
       "  --lr-schedule NAME   constant or cosine (default constant)\n"
       "  --warmup N           linear warm-up steps for cosine (default 0)\n"
       "  --beta1 X, --beta2 X, --eps X, --weight-decay X\n"
       "                       AdamW (defaults 0.9, 0.999, 1e-8, 0.0)\n"
       "  --data-order NAME    sequential or shuffled (default sequential)\n"
       "  --seed S             shuffling and sampling seed (default 1)\n"
       "  --save FILE          write the trained model (llm.c format; a name\n"
       "                       ending in .safetensors: Hugging Face GPT-2 names,\n"
       "                       and config.json beside it, never over a foreign one)\n"
       "  --checkpoint DIR     write DIR/checkpoint.bin (model, AdamW state, data\n"
       "                       position, seeds) every --checkpoint-every steps, at\n"
       "                       the end and on SIGINT/SIGTERM; DIR is created; one\n"
       "                       that holds a checkpoint needs --resume DIR\n"
       "  --checkpoint-every N checkpoint interval in steps (default: only at the\n"
       "                       end and on a signal)\n"
       "  --resume DIR         continue the run saved in DIR/checkpoint.bin: model,\n"
       "                       AdamW state and step, data position, order and seed;\n"
       "                       --steps counts the whole run, so it stops where an\n"
       "                       uninterrupted run would.  With --init-from FILE too,\n"
       "                       one command line serves the first run and every\n"
       "                       restart: no checkpoint in DIR yet starts from FILE,\n"
       "                       and a checkpoint must match FILE's model shape\n"
       "  --sample N           print N generated tokens (as bytes) at the end\n"
       "  --temperature X      sampling temperature (default 1; 0.7 in the\n"
       "                       demonstration)\n"
       "  --val-every N        validation loss every N steps (default: at the end\n"
       "                       when --val is given)\n"
       "  --val-batches N      batches per validation (default 10)\n"
       "  --log-every N        print every N-th step line (default 1)\n"
       "\n"
       "GPT run options (as in bench gpt and simulate gpt):\n",
        stdout);
  tg_cli_gpt_run_help(stdout, TG_RUN_TRAIN_GPT, 0);
  puts("  -h, --help           this text\n"
       "\n"
       "SIGINT/SIGTERM: the current step finishes, a checkpoint is written when\n"
       "--checkpoint is given, and the exit status is 130/143; after training,\n"
       "validation, --save and --sample stop at their next batch, slice or token\n"
       "(an unfinished --save leaves no file).  A second signal ends the process\n"
       "at once.  A non-finite loss stops the run (exit status 2) without writing\n"
       "a checkpoint.  No output may replace an input or another output.\n"
       "\n"
       "Under mpirun, every rank takes an equal part of each global --batch\n"
       "(--batch and --micro-batches must be multiples of the number of ranks)\n"
       "and gradients are summed over the ranks; rank 0 prints\n"
       "and writes files (--save, --checkpoint).\n"
       "\n"
       "Bad flags or files: one message on stderr, exit status 2.");
}

static void parse(int argc, char **argv, gpt_opts *o) {
  memset(o, 0, sizeof *o);
  tg_cli_gpt_run_default(&o->run, TG_RUN_TRAIN_GPT);
  o->steps = 20;
  o->val_batches = 10;
  o->log_every = 1;
  o->temperature = -1;
  o->opt = tg_optimizer_default(TG_OPT_ADAMW);
  o->opt.lr = 3e-4f;
  o->opt.weight_decay = 0.0f;
  o->seed = 1;
  int steps_given = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define VAL tg_cli_value(argc, argv, &i)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      gpt_usage();
      exit(0);
    } else if (tg_cli_gpt_run_flag(argc, argv, &i, TG_RUN_TRAIN_GPT, &o->run)) continue;
    else if (!strcmp(a, "--init-from")) o->init_from = VAL;
    else if (!strcmp(a, "--data")) o->data = VAL;
    else if (!strcmp(a, "--val")) o->val = VAL;
    else if (!strcmp(a, "--save")) o->save = VAL;
    else if (!strcmp(a, "--checkpoint")) o->checkpoint = VAL;
    else if (!strcmp(a, "--checkpoint-every"))
      o->checkpoint_every = (int)tg_cli_int(a, VAL, 1, 1 << 30);
    else if (!strcmp(a, "--resume")) o->resume = VAL;
    else if (!strcmp(a, "--steps")) o->steps = (int)tg_cli_int(a, VAL, 0, 1 << 30), steps_given = 1;
    else if (!strcmp(a, "--lr")) o->opt.lr = (float)tg_cli_double(a, VAL, 0, 10);
    else if (!strcmp(a, "--lr-schedule")) {
      const char *v = VAL;
      if (!strcmp(v, "cosine")) o->cosine = 1;
      else if (strcmp(v, "constant")) tg_cli_die("--lr-schedule: '%s' is not constant or cosine", v);
    } else if (!strcmp(a, "--warmup")) o->warmup = (int)tg_cli_int(a, VAL, 0, 1 << 30);
    else if (!strcmp(a, "--beta1")) o->opt.beta1 = (float)tg_cli_double(a, VAL, 0, 0.999999);
    else if (!strcmp(a, "--beta2")) o->opt.beta2 = (float)tg_cli_double(a, VAL, 0, 0.999999);
    else if (!strcmp(a, "--eps")) o->opt.eps = (float)tg_cli_double(a, VAL, 0, 1);
    else if (!strcmp(a, "--weight-decay")) o->opt.weight_decay = (float)tg_cli_double(a, VAL, 0, 10);
    else if (!strcmp(a, "--data-order")) {
      const char *v = VAL;
      o->order_given = 1;
      if (!strcmp(v, "shuffled")) o->shuffled = 1;
      else if (strcmp(v, "sequential")) tg_cli_die("--data-order: '%s' is not sequential or shuffled", v);
    } else if (!strcmp(a, "--seed")) o->seed = tg_cli_u64(a, VAL), o->seed_given = 1;
    else if (!strcmp(a, "--sample")) o->sample = (int)tg_cli_int(a, VAL, 0, 1 << 20);
    else if (!strcmp(a, "--temperature")) o->temperature = tg_cli_double(a, VAL, 0.01, 100);
    else if (!strcmp(a, "--val-every")) o->val_every = (int)tg_cli_int(a, VAL, 1, 1 << 30);
    else if (!strcmp(a, "--val-batches")) o->val_batches = (int)tg_cli_int(a, VAL, 1, 1 << 20);
    else if (!strcmp(a, "--log-every")) o->log_every = (int)tg_cli_int(a, VAL, 1, 1 << 30);
    else tg_cli_die("unknown flag '%s' for 'train gpt' (see --help)", a);
#undef VAL
  }
  tg_cli_gpt_run_finish(&o->run, TG_RUN_TRAIN_GPT);
  int given_shape = o->run.batch_given || o->run.seq_given || steps_given;
  if (!(o->init_from || o->resume) != !o->data)
    tg_cli_die("give both --init-from and --data (or --resume and --data, or neither, for the "
               "KJV demonstration)");
  if (o->checkpoint_every && !o->checkpoint)
    tg_cli_die("--checkpoint-every needs --checkpoint DIR");
  o->demo = !o->init_from && !o->resume;
  if (o->demo && !given_shape) {
    /* a small byte-level model that learns English-looking words in minutes */
    o->run.cfg.B = 16;
    o->run.cfg.T = 128;
    o->steps = 1500;
    o->opt.lr = 1e-3f;
    o->cosine = 1;
    o->warmup = 50;
    o->log_every = 100;
    if (!o->sample) o->sample = 400;
    if (o->temperature < 0) o->temperature = 0.7;
  }
  if (o->temperature < 0) o->temperature = 1.0;
}

/* FNV-1a over the parameters' bytes: equal on every rank when the replicas
 * are bitwise identical. */
static uint64_t params_checksum(tg_gpt *g, const tg_gpt_config *cfg) {
  size_t sizes[TG_GPT_NPARAMS], n = tg_gpt_param_sizes(cfg, sizes);
  float *p = malloc(n * sizeof *p);
  if (!p) tg_cli_die("out of memory for the checksum");
  if (tg_gpt_read_params(g, p) < 0) tg_cli_die_last("reading the parameters");
  uint64_t h = 0xcbf29ce484222325ULL;
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n * sizeof *p; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  free(p);
  return h;
}

/* a checkpoint record's piece: one slice of the model's state */
static int checkpoint_slice(void *ctx, int p, int kind, size_t offset, float *dst, size_t n) {
  return tg_gpt_read_slice(ctx, kind, (tg_gpt_param)p, (int)(offset / n), dst);
}

/* Writes the training state after `batches` training batches, streamed
 * slice by slice from the model (never a second copy of it in memory). */
static void save_checkpoint(tg_gpt *g, const gpt_opts *o, long long batches) {
  tg_checkpoint c = {.cfg = g->cfg};
  /* the run's steps: AdamW's count plus the steps an overflow skipped */
  c.step = g->optim.step + g->optim.scaler.skipped;
  c.batches = batches;
  c.B = o->run.cfg.B;
  c.T = o->run.cfg.T;
  c.data_order = o->shuffled;
  c.data_seed = o->seed;
  c.rng_seed = o->seed;
  c.scaler = tg_cli_scaler_state(&g->optim.scaler);
  if (tg_checkpoint_save_from(o->checkpoint, &c, checkpoint_slice, g) < 0)
    tg_cli_die_last("--checkpoint");
}

static float lr_at(const gpt_opts *o, int step) {
  if (!o->cosine) return o->opt.lr;
  if (step < o->warmup) return o->opt.lr * (float)(step + 1) / (float)o->warmup;
  int span = o->steps - o->warmup;
  double frac = span > 0 ? (double)(step - o->warmup) / span : 1.0;
  return (float)(o->opt.lr * 0.5 * (1.0 + cos(M_PI * frac)));
}

/* The validation loss over nbatches batches; returns 1 without one when a
 * signal stops it between two batches. */
static int validate(tg_gpt *g, tg_loader *vl, int nbatches, int R, double *loss) {
  if (tg_gpt_loss(g, NULL, 1) < 0) tg_cli_die_last("resetting the loss");
  int nb = tg_loader_batches_per_epoch(vl);
  if (nbatches > nb) nbatches = nb;
  for (int k = 0; k < nbatches; k++) {
    if (tg_cli_signalled(R)) return 1;
    tg_batch b;
    if (tg_loader_next(vl, &b) < 0) tg_cli_die_last("validation data");
    if (tg_gpt_evaluate(g, &b) < 0) tg_cli_die_last("validation");
  }
  if (tg_gpt_loss(g, loss, 1) < 0) tg_cli_die_last("validation loss");
  return 0;
}

/* Samples n tokens after a newline, from the softmax over the first V
 * logits divided by the temperature, with a seeded generator; a signal
 * stops it between two tokens. */
static void sample(tg_gpt *g, int n, int T, double temperature, uint64_t seed) {
  const tg_gpt_config *c = &g->cfg;
  int32_t *ctx = malloc(sizeof(int32_t) * (size_t)(n + 1));
  float *logits = malloc(sizeof(float) * (size_t)T * c->padded_vocab_size);
  if (!ctx || !logits) tg_cli_die("out of memory for sampling");
  ctx[0] = c->vocab_size > '\n' ? '\n' : 0;
  uint64_t s = seed ^ 0x5DEECE66DULL;
  fputs("sample:\n", stdout);
  for (int i = 1; i <= n && !tg_cli_signal; i++) {
    int len = i < T ? i : T;
    tg_tensor tok;
    if (tg_tensor_alloc(&tok, len, 1, TG_I32) < 0) tg_cli_die_last("sampling");
    memcpy(tok.host, ctx + i - len, sizeof(int32_t) * len);
    if (tg_gpt_logits(g, &tok, len, logits) < 0) tg_cli_die_last("sampling");
    tg_tensor_free(&tok);
    const float *row = logits + (size_t)(len - 1) * c->padded_vocab_size;
    double mx = row[0], sum = 0;
    for (int v = 1; v < c->vocab_size; v++) mx = row[v] > mx ? row[v] : mx;
    for (int v = 0; v < c->vocab_size; v++) sum += exp((row[v] - mx) / temperature);
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = (double)(s >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    int pick = c->vocab_size - 1;
    for (int v = 0; v < c->vocab_size; v++) {
      acc += exp((row[v] - mx) / temperature);
      if (acc > u) {
        pick = v;
        break;
      }
    }
    ctx[i] = pick;
    if (c->vocab_size <= 256) putchar(pick);
    else printf("%d ", pick);
    fflush(stdout); /* a token at a time, as it comes */
  }
  putchar('\n');
  free(ctx);
  free(logits);
}

/* The training steps from s->start to --steps, or until a signal: returns
 * the signal (0 when none), with *step the steps done and *batches the
 * training batches consumed. */
static int train_loop(gpt_session *s, tg_progress *bar, int *step, long long *batches) {
  const gpt_opts *o = &s->o;
  tg_gpt *g = &s->g;
  int root = s->root;
  double tokens_per_step = (double)o->run.cfg.B * o->run.cfg.T, last_loss = 0;
  for (*step = s->start; *step < o->steps; (*step)++) {
    int k = *step; /* 0-based index of this step */
    double t0 = tg_cli_now();
    tg_batch b;
    if (tg_loader_next(s->ld, &b) < 0) tg_cli_die_last("training data");
    (*batches)++;
    if (tg_gpt_step(g, &b, lr_at(o, k)) < 0) tg_cli_die_last("training step");
    if (tg_gpt_loss(g, &last_loss, 1) < 0) tg_cli_die_last("reading the loss");
    double dt = tg_cli_now() - t0;
    /* the loss is the global batch's: the same on every rank */
    if (!isfinite(last_loss)) {
      if (root) fprintf(stderr, "taskgrad: error: the loss is not finite at step %d\n", k + 1);
      tg_dist_abort(TG_EXIT_USAGE);
    }
    char scale[64];
    tg_cli_precision_status(scale, sizeof scale, &g->optim.scaler);
    if (root && ((k + 1) % o->log_every == 0 || k == 0 || k + 1 == o->steps))
      printf(tg_deterministic() ? "step %d loss %.9g (%.1f ms, %.0f tokens/s)%s\n"
                                 : "step %d loss %.6f (%.1f ms, %.0f tokens/s)%s\n",
             k + 1, last_loss, dt * 1e3, tokens_per_step / dt, scale);
    fflush(stdout);
    if (o->demo && root) {
      bar->extra = scale;
      tg_progress_update(bar, k + 1, last_loss, -1, tokens_per_step / dt);
    }
    double v;
    if (s->vl && o->val_every && (k + 1) % o->val_every == 0 &&
        !validate(g, s->vl, o->val_batches, s->R, &v) && root)
      printf("step %d val loss %.6f\n", k + 1, v);
    /* ranks get a signal at different moments: they stop after the same step */
    tg_cli_signalled(s->R);
    if (root && o->checkpoint && o->checkpoint_every && (k + 1) % o->checkpoint_every == 0 &&
        k + 1 < o->steps && !tg_cli_signal)
      save_checkpoint(g, o, *batches);
    if (tg_cli_signal) {
      (*step)++;
      return tg_cli_signal;
    }
  }
  return 0;
}

/* a slice of the parameters, for the streamed llm.c writer; a signal
 * abandons the file between two slices (its temporary removed, a previous
 * file at the path untouched) */
static int param_slice(void *ctx, int p, size_t off, float *dst, size_t n) {
  if (tg_cli_signal) return tg_fail(EINTR, "interrupted by a signal");
  return checkpoint_slice(ctx, p, TG_GPT_STATE_VALUE, off, dst, n);
}

/* Saves the trained parameters: FILE.safetensors with Hugging Face GPT-2
 * names, anything else in llm.c's format, both streamed slice by slice from
 * the model (never a second copy of it in memory). */
static void save_model(gpt_session *s) {
  const char *path = s->o.save;
  size_t len = strlen(path);
  int st = len > 12 && !strcmp(path + len - 12, ".safetensors");
  if ((st ? tg_safetensors_write_gpt2_from(path, &s->cfg, param_slice, &s->g)
          : tg_llmc_model_write_from(path, &s->cfg, param_slice, &s->g)) < 0) {
    if (tg_cli_signal) {
      fprintf(stderr, "taskgrad: %s not written (interrupted)\n", path);
      return;
    }
    tg_cli_die_last("--save");
  }
  fprintf(stderr, "taskgrad: saved %s\n", path);
}

/* After the last step: the final validation, the summary, the parameters'
 * checksum, --save and --sample.  Returns 0, or the exit status when a
 * signal stopped one of them (each phase stops at its next safe point). */
static int finish_run(gpt_session *s, double t_train) {
  const gpt_opts *o = &s->o;
  tg_gpt *g = &s->g;
  int root = s->root;
  if (s->vl && (!o->val_every || o->steps % o->val_every)) {
    double v;
    if (validate(g, s->vl, o->val_batches, s->R, &v)) return tg_cli_interrupted("validation");
    if (root) printf("val loss %.6f\n", v);
  }
  double tokens_per_step = (double)o->run.cfg.B * o->run.cfg.T;
  if (root)
    fprintf(stderr, "taskgrad: %d steps in %.1f s (%.0f tokens/s)\n", o->steps - s->start,
            t_train, (o->steps - s->start) * tokens_per_step / (t_train > 0 ? t_train : 1));
  if (root && g->optim.scaler.enabled)
    fprintf(stderr, "taskgrad: %s, loss scale %g, skipped steps: %ld\n",
            tg_precision_name(o->run.prec.precision), g->optim.scaler.scale,
            g->optim.scaler.skipped);
  if (s->R > 1 || tg_deterministic())
    fprintf(stderr, "taskgrad: rank %d parameters fnv1a64 %016llx\n", tg_dist_rank(),
            (unsigned long long)params_checksum(g, &s->cfg));
  if (tg_cli_signalled(s->R)) return tg_cli_interrupted("the summary");
  if (o->save && root) save_model(s);
  if (tg_cli_signal) return tg_cli_interrupted(o->save ? "--save" : "the summary");
  if (o->sample && root) sample(g, o->sample, o->run.cfg.T, o->temperature, o->seed);
  return tg_cli_interrupted("sampling");
}

int tg_cmd_train_gpt(int argc, char **argv) {
  gpt_session session;
  gpt_session *s = &session;
  memset(s, 0, sizeof *s);
  gpt_opts *o = &s->o;
  parse(argc, argv, o);
  s->distributed = tg_cli_mpi_check(&o->run.rt);
  tg_cli_instrument_check(&o->run.rt);
  gpt_setup_model(s);
  gpt_setup_data(s);
  gpt_build_model(s);
  gpt_open_loaders(s);

  tg_progress bar;
  if (o->demo && s->root) {
    tg_progress_begin(&bar, "training", o->steps);
    bar.unit = "tokens/s";
  }
  double t_all = tg_cli_now();
  /* after StarPU's own handlers (tg_init), which would end the process */
  tg_cli_catch_signals();
  long long batches = s->start_batch;
  int step = 0;
  int stopped = train_loop(s, &bar, &step, &batches);
  if (stopped) {
    if (o->demo && s->root) tg_progress_end(&bar);
    if (o->checkpoint && s->root) save_checkpoint(&s->g, o, batches);
    if (s->root)
      fprintf(stderr, "taskgrad: %s: stopped after step %d%s%s\n",
              stopped == SIGINT ? "SIGINT" : "SIGTERM", step,
              o->checkpoint ? "; checkpoint written to " : " (no --checkpoint: state not saved)",
              o->checkpoint ? o->checkpoint : "");
    gpt_teardown(s);
    return 128 + stopped;
  }
  if (o->checkpoint && s->root) save_checkpoint(&s->g, o, batches);
  if (o->demo && s->root) tg_progress_end(&bar);
  /* a signal during the final checkpoint: it is written, then the run stops */
  int rc = tg_cli_signalled(s->R) ? tg_cli_interrupted(o->checkpoint ? "the final checkpoint (written)"
                                                               : "the last step")
                           : finish_run(s, tg_cli_now() - t_all);
  gpt_teardown(s);
  return rc;
}
