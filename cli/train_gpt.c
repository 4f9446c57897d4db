/*
 * taskgrad train gpt: trains a GPT-2 model (llm.c checkpoint and token
 * formats) as a StarPU task graph.
 *
 * Each step prints "step N loss X.XXXXXX" with the step's time and tokens/s
 * (reading the loss waits for the step: that is the only host wait per
 * step).  With no --init-from and no --data it is a demonstration: the KJV
 * token files are prepared if missing, a small model is initialised and
 * trained for a few minutes with a progress bar, and a sample is printed.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "taskgrad/checkpoint.h"
#include "taskgrad/dist.h"
#include "taskgrad/gpt.h"
#include "taskgrad/safetensors.h"

typedef struct gpt_opts {
  const char *init_from, *data, *val, *save, *checkpoint, *resume;
  int B, T, steps, micro, warmup, chunk, attn_splits, sample, val_every, val_batches;
  int log_every, cosine, shuffled, checkpoint_every;
  int order_given, seed_given, shape_given[2];
  double temperature;
  tg_attention_kind attention;
  tg_optimizer_config opt;
  uint64_t seed;
  tg_runtime_config rt;
  tg_cli_precision prec;
  int demo;
} gpt_opts;

static void gpt_usage(void) {
  puts("usage: taskgrad train gpt [flags]\n"
       "\n"
       "Trains a GPT-2 model (llm.c formats) and prints 'step N loss X' per step.\n"
       "With neither --init-from nor --data: prepares the KJV data (Debian's\n"
       "bible-kjv) if missing, trains a small byte-level model for a few minutes\n"
       "and prints a sample.\n"
       "\n"
       "  --init-from FILE     llm.c GPT-2 checkpoint (version 3, fp32)\n"
       "  --data FILE          llm.c token file for training\n"
       "  --val FILE           token file for validation\n"
       "  --batch B            sequences per step (default 8)\n"
       "  --seq T              tokens per sequence (default 64, at most the\n"
       "                       model's maxT)\n"
       "  --steps N            optimizer steps (default 20)\n"
       "  --micro-batches M    micro-batches per step, dividing B (default 1)\n"
       "  --lr X               learning rate (default 3e-4)\n"
       "  --lr-schedule NAME   constant or cosine (default constant)\n"
       "  --warmup N           linear warm-up steps for cosine (default 0)\n"
       "  --beta1 X, --beta2 X, --eps X, --weight-decay X\n"
       "                       AdamW (defaults 0.9, 0.999, 1e-8, 0.0)\n"
       "  --attention NAME     naive or chunked (default chunked)\n"
       "  --chunk K            attention chunk (default 64)\n"
       "  --attn-splits S      attention tasks per micro-batch (default: one per\n"
       "                       worker, dividing B/M)\n"
       "  --data-order NAME    sequential or shuffled (default sequential)\n"
       "  --seed S             shuffling and sampling seed (default 1)\n"
       "  --save FILE          write the trained model (llm.c format; a name\n"
       "                       ending in .safetensors: Hugging Face GPT-2 names)\n"
       "  --checkpoint DIR     write DIR/checkpoint.bin (model, AdamW state, data\n"
       "                       position, seeds) every --checkpoint-every steps, at\n"
       "                       the end and on SIGINT/SIGTERM; DIR is created\n"
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
       "  --log-every N        print every N-th step line (default 1)\n" TG_CLI_PRECISION_HELP
       TG_CLI_RUNTIME_HELP
       "  -h, --help           this text\n"
       "\n"
       "SIGINT/SIGTERM: the current step finishes, a checkpoint is written when\n"
       "--checkpoint is given, and the exit status is 130/143.  A non-finite loss\n"
       "stops the run (exit status 2) without writing a checkpoint.\n"
       "\n"
       "Under mpirun, every rank takes an equal part of each global --batch\n"
       "(--batch and --micro-batches must be multiples of the number of ranks,\n"
       "a power of two) and gradients are summed over the ranks; rank 0 prints\n"
       "and writes files (--save, --checkpoint).\n"
       "\n"
       "Bad flags or files: one message on stderr, exit status 2.");
}

static void parse(int argc, char **argv, gpt_opts *o) {
  memset(o, 0, sizeof *o);
  o->B = 8;
  o->T = 64;
  o->steps = 20;
  o->micro = 1;
  o->chunk = 64;
  o->val_batches = 10;
  o->log_every = 1;
  o->temperature = -1;
  o->attention = TG_ATTN_CHUNKED;
  o->opt = tg_optimizer_default(TG_OPT_ADAMW);
  o->opt.lr = 3e-4f;
  o->opt.weight_decay = 0.0f;
  o->seed = 1;
  o->rt = tg_runtime_config_default();
  tg_cli_precision_default(&o->prec);
  int given_shape = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define VAL tg_cli_value(argc, argv, &i)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      gpt_usage();
      exit(0);
    } else if (!strcmp(a, "--init-from")) o->init_from = VAL;
    else if (!strcmp(a, "--data")) o->data = VAL;
    else if (!strcmp(a, "--val")) o->val = VAL;
    else if (!strcmp(a, "--save")) o->save = VAL;
    else if (!strcmp(a, "--checkpoint")) o->checkpoint = VAL;
    else if (!strcmp(a, "--checkpoint-every"))
      o->checkpoint_every = (int)tg_cli_int(a, VAL, 1, 1 << 30);
    else if (!strcmp(a, "--resume")) o->resume = VAL;
    else if (!strcmp(a, "--batch"))
      o->B = (int)tg_cli_int(a, VAL, 1, 1 << 16), given_shape = 1, o->shape_given[0] = 1;
    else if (!strcmp(a, "--seq"))
      o->T = (int)tg_cli_int(a, VAL, 1, 1 << 20), given_shape = 1, o->shape_given[1] = 1;
    else if (!strcmp(a, "--steps")) o->steps = (int)tg_cli_int(a, VAL, 0, 1 << 30), given_shape = 1;
    else if (!strcmp(a, "--micro-batches")) o->micro = (int)tg_cli_int(a, VAL, 1, 1 << 16);
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
    else if (!strcmp(a, "--attention")) {
      const char *v = VAL;
      if (!strcmp(v, "naive")) o->attention = TG_ATTN_NAIVE;
      else if (!strcmp(v, "chunked")) o->attention = TG_ATTN_CHUNKED;
      else tg_cli_die("--attention: '%s' is not naive or chunked", v);
    } else if (!strcmp(a, "--chunk")) o->chunk = (int)tg_cli_int(a, VAL, 1, 1 << 16);
    else if (!strcmp(a, "--attn-splits")) o->attn_splits = (int)tg_cli_int(a, VAL, 1, TG_MAX_SPLIT);
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
    else if (tg_cli_precision_flag(argc, argv, &i, &o->prec)) continue;
    else if (!tg_cli_runtime_flag(argc, argv, &i, &o->rt))
      tg_cli_die("unknown flag '%s' for 'train gpt' (see --help)", a);
#undef VAL
  }
  tg_cli_precision_finish(&o->prec);
  if (o->B % o->micro)
    tg_cli_die("--micro-batches %d does not divide --batch %d", o->micro, o->B);
  if (o->attn_splits && (o->B / o->micro) % o->attn_splits)
    tg_cli_die("--attn-splits %d does not divide the %d sequences of a micro-batch",
               o->attn_splits, o->B / o->micro);
  if (!(o->init_from || o->resume) != !o->data)
    tg_cli_die("give both --init-from and --data (or --resume and --data, or neither, for the "
               "KJV demonstration)");
  if (o->checkpoint_every && !o->checkpoint)
    tg_cli_die("--checkpoint-every needs --checkpoint DIR");
  o->demo = !o->init_from && !o->resume;
  if (o->demo && !given_shape) {
    /* a small byte-level model that learns English-looking words in minutes */
    o->B = 16;
    o->T = 128;
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

