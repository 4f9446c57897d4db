/*
 * A tiled MLP step (tg_mlp_config.tiles = N: every layer's output features
 * in N blocks, see mlp.h) trains like the untiled one.
 *
 * An MLP 23-37-19-7 (gelu) with odd widths, so that N = 2, 3 and 5 leave
 * remainder blocks, and N = 7 makes the last layer's blocks one feature
 * wide.  The same schedule runs for every N, from the same seed:
 *   - STEPS AdamW steps on one batch of B = 41 rows in M = 3 (uneven)
 *     micro-batches, the loss read after each;
 *   - after the second step, forward-only evaluations of 5 batches of
 *     different sizes, all micro-batch 0, so that the tiled activation
 *     buffers of micro-batch 0 are reused, added and evicted (at most 4
 *     sets per micro-batch are kept);
 *   - a last forward-backward without update, then the parameters and
 *     gradients are read back.
 * Checks, against the untiled (N = 1) run: every loss and every parameter
 * tensor to 1e-6 relative (norm-relative, testutil.h), every gradient
 * tensor to 1e-5 (the lower layers' gradients go through the tiled data
 * gradient, summed in another order).  Once in the default mode (the
 * untiled run merges gradients with StarPU reductions, the tiled ones always
 * in a fixed order), once in deterministic mode, where the N = 3 run
 * repeated must also give bitwise the same parameters; whether the tiled and untiled runs
 * agree bitwise is printed, not required (the data gradient's sum is
 * ordered differently).  tg_mlp_create must refuse tiles beyond the
 * narrowest layer or TG_MAX_SPLIT.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "taskgrad/mlp.h"
#include "taskgrad/parallel.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "testutil.h"

enum { B = 41, M = 3, NL = 3, STEPS = 4, NEVAL = 5, NTILES = 5 };
static const int WIDTHS[NL + 1] = {23, 37, 19, 7};
static const int TILES[NTILES] = {1, 2, 3, 5, 7};
static const int EVAL_ROWS[NEVAL] = {5, 9, 13, 17, 21};
static const uint64_t SEED = 20261123;

#define LOSS_TOL 1e-6
#define PARAM_TOL 1e-6
#define GRAD_TOL 1e-5

/* ---- batches: the first `rows` samples in m row blocks ------------------- */

typedef struct test_batch {
  tg_tensor x, y;  /* (rows, WIDTHS[0]) features, (rows, 1) labels */
  tg_split xs, ys; /* m row blocks, the micro-batches */
  tg_batch batch;
} test_batch;

static int batch_make(test_batch *tb, const float *x, const int32_t *y, int rows, int m) {
  memset(tb, 0, sizeof *tb);
  if (tg_tensor_alloc(&tb->x, rows, WIDTHS[0], TG_F32) < 0 ||
      tg_tensor_alloc(&tb->y, rows, 1, TG_I32) < 0)
    return -1;
  /* no task has touched these buffers yet */
  memcpy(tb->x.host, x, sizeof(float) * rows * WIDTHS[0]);
  memcpy(tb->y.host, y, sizeof(int32_t) * rows);
  if (tg_tensor_split_static(&tb->x, m, &tb->xs) < 0 ||
      tg_tensor_split_static(&tb->y, m, &tb->ys) < 0)
    return -1;
  tb->batch = (tg_batch){.rows = rows, .nmicro = m, .x = tb->xs.parts, .y = tb->ys.parts};
  return 0;
}

static void batch_free(test_batch *tb) {
  tg_split_free(&tb->x, &tb->xs);
  tg_split_free(&tb->y, &tb->ys);
  tg_tensor_free(&tb->x);
  tg_tensor_free(&tb->y);
}

/* ---- one run of the schedule ---------------------------------------------- */

typedef struct result {
  float *w[NL], *b[NL], *dw[NL], *db[NL]; /* (out, in), (1, out) */
  double loss[STEPS + 1];                  /* per step, then the last forward */
  double eval[NEVAL];                      /* evaluation losses */
} result;

static void result_free(result *r) {
  for (int l = 0; l < NL; l++) {
    free(r->w[l]);
    free(r->b[l]);
    free(r->dw[l]);
    free(r->db[l]);
  }
  memset(r, 0, sizeof *r);
}

static int fail_msg(const char *what) {
  fprintf(stderr, "%s: %s\n", what, tg_last_error());
  return -1;
}

static int read_back(tg_mlp *model, result *out) {
  for (int l = 0; l < NL; l++) {
    size_t nw = tg_tensor_numel(&model->w[l]), nb = tg_tensor_numel(&model->b[l]);
    out->w[l] = tg_test_malloc(sizeof(float) * nw);
    out->b[l] = tg_test_malloc(sizeof(float) * nb);
    out->dw[l] = tg_test_malloc(sizeof(float) * nw);
    out->db[l] = tg_test_malloc(sizeof(float) * nb);
    if (tg_tensor_read(&model->w[l], out->w[l]) < 0 ||
        tg_tensor_read(&model->b[l], out->b[l]) < 0 ||
        tg_tensor_read(&model->dw[l], out->dw[l]) < 0 ||
        tg_tensor_read(&model->db[l], out->db[l]) < 0)
      return fail_msg("tg_tensor_read");
  }
  return 0;
}

