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
 * The token loader (tokens[i] = i, so every value says where it came from):
 *  - sequential: batch k has inputs tokens[k*B*T ..] and targets shifted by
 *    one, exactly as llm.c, and wraps to token 0 after (ntokens-1)/(B*T)
 *    batches (checked with ntokens = 3*B*T + 1, where the third batch ends
 *    on the last token, and 3*B*T, where it does not fit);
 *  - micro-batches are whole sequences ((B/nmicro)*T rows, each T-row block
 *    one window) and tasks reading them between tg_loader_next calls see
 *    the batch as handed out;
 *  - shuffled: each epoch covers every window exactly once (nwin % B == 0)
 *    or nwin - nwin % B distinct windows, the order depends on the seed only
 *    and changes between epochs;
 *  - nmicro not dividing B, too few tokens and other bad configurations
 *    are refused with a message.
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

/* ---- token loader ------------------------------------------------------- */

typedef struct isums {
  long long x, y;
  int rows;
} isums;

static void isum_cpu(void *buffers[], void *cl_arg) {
  isums *out = cl_arg;
  const int32_t *x = (const int32_t *)STARPU_MATRIX_GET_PTR(buffers[0]);
  const int32_t *y = (const int32_t *)STARPU_MATRIX_GET_PTR(buffers[1]);
  unsigned ny = STARPU_MATRIX_GET_NY(buffers[0]);
  unsigned ldx = STARPU_MATRIX_GET_LD(buffers[0]);
  unsigned ldy = STARPU_MATRIX_GET_LD(buffers[1]);
  usleep(2000);
  long long sx = 0, sy = 0;
  for (unsigned r = 0; r < ny; r++) {
    sx += x[(size_t)r * ldx];
    sy += y[(size_t)r * ldy];
  }
  out->x = sx;
  out->y = sy;
  out->rows = (int)ny;
}

static struct starpu_codelet isum_cl = {
    .cpu_funcs = {isum_cpu},
    .cpu_funcs_name = {"isum_cpu"},
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_R},
    .name = "test_loader_isum",
};

/* Reads one token micro-batch: checks the shapes, that it holds whole
 * windows (T consecutive tokens starting at a multiple of T, targets one
 * ahead) and stores the window start of each sequence in starts.  Returns
 * the number of sequences, or -1. */
static int read_token_micro(starpu_data_handle_t xh, starpu_data_handle_t yh,
                            int T, int *starts, long long *sx,
                            long long *sy) {
  int rows = (int)starpu_matrix_get_ny(xh);
  CHECK((int)starpu_matrix_get_nx(xh) == 1 && (int)starpu_matrix_get_nx(yh) == 1,
        "token children have %u and %u columns", starpu_matrix_get_nx(xh),
        starpu_matrix_get_nx(yh));
  CHECK((int)starpu_matrix_get_ny(yh) == rows, "y child %u rows, x %d",
        starpu_matrix_get_ny(yh), rows);
  CHECK(starpu_matrix_get_elemsize(xh) == sizeof(int32_t), "x elemsize %zu",
        starpu_matrix_get_elemsize(xh));
  CHECK(rows % T == 0, "micro-batch of %d rows is not whole sequences of %d",
        rows, T);
  if (rows % T != 0) return -1;
  int rc = starpu_data_acquire(xh, STARPU_R);
  CHECK(rc == 0, "acquire x: %d", rc);
  if (rc) return -1;
  rc = starpu_data_acquire(yh, STARPU_R);
  CHECK(rc == 0, "acquire y: %d", rc);
  if (rc) {
    starpu_data_release(xh);
    return -1;
  }
  const int32_t *x = (const int32_t *)starpu_matrix_get_local_ptr(xh);
  const int32_t *y = (const int32_t *)starpu_matrix_get_local_ptr(yh);
  unsigned ldx = starpu_matrix_get_local_ld(xh);
  unsigned ldy = starpu_matrix_get_local_ld(yh);
  int bad = 0;
  *sx = *sy = 0;
  for (int q = 0; q < rows / T; q++) {
    const int s0 = x[(size_t)q * T * ldx];
    starts[q] = s0;
    if (s0 % T != 0) bad++;
    for (int t = 0; t < T; t++) {
      const size_t r = (size_t)q * T + t;
      if (x[r * ldx] != s0 + t || y[r * ldy] != s0 + t + 1) bad++;
      *sx += x[r * ldx];
      *sy += y[r * ldy];
    }
  }
  CHECK(bad == 0, "%d rows are not whole windows (first x %d)", bad, x[0]);
  starpu_data_release(yh);
  starpu_data_release(xh);
  return rows / T;
}

/* Runs nb batches, checking micro-batch shapes and contents, optionally
 * with summing tasks in between; starts[k*B + i] is the first token of
 * sequence i of batch k.  Returns 0, or -1. */
