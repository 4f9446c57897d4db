/*
 * The MLP training step gives the same numbers under every StarPU scheduler
 * and worker count.
 *
 * StarPU starts once per process, so the test re-executes itself: with no
 * argument it runs `/proc/self/exe child` once per configuration (schedulers
 * eager, prio, lws, dmda, dmdas; 1 and 2 CPU workers), with STARPU_SCHED and
 * STARPU_NCPU set in the child's environment (STARPU_NCUDA=0: this is a test
 * of the schedulers on CPU workers, whose kernels are bit-for-bit the same;
 * everything else is inherited), and reads the child's stdout through a pipe.
 *
 * The child: an MLP 64-96-48-10 (gelu), AdamW, one batch of 128 rows in
 * M = 8 micro-batches; step 1 (forward_backward + update), then the metrics
 * reset and a second forward_backward; it prints the loss of step 2 and two
 * checksums of the updated weights (sum of |w| and sum of w^2 over every
 * parameter) with "%.9e", and the scheduler and worker count it really ran
 * with.  The only freedom between configurations is the order in which the
 * REDUX contributions are merged, so the parent requires every value to
 * match the first configuration's to 1e-6 relative.  A child that crashes,
 * exits non-zero, prints nothing usable or ran with another scheduler or
 * worker count than asked is a failure.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <starpu.h>

#include "taskgrad/mlp.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "self_spawn.h"
#include "testutil.h"

extern char **environ;

enum { B = 128, M = 8, NL = 3 };
static const int WIDTHS[NL + 1] = {64, 96, 48, 10};
static const uint64_t SEED = 77;
#define TOL 1e-6

/* ---- child: one configuration ------------------------------------------ */

static int child(void) {
  tg_runtime_config rc0 = tg_runtime_config_default();
  rc0.profiling = 1; /* to report how many tasks each worker ran */
  if (tg_init(&rc0) < 0) {
    fprintf(stderr, "child: tg_init: %s\n", tg_last_error());
    return 2;
  }
  struct starpu_sched_policy *pol = starpu_sched_ctx_get_sched_policy(0);
  const char *sched = pol && pol->policy_name ? pol->policy_name : "?";

  tg_mlp_config cfg = {.nlayers = NL, .act = TG_ACT_GELU};
  for (int l = 0; l <= NL; l++) cfg.widths[l] = WIDTHS[l];
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  tg_mlp m;
  if (tg_mlp_create(&m, &cfg, &opt, SEED) < 0) {
    fprintf(stderr, "child: tg_mlp_create: %s\n", tg_last_error());
    return 2;
  }

  tg_tensor x, y;
  if (tg_tensor_alloc(&x, B, WIDTHS[0], TG_F32) < 0 ||
      tg_tensor_alloc(&y, B, 1, TG_I32) < 0) {
    fprintf(stderr, "child: tg_tensor_alloc: %s\n", tg_last_error());
    return 2;
  }
  tg_rng rng = {.s = 0xD1B54A32D192ED03ULL};
  tg_rng_fill(&rng, x.host, (size_t)B * WIDTHS[0], 1.0f);
  int32_t *yl = y.host;
  for (int r = 0; r < B; r++) yl[r] = (int32_t)(tg_rng_next(&rng) % WIDTHS[NL]);
  struct starpu_data_filter f = {.filter_func = starpu_matrix_filter_vertical_block,
                                 .nchildren = M};
  starpu_data_partition(x.handle, &f);
  starpu_data_partition(y.handle, &f);
  starpu_data_handle_t xs[M], ys[M];
  for (int i = 0; i < M; i++) {
    xs[i] = starpu_data_get_sub_data(x.handle, 1, i);
    ys[i] = starpu_data_get_sub_data(y.handle, 1, i);
  }
  tg_batch batch = {.rows = B, .nmicro = M, .x = xs, .y = ys};

  double loss1 = 0, loss2 = 0;
  int rc = 0;
  if (tg_mlp_step(&m, &batch) < 0 || tg_mlp_metrics(&m, &loss1, NULL, 1) < 0 ||
      tg_mlp_forward_backward(&m, &batch) < 0 ||
      tg_mlp_metrics(&m, &loss2, NULL, 0) < 0) {
    fprintf(stderr, "child: training step: %s\n", tg_last_error());
    rc = 2;
  }
  double l1 = 0, l2 = 0;
  for (int l = 0; l < NL && rc == 0; l++) {
    tg_tensor *ts[2] = {&m.w[l], &m.b[l]};
    for (int k = 0; k < 2; k++) {
      size_t n = tg_tensor_numel(ts[k]);
      float *buf = malloc(sizeof(float) * n);
      if (!buf || tg_tensor_read(ts[k], buf) < 0) {
        fprintf(stderr, "child: reading the weights failed: %s\n", tg_last_error());
        free(buf);
        rc = 2;
        break;
      }
      for (size_t i = 0; i < n; i++) {
        l1 += fabs((double)buf[i]);
        l2 += (double)buf[i] * buf[i];
      }
      free(buf);
    }
  }
  starpu_task_wait_for_all();
  starpu_data_unpartition(x.handle, STARPU_MAIN_RAM);
  starpu_data_unpartition(y.handle, STARPU_MAIN_RAM);
  tg_tensor_free(&x);
  tg_tensor_free(&y);
  tg_mlp_destroy(&m);
  int ncpu = tg_ncpu_workers();
  char tasks[256] = "";
  for (unsigned w = 0, pos = 0; w < starpu_worker_get_count() && pos < sizeof tasks; w++) {
    struct starpu_profiling_worker_info info;
    if (starpu_profiling_worker_get_info((int)w, &info) == 0)
      pos += (unsigned)snprintf(tasks + pos, sizeof tasks - pos, "%s%d", w ? "," : "",
                                info.executed_tasks);
  }
  if (!tasks[0]) snprintf(tasks, sizeof tasks, "-");
  tg_shutdown();
  if (rc) return rc;
  printf("sched %s ncpu %d loss1 %.9e loss2 %.9e wabs %.9e wsq %.9e tasks %s\n", sched,
         ncpu, loss1, loss2, l1, l2, tasks);
  fflush(stdout);
  return 0;
}

