/*
 * test_gpt_precision: the GPT training step in bf16 and fp16 (mixed
 * precision, include/taskgrad/precision.h), with 1 CPU worker (the program
 * re-runs itself with STARPU_NCPU=1 so that memory peaks are sequential):
 *
 *  1. closeness: one step's loss and gradients in bf16 / fp16 against fp32
 *     from the same weights: loss within 1e-2 (relative), gradients within
 *     0.1 (relative 2-norm, bf16 keeps 8 bits), and the gradients further
 *     from fp32 than 1e-4, which shows the 16-bit path ran;
 *  2. padding: an unaligned model (C = 60, V = 250) gives the same losses
 *     over 3 steps with the vocabulary unpadded (Vp = 250) and padded to a
 *     multiple of 64 (Vp = 256, the padding rows zero), in fp32 and bf16:
 *     bitwise equal, since the padded rows never enter the softmax;
 *  3. injected overflow: fp16 with an initial loss scale of 1e30: every step
 *     whose gradients overflowed (the scaler's skipped count grew) leaves
 *     all parameters bit-identical, every other step changes them; some
 *     steps are skipped, then training proceeds at a lower scale;
 *  4. memory: the peak of StarPU-managed memory above the level before the
 *     step (a polling thread reads starpu_memory_get_total - _available
 *     for the main RAM), for the second step (workspaces already allocated):
 *     bf16 at most 55% of fp32.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <starpu.h>

#include "self_spawn.h"
#include "taskgrad/gpt.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "testutil.h"

typedef struct model {
  tg_gpt g;
  tg_tensor x, y;
  tg_split xs, ys;
  tg_batch batch;
  size_t np;
} model;

static void die(const char *what) {
  fprintf(stderr, "FATAL: %s: %s\n", what, tg_last_error());
  exit(1);
}

/* A model of cfg from params, one batch of B x T tokens in M micro-batches. */
static void model_open(model *m, const tg_gpt_config *cfg, const float *params, int B, int T,
                       int M, tg_precision prec, int scaling, float scale,
                       const int32_t *tokens) {
  memset(m, 0, sizeof *m);
  size_t sizes[TG_GPT_NPARAMS];
  m->np = tg_gpt_param_sizes(cfg, sizes);
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  tg_gpt_run_config run = tg_gpt_run_default(B, T);
  run.nmicro = M;
  run.attn_splits = 1;
  run.amp.precision = prec;
  run.amp.loss_scaling = scaling;
  run.amp.loss_scale = scale;
  if (tg_gpt_create(&m->g, cfg, params, &run, &opt) < 0) die("tg_gpt_create");
  if (tg_tensor_alloc(&m->x, B * T, 1, TG_I32) < 0 || tg_tensor_alloc(&m->y, B * T, 1, TG_I32) < 0)
    die("batch");
  memcpy(m->x.host, tokens, sizeof(int32_t) * B * T);
  memcpy(m->y.host, tokens + 1, sizeof(int32_t) * B * T);
  if (tg_tensor_split_static(&m->x, M, &m->xs) < 0 || tg_tensor_split_static(&m->y, M, &m->ys) < 0)
    die("split");
  m->batch = (tg_batch){.rows = B * T, .nmicro = M, .x = m->xs.parts, .y = m->ys.parts};
}

static void model_close(model *m) {
  starpu_task_wait_for_all();
  tg_split_free(&m->x, &m->xs);
  tg_split_free(&m->y, &m->ys);
  tg_tensor_free(&m->x);
  tg_tensor_free(&m->y);
  tg_gpt_destroy(&m->g);
}

static double step(model *m, float lr) {
  double loss;
  if (tg_gpt_step(&m->g, &m->batch, lr) < 0 || tg_gpt_loss(&m->g, &loss, 1) < 0) die("step");
  return loss;
}

static int32_t *random_tokens(tg_rng *rng, int n, int V) {
  int32_t *t = tg_test_malloc(sizeof(int32_t) * (n + 1));
  for (int i = 0; i <= n; i++) t[i] = (int32_t)(tg_rng_next(rng) % (uint64_t)V);
  return t;
}

/* GPT-2 initial parameters of cfg (tg_gpt_init_params); *np: their count */
static float *init_params(const tg_gpt_config *cfg, uint64_t seed, size_t *np) {
  size_t sizes[TG_GPT_NPARAMS];
  *np = tg_gpt_param_sizes(cfg, sizes);
  float *params = tg_test_malloc(sizeof(float) * *np);
  tg_gpt_init_params(cfg, seed, params);
  return params;
}

/* ---- 1. closeness to fp32 ----------------------------------------------------- */

