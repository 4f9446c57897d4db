/*
 * taskgrad train mlp: trains an MLP on Fashion-MNIST.
 *
 * Everything the user gives is checked before any work starts (flags, then
 * the data files); then StarPU starts, the loader thread fills batches ahead
 * of the steps, and each step is submitted as one task graph.  The host waits
 * on the graph only when the progress display reads the running loss (a few
 * dozen times per epoch) and for the evaluation at the end of each epoch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "taskgrad/data.h"
#include "taskgrad/dist.h"
#include "taskgrad/mlp.h"
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
} train_opts;

static void train_usage(void) {
  puts("usage: taskgrad train mlp [flags]\n"
       "\n"
       "Trains a multi-layer perceptron on Fashion-MNIST and prints\n"
       "'test accuracy: 0.XXXX' at the end.\n"
       "\n"
       "  --epochs N           passes over the training set (default 10)\n"
       "  --batch N            samples per step (default 128)\n"
       "  --micro-batches M    micro-batches per step, run concurrently; their\n"
       "                       gradients merge by StarPU reduction (default 2)\n"
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
       "\n"
       "Under mpirun, every rank takes an equal part of each global --batch\n"
       "(--batch and --micro-batches must be multiples of the number of ranks,\n"
       "a power of two) and gradients are summed over the ranks; rank 0 prints\n"
       "and writes files.\n"
       TG_CLI_PRECISION_HELP TG_CLI_RUNTIME_HELP
       "  -h, --help           this text\n"
       "\n"
       "Bad flags or data files: one message on stderr, exit status 2.");
}

static void parse(int argc, char **argv, train_opts *o) {
  o->epochs = 10;
  o->batch = 128;
  o->micro = 2;
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
      o->micro = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 4096);
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
    } else if (tg_cli_precision_flag(argc, argv, &i, &o->prec)) {
      continue;
    } else if (!tg_cli_runtime_flag(argc, argv, &i, &o->rt)) {
      tg_cli_die("unknown flag '%s' for 'train mlp' (see --help)", a);
    }
  }
  if (lr > 0) o->opt.lr = lr;
  if (wd >= 0) o->opt.weight_decay = wd;
  if (o->micro > o->batch)
    tg_cli_die("--micro-batches %d is larger than --batch %d", o->micro, o->batch);
  o->model.widths[o->model.nlayers] = 10;
  if (o->model.tiles > tg_mlp_max_tiles(&o->model))
    tg_cli_die("--tiles %d is larger than the narrowest layer (%d output features)",
               o->model.tiles, tg_mlp_max_tiles(&o->model));
  tg_cli_precision_finish(&o->prec);
  tg_cli_precision_mlp(&o->prec, &o->model, &o->opt);
}

/* Runs one pass of the loader's batches (at most *budget when training,
 * which it counts down); training when train != 0. */
