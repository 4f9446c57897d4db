/*
 * taskgrad train mlp: trains an MLP on Fashion-MNIST.
 *
 * Everything the user gives is checked before any work starts (flags, then
 * the data files); then StarPU starts, the loader thread fills batches ahead
 * of the steps, and each step is submitted as one task graph.  The host waits
 * on the graph only when the progress display reads the running loss (a few
 * dozen times per epoch) and for the evaluation at the end of each epoch.
 *
 * Checkpoints (--checkpoint, --resume) hold the parameters, the optimizer
 * state and step, the loss scaler, the data position and the running
 * epoch's metric sums (src/mlp_checkpoint.c), so that a resumed run draws
 * the same shuffled batches from the same place and prints the same epoch
 * figures as an uninterrupted one.  The loop is therefore driven by the
 * run's step number s (batch s % bpe of epoch s / bpe), not by epochs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "micro_batches.h"
#include "taskgrad/checkpoint.h"
#include "taskgrad/data.h"
#include "taskgrad/mlp.h"
#include "taskgrad/parallel.h"
#include "taskgrad/safetensors.h"

typedef struct train_opts {
  int epochs, batch, micro, prefetch;
  long steps;            /* 0: every batch of every epoch */
  const char *save;      /* safetensors file for the final parameters */
  tg_mlp_config model;
  tg_optimizer_config opt;
  int lr_given;
  uint64_t seed;
  const char *data_dir;
  tg_runtime_config rt;
  tg_cli_precision prec;
  const char *checkpoint, *resume; /* directories */
  int checkpoint_every;            /* steps; 0: at the end and on a signal */
} train_opts;

static void train_usage(void) {
  puts("usage: taskgrad train mlp [flags]\n"
       "\n"
       "Trains a multi-layer perceptron on Fashion-MNIST and prints\n"
       "'test accuracy: 0.XXXX' at the end.\n"
       "\n"
       "  --epochs N           passes over the training set (default 10)\n"
       "  --batch N            samples per step (default 128)\n"
       "  --micro-batches M    micro-batches per step, run concurrently, their\n"
       "                       gradients summed; or auto: one per worker, at\n"
       "                       least 16 samples each (default auto; the choice\n"
       "                       is printed)\n"
       "  --hidden LIST        hidden layer widths, e.g. 512,256 (default 512,256)\n"
       "  --activation NAME    relu or gelu (default relu)\n"
       "  --optimizer NAME     adamw or sgd (default adamw)\n"
       "  --lr X               learning rate (default 1e-3 adamw, 0.05 sgd)\n"
       "  --weight-decay X     (default 0.01 adamw, 0 sgd)\n"
       "  --seed N             initialisation and shuffling seed (default 1)\n"
       "  --data-dir DIR       Fashion-MNIST IDX files (default\n"
       "                       " TG_FASHION_MNIST_DIR ")\n"
       "  --prefetch N         batches prepared ahead by the loader (default 2)\n"
       "  --steps N            stop after N optimizer steps (default: all epochs)\n"
       "  --save FILE          write the trained parameters as safetensors\n"
       "                       (layers.<l>.weight (out, in), layers.<l>.bias)\n"
       "  --tiles N            split every layer's output features into N blocks\n"
       "                       (1..64, at most the narrowest layer, 10 classes\n"
       "                       included), one task per block, so that a layer can\n"
       "                       span several workers or GPUs (default 1: off)\n"
       "  --checkpoint DIR     write DIR/" TG_MLP_CHECKPOINT_FILE " (parameters,\n"
       "                       optimizer state, data position, loss scale) every\n"
       "                       --checkpoint-every steps, at the end and on\n"
       "                       SIGINT/SIGTERM; DIR is created; one that holds a\n"
       "                       checkpoint needs --resume DIR\n"
       "  --checkpoint-every N checkpoint interval in steps (default: only at the\n"
       "                       end and on a signal)\n"
       "  --resume DIR         continue the run saved in DIR; the model, optimizer,\n"
       "                       precision, tiles, batch and seed must be the\n"
       "                       checkpoint's; --epochs and --steps count the whole\n"
       "                       run.  With no checkpoint in DIR yet the run starts\n"
       "                       from --seed, so one command line serves the first\n"
       "                       run and every restart\n"
       "\n"
       "SIGINT/SIGTERM: the current step finishes, a checkpoint is written when\n"
       "--checkpoint is given, and the exit status is 130/143 (after the last\n"
       "step: before --save).  A second signal ends the process at once.  A\n"
       "non-finite training loss stops the run (exit status 2) without writing a\n"
       "checkpoint.  No output may replace an input or another output.\n"
       "\n"
       "Under mpirun, every rank takes an equal part of each global --batch\n"
       "(--batch and --micro-batches must be multiples of the number of ranks)\n"
       "and gradients are summed over the ranks; rank 0 prints\n"
       "and writes files.\n"
       TG_CLI_PRECISION_HELP TG_CLI_RUNTIME_HELP
       "  -h, --help           this text\n"
       "\n"
       "Bad flags or data files: one message on stderr, exit status 2.");
}