static void closeness(void) {
  tg_gpt_config cfg = {.max_seq_len = 32, .vocab_size = 128, .num_layers = 2,
                       .num_heads = 4, .channels = 64, .padded_vocab_size = 128};
  tg_rng rng = {11};
  size_t np;
  float *params = init_params(&cfg, 5, &np);
  int32_t *tok = random_tokens(&rng, 4 * 32, cfg.vocab_size);
  float *g32 = tg_test_malloc(sizeof(float) * np), *g16 = tg_test_malloc(sizeof(float) * np);
  double l32 = 0;
  for (int p = 0; p < 3; p++) {
    tg_precision prec = p == 0 ? TG_PREC_FP32 : p == 1 ? TG_PREC_BF16 : TG_PREC_FP16;
    model m;
    model_open(&m, &cfg, params, 4, 32, 2, prec, prec == TG_PREC_FP16, 1024.0f, tok);
    double loss;
    if (tg_gpt_forward_backward(&m.g, &m.batch) < 0 || tg_gpt_loss(&m.g, &loss, 1) < 0)
      die("forward_backward");
    if (tg_gpt_read_grads(&m.g, p == 0 ? g32 : g16) < 0) die("read grads");
    if (prec == TG_PREC_FP16) /* the gradients are those of the scaled loss */
      for (size_t i = 0; i < np; i++) g16[i] /= 1024.0f;
    model_close(&m);
    if (p == 0) {
      l32 = loss;
      continue;
    }
    double le = fabs(loss - l32) / l32, ge = tg_rel_err_f32(g16, g32, np);
    CHECK(le <= 1e-2, "%s loss %.6f vs fp32 %.6f (rel %.2e)", tg_precision_name(prec), loss, l32,
          le);
    CHECK(ge <= 0.1 && ge > 1e-4, "%s gradients: rel err %.2e vs fp32 (expected in (1e-4, 0.1])",
          tg_precision_name(prec), ge);
    printf("ok   %s: loss %.6f vs fp32 %.6f (rel %.1e), gradients rel err %.2e\n",
           tg_precision_name(prec), loss, l32, le, ge);
  }
  free(params);
  free(tok);
  free(g32);
  free(g16);
}

/* ---- 2. padding ----------------------------------------------------------------- */

static void padding(void) {
  tg_gpt_config c0 = {.max_seq_len = 16, .vocab_size = 250, .num_layers = 2,
                      .num_heads = 4, .channels = 60, .padded_vocab_size = 250}, c1 = c0;
  c1.padded_vocab_size = 256;
  size_t s0[TG_GPT_NPARAMS], s1[TG_GPT_NPARAMS];
  size_t n0 = tg_gpt_param_sizes(&c0, s0), n1 = tg_gpt_param_sizes(&c1, s1);
  float *p0 = tg_test_malloc(sizeof(float) * n0), *p1 = tg_test_malloc(sizeof(float) * n1);
  tg_gpt_init_params(&c0, 9, p0);
  /* wte is the first tensor: (Vp, C); the padded rows are zero */
  memset(p1, 0, sizeof(float) * n1);
  memcpy(p1, p0, sizeof(float) * s0[TG_WTE]);
  memcpy(p1 + s1[TG_WTE], p0 + s0[TG_WTE], sizeof(float) * (n0 - s0[TG_WTE]));
  tg_rng rng = {21};
  int32_t *tok = random_tokens(&rng, 4 * 16, 250);
  for (int p = 0; p < 2; p++) {
    tg_precision prec = p ? TG_PREC_BF16 : TG_PREC_FP32;
    double loss[2][3];
    for (int k = 0; k < 2; k++) {
      model m;
      model_open(&m, k ? &c1 : &c0, k ? p1 : p0, 4, 16, 2, prec, 0, 0, tok);
      for (int s = 0; s < 3; s++) loss[k][s] = step(&m, 1e-3f);
      model_close(&m);
    }
    int same = 1;
    for (int s = 0; s < 3; s++) same &= loss[0][s] == loss[1][s];
    CHECK(same, "%s: C=60 V=250 losses unpadded %.9g %.9g %.9g vs Vp=256 %.9g %.9g %.9g",
          tg_precision_name(prec), loss[0][0], loss[0][1], loss[0][2], loss[1][0], loss[1][1],
          loss[1][2]);
    printf("ok   %s C=60 V=250: 3 losses bitwise equal unpadded and padded to Vp=256 (%.7f)\n",
           tg_precision_name(prec), loss[0][2]);
  }
  free(p0);
  free(p1);
  free(tok);
}

/* ---- 3. injected overflow ---------------------------------------------------- */