static int run(int tiles, const float *x, const int32_t *y, result *out) {
  memset(out, 0, sizeof *out);
  tg_mlp_config cfg = {.nlayers = NL, .act = TG_ACT_GELU, .tiles = tiles};
  for (int l = 0; l <= NL; l++) cfg.widths[l] = WIDTHS[l];
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  tg_mlp model;
  if (tg_mlp_create(&model, &cfg, &opt, SEED) < 0) return fail_msg("tg_mlp_create");
  test_batch train, evals[NEVAL];
  int rc = batch_make(&train, x, y, B, M);
  for (int e = 0; e < NEVAL && rc == 0; e++)
    rc = batch_make(&evals[e], x, y, EVAL_ROWS[e], 1);
  if (rc < 0) fail_msg("batch_make");
  for (int s = 0; s < STEPS && rc == 0; s++) {
    if (tg_mlp_step(&model, &train.batch) < 0 ||
        tg_mlp_metrics(&model, &out->loss[s], NULL, 1) < 0)
      rc = fail_msg("tg_mlp_step");
    for (int e = 0; e < NEVAL && s == 1 && rc == 0; e++)
      if (tg_mlp_evaluate(&model, &evals[e].batch) < 0 ||
          tg_mlp_metrics(&model, &out->eval[e], NULL, 1) < 0)
        rc = fail_msg("tg_mlp_evaluate");
  }
  if (rc == 0 && (tg_mlp_forward_backward(&model, &train.batch) < 0 ||
                  tg_mlp_metrics(&model, &out->loss[STEPS], NULL, 1) < 0))
    rc = fail_msg("tg_mlp_forward_backward");
  if (rc == 0) rc = read_back(&model, out);
  starpu_task_wait_for_all();
  batch_free(&train);
  for (int e = 0; e < NEVAL; e++) batch_free(&evals[e]);
  tg_mlp_destroy(&model);
  if (rc < 0) result_free(out);
  return rc;
}

/* ---- comparisons ------------------------------------------------------------ */

static int bitwise_equal(const result *a, const result *b) {
  for (int l = 0; l < NL; l++) {
    size_t nw = (size_t)WIDTHS[l + 1] * WIDTHS[l], nb = (size_t)WIDTHS[l + 1];
    if (memcmp(a->w[l], b->w[l], sizeof(float) * nw) ||
        memcmp(a->b[l], b->b[l], sizeof(float) * nb) ||
        memcmp(a->dw[l], b->dw[l], sizeof(float) * nw) ||
        memcmp(a->db[l], b->db[l], sizeof(float) * nb))
      return 0;
  }
  return memcmp(a->loss, b->loss, sizeof a->loss) == 0 &&
         memcmp(a->eval, b->eval, sizeof a->eval) == 0;
}

static double rel(double a, double ref) { return fabs(a - ref) / fmax(fabs(ref), 1e-300); }

/* got (tiled) against ref (untiled): every check, and the worst errors */
static void compare(const char *mode, int tiles, const result *got, const result *ref) {
  char what[128];
  double worst_loss = 0, worst_param = 0, worst_grad = 0;
  for (int s = 0; s <= STEPS; s++) {
    double e = rel(got->loss[s], ref->loss[s]);
    snprintf(what, sizeof what, "%s tiles=%d loss of step %d", mode, tiles, s);
    CHECK_REL(e, LOSS_TOL, what);
    worst_loss = fmax(worst_loss, e);
  }
  for (int e = 0; e < NEVAL; e++) {
    double r = rel(got->eval[e], ref->eval[e]);
    snprintf(what, sizeof what, "%s tiles=%d evaluation loss on %d rows", mode, tiles,
             EVAL_ROWS[e]);
    CHECK_REL(r, LOSS_TOL, what);
    worst_loss = fmax(worst_loss, r);
  }
  for (int l = 0; l < NL; l++) {
    size_t nw = (size_t)WIDTHS[l + 1] * WIDTHS[l], nb = (size_t)WIDTHS[l + 1];
    double ew = tg_rel_err_f32(got->w[l], ref->w[l], nw);
    double eb = tg_rel_err_f32(got->b[l], ref->b[l], nb);
    double edw = tg_rel_err_f32(got->dw[l], ref->dw[l], nw);
    double edb = tg_rel_err_f32(got->db[l], ref->db[l], nb);
    snprintf(what, sizeof what, "%s tiles=%d W[%d]", mode, tiles, l);
    CHECK_REL(ew, PARAM_TOL, what);
    snprintf(what, sizeof what, "%s tiles=%d b[%d]", mode, tiles, l);
    CHECK_REL(eb, PARAM_TOL, what);
    snprintf(what, sizeof what, "%s tiles=%d dW[%d]", mode, tiles, l);
    CHECK_REL(edw, GRAD_TOL, what);
    snprintf(what, sizeof what, "%s tiles=%d db[%d]", mode, tiles, l);
    CHECK_REL(edb, GRAD_TOL, what);
    worst_param = fmax(worst_param, fmax(ew, eb));
    worst_grad = fmax(worst_grad, fmax(edw, edb));
  }
  printf("%s tiles=%d vs untiled: worst rel err loss %.2e, parameters %.2e, "
         "gradients %.2e; bitwise equal: %s (first forward's loss: %s)\n",
         mode, tiles, worst_loss, worst_param, worst_grad,
         bitwise_equal(got, ref) ? "yes" : "no",
         got->loss[0] == ref->loss[0] ? "equal" : "differs");
}