static void parse(int argc, char **argv, train_opts *o) {
  o->epochs = 10;
  o->batch = 128;
  o->micro = 0; /* auto */
  o->prefetch = 2;
  o->steps = 0;
  o->save = NULL;
  o->model.nlayers = 3;
  o->model.widths[0] = 784;
  o->model.widths[1] = 512;
  o->model.widths[2] = 256;
  o->model.widths[3] = 10;
  o->model.act = TG_ACT_RELU;
  o->model.tiles = 1;
  o->opt = tg_optimizer_default(TG_OPT_ADAMW);
  o->seed = 1;
  o->data_dir = TG_FASHION_MNIST_DIR;
  o->rt = tg_runtime_config_default();
  tg_cli_precision_default(&o->prec);
  o->checkpoint = o->resume = NULL;
  o->checkpoint_every = 0;
  float lr = -1, wd = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      train_usage();
      exit(0);
    } else if (!strcmp(a, "--epochs")) {
      o->epochs = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 100000);
    } else if (!strcmp(a, "--batch")) {
      o->batch = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 1 << 20);
    } else if (!strcmp(a, "--micro-batches")) {
      o->micro = tg_cli_micro_batches_arg(a, tg_cli_value(argc, argv, &i), 4096);
    } else if (!strcmp(a, "--prefetch")) {
      o->prefetch = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 64);
    } else if (!strcmp(a, "--hidden")) {
      int n = tg_cli_int_list(a, tg_cli_value(argc, argv, &i), o->model.widths + 1,
                              TG_MLP_MAX_LAYERS - 1, 1, 1 << 16);
      o->model.nlayers = n + 1;
    } else if (!strcmp(a, "--activation")) {
      const char *v = tg_cli_value(argc, argv, &i);
      if (!strcmp(v, "relu")) o->model.act = TG_ACT_RELU;
      else if (!strcmp(v, "gelu")) o->model.act = TG_ACT_GELU;
      else tg_cli_die("--activation: '%s' is not relu or gelu", v);
    } else if (!strcmp(a, "--optimizer")) {
      const char *v = tg_cli_value(argc, argv, &i);
      if (!strcmp(v, "adamw")) o->opt = tg_optimizer_default(TG_OPT_ADAMW);
      else if (!strcmp(v, "sgd")) o->opt = tg_optimizer_default(TG_OPT_SGD);
      else tg_cli_die("--optimizer: '%s' is not adamw or sgd", v);
    } else if (!strcmp(a, "--lr")) {
      lr = (float)tg_cli_double(a, tg_cli_value(argc, argv, &i), 1e-12, 1e3);
    } else if (!strcmp(a, "--weight-decay")) {
      wd = (float)tg_cli_double(a, tg_cli_value(argc, argv, &i), 0, 10);
    } else if (!strcmp(a, "--steps")) {
      o->steps = tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 1L << 40);
    } else if (!strcmp(a, "--save")) {
      o->save = tg_cli_value(argc, argv, &i);
      if (!*o->save) tg_cli_die("--save: empty file name");
    } else if (!strcmp(a, "--tiles")) {
      o->model.tiles = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, TG_MAX_SPLIT);
    } else if (!strcmp(a, "--seed")) {
      o->seed = tg_cli_u64(a, tg_cli_value(argc, argv, &i));
    } else if (!strcmp(a, "--data-dir")) {
      o->data_dir = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--checkpoint")) {
      o->checkpoint = tg_cli_value(argc, argv, &i);
    } else if (!strcmp(a, "--checkpoint-every")) {
      o->checkpoint_every = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 1 << 30);
    } else if (!strcmp(a, "--resume")) {
      o->resume = tg_cli_value(argc, argv, &i);
    } else if (tg_cli_precision_flag(argc, argv, &i, &o->prec)) {
      continue;
    } else if (!tg_cli_runtime_flag(argc, argv, &i, &o->rt)) {
      tg_cli_die("unknown flag '%s' for 'train mlp' (see --help)", a);
    }
  }
  if (lr > 0) o->opt.lr = lr;
  if (wd >= 0) o->opt.weight_decay = wd;
  if (o->checkpoint_every && !o->checkpoint)
    tg_cli_die("--checkpoint-every needs --checkpoint DIR");
  if ((o->checkpoint && !*o->checkpoint) || (o->resume && !*o->resume))
    tg_cli_die("--checkpoint and --resume need a directory name");
  if (o->micro > o->batch) /* auto (0): chosen once the workers are known */
    tg_cli_die("--micro-batches %d is larger than --batch %d", o->micro, o->batch);
  o->model.widths[o->model.nlayers] = 10;
  if (o->model.tiles > tg_mlp_max_tiles(&o->model))
    tg_cli_die("--tiles %d is larger than the narrowest layer (%d output features)",
               o->model.tiles, tg_mlp_max_tiles(&o->model));
  tg_cli_precision_finish(&o->prec);
  tg_cli_precision_mlp(&o->prec, &o->model, &o->opt);
}

