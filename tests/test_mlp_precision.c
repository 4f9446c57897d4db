/*
 * test_mlp_precision: the MLP step in bf16 and fp16 (tg_mlp_config.amp)
 * against fp32 from the same initial weights, on one batch of 3
 * micro-batches (widths 23-37-19-10, GELU, AdamW):
 *  - the first forward/backward: loss within 1e-2 (relative) of fp32, weight
 *    gradients within 0.1 (relative 2-norm) and further from fp32 than 1e-4,
 *    which shows that the 16-bit path ran (fp16's gradients are those of
 *    the scaled loss, divided back here);
 *  - an injected overflow: fp16 with an initial loss scale of 1e30 skips
 *    steps with every parameter bit-identical, halving the scale each time,
 *    then applies steps at a lower scale;
 *  - the refusals: a 16-bit precision with SGD or with tiles, loss scaling
 *    in fp32.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "taskgrad/mlp.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "testutil.h"

enum { B = 45, M = 3, NL = 3 };
static const int WIDTHS[NL + 1] = {23, 37, 19, 10};

typedef struct model {
  tg_mlp m;
  tg_tensor x, y;  /* (B, 23) features, (B, 1) labels */
  tg_split xs, ys; /* the micro-batches */
  tg_batch batch;
} model;

static void die(const char *what) {
  fprintf(stderr, "FATAL: %s: %s\n", what, tg_last_error());
  exit(1);
}

static tg_mlp_config config(tg_precision prec, int scaling, float scale) {
  tg_mlp_config c = {.nlayers = NL, .act = TG_ACT_GELU, .amp = {.precision = prec,
                     .loss_scaling = scaling, .loss_scale = scale}};
  for (int l = 0; l <= NL; l++) c.widths[l] = WIDTHS[l];
  return c;
}

static void model_open(model *d, tg_precision prec, int scaling, float scale) {
  memset(d, 0, sizeof *d);
  tg_mlp_config c = config(prec, scaling, scale);
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  if (tg_mlp_create(&d->m, &c, &opt, 77) < 0) die("tg_mlp_create");
  if (tg_tensor_alloc(&d->x, B, WIDTHS[0], TG_F32) < 0 || tg_tensor_alloc(&d->y, B, 1, TG_I32) < 0)
    die("batch");
  tg_rng rng = {.s = 123};
  tg_rng_fill(&rng, d->x.host, (size_t)B * WIDTHS[0], 1.0f);
  for (int i = 0; i < B; i++) ((int32_t *)d->y.host)[i] = (int32_t)(tg_rng_next(&rng) % 10);
  if (tg_tensor_split_static(&d->x, M, &d->xs) < 0 || tg_tensor_split_static(&d->y, M, &d->ys) < 0)
    die("split");
  d->batch = (tg_batch){.rows = B, .nmicro = M, .x = d->xs.parts, .y = d->ys.parts};
}

static void model_close(model *d) {
  starpu_task_wait_for_all();
  tg_split_free(&d->x, &d->xs);
  tg_split_free(&d->y, &d->ys);
  tg_tensor_free(&d->x);
  tg_tensor_free(&d->y);
  tg_mlp_destroy(&d->m);
}

static size_t nparams(void) {
  size_t n = 0;
  for (int l = 0; l < NL; l++) n += (size_t)WIDTHS[l + 1] * (WIDTHS[l] + 1);
  return n;
}

/* every weight and bias (which = 0) or their gradients (which = 1), in order */
static void read_all(model *d, int which, float *dst) {
  for (int l = 0; l < NL; l++) {
    tg_tensor *w = which ? &d->m.dw[l] : &d->m.w[l], *b = which ? &d->m.db[l] : &d->m.b[l];
    if (tg_tensor_read(w, dst) < 0 || tg_tensor_read(b, dst + tg_tensor_numel(w)) < 0)
      die("read");
    dst += tg_tensor_numel(w) + tg_tensor_numel(b);
  }
}

