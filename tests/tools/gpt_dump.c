/*
 * tg_gpt_dump: runs taskgrad's GPT-2 training step (graphs/gpt.c) on one
 * batch and dumps everything a reference implementation needs to check it
 * (tests/test_gpt_torch.py rebuilds the model in PyTorch from the same
 * checkpoint and compares).
 *
 *   tg_gpt_dump --model FILE --tokens FILE --batch B --seq T --micro M
 *               --attention naive|chunked --chunk K --splits S --steps N
 *               --lr X --out FILE
 *
 * --model is an llm.c checkpoint, --tokens an llm.c token file (see
 * taskgrad/llmc.h).  The batch is the first B*T + 1 tokens: inputs
 * tokens[0 .. B*T), targets tokens[1 .. B*T], B sequences of T tokens, split
 * into M micro-batches of whole sequences; every step uses this same batch.
 * --splits is the attention tasks per micro-batch (0: one per worker,
 * tg_gpt_run_config.attn_splits).  Defaults: M 1, chunked, chunk 64,
 * splits 1, N 1, lr 1e-3.
 *
 * Order of work: the logits of the initial model (tg_gpt_logits on the
 * inputs, b = B sequences of T); step 1 = tg_gpt_forward_backward, its
 * loss (tg_gpt_loss, reset) and gradients (tg_gpt_read_grads), then
 * tg_gpt_update(lr); steps 2 .. N = tg_gpt_step(lr), each loss read and
 * reset after its step; then the final parameters.  N = 0 runs one
 * forward_backward and no update (no losses, final = initial parameters).
 * AdamW hyper-parameters are tg_optimizer_default(TG_OPT_ADAMW)'s with the
 * given lr; tg_gpt_update applies the same weight decay to every one of
 * the 16 tensors (as llm.c does), which the dump records per tensor.
 *
 * File layout (native little-endian, no padding):
 *   char[8]  "TGGPTDU1"
 *   int32    maxT, V, L, NH, C, Vp           the checkpoint's configuration
 *   int32    B, T, M, attention (0 naive, 1 chunked), chunk,
 *            splits (effective: g.run.attn_splits), steps N,
 *            classifier_chunk, nparams (total floats, tg_gpt_param_sizes)
 *   float32  lr, beta1, beta2, eps
 *   float32  weight_decay[16]                per tensor, llm.c order
 *   int32    tokens[B*T + 1]                 the batch's tokens
 *   float64  loss of step 1 (before any update)
 *   float32  logits (B*T, Vp)                initial model, all Vp columns
 *   float32  grads[nparams]                  step 1, llm.c layout
 *   float64  loss[N]                         loss[k] of step k + 1
 *   float32  params[nparams]                 after N steps, llm.c layout
 * Exit status: 0 ok, 1 runtime failure, 2 bad command line or input files.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "taskgrad/gpt.h"
#include "taskgrad/llmc.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"

static void usage(FILE *f, const char *prog) {
  fprintf(f,
          "usage: %s --model FILE --tokens FILE --batch B --seq T [--micro M]\n"
          "          [--attention naive|chunked] [--chunk K] [--splits S]\n"
          "          [--classifier-chunk R] [--classifier-blocks K] [--steps N]\n"
          "          [--lr X] --out FILE\n",
          prog);
}

static int parse_int(const char *s, long lo, long hi, const char *what, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "tg_gpt_dump: bad %s '%s' (expected an integer in [%ld, %ld])\n",
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
    fprintf(stderr, "tg_gpt_dump: writing %s: %s\n", w->path, strerror(errno));
    w->failed = 1;
  }
}
static void put_i32(writer *w, int32_t v) { put(w, &v, sizeof v, 1); }
static void put_f32(writer *w, float v) { put(w, &v, sizeof v, 1); }
static void put_f64(writer *w, double v) { put(w, &v, sizeof v, 1); }

int main(int argc, char **argv) {
  const char *model = NULL, *tokfile = NULL, *out = NULL;
  long B = -1, T = -1, M = 1, chunk = 64, splits = 1, steps = 1, cchunk = 0, cblocks = 0;
  tg_attention_kind attention = TG_ATTN_CHUNKED;
  float lr = 1e-3f;

  static const struct option opts[] = {
      {"model", required_argument, NULL, 'p'},  {"tokens", required_argument, NULL, 't'},
      {"batch", required_argument, NULL, 'b'},  {"seq", required_argument, NULL, 'T'},
      {"micro", required_argument, NULL, 'm'},  {"attention", required_argument, NULL, 'a'},
      {"chunk", required_argument, NULL, 'c'},  {"splits", required_argument, NULL, 's'},
      {"steps", required_argument, NULL, 'k'},  {"lr", required_argument, NULL, 'l'},
      {"out", required_argument, NULL, 'f'},    {"help", no_argument, NULL, 'h'},
      {"classifier-chunk", required_argument, NULL, 'r'},
      {"classifier-blocks", required_argument, NULL, 'q'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'p': model = optarg; break;
    case 't': tokfile = optarg; break;
    case 'f': out = optarg; break;
    case 'b': if (parse_int(optarg, 1, 1 << 16, "--batch", &B) < 0) return 2; break;
    case 'T': if (parse_int(optarg, 1, 1 << 16, "--seq", &T) < 0) return 2; break;
    case 'm': if (parse_int(optarg, 1, 1 << 16, "--micro", &M) < 0) return 2; break;
    case 'c': if (parse_int(optarg, 1, 1 << 20, "--chunk", &chunk) < 0) return 2; break;
    case 's': if (parse_int(optarg, 0, TG_MAX_SPLIT, "--splits", &splits) < 0) return 2; break;
    case 'r':
      if (parse_int(optarg, 1, 1 << 20, "--classifier-chunk", &cchunk) < 0) return 2;
      break;
    case 'q':
      if (parse_int(optarg, 1, TG_MAX_SPLIT, "--classifier-blocks", &cblocks) < 0) return 2;
      break;
    case 'k': if (parse_int(optarg, 0, 1 << 20, "--steps", &steps) < 0) return 2; break;
    case 'a':
      if (strcmp(optarg, "naive") == 0) attention = TG_ATTN_NAIVE;
      else if (strcmp(optarg, "chunked") == 0) attention = TG_ATTN_CHUNKED;
      else {
        fprintf(stderr, "tg_gpt_dump: bad --attention '%s' (naive or chunked)\n", optarg);
        return 2;
      }
      break;
    case 'l': {
      char *end;
      errno = 0;
      double x = strtod(optarg, &end);
      if (errno || end == optarg || *end || !(x >= 0.0) || x > 10.0) {
        fprintf(stderr, "tg_gpt_dump: bad --lr '%s' (a number in [0, 10])\n", optarg);
        return 2;
      }
      lr = (float)x;
      break;
    }
    case 'h': usage(stdout, argv[0]); return 0;
    default: usage(stderr, argv[0]); return 2;
    }
  }
  if (optind < argc || !model || !tokfile || !out || B < 1 || T < 1) {
    if (optind < argc) fprintf(stderr, "tg_gpt_dump: unexpected argument '%s'\n", argv[optind]);
    else fprintf(stderr, "tg_gpt_dump: --model, --tokens, --batch, --seq and --out are required\n");
    usage(stderr, argv[0]);
    return 2;
  }
  if (B % M) {
    fprintf(stderr, "tg_gpt_dump: --micro %ld does not divide --batch %ld\n", M, B);
    return 2;
  }

  tg_gpt_config cfg;
  float *params = NULL;
  if (tg_llmc_model_read(model, &cfg, &params) < 0) {
    fprintf(stderr, "tg_gpt_dump: %s\n", tg_last_error());
    return 2;
  }
  uint16_t *toks = NULL;
  size_t ntok = 0;
  if (tg_llmc_tokens_read(tokfile, cfg.vocab_size, &toks, &ntok) < 0) {
    fprintf(stderr, "tg_gpt_dump: %s\n", tg_last_error());
    free(params);
    return 2;
  }
  const int n = (int)(B * T), Vp = cfg.padded_vocab_size;
  if (ntok < (size_t)n + 1 || T > cfg.max_seq_len) {
    if (T > cfg.max_seq_len)
      fprintf(stderr, "tg_gpt_dump: --seq %ld exceeds the model's maxT %d\n", T,
              cfg.max_seq_len);
    else
      fprintf(stderr, "tg_gpt_dump: %s holds %zu tokens, the batch needs B*T+1 = %d\n",
              tokfile, ntok, n + 1);
    free(params);
    free(toks);
    return 2;
  }
  size_t sizes[TG_GPT_NPARAMS];
  const size_t nparams = tg_gpt_param_sizes(&cfg, sizes);

  if (tg_init(NULL) < 0) {
    fprintf(stderr, "tg_gpt_dump: tg_init: %s\n", tg_last_error());
    return 1;
  }
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  opt.lr = lr;
  tg_gpt_run_config run = tg_gpt_run_default((int)B, (int)T);
  run.nmicro = (int)M;
  run.attention = attention;
  run.chunk = (int)chunk;
  run.attn_splits = (int)splits;
  if (cchunk > 0) run.classifier_chunk = (int)cchunk; /* else the default */
  run.classifier_blocks = (int)cblocks;                 /* 0: auto */
  tg_gpt g;
  if (tg_gpt_create(&g, &cfg, params, &run, &opt) < 0) {
    fprintf(stderr, "tg_gpt_dump: tg_gpt_create: %s\n", tg_last_error());
    tg_shutdown();
    return 1;
  }

  /* the batch: inputs and targets (n, 1) int32, statically split into M row
   * blocks; a separate unsplit copy of the inputs for tg_gpt_logits (a
   * partitioned handle cannot be used as a whole) */
  tg_tensor x, y, xl;
  tg_split xs = {0}, ys = {0};
  if (tg_tensor_alloc(&x, n, 1, TG_I32) < 0 || tg_tensor_alloc(&y, n, 1, TG_I32) < 0 ||
      tg_tensor_alloc(&xl, n, 1, TG_I32) < 0) {
    fprintf(stderr, "tg_gpt_dump: allocating the batch: %s\n", tg_last_error());
    return 1;
  }
  int32_t *xh = x.host, *yh = y.host, *xlh = xl.host;
  for (int i = 0; i < n; i++) { /* no task has touched them yet */
    xh[i] = xlh[i] = toks[i];
    yh[i] = toks[i + 1];
  }
  if (tg_tensor_split_static(&x, (int)M, &xs) < 0 ||
      tg_tensor_split_static(&y, (int)M, &ys) < 0) {
    fprintf(stderr, "tg_gpt_dump: splitting the batch: %s\n", tg_last_error());
    return 1;
  }
  tg_batch tb = {.rows = n, .nmicro = (int)M, .x = xs.parts, .y = ys.parts};

  writer w = {.f = fopen(out, "wb"), .path = out, .failed = 0};
  if (!w.f) {
    fprintf(stderr, "tg_gpt_dump: cannot open %s: %s\n", out, strerror(errno));
    return 1;
  }
  put(&w, "TGGPTDU1", 1, 8);
  int32_t hdr[] = {cfg.max_seq_len, cfg.vocab_size, cfg.num_layers, cfg.num_heads,
                   cfg.channels,    Vp,             (int32_t)B,     (int32_t)T,
                   (int32_t)M,      (int32_t)attention, (int32_t)chunk,
                   g.run.attn_splits, (int32_t)steps, g.run.classifier_chunk,
                   (int32_t)nparams};
  put(&w, hdr, sizeof hdr[0], sizeof hdr / sizeof hdr[0]);
  float hyper[4] = {lr, g.optim.opt.beta1, g.optim.opt.beta2, g.optim.opt.eps};
  put(&w, hyper, sizeof hyper[0], 4);
  /* tg_gpt_update uses g.optim.opt.weight_decay for every tensor */
  for (int p = 0; p < TG_GPT_NPARAMS; p++) put_f32(&w, g.optim.opt.weight_decay);
  for (int i = 0; i <= n; i++) put_i32(&w, toks[i]);

  int rc = 0;
  float *buf = malloc(sizeof(float) * (nparams > (size_t)n * Vp ? nparams : (size_t)n * Vp));
  double *losses = calloc((size_t)steps + 1, sizeof *losses);
  if (!buf || !losses) {
    fprintf(stderr, "tg_gpt_dump: out of memory\n");
    rc = -1;
  }
  /* logits of the initial model */
  float *logits = rc == 0 ? malloc(sizeof(float) * (size_t)n * Vp) : NULL;
  if (rc == 0 && (!logits || tg_gpt_logits(&g, &xl, (int)T, logits) < 0)) {
    fprintf(stderr, "tg_gpt_dump: tg_gpt_logits: %s\n", logits ? tg_last_error() : "no memory");
    rc = -1;
  }
  /* step 1: loss and gradients before any update */
  if (rc == 0 && (tg_gpt_forward_backward(&g, &tb) < 0 ||
                  tg_gpt_loss(&g, &losses[0], 1) < 0 || tg_gpt_read_grads(&g, buf) < 0)) {
    fprintf(stderr, "tg_gpt_dump: step 1: %s\n", tg_last_error());
    rc = -1;
  }
  if (rc == 0) {
    put_f64(&w, losses[0]);
    put(&w, logits, sizeof(float), (size_t)n * Vp);
    put(&w, buf, sizeof(float), nparams);
  }
  if (rc == 0 && steps > 0 && tg_gpt_update(&g, lr) < 0) {
    fprintf(stderr, "tg_gpt_dump: update 1: %s\n", tg_last_error());
    rc = -1;
  }
  for (long k = 1; rc == 0 && k < steps; k++)
    if (tg_gpt_step(&g, &tb, lr) < 0 || tg_gpt_loss(&g, &losses[k], 1) < 0) {
      fprintf(stderr, "tg_gpt_dump: step %ld: %s\n", k + 1, tg_last_error());
      rc = -1;
    }
  if (rc == 0) put(&w, losses, sizeof(double), (size_t)steps);
  if (rc == 0 && tg_gpt_read_params(&g, buf) < 0) {
    fprintf(stderr, "tg_gpt_dump: reading the parameters: %s\n", tg_last_error());
    rc = -1;
  }
  if (rc == 0) put(&w, buf, sizeof(float), nparams);

  starpu_task_wait_for_all();
  tg_split_free(&x, &xs);
  tg_split_free(&y, &ys);
  tg_tensor_free(&x);
  tg_tensor_free(&y);
  tg_tensor_free(&xl);
  tg_gpt_destroy(&g);
  tg_shutdown();
  free(buf);
  free(logits);
  free(losses);
  free(params);
  free(toks);
  if (fclose(w.f) != 0 && !w.failed) {
    fprintf(stderr, "tg_gpt_dump: closing %s: %s\n", out, strerror(errno));
    w.failed = 1;
  }
  if (rc < 0 || w.failed) {
    remove(out);
    return 1;
  }
  return 0;
}
