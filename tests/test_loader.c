/*
 * The batch loader on a synthetic data set (n = 103 samples of 5 features,
 * x[i][f] = i*10 + f, y[i] = i % 10):
 *  - batch 20, 3 micro-batches (uneven: 7+7+6), prefetch 2, shuffle, no
 *    drop_last: over 2 epochs every sample appears exactly once per epoch,
 *    the last batch of an epoch has 3 rows, micro-batch rows add up to the
 *    batch rows, labels match their samples, the two epochs' orders differ,
 *    and a second loader with the same seed repeats the sequence exactly
 *    (a different seed does not);
 *  - between tg_loader_next calls, slow tasks of our own read every
 *    micro-batch (sum of x, sum of y); the loader refills a slot only through
 *    a W acquire, so their sums must match the samples the batch held when it
 *    was handed out, even though the loader runs ahead;
 *  - shuffle off gives the identity order (drop_last: 5 batches of 20);
 *  - a short epoch (2 batches) with a deep prefetch does not stall;
 *  - invalid configurations return NULL with a message.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <starpu.h>

#include "taskgrad/data.h"
#include "taskgrad/runtime.h"
#include "testutil.h"

enum { N = 103, F = 5, EPOCHS = 2 };

/* ---- a slow codelet summing one micro-batch ---------------------------- */

typedef struct sums {
  double x;
  long long y;
  int rows;
} sums;

static void sum_cpu(void *buffers[], void *cl_arg) {
  sums *out = cl_arg;
  const float *x = (const float *)STARPU_MATRIX_GET_PTR(buffers[0]);
  unsigned nx = STARPU_MATRIX_GET_NX(buffers[0]);
  unsigned ny = STARPU_MATRIX_GET_NY(buffers[0]);
  unsigned ldx = STARPU_MATRIX_GET_LD(buffers[0]);
  const int32_t *y = (const int32_t *)STARPU_MATRIX_GET_PTR(buffers[1]);
  unsigned ldy = STARPU_MATRIX_GET_LD(buffers[1]);
  usleep(3000); /* long enough for the loader to try to refill the slot */
  double sx = 0;
  long long sy = 0;
  for (unsigned r = 0; r < ny; r++) {
    for (unsigned c = 0; c < nx; c++) sx += x[(size_t)r * ldx + c];
    sy += y[(size_t)r * ldy];
  }
  out->x = sx;
  out->y = sy;
  out->rows = (int)ny;
}