static void check_mode(int deterministic, const float *x, const int32_t *y) {
  const char *mode = deterministic ? "deterministic" : "default";
  tg_set_deterministic(deterministic);
  result res[NTILES];
  int ok[NTILES];
  for (int t = 0; t < NTILES; t++) {
    ok[t] = run(TILES[t], x, y, &res[t]) == 0;
    CHECK(ok[t], "%s: the run with tiles = %d failed", mode, TILES[t]);
  }
  printf("%s untiled: loss %.9f -> %.9f over %d steps\n", mode, ok[0] ? res[0].loss[0] : 0,
         ok[0] ? res[0].loss[STEPS - 1] : 0, STEPS);
  for (int t = 1; t < NTILES; t++)
    if (ok[0] && ok[t]) compare(mode, TILES[t], &res[t], &res[0]);
  if (deterministic && ok[2]) {
    /* tiles = 3 again: a fixed-order sum gives the same bits */
    result again;
    int ok2 = run(TILES[2], x, y, &again) == 0;
    CHECK(ok2, "deterministic: the repeated tiles = %d run failed", TILES[2]);
    if (ok2) {
      CHECK(bitwise_equal(&again, &res[2]),
            "deterministic: two tiles = %d runs differ bitwise", TILES[2]);
      printf("deterministic tiles=%d twice: bitwise equal: %s\n", TILES[2],
             bitwise_equal(&again, &res[2]) ? "yes" : "no");
      result_free(&again);
    }
  }
  for (int t = 0; t < NTILES; t++)
    if (ok[t]) result_free(&res[t]);
  tg_set_deterministic(0);
}

/* tg_mlp_create refuses tiles it cannot make, with -EINVAL and a message */
static void check_refusals(void) {
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_SGD);
  int bad[] = {8 /* > 7 classes */, TG_MAX_SPLIT + 1, -1};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    tg_mlp_config cfg = {.nlayers = NL, .act = TG_ACT_RELU, .tiles = bad[k]};
    for (int l = 0; l <= NL; l++) cfg.widths[l] = WIDTHS[l];
    tg_mlp model;
    int rc = tg_mlp_create(&model, &cfg, &opt, SEED);
    CHECK(rc == -EINVAL && strstr(tg_last_error(), "tiles"),
          "tiles = %d: tg_mlp_create returned %d (%s), expected -EINVAL", bad[k], rc,
          tg_last_error());
    if (rc == 0) tg_mlp_destroy(&model);
  }
  /* SGD (no second state tensor) with as many tiles as the narrowest layer */
  tg_mlp_config cfg = {.nlayers = NL, .act = TG_ACT_RELU, .tiles = WIDTHS[NL]};
  for (int l = 0; l <= NL; l++) cfg.widths[l] = WIDTHS[l];
  tg_mlp model;
  int rc = tg_mlp_create(&model, &cfg, &opt, SEED);
  CHECK(rc == 0, "SGD with tiles = %d: %s", WIDTHS[NL], tg_last_error());
  if (rc == 0) tg_mlp_destroy(&model);
}

int main(void) {
  if (tg_init(NULL) < 0) {
    fprintf(stderr, "tg_init: %s\n", tg_last_error());
    return 1;
  }
  printf("test_mlp_tiled: %d CPU workers, %d CUDA workers\n", tg_ncpu_workers(),
         tg_ncuda_workers());
  float *x = tg_test_malloc(sizeof(float) * B * WIDTHS[0]); /* (B, WIDTHS[0]) */
  int32_t y[B];                                            /* (B, 1) */
  tg_rng rng = {.s = 0x2545F4914F6CDD1DULL};
  tg_rng_fill(&rng, x, (size_t)B * WIDTHS[0], 1.5f);
  for (int r = 0; r < B; r++) y[r] = (int32_t)(tg_rng_next(&rng) % WIDTHS[NL]);

  check_refusals();
  check_mode(0, x, y);
  check_mode(1, x, y);

  free(x);
  tg_shutdown();
  return tg_test_finish("test_mlp_tiled");
}