/* An existing file we can read, checked before any work. */
static void need_file(const char *flag, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
    tg_cli_die("%s: '%s' is not a readable file", flag, path);
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

/* Writes the training state after `batches` training batches. */
static void save_checkpoint(tg_gpt *g, const gpt_opts *o, long long batches) {
  tg_checkpoint c;
  if (tg_checkpoint_alloc(&c, &g->cfg) < 0) tg_cli_die_last("--checkpoint");
  int step = 0;
  if (tg_gpt_read_state(g, c.params, c.m, c.v, &step) < 0) tg_cli_die_last("--checkpoint");
  /* the run's steps: AdamW's count plus the steps an overflow skipped */
  c.step = step + g->optim.scaler.skipped;
  c.batches = batches;
  c.B = o->B;
  c.T = o->T;
  c.data_order = o->shuffled;
  c.data_seed = o->seed;
  c.rng_seed = o->seed;
  c.scaler = tg_cli_scaler_state(&g->optim.scaler);
  if (tg_checkpoint_save(o->checkpoint, &c) < 0) tg_cli_die_last("--checkpoint");
  tg_checkpoint_free(&c);
}

static float lr_at(const gpt_opts *o, int step) {
  if (!o->cosine) return o->opt.lr;
  if (step < o->warmup) return o->opt.lr * (float)(step + 1) / (float)o->warmup;
  int span = o->steps - o->warmup;
  double frac = span > 0 ? (double)(step - o->warmup) / span : 1.0;
  return (float)(o->opt.lr * 0.5 * (1.0 + cos(M_PI * frac)));
}

static double validate(tg_gpt *g, tg_loader *vl, int nbatches) {
  double loss;
  if (tg_gpt_loss(g, NULL, 1) < 0) tg_cli_die_last("resetting the loss");
  int nb = tg_loader_batches_per_epoch(vl);
  if (nbatches > nb) nbatches = nb;
  for (int k = 0; k < nbatches; k++) {
    tg_batch b;
    if (tg_loader_next(vl, &b) < 0) tg_cli_die_last("validation data");
    if (tg_gpt_evaluate(g, &b) < 0) tg_cli_die_last("validation");
  }
  if (tg_gpt_loss(g, &loss, 1) < 0) tg_cli_die_last("validation loss");
  return loss;
}

/* Samples n tokens after a newline, from the softmax over the first V
 * logits divided by the temperature, with a seeded generator. */
static void sample(tg_gpt *g, int n, int T, double temperature, uint64_t seed) {
  const tg_gpt_config *c = &g->cfg;
  int32_t *ctx = malloc(sizeof(int32_t) * (size_t)(n + 1));
  float *logits = malloc(sizeof(float) * (size_t)T * c->padded_vocab_size);
  if (!ctx || !logits) tg_cli_die("out of memory for sampling");
  ctx[0] = c->vocab_size > '\n' ? '\n' : 0;
  uint64_t s = seed ^ 0x5DEECE66DULL;
  fputs("sample:\n", stdout);
  for (int i = 1; i <= n; i++) {
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
  }
  putchar('\n');
  free(ctx);
  free(logits);
}

static void demo_prepare(gpt_opts *o, char *train, char *val, size_t len) {
  const char *cache = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  char dir[3000];
  if (cache) snprintf(dir, sizeof dir, "%s/taskgrad/kjv", cache);
  else snprintf(dir, sizeof dir, "%s/.cache/taskgrad/kjv", home ? home : ".");
  snprintf(train, len, "%s/kjv_train.bin", dir);
  snprintf(val, len, "%s/kjv_val.bin", dir);
  struct stat st;
  if (stat(train, &st) != 0 || stat(val, &st) != 0) {
    fprintf(stderr, "taskgrad: preparing the KJV token files in %s\n", dir);
    char *argv[] = {"kjv", "--out", dir, NULL};
    if (tg_cmd_prepare_kjv(3, argv) != 0) exit(TG_EXIT_USAGE);
  }
  o->data = train;
  o->val = val;
}

/* --resume DIR: 1 when DIR holds a checkpoint to continue from; 0 when it
 * holds none yet and --init-from names the start (a requeued job's first
 * run); exits 2 otherwise. */
static int resume_from_checkpoint(const gpt_opts *o) {
  int have = tg_checkpoint_exists(o->resume);
  if (have < 0) tg_cli_die_last("--resume");
  if (!have && !o->init_from)
    tg_cli_die("--resume %s: no checkpoint there yet; give --init-from FILE too, to start "
               "the run from FILE when there is none", o->resume);
  return have;
}

/* A checkpoint continues the run that --init-from started: same model. */
static void check_same_model(const char *init_from, const tg_gpt_config *ck) {
  need_file("--init-from", init_from);
  tg_gpt_config cfg;
  float *params = NULL;
  if (tg_llmc_model_read(init_from, &cfg, &params) < 0) tg_cli_die_last("--init-from");
  free(params);
  if (memcmp(&cfg, ck, sizeof cfg))
    tg_cli_die("--init-from %s (L=%d C=%d NH=%d V=%d Vp=%d T=%d) is not the model of the "
               "checkpoint in the --resume directory (L=%d C=%d NH=%d V=%d Vp=%d T=%d)",
               init_from, cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size,
               cfg.padded_vocab_size, cfg.max_seq_len, ck->num_layers, ck->channels,
               ck->num_heads, ck->vocab_size, ck->padded_vocab_size, ck->max_seq_len);
}

int tg_cmd_train_gpt(int argc, char **argv) {
  gpt_opts o;
  parse(argc, argv, &o);
  int distributed = tg_cli_mpi_check(&o.rt);
  tg_cli_instrument_check(&o.rt);
  char train_path[4096], val_path[4096];
  tg_gpt_config cfg;
  float *params = NULL;
  tg_checkpoint ck;
  int have_ck = 0;
  memset(&ck, 0, sizeof ck);
  if (o.resume && !resume_from_checkpoint(&o)) {
    /* the first run of a requeued job: nothing saved yet */
    fprintf(stderr, "taskgrad: no checkpoint in %s yet: starting from %s\n", o.resume,
            o.init_from);
    o.resume = NULL;
  }
  if (o.demo) {
    demo_prepare(&o, train_path, val_path, sizeof train_path);
    cfg = (tg_gpt_config){256, 256, 4, 4, 128, 256};
    size_t sizes[TG_GPT_NPARAMS];
    params = malloc(sizeof(float) * tg_gpt_param_sizes(&cfg, sizes));
    if (!params) tg_cli_die("out of memory");
    tg_gpt_init_params(&cfg, o.seed, params);
    fprintf(stderr, "taskgrad: demonstration: L=%d C=%d NH=%d, byte-level KJV, %d steps "
            "of %d x %d tokens\n", cfg.num_layers, cfg.channels, cfg.num_heads, o.steps, o.B, o.T);
  } else if (o.resume) {
    need_file("--data", o.data);
    if (o.val) need_file("--val", o.val);
    if (tg_checkpoint_load(o.resume, &ck) < 0) tg_cli_die_last("--resume");
    have_ck = 1;
    cfg = ck.cfg;
    if (o.init_from) check_same_model(o.init_from, &cfg);
    /* the data sequence continues only with the same shape, order and seed */
    if (o.shape_given[0] && o.B != ck.B)
      tg_cli_die("--batch %d disagrees with the checkpoint's %d", o.B, ck.B);
    if (o.shape_given[1] && o.T != ck.T)
      tg_cli_die("--seq %d disagrees with the checkpoint's %d", o.T, ck.T);
    if (o.order_given && o.shuffled != ck.data_order)
      tg_cli_die("--data-order %s disagrees with the checkpoint's %s",
                 o.shuffled ? "shuffled" : "sequential", ck.data_order ? "shuffled" : "sequential");
    if (o.seed_given && o.seed != ck.data_seed)
      tg_cli_die("--seed %llu disagrees with the checkpoint's %llu", (unsigned long long)o.seed,
                 (unsigned long long)ck.data_seed);
    if (ck.step > o.steps)
      tg_cli_die("--steps %d: the checkpoint is already at step %lld", o.steps, ck.step);
    o.B = ck.B;
    o.T = ck.T;
    o.shuffled = ck.data_order;
    o.seed = ck.data_seed;
    if (o.B % o.micro)
      tg_cli_die("--micro-batches %d does not divide the checkpoint's batch %d", o.micro, o.B);
    params = ck.params;
  } else {
    need_file("--init-from", o.init_from);
    need_file("--data", o.data);
    if (o.val) need_file("--val", o.val);
    if (tg_llmc_model_read(o.init_from, &cfg, &params) < 0) tg_cli_die_last("--init-from");
  }
  if (o.save) tg_cli_check_output("--save", o.save);
  if (o.checkpoint) tg_cli_checkpoint_dir(o.checkpoint);
  if (o.T > cfg.max_seq_len)
    tg_cli_die("--seq %d exceeds the model's maximum sequence length %d", o.T, cfg.max_seq_len);
  uint16_t *tokens = NULL, *vtokens = NULL;
  size_t ntok = 0, nvtok = 0;
  if (tg_llmc_tokens_read(o.data, cfg.vocab_size, &tokens, &ntok) < 0) tg_cli_die_last("--data");
  if (o.val && tg_llmc_tokens_read(o.val, cfg.vocab_size, &vtokens, &nvtok) < 0)
    tg_cli_die_last("--val");
  size_t need = (size_t)o.B * o.T + 1;
  if (ntok < need)
    tg_cli_die("--data: %zu tokens, fewer than one batch needs (%zu)", ntok, need);
  if (o.val && nvtok < need)
    tg_cli_die("--val: %zu tokens, fewer than one batch needs (%zu)", nvtok, need);

  if (tg_init(&o.rt) < 0) tg_cli_die_last("starting StarPU");
  /* data parallelism: each rank B / R sequences and micro / R micro-batches
   * of every global batch */
  int R = tg_dist_size(), root = tg_cli_is_root();
  if (distributed && (R & (R - 1)))
    tg_cli_die("%d MPI ranks: the gradient reduction tree needs a power of two", R);
  if (o.B % R || o.micro % R)
    tg_cli_die("--batch %d and --micro-batches %d must be multiples of the %d MPI ranks",
               o.B, o.micro, R);
  tg_cli_instrument_begin(&o.rt);
  tg_gpt_run_config run = tg_gpt_run_default(o.B / R, o.T);
  run.nmicro = o.micro / R;
  run.attention = o.attention;
  run.chunk = o.chunk;
  run.attn_splits = o.attn_splits;
  run.amp.precision = o.prec.precision;
  run.amp.loss_scaling = o.prec.dynamic;
  run.amp.loss_scale = (float)o.prec.scale;
  run.amp.loss_scale_window = o.prec.window;
  tg_cli_precision_start(&o.prec);
  tg_gpt g;
  tg_cli_check_memory_limit(tg_gpt_managed_bytes(&cfg, &run, tg_ncpu_workers() + tg_ncuda_workers()),
                            "this GPT model and batch");
  if (tg_gpt_create(&g, &cfg, params, &run, &o.opt) < 0) tg_cli_die_last("building the model");
  /* every replica starts from rank 0's parameters */
  for (int p = 0; p < TG_GPT_NPARAMS; p++)
    for (int l = 0; l < (tg_gpt_param_per_layer((tg_gpt_param)p) ? cfg.num_layers : 1); l++)
      if (tg_dist_broadcast(g.w[p][l].handle) < 0) tg_cli_die_last("broadcasting the parameters");
  int start = 0;
  long long start_batch = 0;
  if (have_ck) {
    if (tg_gpt_write_state(&g, NULL, ck.m, ck.v, (int)(ck.step - ck.scaler.skipped_steps)) < 0)
      tg_cli_die_last("--resume");
    start = (int)ck.step;
    start_batch = ck.batches;
    tg_cli_scaler_restore(&g.optim.scaler, &ck.scaler);
    tg_checkpoint_free(&ck);
    if (root)
      fprintf(stderr, "taskgrad: resuming %s at step %d (batch %lld)\n", o.resume, start,
              start_batch);
  } else {
    free(params);
  }
  params = NULL;
  tg_token_loader_config lc = {o.B, o.T, o.micro / R, 2, o.shuffled, o.seed, start_batch,
                               tg_dist_rank(), R};
  tg_loader *ld = tg_token_loader_create(tokens, ntok, &lc);
  if (!ld) tg_cli_die_last("training data");
  /* validation: every rank the same batches (identical parameters) */
  tg_token_loader_config vc = {o.B / R, o.T, o.micro / R, 2, 0, 0, 0, 0, 1};
  tg_loader *vl = o.val ? tg_token_loader_create(vtokens, nvtok, &vc) : NULL;
  if (o.val && !vl) tg_cli_die_last("validation data");
  if (root)
    fprintf(stderr, "taskgrad: GPT L=%d C=%d NH=%d V=%d (Vp %d), %d CPU + %d CUDA + %d emulated workers%s, "
            "%s attention, %d attention tasks per micro-batch, %s%s\n", cfg.num_layers,
            cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size,
            tg_ncpu_workers(), tg_ncuda_workers(), tg_nopencl_workers(), R > 1 ? " per rank" : "",
            o.attention == TG_ATTN_NAIVE ? "naive" : "chunked", g.run.attn_splits,
            tg_precision_name(o.prec.precision),
            tg_deterministic() ? ", deterministic reductions" : "");
  if (root && R > 1)
    fprintf(stderr, "taskgrad: %d MPI ranks, %d sequences and %d micro-batches each per step\n",
            R, o.B / R, o.micro / R);

  tg_progress bar;
  if (o.demo && root) {
    tg_progress_begin(&bar, "training", o.steps);
    bar.unit = "tokens/s";
  }
  double tokens_per_step = (double)o.B * o.T, t_all = tg_cli_now(), last_loss = 0;
  /* after StarPU's own handlers (tg_init), which would end the process */
  tg_cli_catch_signals();
  long long batches = start_batch;
  int step = start, stopped = 0;
  for (; step < o.steps; step++) {
    double t0 = tg_cli_now();
    tg_batch b;
    if (tg_loader_next(ld, &b) < 0) tg_cli_die_last("training data");
    batches++;
    if (tg_gpt_step(&g, &b, lr_at(&o, step)) < 0) tg_cli_die_last("training step");
    if (tg_gpt_loss(&g, &last_loss, 1) < 0) tg_cli_die_last("reading the loss");
    double dt = tg_cli_now() - t0;
    /* the loss is the global batch's: the same on every rank */
    if (!isfinite(last_loss)) {
      if (root)
        fprintf(stderr, "taskgrad: error: the loss is not finite at step %d\n", step + 1);
      tg_dist_abort(TG_EXIT_USAGE);
    }
    char scale[64];
    tg_cli_precision_status(scale, sizeof scale, &g.optim.scaler);
    if (root && ((step + 1) % o.log_every == 0 || step == 0 || step + 1 == o.steps))
      printf(tg_deterministic() ? "step %d loss %.9g (%.1f ms, %.0f tokens/s)%s\n"
                                 : "step %d loss %.6f (%.1f ms, %.0f tokens/s)%s\n",
             step + 1, last_loss, dt * 1e3, tokens_per_step / dt, scale);
    fflush(stdout);
    if (o.demo && root) {
      bar.extra = scale;
      tg_progress_update(&bar, step + 1, last_loss, -1, tokens_per_step / dt);
    }
    if (vl && o.val_every && (step + 1) % o.val_every == 0) {
      double v = validate(&g, vl, o.val_batches);
      if (root) printf("step %d val loss %.6f\n", step + 1, v);
    }
    /* ranks get a signal at different moments: they stop after the same step */
    if (R > 1 && !tg_dist_all_ok(!tg_cli_signal) && !tg_cli_signal) tg_cli_signal = SIGTERM;
    if (root && o.checkpoint && o.checkpoint_every && (step + 1) % o.checkpoint_every == 0 &&
        step + 1 < o.steps && !tg_cli_signal)
      save_checkpoint(&g, &o, batches);
    if (tg_cli_signal) {
      stopped = tg_cli_signal;
      step++;
      break;
    }
  }
  if (stopped) {
    if (o.demo && root) tg_progress_end(&bar);
    if (o.checkpoint && root) save_checkpoint(&g, &o, batches);
    if (root)
      fprintf(stderr, "taskgrad: %s: stopped after step %d%s%s\n",
            stopped == SIGINT ? "SIGINT" : "SIGTERM", step,
            o.checkpoint ? "; checkpoint written to " : " (no --checkpoint: state not saved)",
            o.checkpoint ? o.checkpoint : "");
    tg_loader_destroy(ld);
    if (vl) tg_loader_destroy(vl);
    tg_gpt_destroy(&g);
    tg_cli_instrument_end(&o.rt);
    tg_shutdown();
    free(tokens);
    free(vtokens);
    return 128 + stopped;
  }
  if (o.checkpoint && root) save_checkpoint(&g, &o, batches);
  if (o.demo && root) tg_progress_end(&bar);
  double t_train = tg_cli_now() - t_all;
  if (vl && (!o.val_every || o.steps % o.val_every)) {
    double v = validate(&g, vl, o.val_batches);
    if (root) printf("val loss %.6f\n", v);
  }
  if (root)
    fprintf(stderr, "taskgrad: %d steps in %.1f s (%.0f tokens/s)\n", o.steps - start, t_train,
            (o.steps - start) * tokens_per_step / (t_train > 0 ? t_train : 1));
  if (root && g.optim.scaler.enabled)
    fprintf(stderr, "taskgrad: %s, loss scale %g, skipped steps: %ld\n",
            tg_precision_name(o.prec.precision), g.optim.scaler.scale, g.optim.scaler.skipped);
  if (R > 1 || tg_deterministic())
    fprintf(stderr, "taskgrad: rank %d parameters fnv1a64 %016llx\n", tg_dist_rank(),
            (unsigned long long)params_checksum(&g, &cfg));
  if (o.save && root) {
    size_t sizes[TG_GPT_NPARAMS];
    float *out = malloc(sizeof(float) * tg_gpt_param_sizes(&cfg, sizes));
    if (!out) tg_cli_die("out of memory for --save");
    if (tg_gpt_read_params(&g, out) < 0) tg_cli_die_last("--save");
    /* FILE.safetensors: Hugging Face GPT-2 names; anything else: llm.c */
    size_t len = strlen(o.save);
    int st = len > 12 && !strcmp(o.save + len - 12, ".safetensors");
    if ((st ? tg_safetensors_write_gpt2(o.save, &cfg, out) : tg_llmc_model_write(o.save, &cfg, out)) < 0)
      tg_cli_die_last("--save");
    free(out);
    fprintf(stderr, "taskgrad: saved %s\n", o.save);
  }
  if (o.sample && root) sample(&g, o.sample, o.T, o.temperature, o.seed);
  tg_loader_destroy(ld);
  if (vl) tg_loader_destroy(vl);
  tg_gpt_destroy(&g);
  tg_cli_instrument_end(&o.rt);
  tg_shutdown();
  free(tokens);
  free(vtokens);
  return 0;
}
