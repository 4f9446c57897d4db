/*
 * tg_mlp_dump: runs taskgrad's MLP training step on one seeded random batch
 * and dumps everything a reference implementation needs to check it
 * (tests/test_mlp_torch.py rebuilds the model in PyTorch from the dump).
 *
 *   tg_mlp_dump --widths 20,31,7 --act relu|gelu --batch B --micro M
 *               --seed S --steps K --optimizer adamw|sgd --out FILE
 *
 * The batch (inputs uniform in [-1, 1), labels uniform in [0, classes)) comes
 * from a splitmix64 generator seeded with S (not the model's: the model is
 * tg_mlp_create(..., S)).  Optimizer hyper-parameters are
 * tg_optimizer_default()'s.  K >= 1 steps of tg_mlp_step on the same batch;
 * the mean loss of each step is read (and the metrics reset) after it; the
 * gradients of step 1 (before any update) are read after step 1 (the
 * optimizer tasks only read them).  K = 0 runs one forward_backward only.
 *
 * File layout (native little-endian, no padding):
 *   char[8]  "TGMLPDU1"
 *   int32    nlayers, act (0 relu, 1 gelu), batch, micro, steps,
 *            optimizer (0 adamw, 1 sgd)
 *   int32    widths[nlayers + 1]
 *   float32  lr, momentum, beta1, beta2, eps, weight_decay
 *   uint64   seed
 *   per layer l: float32 W (out, in), float32 b (out)        initial weights
 *   float32  X (batch, widths[0]);  int32 y (batch)
 *   float64  loss of step 1 (before any update)
 *   per layer l: float32 dW (out, in), float32 db (out)      step-1 gradients
 *   float64  loss[steps]                  loss[k] is the loss of step k + 1
 *   per layer l: float32 W (out, in), float32 b (out)        after K steps
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

/* the library's one generator (private: the tools see no src/ path) */
#include "taskgrad/mlp.h"
#include "taskgrad/rng.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"

static void usage(FILE *f, const char *prog) {
  fprintf(f,
          "usage: %s --widths W0,W1,...,WL --act relu|gelu --batch B --micro M\n"
          "          --seed S --steps K --optimizer adamw|sgd --out FILE\n",
          prog);
}