static void run_epoch(tg_mlp *m, tg_loader *ld, int train, tg_progress *bar,
                      double *loss, double *acc, long *budget) {
  int nb = tg_loader_batches_per_epoch(ld);
  if (train && *budget < nb) nb = (int)*budget;
  if (train) *budget -= nb;
  int every = nb / 40 > 1 ? nb / 40 : 1;
  double t0 = tg_cli_now();
  long samples = 0;
  tg_mlp_metrics(m, NULL, NULL, 1);
  for (int k = 0; k < nb; k++) {
    tg_batch b;
    if (tg_loader_next(ld, &b) < 0) tg_cli_die_last("data loader");
    int rc = train ? tg_mlp_step(m, &b) : tg_mlp_evaluate(m, &b);
    if (rc < 0) tg_cli_die_last(train ? "training step" : "evaluation");
    samples += (long)b.rows * (train ? tg_dist_size() : 1);
    if (bar && ((k + 1) % every == 0 || k + 1 == nb)) {
      double l, a;
      if (tg_mlp_metrics(m, &l, &a, 0) < 0) tg_cli_die_last("reading the loss");
      char scale[64];
      tg_cli_precision_status(scale, sizeof scale, &m->scaler);
      bar->extra = scale;
      tg_progress_update(bar, k + 1, l, a, samples / (tg_cli_now() - t0));
      bar->extra = NULL;
    }
  }
  if (tg_mlp_metrics(m, loss, acc, 1) < 0) tg_cli_die_last("reading the loss");
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
  const char *np[2 * TG_MLP_MAX_LAYERS];
  const float *data[2 * TG_MLP_MAX_LAYERS];
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

int tg_cmd_train_mlp(int argc, char **argv) {
  train_opts o;
  parse(argc, argv, &o);
  int distributed = tg_cli_mpi_check(&o.rt);
  tg_cli_instrument_check(&o.rt);
  if (o.save) tg_cli_check_output("--save", o.save);
  struct stat st;
  if (stat(o.data_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    tg_cli_die("--data-dir: directory '%s' does not exist (install Debian's "
               "dataset-fashion-mnist or pass --data-dir)", o.data_dir);
  tg_dataset train = {0}, test = {0};
  if (tg_fashion_mnist_load(o.data_dir, 1, &train) < 0) tg_cli_die_last("training data");
  if (tg_fashion_mnist_load(o.data_dir, 0, &test) < 0) tg_cli_die_last("test data");
  if (o.batch > train.n)
    tg_cli_die("--batch %d is larger than the %d training samples", o.batch, train.n);
  o.model.widths[0] = train.features;

  if (tg_init(&o.rt) < 0) tg_cli_die_last("starting StarPU");
  int R = tg_dist_size(), root = tg_cli_is_root();
  if (distributed && (R & (R - 1)))
    tg_cli_die("%d MPI ranks: the gradient reduction tree needs a power of two", R);
  if (o.batch % R || o.micro % R)
    tg_cli_die("--batch %d and --micro-batches %d must be multiples of the %d MPI ranks",
               o.batch, o.micro, R);
  tg_cli_instrument_begin(&o.rt);
  if (root)
    fprintf(stderr, "taskgrad: %d training / %d test samples, %d CPU + %d CUDA + %d emulated workers%s, "
            "scheduler %s, %s%s\n", train.n, test.n, tg_ncpu_workers(), tg_ncuda_workers(),
            tg_nopencl_workers(), R > 1 ? " per rank" : "",
            o.rt.sched ? o.rt.sched : (getenv("STARPU_SCHED") ? getenv("STARPU_SCHED") : "default"),
            tg_precision_name(o.model.precision), tg_deterministic() ? ", deterministic reductions" : "");
  if (root && R > 1)
    fprintf(stderr, "taskgrad: %d MPI ranks, %d samples and %d micro-batches each per step\n",
            R, o.batch / R, o.micro / R);
  tg_cli_check_memory_limit(
      tg_mlp_managed_bytes(&o.model, o.batch / R, tg_ncpu_workers() + tg_ncuda_workers()),
      "this MLP and batch");
  tg_cli_precision_start(&o.prec);
  tg_mlp m;
  if (tg_mlp_create(&m, &o.model, &o.opt, o.seed) < 0) tg_cli_die_last("creating the model");
  /* every replica starts from rank 0's parameters */
  for (int l = 0; l < o.model.nlayers; l++)
    if (tg_dist_broadcast(m.w[l].handle) < 0 || tg_dist_broadcast(m.b[l].handle) < 0)
      tg_cli_die_last("broadcasting the parameters");
  tg_loader_config lc = {o.batch, o.micro / R, o.prefetch, 1, 0, o.seed, tg_dist_rank(), R};
  tg_loader *ld = tg_loader_create(&train, &lc);
  if (!ld) tg_cli_die_last("training data loader");
  /* evaluation: every rank the whole test set (identical parameters) */
  int eval_batch = test.n < 1000 ? test.n : 1000;
  tg_loader_config ec = {eval_batch, o.micro < eval_batch ? o.micro : eval_batch,
                         o.prefetch, 0, 0, 0, 0, 1};
  double test_acc = 0, t_train = 0; /* training time, evaluations excluded */
  long budget = o.steps > 0 ? o.steps : (long)o.epochs * tg_loader_batches_per_epoch(ld);
  long total_steps = 0; /* steps run: --steps, or fewer when the epochs end first */
  for (int e = 0; e < o.epochs && budget > 0; e++) {
    char label[32];
    snprintf(label, sizeof label, "epoch %d/%d", e + 1, o.epochs);
    tg_progress bar;
    int nb = tg_loader_batches_per_epoch(ld);
    if (budget < nb) nb = (int)budget;
    tg_progress_begin(&bar, label, nb);
    double tl, ta, vl;
    double t0 = tg_cli_now();
    run_epoch(&m, ld, 1, root ? &bar : NULL, &tl, &ta, &budget);
    total_steps += nb;
    if (root) tg_progress_end(&bar);
    double dt = tg_cli_now() - t0;
    t_train += dt;
    /* a fresh test loader each epoch: same order, no shuffling */
    tg_loader *tl_ld = tg_loader_create(&test, &ec);
    if (!tl_ld) tg_cli_die_last("test data loader");
    run_epoch(&m, tl_ld, 0, NULL, &vl, &test_acc, NULL);
    tg_loader_destroy(tl_ld);
    if (root)
      fprintf(stderr, "epoch %d/%d: train loss %.9g acc %.4f | test loss %.4f acc %.4f | "
              "%.1f s, %.0f samples/s\n", e + 1, o.epochs, tl, ta, vl, test_acc, dt,
              (double)nb * o.batch / dt);
  }
  tg_loader_destroy(ld);
  if (root && m.scaler.enabled)
    fprintf(stderr, "taskgrad: %s, loss scale %g, skipped steps: %ld\n",
            tg_precision_name(o.model.precision), m.scaler.scale, m.scaler.skipped);
  uint64_t sum = param_checksum(&m);
  if (R > 1 || tg_deterministic())
    fprintf(stderr, "taskgrad: rank %d parameters fnv1a64 %016llx\n", tg_dist_rank(),
            (unsigned long long)sum);
  if (root && o.save) save_params(&m, o.save);
  tg_mlp_destroy(&m);
  tg_cli_instrument_end(&o.rt);
  tg_shutdown();
  tg_dataset_free(&train);
  tg_dataset_free(&test);
  if (root) {
    fprintf(stderr, "taskgrad: trained %ld steps in %.2f s (%.0f samples/s)\n", total_steps,
            t_train, (double)total_steps * o.batch / t_train);
    printf("test accuracy: %.4f\n", test_acc);
  }
  return 0;
}