static int run_token_loader(const uint16_t *tok, size_t ntok,
                            const tg_token_loader_config *cfg, int nb,
                            int *starts, int with_tasks, int *bpe_out) {
  tg_loader *ld = tg_token_loader_create(tok, ntok, cfg);
  CHECK(ld != NULL, "tg_token_loader_create: %s", tg_last_error());
  if (!ld) return -1;
  if (bpe_out) *bpe_out = tg_loader_batches_per_epoch(ld);
  const int B = cfg->B, T = cfg->T, per = B / cfg->nmicro;
  isums *res = calloc((size_t)nb * cfg->nmicro, sizeof *res);
  long long *want = calloc((size_t)nb * cfg->nmicro * 2, sizeof *want);
  if (!res || !want) exit(1);
  int rc = 0;
  for (int k = 0; k < nb && rc == 0; k++) {
    tg_batch b;
    int r = tg_loader_next(ld, &b);
    CHECK(r == 0, "token batch %d: %s", k, tg_last_error());
    if (r) {
      rc = -1;
      break;
    }
    CHECK(b.rows == B * T && b.nmicro == cfg->nmicro, "batch %d: %d rows, %d "
          "micro-batches", k, b.rows, b.nmicro);
    if (b.nmicro != cfg->nmicro) {
      rc = -1;
      break;
    }
    if (with_tasks)
      for (int m = 0; m < b.nmicro; m++) {
        struct starpu_task *t = starpu_task_create();
        t->cl = &isum_cl;
        t->handles[0] = b.x[m];
        t->handles[1] = b.y[m];
        t->cl_arg = &res[(size_t)k * cfg->nmicro + m];
        CHECK(starpu_task_submit(t) == 0, "submit");
      }
    for (int m = 0; m < b.nmicro; m++) {
      CHECK((int)starpu_matrix_get_ny(b.x[m]) == per * T,
            "micro-batch %d has %u rows, expected %d whole sequences of %d", m,
            starpu_matrix_get_ny(b.x[m]), per, T);
      long long *w = want + ((size_t)k * cfg->nmicro + m) * 2;
      int nseq = read_token_micro(b.x[m], b.y[m], T,
                                  starts + (size_t)k * B + (size_t)m * per,
                                  &w[0], &w[1]);
      if (nseq != per) rc = -1;
    }
  }
  tg_loader_destroy(ld);
  if (with_tasks && rc == 0) {
    CHECK(starpu_task_wait_for_all() == 0, "wait");
    int bad = 0;
    for (int i = 0; i < nb * cfg->nmicro; i++)
      if (res[i].rows != per * T || res[i].x != want[2 * i] ||
          res[i].y != want[2 * i + 1])
        bad++;
    CHECK(bad == 0, "%d token micro-batch tasks saw other data", bad);
  }
  free(res);
  free(want);
  return rc;
}