/* One pass over the test set (a fresh loader each time: same order, no
 * shuffling; every rank the whole set, the parameters being identical).
 * Leaves the metric accumulators reset. */
static void evaluate(tg_mlp *m, const tg_dataset *test, const train_opts *o, double *loss,
                     double *acc) {
  int eval_batch = test->n < 1000 ? test->n : 1000;
  tg_loader_config ec = {.batch = eval_batch,
                         .nmicro = o->micro < eval_batch ? o->micro : eval_batch,
                         .prefetch = o->prefetch, .nshards = 1};
  tg_loader *ld = tg_loader_create(test, &ec);
  if (!ld) tg_cli_die_last("test data loader");
  if (tg_mlp_metrics(m, NULL, NULL, 1) < 0) tg_cli_die_last("resetting the metrics");
  for (int k = 0; k < tg_loader_batches_per_epoch(ld); k++) {
    tg_batch b;
    if (tg_loader_next(ld, &b) < 0) tg_cli_die_last("test data loader");
    if (tg_mlp_evaluate(m, &b) < 0) tg_cli_die_last("evaluation");
  }
  if (tg_mlp_metrics(m, loss, acc, 1) < 0) tg_cli_die_last("reading the test loss");
  tg_loader_destroy(ld);
}

/* FNV-1a over the parameters' bytes: equal on every rank when the replicas
 * are bitwise identical. */
static uint64_t param_checksum(tg_mlp *m) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int l = 0; l < m->cfg.nlayers; l++) {
    tg_tensor *ts[2] = {&m->w[l], &m->b[l]};
    for (int k = 0; k < 2; k++) {
      size_t n = tg_tensor_numel(ts[k]) * sizeof(float);
      unsigned char *buf = malloc(n);
      if (!buf) tg_cli_die("out of memory for the checksum");
      if (tg_tensor_read(ts[k], buf) < 0) tg_cli_die_last("reading the parameters");
      for (size_t i = 0; i < n; i++) h = (h ^ buf[i]) * 0x100000001b3ULL;
      free(buf);
    }
  }
  return h;
}