/* ---- parent: run every configuration ----------------------------------- */

typedef struct outcome {
  char sched[64];
  char tasks[128]; /* tasks run per worker, for information */
  int ncpu;
  double v[4]; /* loss1, loss2, wabs, wsq */
} outcome;
static const char *VNAMES[4] = {"step-1 loss", "step-2 loss", "sum |w|", "sum w^2"};

/* Runs one child; returns 0 and fills *o, or -1 after printing why. */
static int run_child(const char *sched, int ncpu, outcome *o) {
  static const char *const drop[] = {"STARPU_SCHED=", "STARPU_NCPU=", "STARPU_NCPUS=",
                                     "STARPU_NCUDA=", NULL};
  char bufs[3][80], label[96], out[16384];
  snprintf(bufs[0], 80, "STARPU_SCHED=%s", sched);
  snprintf(bufs[1], 80, "STARPU_NCPU=%d", ncpu);
  snprintf(bufs[2], 80, "STARPU_NCUDA=0");
  const char *const add[] = {bufs[0], bufs[1], bufs[2], NULL};
  snprintf(label, sizeof label, "%s/%d", sched, ncpu);
  if (tg_test_run_self(NULL, drop, add, out, sizeof out, label) < 0) return -1;
  /* the result line is the last one starting with "sched " */
  const char *line = NULL;
  for (const char *p = out; (p = strstr(p, "sched ")) != NULL; p++)
    if (p == out || p[-1] == '\n') line = p;
  if (!line ||
      sscanf(line, "sched %63s ncpu %d loss1 %le loss2 %le wabs %le wsq %le tasks %127s",
             o->sched, &o->ncpu, &o->v[0], &o->v[1], &o->v[2], &o->v[3], o->tasks) != 7) {
    fprintf(stderr, "%s/%d: no result line in the child's output:\n%s\n", sched, ncpu,
            out);
    return -1;
  }
  return 0;
}

static int parent(void) {
  static const char *SCHEDS[] = {"eager", "prio", "lws", "dmda", "dmdas"};
  static const int NCPUS[] = {1, 2};
  enum { NS = sizeof SCHEDS / sizeof SCHEDS[0], NC = sizeof NCPUS / sizeof NCPUS[0] };
  outcome ref = {.ncpu = 0};
  int have_ref = 0;
  char ref_name[80] = "";
  for (int c = 0; c < NC; c++)
    for (int s = 0; s < NS; s++) {
      outcome o;
      char name[80];
      snprintf(name, sizeof name, "%s/%d cpu", SCHEDS[s], NCPUS[c]);
      int ok = run_child(SCHEDS[s], NCPUS[c], &o) == 0;
      CHECK(ok, "%s: the child failed (see above)", name);
      if (!ok) continue;
      CHECK(strcmp(o.sched, SCHEDS[s]) == 0, "%s: the child ran with scheduler %s",
            name, o.sched);
      CHECK(o.ncpu == NCPUS[c], "%s: the child ran with %d CPU workers", name, o.ncpu);
      CHECK(isfinite(o.v[0]) && isfinite(o.v[1]) && isfinite(o.v[2]) &&
                isfinite(o.v[3]) && o.v[0] > 0 && o.v[1] > 0 && o.v[2] > 0,
            "%s: values not finite or not positive", name);
      if (!have_ref) {
        ref = o;
        have_ref = 1;
        snprintf(ref_name, sizeof ref_name, "%s", name);
        printf("%-12s loss1 %.9e loss2 %.9e sum|w| %.9e sum w^2 %.9e (reference; "
               "tasks per worker %s)\n",
               name, o.v[0], o.v[1], o.v[2], o.v[3], o.tasks);
        continue;
      }
      double worst = 0;
      for (int k = 0; k < 4; k++) {
        double e = fabs(o.v[k] - ref.v[k]) / fabs(ref.v[k]);
        worst = fmax(worst, e);
        CHECK(e <= TOL, "%s: %s %.9e vs %.9e under %s: relative difference %.3e > %.0e",
              name, VNAMES[k], o.v[k], ref.v[k], ref_name, e, TOL);
      }
      printf("%-12s loss1 %.9e loss2 %.9e sum|w| %.9e sum w^2 %.9e (max rel diff %.2e; "
             "tasks per worker %s)\n",
             name, o.v[0], o.v[1], o.v[2], o.v[3], worst, o.tasks);
    }
  CHECK(have_ref, "no configuration ran");
  return tg_test_finish("test_mlp_schedulers");
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) return child();
  if (argc > 1) {
    fprintf(stderr, "usage: %s [child]\n", argv[0]);
    return 2;
  }
  return parent();
}