static void test_token_loader(void) {
  enum { B = 4, T = 8, NTOK = 3 * B * T + 1, NB = 8 };
  uint16_t tok[1000];
  for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)i;

  /* sequential, exactly fitting 3 batches: starts 0, 32, 64, then 0 again */
  tg_token_loader_config sc = {.B = B, .T = T, .nmicro = 2, .prefetch = 2,
                               .shuffled = 0, .seed = 1};
  int starts[NB * B];
  int bpe = 0;
  if (run_token_loader(tok, NTOK, &sc, NB, starts, 1, &bpe) == 0) {
    CHECK(bpe == 3, "sequential: %d batches per epoch, expected 3", bpe);
    int bad = 0;
    for (int k = 0; k < NB; k++)
      for (int i = 0; i < B; i++)
        if (starts[k * B + i] != (k % 3) * B * T + i * T) bad++;
    CHECK(bad == 0, "sequential: %d sequences not at llm.c's positions (batch "
          "3 starts at %d)", bad, starts[3 * B]);
    /* the last token of batch 2's targets is the file's last token */
    CHECK(starts[2 * B + B - 1] + T == NTOK - 1, "batch 2 ends at %d",
          starts[2 * B + B - 1] + T);
  }
  /* one token fewer: the third batch no longer fits, the wrap comes after 2 */
  if (run_token_loader(tok, NTOK - 1, &sc, 4, starts, 0, &bpe) == 0) {
    CHECK(bpe == 2, "sequential, %d tokens: %d batches per epoch", NTOK - 1,
          bpe);
    CHECK(starts[2 * B] == 0 && starts[3 * B] == B * T,
          "sequential wrap: batches 2, 3 start at %d, %d", starts[2 * B],
          starts[3 * B]);
  }
  /* the smallest possible file: one batch, every batch the same */
  tg_token_loader_config one = {.B = 2, .T = 3, .nmicro = 1, .prefetch = 3};
  if (run_token_loader(tok, 7, &one, 3, starts, 0, &bpe) == 0)
    CHECK(bpe == 1 && starts[0] == 0 && starts[1] == 3 && starts[4] == 0 &&
          starts[5] == 3, "B*T+1 tokens: bpe %d, starts %d %d", bpe, starts[0],
          starts[1]);

  /* shuffled, 12 windows of 8 (97 tokens), 3 batches of 4 per epoch */
  enum { EP = 3 };
  tg_token_loader_config hc = {.B = B, .T = T, .nmicro = 4, .prefetch = 2,
                               .shuffled = 1, .seed = 9};
  int o1[EP * 3 * B], o2[EP * 3 * B], o3[EP * 3 * B];
  if (run_token_loader(tok, NTOK, &hc, EP * 3, o1, 1, &bpe) == 0) {
    CHECK(bpe == 3, "shuffled: %d batches per epoch, expected 3", bpe);
    for (int e = 0; e < EP; e++) {
      int seen[12] = {0}, bad = 0;
      for (int k = 0; k < 3 * B; k++) {
        int w = o1[e * 3 * B + k] / T;
        if (w < 0 || w >= 12 || seen[w]++) bad++;
      }
      CHECK(bad == 0, "shuffled epoch %d: %d windows repeated or invalid", e,
            bad);
    }
    CHECK(memcmp(o1, o1 + 3 * B, sizeof(int) * 3 * B) != 0,
          "epochs 0 and 1 in the same order");
    int identity = 1;
    for (int k = 0; k < 3 * B; k++)
      if (o1[k] != k * T) identity = 0;
    CHECK(!identity, "shuffled order is the identity");
  }
  if (run_token_loader(tok, NTOK, &hc, EP * 3, o2, 0, NULL) == 0)
    CHECK(memcmp(o1, o2, sizeof o1) == 0, "same seed, another window order");
  tg_token_loader_config hc2 = hc;
  hc2.seed = 10;
  if (run_token_loader(tok, NTOK, &hc2, EP * 3, o3, 0, NULL) == 0)
    CHECK(memcmp(o1, o3, sizeof o1) != 0, "seeds 9 and 10 give one order");

  /* 13 windows (8*13+1 tokens), B = 4: 3 batches of distinct windows */
  hc.nmicro = 1;
  int o4[2 * 3 * B];
  if (run_token_loader(tok, 8 * 13 + 1, &hc, 6, o4, 0, &bpe) == 0) {
    CHECK(bpe == 3, "13 windows: %d batches per epoch", bpe);
    for (int e = 0; e < 2; e++) {
      int seen[13] = {0}, bad = 0;
      for (int k = 0; k < 3 * B; k++) {
        int w = o4[e * 3 * B + k] / T;
        if (w < 0 || w >= 13 || seen[w]++) bad++;
      }
      CHECK(bad == 0, "13 windows, epoch %d: %d repeated or invalid", e, bad);
    }
  }

  /* refusals */
  struct {
    tg_token_loader_config c;
    size_t n;
    const char *what;
  } bad[] = {
      {{.B = 4, .T = 8, .nmicro = 3, .prefetch = 2}, NTOK, "divide B = 4"},
      {{.B = 4, .T = 8, .nmicro = 0, .prefetch = 2}, NTOK, "divide"},
      {{.B = 4, .T = 8, .nmicro = 8, .prefetch = 2}, NTOK, "divide"},
      {{.B = 0, .T = 8, .nmicro = 1, .prefetch = 2}, NTOK, "B = 0"},
      {{.B = 4, .T = -1, .nmicro = 1, .prefetch = 2}, NTOK, "T = -1"},
      {{.B = 4, .T = 8, .nmicro = 1, .prefetch = 0}, NTOK, "prefetch"},
      {{.B = 4, .T = 8, .nmicro = 1, .prefetch = 2}, 32, "too few"},
      {{.B = 4, .T = 8, .nmicro = 1, .prefetch = 2, .shuffled = 1}, 32,
       "needs B*T+1 = 33"},
      {{.B = 1 << 20, .T = 1 << 20, .nmicro = 1, .prefetch = 2}, NTOK,
       "too large"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tg_fail(0, "%s", "");
    tg_loader *ld = tg_token_loader_create(tok, bad[i].n, &bad[i].c);
    CHECK(ld == NULL, "invalid token config %zu accepted", i);
    CHECK(strstr(tg_last_error(), bad[i].what) != NULL,
          "token config %zu: message '%s' lacks '%s'", i, tg_last_error(),
          bad[i].what);
    if (ld) tg_loader_destroy(ld);
  }
  CHECK(tg_token_loader_create(NULL, NTOK, &sc) == NULL, "NULL tokens");
  CHECK(tg_token_loader_create(tok, NTOK, NULL) == NULL, "NULL config");
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

  test_token_loader();

  tg_dataset_free(&ds);
  tg_shutdown();
  return tg_test_finish("test_loader");
}