static void save_params(tg_mlp *m, const char *path) {
  int L = m->cfg.nlayers;
  char names[2 * TG_MLP_MAX_LAYERS][32];
  const char *np[2 * TG_MLP_MAX_LAYERS] = {0};
  const float *data[2 * TG_MLP_MAX_LAYERS] = {0};
  int shapes[2 * TG_MLP_MAX_LAYERS][2];
  float *bufs[2 * TG_MLP_MAX_LAYERS] = {0};
  for (int l = 0; l < L; l++)
    for (int k = 0; k < 2; k++) {
      tg_tensor *t = k ? &m->b[l] : &m->w[l];
      int i = 2 * l + k;
      snprintf(names[i], sizeof names[i], "layers.%d.%s", l, k ? "bias" : "weight");
      np[i] = names[i];
      bufs[i] = malloc(tg_tensor_numel(t) * sizeof(float));
      if (!bufs[i]) tg_cli_die("out of memory saving the parameters");
      if (tg_tensor_read(t, bufs[i]) < 0) tg_cli_die_last("reading the parameters");
      data[i] = bufs[i];
      shapes[i][0] = t->rows;
      shapes[i][1] = t->cols;
    }
  if (tg_safetensors_write(path, 2 * L, np, data, (const int(*)[2])shapes) < 0)
    tg_cli_die_last("--save");
  for (int i = 0; i < 2 * L; i++) free(bufs[i]);
  fprintf(stderr, "taskgrad: parameters written to %s\n", path);
}

/* ---- checkpoints ----------------------------------------------------------- */

/* The run's description as a checkpoint stores it (no arrays). */
static tg_mlp_checkpoint run_shape(const train_opts *o, int samples) {
  tg_mlp_checkpoint c = {.nlayers = o->model.nlayers,
                         .activation = (int)o->model.act,
                         .optimizer = (int)o->opt.kind,
                         .precision = (int)o->model.amp.precision,
                         .tiles = o->model.tiles > 1 ? o->model.tiles : 1,
                         .batch = o->batch,
                         .shuffled = 1,
                         .samples = samples,
                         .seed = o->seed,
                         .loss_scaling = o->model.amp.loss_scaling != 0,
                         .scaler = {.scale = 1.0f}};
  for (int l = 0; l <= o->model.nlayers; l++) c.widths[l] = o->model.widths[l];
  return c;
}

static void list_widths(char *buf, size_t len, const tg_mlp_checkpoint *c) {
  size_t n = 0;
  buf[0] = 0;
  for (int l = 0; l <= c->nlayers && n < len; l++)
    n += (size_t)snprintf(buf + n, len - n, l ? ",%d" : "%d", c->widths[l]);
}

/* A checkpoint continues only the run these flags describe: exits 2 naming
 * the first difference. */
static void check_same_run(const tg_mlp_checkpoint *ck, const tg_mlp_checkpoint *run,
                           const char *dir) {
  char a[256], b[256];
  list_widths(a, sizeof a, run);
  list_widths(b, sizeof b, ck);
  if (strcmp(a, b))
    tg_cli_die("--resume %s: layer widths %s (--hidden and the data's features) differ from "
               "the checkpoint's %s", dir, a, b);
  static const char *const acts[] = {"relu", "gelu"}, *const opts[] = {"adamw", "sgd"};
  struct {
    const char *flag;
    long long run, ck;
    const char *const *names;
  } f[] = {
      {"--activation", run->activation, ck->activation, acts},
      {"--optimizer", run->optimizer, ck->optimizer, opts},
      {"--precision", run->precision, ck->precision, NULL},
      {"--loss-scale (loss scaling on or off)", run->loss_scaling, ck->loss_scaling, NULL},
      {"--tiles", run->tiles, ck->tiles, NULL},
      {"--batch", run->batch, ck->batch, NULL},
      {"--seed", (long long)run->seed, (long long)ck->seed, NULL},
      {"shuffling", run->shuffled, ck->shuffled, NULL},
      {"training samples (--data-dir)", run->samples, ck->samples, NULL},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    if (f[i].run == f[i].ck) continue;
    if (f[i].names && f[i].ck >= 0 && f[i].ck < 2)
      tg_cli_die("--resume %s: %s %s differs from the checkpoint's %s", dir, f[i].flag,
                 f[i].names[f[i].run], f[i].names[f[i].ck]);
    if (!strcmp(f[i].flag, "--precision"))
      tg_cli_die("--resume %s: --precision %s differs from the checkpoint's %s", dir,
                 tg_precision_name((tg_precision)f[i].run),
                 tg_precision_name((tg_precision)f[i].ck));
    tg_cli_die("--resume %s: %s %lld differs from the checkpoint's %lld", dir, f[i].flag,
               f[i].run, f[i].ck);
  }
}