static void closeness(void) {
  size_t n = nparams();
  float *g32 = tg_test_malloc(sizeof(float) * n), *g16 = tg_test_malloc(sizeof(float) * n);
  double l32 = 0;
  for (int p = 0; p < 3; p++) {
    tg_precision prec = p == 0 ? TG_PREC_FP32 : p == 1 ? TG_PREC_BF16 : TG_PREC_FP16;
    model d;
    model_open(&d, prec, prec == TG_PREC_FP16, 256.0f);
    double loss;
    if (tg_mlp_forward_backward(&d.m, &d.batch) < 0 || tg_mlp_metrics(&d.m, &loss, NULL, 1) < 0)
      die("forward_backward");
    read_all(&d, 1, p ? g16 : g32);
    model_close(&d);
    if (p == 0) {
      l32 = loss;
      continue;
    }
    if (prec == TG_PREC_FP16)
      for (size_t i = 0; i < n; i++) g16[i] /= 256.0f;
    double le = fabs(loss - l32) / l32, ge = tg_rel_err_f32(g16, g32, n);
    CHECK(le <= 1e-2, "%s loss %.6f vs fp32 %.6f", tg_precision_name(prec), loss, l32);
    CHECK(ge <= 0.1 && ge > 1e-4, "%s gradients: rel err %.2e (expected in (1e-4, 0.1])",
          tg_precision_name(prec), ge);
    printf("ok   %s: loss %.6f vs fp32 %.6f (rel %.1e), gradients rel err %.2e\n",
           tg_precision_name(prec), loss, l32, le, ge);
  }
  free(g32);
  free(g16);
}

static void overflow(void) {
  size_t n = nparams();
  float *before = tg_test_malloc(sizeof(float) * n), *after = tg_test_malloc(sizeof(float) * n);
  model d;
  model_open(&d, TG_PREC_FP16, 1, 1e30f);
  read_all(&d, 0, before);
  int skipped = 0, applied = 0, wrong = 0;
  for (int s = 0; s < 200 && (skipped == 0 || applied < 3); s++) {
    long sk = d.m.optim.scaler.skipped;
    float scale = d.m.optim.scaler.scale;
    if (tg_mlp_step(&d.m, &d.batch) < 0) die("step");
    read_all(&d, 0, after);
    int same = memcmp(before, after, sizeof(float) * n) == 0;
    if (d.m.optim.scaler.skipped == sk + 1 && same && d.m.optim.scaler.scale == scale / 2) skipped++;
    else if (d.m.optim.scaler.skipped == sk && !same) applied++;
    else wrong++;
    memcpy(before, after, sizeof(float) * n);
  }
  CHECK(wrong == 0 && skipped > 0 && applied >= 3,
        "fp16 overflow: %d skipped, %d applied, %d neither", skipped, applied, wrong);
  CHECK(d.m.optim.step == applied, "AdamW counted %d steps, %d were applied", d.m.optim.step, applied);
  printf("ok   fp16, loss scale 1e30: %d steps skipped with parameters bit-identical, then %d "
         "applied at scale %g\n", skipped, applied, d.m.optim.scaler.scale);
  model_close(&d);
  free(before);
  free(after);
}

static void refusals(void) {
  tg_mlp m;
  tg_mlp_config c = config(TG_PREC_BF16, 0, 0);
  tg_optimizer_config sgd = tg_optimizer_default(TG_OPT_SGD);
  CHECK(tg_mlp_create(&m, &c, &sgd, 1) == -EINVAL && strstr(tg_last_error(), "AdamW"),
        "bf16 with SGD: %s", tg_last_error());
  tg_optimizer_config adamw = tg_optimizer_default(TG_OPT_ADAMW);
  c.tiles = 2;
  CHECK(tg_mlp_create(&m, &c, &adamw, 1) == -EINVAL && strstr(tg_last_error(), "tiles"),
        "bf16 with tiles: %s", tg_last_error());
  c = config(TG_PREC_FP32, 1, 1024.0f);
  CHECK(tg_mlp_create(&m, &c, &adamw, 1) == -EINVAL && strstr(tg_last_error(), "loss scaling"),
        "loss scaling in fp32: %s", tg_last_error());
}

int main(void) {
  if (tg_init(NULL) != 0) die("tg_init");
  closeness();
  overflow();
  refusals();
  tg_shutdown();
  return tg_test_finish("test_mlp_precision");
}