static void overflow(void) {
  tg_gpt_config cfg = {.max_seq_len = 16, .vocab_size = 64, .num_layers = 2,
                       .num_heads = 4, .channels = 32, .padded_vocab_size = 64};
  size_t np;
  float *params = init_params(&cfg, 3, &np);
  tg_rng rng = {31};
  int32_t *tok = random_tokens(&rng, 4 * 16, cfg.vocab_size);
  model m;
  model_open(&m, &cfg, params, 4, 16, 2, TG_PREC_FP16, 1, 1e30f, tok);
  float *before = tg_test_malloc(sizeof(float) * np), *after = tg_test_malloc(sizeof(float) * np);
  if (tg_gpt_read_params(&m.g, before) < 0) die("read params");
  int steps = 0, skipped_ok = 0, applied_ok = 0, wrong = 0, optimizer_steps = 0;
  while (steps < 200 && (m.g.optim.scaler.skipped == 0 || applied_ok < 3)) {
    long sk = m.g.optim.scaler.skipped;
    float scale = m.g.optim.scaler.scale;
    step(&m, 1e-3f);
    steps++;
    if (tg_gpt_read_params(&m.g, after) < 0) die("read params");
    int same = memcmp(before, after, sizeof(float) * np) == 0;
    int skipped = m.g.optim.scaler.skipped == sk + 1;
    if (skipped && same && m.g.optim.scaler.scale == scale / 2) skipped_ok++;
    else if (!skipped && !same && m.g.optim.scaler.skipped == sk) applied_ok++;
    else {
      wrong++;
      fprintf(stderr, "step %d: skipped %d, parameters %s, scale %g -> %g\n", steps, skipped,
              same ? "unchanged" : "changed", scale, m.g.optim.scaler.scale);
    }
    optimizer_steps = m.g.optim.step;
    memcpy(before, after, sizeof(float) * np);
  }
  CHECK(wrong == 0, "fp16 overflow: %d steps neither cleanly skipped nor applied", wrong);
  CHECK(skipped_ok > 0 && applied_ok >= 3,
        "fp16 overflow: %d skipped, %d applied steps in %d (expected both)", skipped_ok,
        applied_ok, steps);
  CHECK(optimizer_steps == applied_ok, "AdamW counted %d steps, %d were applied",
        optimizer_steps, applied_ok);
  CHECK(m.g.optim.scaler.scale < 1e30f, "the scale stayed at %g", m.g.optim.scaler.scale);
  printf("ok   fp16, loss scale 1e30: %d steps skipped with parameters bit-identical, then %d "
         "applied at scale %g\n", skipped_ok, applied_ok, m.g.optim.scaler.scale);
  model_close(&m);
  free(params);
  free(tok);
  free(before);
  free(after);
}

/* ---- 4. activation memory ------------------------------------------------------ */

static volatile int poll_on;
static long long poll_peak;

static long long ram_used(void) {
  return (long long)(starpu_memory_get_total(STARPU_MAIN_RAM) -
                     starpu_memory_get_available(STARPU_MAIN_RAM));
}

static void *poller(void *arg) {
  (void)arg;
  while (poll_on) {
    long long u = ram_used();
    if (u > poll_peak) poll_peak = u;
    usleep(20);
  }
  return NULL;
}

static long long step_peak(tg_precision prec) {
  tg_gpt_config cfg = {.max_seq_len = 64, .vocab_size = 64, .num_layers = 4,
                       .num_heads = 4, .channels = 64, .padded_vocab_size = 64};
  size_t np;
  float *params = init_params(&cfg, 7, &np);
  tg_rng rng = {41};
  int32_t *tok = random_tokens(&rng, 8 * 64, cfg.vocab_size);
  model m;
  model_open(&m, &cfg, params, 8, 64, 1, prec, 0, 0, tok);
  step(&m, 1e-3f); /* first step: workspaces */
  starpu_task_wait_for_all();
  long long base = ram_used();
  poll_peak = base;
  poll_on = 1;
  pthread_t th;
  if (pthread_create(&th, NULL, poller, NULL) != 0) die("pthread_create");
  /* three steps under one poll: a sampler that a loaded machine delays
   * catches the peak in one of them (one step alone missed it under
   * ctest -j2) */
  for (int k = 0; k < 3; k++) step(&m, 1e-3f);
  starpu_task_wait_for_all();
  poll_on = 0;
  pthread_join(th, NULL);
  model_close(&m);
  free(params);
  free(tok);
  return poll_peak - base;
}

static void memory(void) {
  long long f = step_peak(TG_PREC_FP32), b = step_peak(TG_PREC_BF16);
  double ratio = f > 0 ? (double)b / f : 1.0;
  CHECK(f > 0 && ratio <= 0.55, "bf16 step peak %lld bytes is %.1f%% of fp32's %lld (at most 55%%)",
        b, 100 * ratio, f);
  printf("ok   activation memory of a step (StarPU-managed peak above the step's start): fp32 "
         "%lld bytes, bf16 %lld bytes (%.1f%%)\n", f, b, 100 * ratio);
}

static int child(void) {
  if (tg_init(NULL) != 0) die("tg_init");
  closeness();
  padding();
  overflow();
  memory();
  tg_shutdown();
  return tg_test_finish("test_gpt_precision");
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "child")) return child();
  static const char *const drop[] = {"STARPU_NCPU=", "STARPU_NCPUS=", "STARPU_NCUDA=", NULL};
  static const char *const add[] = {"STARPU_NCPU=1", "STARPU_NCUDA=0", NULL};
  static char out[1 << 16];
  int rc = tg_test_run_self(NULL, drop, add, out, sizeof out, "test_gpt_precision");
  fputs(out, stdout);
  CHECK(rc == 0, "the child failed (see above)");
  return tg_test_finish("test_gpt_precision");
}