/* Writes the state after `batches` training steps, unless the running
 * epoch's loss is not finite (the last good checkpoint stays). */
static void save_checkpoint(tg_mlp *m, const train_opts *o, const tg_mlp_checkpoint *shape,
                            long long batches) {
  tg_mlp_checkpoint c = *shape;
  if (tg_mlp_read_metric_sums(m, &c.loss_sum, &c.correct_sum) < 0)
    tg_cli_die_last("--checkpoint");
  if (!isfinite(c.loss_sum)) {
    fprintf(stderr, "taskgrad: error: the training loss is not finite at step %lld; the last "
            "checkpoint in %s is kept\n", batches, o->checkpoint);
    tg_dist_abort(TG_EXIT_USAGE);
  }
  if (tg_mlp_checkpoint_alloc(&c) < 0) tg_cli_die_last("--checkpoint");
  if (tg_mlp_read_state(m, c.params, c.state1, c.state2) < 0) tg_cli_die_last("--checkpoint");
  c.step = m->optim.step;
  c.batches = batches;
  c.metric_batches = m->metric_batches;
  c.metric_samples = m->metric_samples;
  c.scaler = tg_cli_scaler_state(&m->optim.scaler);
  if (tg_mlp_checkpoint_save(o->checkpoint, &c) < 0) tg_cli_die_last("--checkpoint");
  tg_mlp_checkpoint_free(&c);
}

/* Puts a loaded checkpoint's state into the freshly created model. */
static void restore(tg_mlp *m, tg_mlp_checkpoint *ck) {
  if (ck->step > INT32_MAX) tg_cli_die("--resume: optimizer step %lld too large", ck->step);
  if (tg_mlp_write_state(m, ck->params, ck->state1, ck->state2, (int)ck->step) < 0 ||
      tg_mlp_write_metric_sums(m, ck->loss_sum, ck->correct_sum, ck->metric_batches,
                               ck->metric_samples) < 0)
    tg_cli_die_last("--resume");
  tg_cli_scaler_restore(&m->optim.scaler, &ck->scaler);
}

/* --resume DIR: loads the checkpoint into *ck and returns 1, or returns 0
 * (saying so) when DIR holds none yet: a requeued job's first run. */
static int resume_checkpoint(const train_opts *o, const tg_mlp_checkpoint *run,
                             tg_mlp_checkpoint *ck) {
  int have = tg_mlp_checkpoint_exists(o->resume);
  if (have < 0) tg_cli_die_last("--resume");
  if (!have) {
    if (tg_cli_is_root())
      fprintf(stderr, "taskgrad: no checkpoint in %s yet: starting from --seed %llu\n",
              o->resume, (unsigned long long)o->seed);
    return 0;
  }
  if (tg_mlp_checkpoint_load(o->resume, ck) < 0) tg_cli_die_last("--resume");
  check_same_run(ck, run, o->resume);
  return 1;
}

/* One run of the command: what its steps share. */
typedef struct mlp_run {
  train_opts o;
  int distributed;                /* launched under MPI */
  tg_dataset train, test;
  tg_mlp_checkpoint shape, ck;    /* this run's shape; --resume's checkpoint */
  int have_ck;
  int R, root;                    /* MPI ranks; this is rank 0 */
  tg_loader *ld;
  int bpe;                        /* batches per epoch */
  long long total, start;         /* the run's last step and its first */
  tg_mlp m;
  double test_acc, test_loss, t_train; /* t_train: evaluations excluded */
} mlp_run;

/* No output replaces another or an input (cli/output_paths.c): the data
 * set's files (either name the loader reads), the checkpoint --resume reads
 * (which --checkpoint DIR may replace), --trace. */
static void check_paths(const train_opts *o) {
  static const char *const data[] = {
      "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
      "t10k-labels-idx1-ubyte"};
  char gz[64];
  for (int i = 0; i < 4; i++) {
    snprintf(gz, sizeof gz, "%s.gz", data[i]);
    tg_cli_path_in_dir("--data-dir", o->data_dir, data[i]);
    tg_cli_path_in_dir("--data-dir", o->data_dir, gz);
  }
  tg_cli_path_in_dir("--resume", o->resume, TG_MLP_CHECKPOINT_FILE);
  tg_cli_path_out("--save", o->save);
  tg_cli_path_out_dir("--checkpoint", o->checkpoint, TG_MLP_CHECKPOINT_FILE);
  tg_cli_path_may_replace("--checkpoint", "--resume");
  tg_cli_paths_check();
}