static int parse_int(const char *s, long lo, long hi, const char *what, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "tg_mlp_dump: bad %s '%s' (expected an integer in [%ld, %ld])\n",
            what, s, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

typedef struct writer {
  FILE *f;
  const char *path;
  int failed;
} writer;

static void put(writer *w, const void *p, size_t size, size_t n) {
  if (w->failed || n == 0) return;
  if (fwrite(p, size, n, w->f) != n) {
    fprintf(stderr, "tg_mlp_dump: writing %s: %s\n", w->path, strerror(errno));
    w->failed = 1;
  }
}
static void put_i32(writer *w, int32_t v) { put(w, &v, sizeof v, 1); }
static void put_f32(writer *w, float v) { put(w, &v, sizeof v, 1); }
static void put_f64(writer *w, double v) { put(w, &v, sizeof v, 1); }

/* Reads tensor t (waiting for its tasks) and writes it. */
static int put_tensor(writer *w, const tg_tensor *t) {
  size_t n = tg_tensor_numel(t);
  float *buf = malloc(sizeof(float) * n);
  if (!buf) {
    fprintf(stderr, "tg_mlp_dump: out of memory\n");
    return -1;
  }
  if (tg_tensor_read(t, buf) < 0) {
    fprintf(stderr, "tg_mlp_dump: tg_tensor_read: %s\n", tg_last_error());
    free(buf);
    return -1;
  }
  put(w, buf, sizeof(float), n);
  free(buf);
  return 0;
}

static int put_params(writer *w, const tg_mlp *m, int grads) {
  for (int l = 0; l < m->cfg.nlayers; l++) {
    if (put_tensor(w, grads ? &m->dw[l] : &m->w[l]) < 0 ||
        put_tensor(w, grads ? &m->db[l] : &m->b[l]) < 0)
      return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  tg_mlp_config cfg = {.nlayers = 0, .act = TG_ACT_RELU};
  long batch = -1, micro = 1, steps = 1;
  uint64_t seed = 1;
  tg_optimizer_kind okind = TG_OPT_ADAMW;
  const char *out = NULL;

  static const struct option opts[] = {
      {"widths", required_argument, NULL, 'w'}, {"act", required_argument, NULL, 'a'},
      {"batch", required_argument, NULL, 'b'},  {"micro", required_argument, NULL, 'm'},
      {"seed", required_argument, NULL, 's'},   {"steps", required_argument, NULL, 'k'},
      {"optimizer", required_argument, NULL, 'o'}, {"out", required_argument, NULL, 'f'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'w': {
      cfg.nlayers = -1;
      const char *p = optarg;
      int n = 0;
      while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 1 || x > 1 << 20 || n > TG_MLP_MAX_LAYERS ||
            (*end != ',' && *end != '\0')) {
          fprintf(stderr,
                  "tg_mlp_dump: bad --widths '%s' (2 to %d positive integers, "
                  "comma-separated)\n",
                  optarg, TG_MLP_MAX_LAYERS + 1);
          return 2;
        }
        cfg.widths[n++] = (int)x;
        p = *end ? end + 1 : end;
      }
      if (n < 2) {
        fprintf(stderr, "tg_mlp_dump: --widths needs at least 2 widths\n");
        return 2;
      }
      cfg.nlayers = n - 1;
      break;
    }
    case 'a':
      if (strcmp(optarg, "relu") == 0) cfg.act = TG_ACT_RELU;
      else if (strcmp(optarg, "gelu") == 0) cfg.act = TG_ACT_GELU;
      else {
        fprintf(stderr, "tg_mlp_dump: bad --act '%s' (relu or gelu)\n", optarg);
        return 2;
      }
      break;
    case 'b':
      if (parse_int(optarg, 1, 1 << 20, "--batch", &batch) < 0) return 2;
      break;
    case 'm':
      if (parse_int(optarg, 1, 1 << 20, "--micro", &micro) < 0) return 2;
      break;
    case 'k':
      if (parse_int(optarg, 0, 1 << 20, "--steps", &steps) < 0) return 2;
      break;
    case 's': {
      char *end;
      errno = 0;
      unsigned long long x = strtoull(optarg, &end, 10);
      if (errno || end == optarg || *end) {
        fprintf(stderr, "tg_mlp_dump: bad --seed '%s'\n", optarg);
        return 2;
      }
      seed = x;
      break;
    }
    case 'o':
      if (strcmp(optarg, "adamw") == 0) okind = TG_OPT_ADAMW;
      else if (strcmp(optarg, "sgd") == 0) okind = TG_OPT_SGD;
      else {
        fprintf(stderr, "tg_mlp_dump: bad --optimizer '%s' (adamw or sgd)\n", optarg);
        return 2;
      }
      break;
    case 'f': out = optarg; break;
    case 'h': usage(stdout, argv[0]); return 0;
    default: usage(stderr, argv[0]); return 2;
    }
  }
  if (optind < argc || cfg.nlayers < 1 || batch < 1 || !out) {
    if (optind < argc) fprintf(stderr, "tg_mlp_dump: unexpected argument '%s'\n", argv[optind]);
    else fprintf(stderr, "tg_mlp_dump: --widths, --batch and --out are required\n");
    usage(stderr, argv[0]);
    return 2;
  }
  if (micro > batch) {
    fprintf(stderr, "tg_mlp_dump: --micro %ld exceeds --batch %ld\n", micro, batch);
    return 2;
  }
  const int F = cfg.widths[0], C = cfg.widths[cfg.nlayers], L = cfg.nlayers;
  const int B = (int)batch, M = (int)micro, K = (int)steps;

  if (tg_init(NULL) < 0) {
    fprintf(stderr, "tg_mlp_dump: tg_init: %s\n", tg_last_error());
    return 1;
  }
  tg_optimizer_config opt = tg_optimizer_default(okind);
  tg_mlp m;
  if (tg_mlp_create(&m, &cfg, &opt, seed) < 0) {
    fprintf(stderr, "tg_mlp_dump: tg_mlp_create: %s\n", tg_last_error());
    tg_shutdown();
    return 1;
  }
  tg_tensor x, y;
  starpu_data_handle_t *xs = calloc((size_t)M, sizeof *xs);
  starpu_data_handle_t *ys = calloc((size_t)M, sizeof *ys);
  if (!xs || !ys || tg_tensor_alloc(&x, B, F, TG_F32) < 0 ||
      tg_tensor_alloc(&y, B, 1, TG_I32) < 0) {
    fprintf(stderr, "tg_mlp_dump: allocating the batch failed: %s\n", tg_last_error());
    return 1;
  }
  /* no task has touched the batch buffers yet */
  uint64_t s = seed ^ 0xA0761D6478BD642FULL;
  float *xh = x.host;
  int32_t *yh = y.host;
  for (size_t i = 0; i < (size_t)B * F; i++)
    xh[i] = (float)((double)(tg_splitmix64(&s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  for (int r = 0; r < B; r++) yh[r] = (int32_t)(tg_splitmix64(&s) % (uint64_t)C);

  writer w = {.f = fopen(out, "wb"), .path = out, .failed = 0};
  if (!w.f) {
    fprintf(stderr, "tg_mlp_dump: cannot open %s: %s\n", out, strerror(errno));
    return 1;
  }
  put(&w, "TGMLPDU1", 1, 8);
  int32_t hdr[6] = {L, (int32_t)cfg.act, B, M, K, (int32_t)okind};
  put(&w, hdr, sizeof hdr[0], 6);
  for (int l = 0; l <= L; l++) put_i32(&w, cfg.widths[l]);
  float hyper[6] = {opt.lr, opt.momentum, opt.beta1, opt.beta2, opt.eps, opt.weight_decay};
  for (int i = 0; i < 6; i++) put_f32(&w, hyper[i]);
  put(&w, &seed, sizeof seed, 1);
  int rc = put_params(&w, &m, 0);
  put(&w, xh, sizeof(float), (size_t)B * F);
  put(&w, yh, sizeof(int32_t), (size_t)B);

  struct starpu_data_filter filt = {.filter_func = starpu_matrix_filter_vertical_block,
                                    .nchildren = (unsigned)M};
  starpu_data_partition(x.handle, &filt);
  starpu_data_partition(y.handle, &filt);
  for (int i = 0; i < M; i++) {
    xs[i] = starpu_data_get_sub_data(x.handle, 1, i);
    ys[i] = starpu_data_get_sub_data(y.handle, 1, i);
  }
  tg_batch tb = {.rows = B, .nmicro = M, .x = xs, .y = ys};

  double *losses = calloc((size_t)K + 1, sizeof *losses);
  if (!losses) rc = -1;
  for (int k = 0; rc == 0 && k < (K > 0 ? K : 1); k++) {
    int r = K > 0 ? tg_mlp_step(&m, &tb) : tg_mlp_forward_backward(&m, &tb);
    if (r == 0) r = tg_mlp_metrics(&m, &losses[k], NULL, 1);
    if (r < 0) {
      fprintf(stderr, "tg_mlp_dump: step %d: %s\n", k + 1, tg_last_error());
      rc = -1;
      break;
    }
    if (k == 0) {
      put_f64(&w, losses[0]);
      rc = put_params(&w, &m, 1);
    }
  }
  for (int k = 0; rc == 0 && k < K; k++) put_f64(&w, losses[k]);
  if (rc == 0) rc = put_params(&w, &m, 0);
  free(losses);

  starpu_task_wait_for_all();
  starpu_data_unpartition(x.handle, STARPU_MAIN_RAM);
  starpu_data_unpartition(y.handle, STARPU_MAIN_RAM);
  tg_tensor_free(&x);
  tg_tensor_free(&y);
  free(xs);
  free(ys);
  tg_mlp_destroy(&m);
  tg_shutdown();
  if (fclose(w.f) != 0 && !w.failed) {
    fprintf(stderr, "tg_mlp_dump: closing %s: %s\n", out, strerror(errno));
    w.failed = 1;
  }
  if (rc < 0 || w.failed) {
    remove(out);
    return 1;
  }
  return 0;
}