static struct starpu_codelet sum_cl = {
    .cpu_funcs = {sum_cpu},
    .cpu_funcs_name = {"sum_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_R},
    .name = "test_loader_sum",
};

/* ---- helpers ------------------------------------------------------------ */

static tg_dataset make_dataset(void) {
  tg_dataset ds = {0};
  ds.n = N;
  ds.features = F;
  ds.classes = 10;
  ds.x = malloc(sizeof(float) * N * F);
  ds.y = malloc(sizeof(int32_t) * N);
  if (!ds.x || !ds.y) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (int i = 0; i < N; i++) {
    for (int f = 0; f < F; f++) ds.x[i * F + f] = (float)(i * 10 + f);
    ds.y[i] = i % 10;
  }
  return ds;
}

/* Reads the sample ids of one micro-batch (R acquire), checking that each row
 * is a whole sample and its label matches.  Returns the number of rows. */
static int read_micro(starpu_data_handle_t xh, starpu_data_handle_t yh,
                      int *ids) {
  int rc = starpu_data_acquire(xh, STARPU_R);
  CHECK(rc == 0, "acquire x: %d", rc);
  if (rc) return 0;
  rc = starpu_data_acquire(yh, STARPU_R);
  CHECK(rc == 0, "acquire y: %d", rc);
  if (rc) {
    starpu_data_release(xh);
    return 0;
  }
  const float *x = (const float *)starpu_matrix_get_local_ptr(xh);
  const int32_t *y = (const int32_t *)starpu_matrix_get_local_ptr(yh);
  int rows = (int)starpu_matrix_get_ny(xh);
  unsigned ldx = starpu_matrix_get_local_ld(xh);
  unsigned ldy = starpu_matrix_get_local_ld(yh);
  CHECK((int)starpu_matrix_get_nx(xh) == F, "x child has %u columns",
        starpu_matrix_get_nx(xh));
  CHECK((int)starpu_matrix_get_ny(yh) == rows, "y child has %u rows, x %d",
        starpu_matrix_get_ny(yh), rows);
  for (int r = 0; r < rows; r++) {
    int id = (int)x[(size_t)r * ldx] / 10;
    ids[r] = id;
    int whole = id >= 0 && id < N;
    for (int f = 0; f < F; f++)
      if (x[(size_t)r * ldx + f] != (float)(id * 10 + f)) whole = 0;
    CHECK(whole, "row %d is not a whole sample (x[0] = %g)", r,
          (double)x[(size_t)r * ldx]);
    CHECK(y[(size_t)r * ldy] == id % 10, "sample %d has label %d", id,
          y[(size_t)r * ldy]);
  }
  starpu_data_release(yh);
  starpu_data_release(xh);
  return rows;
}

static double expected_xsum(const int *ids, int rows) {
  double s = 0;
  for (int r = 0; r < rows; r++)
    for (int f = 0; f < F; f++) s += ids[r] * 10 + f;
  return s;
}
static long long expected_ysum(const int *ids, int rows) {
  long long s = 0;
  for (int r = 0; r < rows; r++) s += ids[r] % 10;
  return s;
}

/* Runs nepochs epochs and records the order of sample ids (order[e*N + k]),
 * submitting the summing tasks on every micro-batch when with_tasks.
 * Returns 0, or -1 when the loader failed. */
static int run_loader(const tg_dataset *ds, const tg_loader_config *cfg,
                      int nepochs, int *order, int with_tasks,
                      int *last_rows) {
  tg_loader *ld = tg_loader_create(ds, cfg);
  CHECK(ld != NULL, "tg_loader_create: %s", tg_last_error());
  if (!ld) return -1;
  const int bpe = tg_loader_batches_per_epoch(ld);
  const int expect_bpe =
      cfg->drop_last ? N / cfg->batch : (N + cfg->batch - 1) / cfg->batch;
  CHECK(bpe == expect_bpe, "batches per epoch %d, expected %d", bpe,
        expect_bpe);
  const int per_epoch = cfg->drop_last ? bpe * cfg->batch : N;

  const int nb = nepochs * bpe;
  sums *res = calloc((size_t)nb * (size_t)cfg->nmicro, sizeof *res);
  int *ids = calloc((size_t)nb * (size_t)cfg->batch, sizeof *ids);
  int *mrows = calloc((size_t)nb * (size_t)cfg->nmicro, sizeof *mrows);
  if (!res || !ids || !mrows) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  int rc = 0;
  for (int e = 0; e < nepochs && rc == 0; e++) {
    int pos = 0;
    for (int b = 0; b < bpe; b++) {
      const int k = e * bpe + b;
      tg_batch batch;
      int r = tg_loader_next(ld, &batch);
      CHECK(r == 0, "tg_loader_next (epoch %d batch %d): %s", e, b,
            tg_last_error());
      if (r) {
        rc = -1;
        break;
      }
      const int last = b == bpe - 1;
      const int want_rows =
          (last && !cfg->drop_last && N % cfg->batch) ? N % cfg->batch
                                                      : cfg->batch;
      CHECK(batch.rows == want_rows, "epoch %d batch %d: %d rows, expected %d",
            e, b, batch.rows, want_rows);
      const int want_micro =
          cfg->nmicro < want_rows ? cfg->nmicro : want_rows;
      CHECK(batch.nmicro == want_micro, "batch %d: %d micro-batches, "
            "expected %d", b, batch.nmicro, want_micro);
      if (last && last_rows) *last_rows = batch.rows;
      if (batch.nmicro > cfg->nmicro || batch.rows > cfg->batch) {
        rc = -1;
        break;
      }

      /* The tasks first, so that they are still running when the loader
       * wants this slot back. */
      if (with_tasks) {
        for (int m = 0; m < batch.nmicro; m++) {
          struct starpu_task *t = starpu_task_create();
          t->cl = &sum_cl;
          t->handles[0] = batch.x[m];
          t->handles[1] = batch.y[m];
          t->cl_arg = &res[(size_t)k * cfg->nmicro + m];
          t->cl_arg_size = 0;
          int s = starpu_task_submit(t);
          CHECK(s == 0, "starpu_task_submit: %d", s);
        }
      }
      int total = 0;
      for (int m = 0; m < batch.nmicro; m++) {
        int *dst = ids + (size_t)k * cfg->batch + total;
        int rows = read_micro(batch.x[m], batch.y[m], dst);
        mrows[(size_t)k * cfg->nmicro + m] = rows;
        for (int q = 0; q < rows && pos + q < per_epoch; q++)
          order[(size_t)e * per_epoch + pos + q] = dst[q];
        pos += rows;
        total += rows;
      }
      CHECK(total == batch.rows, "micro-batch rows add up to %d, batch has %d",
            total, batch.rows);
    }
    CHECK(rc != 0 || pos == per_epoch, "epoch %d covered %d samples", e, pos);
  }
  tg_loader_destroy(ld);

  if (with_tasks && rc == 0) {
    int r = starpu_task_wait_for_all();
    CHECK(r == 0, "starpu_task_wait_for_all: %d", r);
    int bad = 0;
    for (int k = 0; k < nb; k++) {
      int off = 0;
      for (int m = 0; m < cfg->nmicro; m++) {
        const int rows = mrows[(size_t)k * cfg->nmicro + m];
        if (rows == 0) continue;
        const sums *s = &res[(size_t)k * cfg->nmicro + m];
        const int *mid = ids + (size_t)k * cfg->batch + off;
        if (s->rows != rows || s->x != expected_xsum(mid, rows) ||
            s->y != expected_ysum(mid, rows)) {
          if (bad++ < 5)
            fprintf(stderr, "batch %d micro %d: task saw %d rows, x sum %g, "
                    "y sum %lld; expected %d, %g, %lld\n", k, m, s->rows,
                    s->x, s->y, rows, expected_xsum(mid, rows),
                    expected_ysum(mid, rows));
        }
        off += rows;
      }
    }
    CHECK(bad == 0, "%d micro-batch tasks saw other data than handed out",
          bad);
  }
  free(res);
  free(ids);
  free(mrows);
  return rc;
}

static void check_epochs_are_permutations(const int *order, int nepochs,
                                          int per_epoch, const char *what) {
  for (int e = 0; e < nepochs; e++) {
    int seen[N] = {0};
    int bad = 0;
    for (int k = 0; k < per_epoch; k++) {
      int id = order[(size_t)e * per_epoch + k];
      if (id < 0 || id >= N || seen[id]++) bad++;
    }
    CHECK(bad == 0, "%s epoch %d: %d samples repeated or invalid", what, e,
          bad);
  }
}

int main(void) {
  int rc = tg_init(NULL);
  if (rc < 0) {
    fprintf(stderr, "tg_init: %s\n", tg_last_error());
    return 1;
  }
  tg_dataset ds = make_dataset();

  /* shuffled, uneven micro-batches, partial last batch, tasks in between */
  tg_loader_config cfg = {.batch = 20, .nmicro = 3, .prefetch = 2,
                          .shuffle = 1, .drop_last = 0, .seed = 42};
  int order1[EPOCHS * N], order2[EPOCHS * N], order3[EPOCHS * N];
  int last_rows = 0;
  if (run_loader(&ds, &cfg, EPOCHS, order1, 1, &last_rows) == 0) {
    CHECK(last_rows == 3, "last batch has %d rows, expected 3", last_rows);
    check_epochs_are_permutations(order1, EPOCHS, N, "shuffled");
    CHECK(memcmp(order1, order1 + N, sizeof(int) * N) != 0,
          "both epochs have the same order");
    int identity = 1;
    for (int k = 0; k < N; k++)
      if (order1[k] != k) identity = 0;
    CHECK(!identity, "shuffled order is the identity");
  }
  /* same seed, fresh loader (no tasks this time): same sequence */
  if (run_loader(&ds, &cfg, EPOCHS, order2, 0, NULL) == 0)
    CHECK(memcmp(order1, order2, sizeof order1) == 0,
          "same seed gives another order");
  /* another seed: another sequence */
  tg_loader_config cfg3 = cfg;
  cfg3.seed = 43;
  if (run_loader(&ds, &cfg3, EPOCHS, order3, 0, NULL) == 0) {
    check_epochs_are_permutations(order3, EPOCHS, N, "seed 43");
    CHECK(memcmp(order1, order3, sizeof order1) != 0,
          "seeds 42 and 43 give the same order");
  }

  /* shuffle off, drop_last: identity order, 5 full batches, one micro */
  tg_loader_config cfg4 = {.batch = 20, .nmicro = 1, .prefetch = 1,
                           .shuffle = 0, .drop_last = 1, .seed = 42};
  int order4[EPOCHS * 100];
  if (run_loader(&ds, &cfg4, EPOCHS, order4, 1, NULL) == 0) {
    int bad = 0;
    for (int e = 0; e < EPOCHS; e++)
      for (int k = 0; k < 100; k++)
        if (order4[e * 100 + k] != k) bad++;
    CHECK(bad == 0, "shuffle off: %d samples out of identity order", bad);
  }

  /* short epochs (60 + 43) with a deep prefetch: the single partial slot
   * must not stall the loader for good */
  tg_loader_config cfg5 = {.batch = 60, .nmicro = 2, .prefetch = 4,
                           .shuffle = 1, .drop_last = 0, .seed = 7};
  int order5[3 * N];
  if (run_loader(&ds, &cfg5, 3, order5, 1, &last_rows) == 0) {
    CHECK(last_rows == 43, "last batch has %d rows, expected 43", last_rows);
    check_epochs_are_permutations(order5, 3, N, "batch 60");
  }

  /* nmicro == batch (one sample per micro-batch) and a loader destroyed
   * before it is drained, with batches still prefetched and tasks running */
  {
    tg_loader_config c = {.batch = 4, .nmicro = 4, .prefetch = 3,
                          .shuffle = 1, .drop_last = 0, .seed = 1};
    tg_loader *ld = tg_loader_create(&ds, &c);
    CHECK(ld != NULL, "create: %s", tg_last_error());
    if (ld) {
      tg_batch b;
      static sums res[4];
      CHECK(tg_loader_next(ld, &b) == 0, "next: %s", tg_last_error());
      CHECK(b.rows == 4 && b.nmicro == 4, "rows %d nmicro %d", b.rows,
            b.nmicro);
      for (int m = 0; m < b.nmicro && m < 4; m++) {
        struct starpu_task *t = starpu_task_create();
        t->cl = &sum_cl;
        t->handles[0] = b.x[m];
        t->handles[1] = b.y[m];
        t->cl_arg = &res[m];
        CHECK(starpu_task_submit(t) == 0, "submit");
      }
      tg_loader_destroy(ld); /* waits for those tasks */
      for (int m = 0; m < 4; m++)
        CHECK(res[m].rows == 1, "task %d did not run before destroy", m);
    }
  }

  /* invalid configurations */
  struct {
    tg_loader_config c;
    const char *what;
  } bad[] = {
      {{.batch = 20, .nmicro = 21, .prefetch = 2}, "micro-batches"},
      {{.batch = 0, .nmicro = 1, .prefetch = 2}, "batch size 0"},
      {{.batch = 20, .nmicro = 0, .prefetch = 2}, "micro-batches"},
      {{.batch = 20, .nmicro = 3, .prefetch = 0}, "prefetch"},
      {{.batch = 200, .nmicro = 3, .prefetch = 1}, "exceeds"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tg_fail(0, "%s", ""); /* clear */
    tg_loader *ld = tg_loader_create(&ds, &bad[i].c);
    CHECK(ld == NULL, "invalid config %zu accepted", i);
    CHECK(strstr(tg_last_error(), bad[i].what) != NULL,
          "config %zu: message '%s' lacks '%s'", i, tg_last_error(),
          bad[i].what);
    if (ld) tg_loader_destroy(ld);
  }
  CHECK(tg_loader_create(NULL, &cfg) == NULL, "NULL data set accepted");
  CHECK(tg_loader_create(&ds, NULL) == NULL, "NULL config accepted");

  tg_dataset_free(&ds);
  tg_shutdown();
  return tg_test_finish("test_loader");
}