/* The outputs' places, the data and the checkpoint to resume from, all
 * checked before any work. */
static void load_inputs(mlp_run *r) {
  train_opts *o = &r->o;
  check_paths(o);
  if (o->save) tg_cli_check_output("--save", o->save);
  struct stat st;
  if (stat(o->data_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    tg_cli_die("--data-dir: directory '%s' does not exist (install Debian's "
               "dataset-fashion-mnist or pass --data-dir)", o->data_dir);
  if (tg_fashion_mnist_load(o->data_dir, 1, &r->train) < 0) tg_cli_die_last("training data");
  if (tg_fashion_mnist_load(o->data_dir, 0, &r->test) < 0) tg_cli_die_last("test data");
  if (o->batch > r->train.n)
    tg_cli_die("--batch %d is larger than the %d training samples", o->batch, r->train.n);
  o->model.widths[0] = r->train.features;
  if (o->checkpoint)
    tg_cli_checkpoint_dir(o->checkpoint, o->resume, TG_MLP_CHECKPOINT_FILE,
                          tg_mlp_checkpoint_exists);
  /* the checkpoint, and whether it continues this run, before any work */
  r->shape = run_shape(o, r->train.n);
  r->have_ck = o->resume && resume_checkpoint(o, &r->shape, &r->ck);
}

/* StarPU, the ranks' shares of the batch, the loader (from the
 * checkpoint's place) and the run's steps; prints the banner. */
static void start_run(mlp_run *r) {
  train_opts *o = &r->o;
  if (tg_init(&o->rt) < 0) tg_cli_die_last("starting StarPU");
  int R = r->R = tg_dist_size();
  r->root = tg_cli_is_root();
  if (!o->micro && o->batch % R == 0)
    o->micro = tg_cli_auto_micro_batches(o->batch, R, 0, TG_MLP_AUTO_MIN_SAMPLES);
  if (o->batch % R || o->micro % R)
    tg_cli_die("--batch %d and --micro-batches %d must be multiples of the %d MPI ranks",
               o->batch, o->micro, R);
  /* the loader starts at the checkpoint's batch of its epoch's permutation */
  tg_loader_config lc = {.batch = o->batch, .nmicro = o->micro / R, .prefetch = o->prefetch,
                         .shuffle = 1, .seed = o->seed, .shard = tg_dist_rank(), .nshards = R,
                         .start_batch = r->have_ck ? r->ck.batches : 0};
  r->ld = tg_loader_create(&r->train, &lc);
  if (!r->ld) tg_cli_die_last("training data loader");
  const int bpe = r->bpe = tg_loader_batches_per_epoch(r->ld);
  r->shape.batches_per_epoch = bpe;
  /* with the same data and batch, only the number of MPI ranks can change
   * the epoch's length (a last partial batch they cannot share is dropped) */
  if (r->have_ck && r->ck.batches_per_epoch != bpe)
    tg_cli_die("--resume %s: %d batches per epoch with %d MPI ranks, the checkpoint's run had "
               "%d", o->resume, bpe, R, r->ck.batches_per_epoch);
  r->total = (long long)o->epochs * bpe;
  r->start = r->have_ck ? r->ck.batches : 0;
  if (o->steps > 0 && o->steps < r->total) r->total = o->steps;
  if (r->start > r->total)
    tg_cli_die("--resume %s: the checkpoint is at step %lld, past this run's %lld (--epochs, "
               "--steps)", o->resume, r->start, r->total);
  tg_cli_instrument_begin(&o->rt);
  if (r->root)
    fprintf(stderr, "taskgrad: %d training / %d test samples, %d CPU + %d CUDA + %d emulated workers%s, "
            "scheduler %s, %s%s\n", r->train.n, r->test.n, tg_ncpu_workers(), tg_ncuda_workers(),
            tg_nopencl_workers(), R > 1 ? " per rank" : "",
            o->rt.sched ? o->rt.sched : (getenv("STARPU_SCHED") ? getenv("STARPU_SCHED") : "default"),
            tg_precision_name(o->model.amp.precision), tg_deterministic() ? ", deterministic reductions" : "");
  if (r->root && R > 1)
    fprintf(stderr, "taskgrad: %d MPI ranks, %d samples and %d micro-batches each per step\n",
            R, o->batch / R, o->micro / R);
}

/* The model on every rank, from rank 0's parameters or the checkpoint. */
static void build_model(mlp_run *r) {
  train_opts *o = &r->o;
  tg_cli_check_memory_limit(
      tg_mlp_managed_bytes(&o->model, o->batch / r->R, tg_ncpu_workers() + tg_ncuda_workers()),
      "this MLP and batch");
  tg_cli_precision_start(&o->prec);
  tg_mlp *m = &r->m;
  if (tg_mlp_create(m, &o->model, &o->opt, o->seed) < 0) tg_cli_die_last("creating the model");
  /* every replica starts from rank 0's parameters */
  for (int l = 0; l < o->model.nlayers; l++)
    if (tg_dist_broadcast(m->w[l].handle) < 0 || tg_dist_broadcast(m->b[l].handle) < 0)
      tg_cli_die_last("broadcasting the parameters");
  if (r->have_ck) {
    restore(m, &r->ck); /* every rank reads the same file */
    tg_mlp_checkpoint_free(&r->ck);
    if (r->root)
      fprintf(stderr, "taskgrad: resuming %s at step %lld (epoch %lld, batch %lld)\n", o->resume,
              r->start, r->start / r->bpe + 1, r->start % r->bpe);
  } else if (tg_mlp_metrics(m, NULL, NULL, 1) < 0) {
    tg_cli_die_last("resetting the metrics");
  }
}

/* The end of epoch e (or of the run, at step s): its training figures,
 * stopping on a non-finite loss, and the test set's. */
static void end_epoch(mlp_run *r, long long e, long long s, double t_epoch, long samples) {
  double tl, ta, dt = tg_cli_now() - t_epoch;
  if (tg_mlp_metrics(&r->m, &tl, &ta, 1) < 0) tg_cli_die_last("reading the loss");
  if (!isfinite(tl)) {
    if (r->root)
      fprintf(stderr, "taskgrad: error: the training loss is not finite in epoch %lld "
              "(step %lld)\n", e + 1, s + 1);
    tg_dist_abort(TG_EXIT_USAGE);
  }
  evaluate(&r->m, &r->test, &r->o, &r->test_loss, &r->test_acc);
  if (r->root)
    fprintf(stderr, "epoch %lld/%d: train loss %.9g acc %.4f | test loss %.4f acc %.4f | "
            "%.1f s, %.0f samples/s\n", e + 1, r->o.epochs, tl, ta, r->test_loss, r->test_acc,
            dt, samples / dt);
}

/* The steps from r->start to r->total, or until a signal; returns the
 * signal (0: none) and the steps taken in *done. */
static int train_loop(mlp_run *r, long long *done) {
  const train_opts *o = &r->o;
  const int bpe = r->bpe, R = r->R, root = r->root;
  tg_mlp *m = &r->m;
  double t_epoch = tg_cli_now();
  tg_progress bar;
  char label[32];
  long samples = 0;
  int stopped = 0, every = 1;
  long long s = r->start, total = r->total;
  for (; s < total && !stopped; s++) {
    long long e = s / bpe;
    int k = (int)(s % bpe), nb = (int)(total - e * bpe < bpe ? total - e * bpe : bpe);
    if (k == 0 || s == r->start) {
      snprintf(label, sizeof label, "epoch %lld/%d", e + 1, o->epochs);
      tg_progress_begin(&bar, label, nb);
      every = nb / 40 > 1 ? nb / 40 : 1;
      t_epoch = tg_cli_now();
      samples = 0;
    }
    tg_batch b;
    if (tg_loader_next(r->ld, &b) < 0) tg_cli_die_last("data loader");
    if (tg_mlp_step(m, &b) < 0) tg_cli_die_last("training step");
    samples += (long)b.rows * R;
    if (root && ((k + 1) % every == 0 || k + 1 == nb)) {
      double l, a;
      if (tg_mlp_metrics(m, &l, &a, 0) < 0) tg_cli_die_last("reading the loss");
      char scale[64];
      tg_cli_precision_status(scale, sizeof scale, &m->optim.scaler);
      bar.extra = scale;
      tg_progress_update(&bar, k + 1, l, a, samples / (tg_cli_now() - t_epoch));
      bar.extra = NULL;
    }
    /* ranks get a signal at different moments: they stop after the same step */
    stopped = tg_cli_signalled(R) ? tg_cli_signal : 0;
    int epoch_end = k + 1 == bpe, last = s + 1 == total;
    int periodic = o->checkpoint_every && (s + 1) % o->checkpoint_every == 0;
    int save = o->checkpoint && root && (periodic || last || stopped);
    /* a checkpoint within an epoch keeps the epoch's running sums; one at
     * its end follows the epoch's figures, which restart them */
    if (save && !epoch_end) save_checkpoint(m, o, &r->shape, s + 1);
    if (epoch_end || last || stopped) {
      r->t_train += tg_cli_now() - t_epoch;
      if (root) tg_progress_end(&bar);
    }
    if (epoch_end || (last && !stopped)) end_epoch(r, e, s, t_epoch, samples);
    if (save && epoch_end) save_checkpoint(m, o, &r->shape, s + 1);
  }
  *done = s;
  return stopped;
}

/* Frees what the run holds and stops StarPU. */
static void teardown(mlp_run *r) {
  tg_mlp_destroy(&r->m);
  tg_cli_instrument_end(&r->o.rt);
  tg_shutdown();
  tg_dataset_free(&r->train);
  tg_dataset_free(&r->test);
}

/* After the last step: the test figures, the checksum, --save, the summary;
 * returns the exit status (128 + the signal when one stopped it before
 * --save: the checkpoint of the last step is already written). */
static int finish(mlp_run *r) {
  const train_opts *o = &r->o;
  tg_mlp *m = &r->m;
  if (r->test_acc < 0) /* nothing left to run */
    evaluate(m, &r->test, o, &r->test_loss, &r->test_acc);
  if (r->root && m->optim.scaler.enabled)
    fprintf(stderr, "taskgrad: %s, loss scale %g, skipped steps: %ld\n",
            tg_precision_name(o->model.amp.precision), m->optim.scaler.scale,
            m->optim.scaler.skipped);
  uint64_t sum = param_checksum(m);
  if (r->R > 1 || tg_deterministic())
    fprintf(stderr, "taskgrad: rank %d parameters fnv1a64 %016llx\n", tg_dist_rank(),
            (unsigned long long)sum);
  int rc = tg_cli_signalled(r->R) ? tg_cli_interrupted("the final evaluation") : 0;
  /* small: once started, --save finishes (under a second) */
  if (!rc && r->root && o->save) save_params(m, o->save);
  teardown(r);
  if (rc) return rc;
  if (r->root) {
    long long ran = r->total - r->start;
    fprintf(stderr, "taskgrad: trained %lld steps in %.2f s (%.0f samples/s)\n", ran, r->t_train,
            r->t_train > 0 ? (double)ran * o->batch / r->t_train : 0.0);
    printf("test accuracy: %.4f\n", r->test_acc);
  }
  return tg_cli_interrupted(NULL); /* a signal during --save */
}

int tg_cmd_train_mlp(int argc, char **argv) {
  static mlp_run r; /* zeroed */
  train_opts *o = &r.o;
  parse(argc, argv, o);
  r.distributed = tg_cli_mpi_check(&o->rt);
  tg_cli_instrument_check(&o->rt);
  load_inputs(&r);
  start_run(&r);
  build_model(&r);
  /* after StarPU's own handlers (tg_init), which would end the process */
  tg_cli_catch_signals();
  r.test_acc = -1;
  long long s;
  int stopped = train_loop(&r, &s);
  tg_loader_destroy(r.ld);
  if (stopped) {
    if (r.root)
      fprintf(stderr, "taskgrad: %s: stopped after step %lld%s%s\n",
              stopped == SIGINT ? "SIGINT" : "SIGTERM", s,
              o->checkpoint ? "; checkpoint written to " : " (no --checkpoint: state not saved)",
              o->checkpoint ? o->checkpoint : "");
    teardown(&r);
    return 128 + stopped;
  }
  return finish(&r);
}
