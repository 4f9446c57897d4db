/*
 * taskgrad's own scheduling policies (tg-critpath, tg-memaware) run every
 * task exactly once and give the same training numbers as eager.
 *
 * StarPU starts once per process, so the test re-executes itself like
 * test_mlp_schedulers: `/proc/self/exe child [NAME]` once per configuration,
 * STARPU_NCPU = 1 or 2 and STARPU_NCUDA = 0 in the child's environment, the
 * policy named either by STARPU_SCHED or by NAME (tg_runtime_config.sched),
 * the object found by tg_sched_policy_requested and passed in
 * tg_runtime_config.sched_policy, as the CLI does.  Configurations: eager (the
 * reference), tg-critpath and tg-memaware on 1 and 2 CPU workers through
 * STARPU_SCHED, both on 2 workers through the config, and tg-memaware on 2
 * workers with STARPU_LIMIT_CPU_MEM=2048 and TG_MEMAWARE_PRESSURE=1, which
 * puts main memory permanently "under pressure" so that the memory-frugal
 * choice is the one exercised.
 *
 * The child:
 *  1. counts: NIND independent tasks (each reads one shared vector and
 *     writes its own temporary, random priorities over the scheduler's
 *     range) and NCHAIN chains of CHAINLEN tasks (RW on one vector per
 *     chain, random priorities); every task body increments its own counter
 *     and the chain tasks check they run in submission order.  After
 *     starpu_task_wait_for_all every counter must be exactly 1.
 *  2. an MLP 64-96-48-10 step (as in test_mlp_schedulers): the step-1 loss
 *     and a second forward_backward's loss after the update;
 *  3. a GPT-2 step (L = 2, C = 32, NH = 4, T = 16, B = 4, M = 2 micro-
 *     batches): tg_gpt_step then tg_gpt_loss, and an evaluation after the
 *     update.
 * It prints one result line; the parent requires the scheduler and worker
 * count asked for, every count right, and the four losses within 1e-6
 * relative of those of eager on 1 worker (only the merge order of REDUX
 * contributions may differ).
 */
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <starpu.h>

#include "taskgrad/gpt.h"
#include "taskgrad/mlp.h"
#include "taskgrad/runtime.h"
#include "taskgrad/sched.h"
#include "taskgrad/tensor.h"
#include "self_spawn.h"
#include "testutil.h"

extern char **environ;

#define TOL 1e-6

/* ---- child part 1: every task exactly once ------------------------------ */

enum { NIND = 600, NCHAIN = 6, CHAINLEN = 60, NCOUNT = NIND + NCHAIN * CHAINLEN, VLEN = 256 };

static int counts[NCOUNT];
static int task_ids[NCOUNT];
static int chain_pos[NCOUNT]; /* expected value of the chain vector's [0] */
static int order_errors;

static void ind_cpu(void *buffers[], void *arg) {
  int id = *(const int *)arg;
  const float *in = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
  float *out = (float *)STARPU_VECTOR_GET_PTR(buffers[1]);
  unsigned n = STARPU_VECTOR_GET_NX(buffers[1]);
  for (unsigned i = 0; i < n; i++) out[i] = in[i] + (float)id;
  __atomic_fetch_add(&counts[id], 1, __ATOMIC_RELAXED);
}

static void chain_cpu(void *buffers[], void *arg) {
  int id = *(const int *)arg;
  float *v = (float *)STARPU_VECTOR_GET_PTR(buffers[0]);
  if ((int)v[0] != chain_pos[id]) __atomic_fetch_add(&order_errors, 1, __ATOMIC_RELAXED);
  v[0] += 1.0f;
  __atomic_fetch_add(&counts[id], 1, __ATOMIC_RELAXED);
}

static struct starpu_codelet ind_cl = {
    .cpu_funcs = {ind_cpu}, .nbuffers = 2, .modes = {STARPU_R, STARPU_W}, .name = "test_ind"};
static struct starpu_codelet chain_cl = {
    .cpu_funcs = {chain_cpu}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "test_chain"};

/* returns the number of miscounted tasks (or -1 if submitting failed) */
static int count_tasks(void) {
  static float input[VLEN];
  static float chains[NCHAIN][VLEN];
  memset(counts, 0, sizeof counts);
  order_errors = 0;
  starpu_data_handle_t in_h, chain_h[NCHAIN];
  starpu_vector_data_register(&in_h, STARPU_MAIN_RAM, (uintptr_t)input, VLEN, sizeof(float));
  for (int c = 0; c < NCHAIN; c++) {
    memset(chains[c], 0, sizeof chains[c]);
    starpu_vector_data_register(&chain_h[c], STARPU_MAIN_RAM, (uintptr_t)chains[c], VLEN,
                                sizeof(float));
  }
  int lo = starpu_sched_get_min_priority(), hi = starpu_sched_get_max_priority();
  tg_rng rng = {.s = 0x1234567890ABCDEFULL};
  int rc = 0;
  /* interleave: independent tasks and chain links alternate in submission */
  int next_ind = 0, next_link = 0;
  while (rc == 0 && (next_ind < NIND || next_link < NCHAIN * CHAINLEN)) {
    struct starpu_task *t = starpu_task_create();
    /* the range may be all of int (dmdas): no int overflow */
    int prio = (int)((long long)lo +
                     (long long)(tg_rng_next(&rng) % (uint64_t)((long long)hi - lo + 1)));
    int id;
    if (next_ind < NIND && (next_link >= NCHAIN * CHAINLEN || (tg_rng_next(&rng) & 1))) {
      id = next_ind++;
      starpu_data_handle_t tmp;
      starpu_vector_data_register(&tmp, -1, 0, VLEN, sizeof(float));
      t->cl = &ind_cl;
      t->handles[0] = in_h;
      t->handles[1] = tmp;
      task_ids[id] = id;
      t->cl_arg = &task_ids[id];
      t->priority = prio;
      if (starpu_task_submit(t) != 0) rc = -1;
      starpu_data_unregister_submit(tmp);
    } else {
      int link = next_link++;
      int c = link % NCHAIN, pos = link / NCHAIN;
      id = NIND + link;
      chain_pos[id] = pos;
      task_ids[id] = id;
      t->cl = &chain_cl;
      t->handles[0] = chain_h[c];
      t->cl_arg = &task_ids[id];
      t->priority = prio;
      if (starpu_task_submit(t) != 0) rc = -1;
    }
  }
  starpu_task_wait_for_all();
  starpu_data_unregister(in_h);
  for (int c = 0; c < NCHAIN; c++) starpu_data_unregister(chain_h[c]);
  if (rc) return -1;
  int bad = 0;
  for (int i = 0; i < NCOUNT; i++)
    if (counts[i] != 1) {
      if (bad < 5) fprintf(stderr, "child: task %d ran %d times\n", i, counts[i]);
      bad++;
    }
  for (int c = 0; c < NCHAIN; c++)
    if ((int)chains[c][0] != CHAINLEN) {
      fprintf(stderr, "child: chain %d reached %d, not %d\n", c, (int)chains[c][0], CHAINLEN);
      bad++;
    }
  if (order_errors) {
    fprintf(stderr, "child: %d chain tasks ran out of order\n", order_errors);
    bad += order_errors;
  }
  return bad;
}

/* ---- child part 2: MLP step --------------------------------------------- */

static int mlp_losses(double *loss1, double *loss2) {
  enum { B = 128, M = 8, NL = 3 };
  static const int WIDTHS[NL + 1] = {64, 96, 48, 10};
  tg_mlp_config cfg = {.nlayers = NL, .act = TG_ACT_GELU};
  for (int l = 0; l <= NL; l++) cfg.widths[l] = WIDTHS[l];
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  tg_mlp m;
  if (tg_mlp_create(&m, &cfg, &opt, 77) < 0) return -1;
  tg_tensor x, y;
  if (tg_tensor_alloc(&x, B, WIDTHS[0], TG_F32) < 0) return -1;
  if (tg_tensor_alloc(&y, B, 1, TG_I32) < 0) return -1;
  tg_rng rng = {.s = 0xD1B54A32D192ED03ULL};
  tg_rng_fill(&rng, x.host, (size_t)B * WIDTHS[0], 1.0f);
  int32_t *yl = y.host;
  for (int r = 0; r < B; r++) yl[r] = (int32_t)(tg_rng_next(&rng) % WIDTHS[NL]);
  tg_split xs = {0}, ys = {0};
  if (tg_tensor_split_static(&x, M, &xs) < 0 || tg_tensor_split_static(&y, M, &ys) < 0)
    return -1;
  tg_batch batch = {.rows = B, .nmicro = M, .x = xs.parts, .y = ys.parts};
  int rc = 0;
  if (tg_mlp_step(&m, &batch) < 0 || tg_mlp_metrics(&m, loss1, NULL, 1) < 0 ||
      tg_mlp_forward_backward(&m, &batch) < 0 || tg_mlp_metrics(&m, loss2, NULL, 0) < 0)
    rc = -1;
  starpu_task_wait_for_all();
  tg_split_free(&x, &xs);
  tg_split_free(&y, &ys);
  tg_tensor_free(&x);
  tg_tensor_free(&y);
  tg_mlp_destroy(&m);
  return rc;
}

/* ---- child part 3: GPT step --------------------------------------------- */

static int gpt_losses(double *loss1, double *loss2) {
  enum { L = 2, C = 32, NH = 4, T = 16, B = 4, M = 2, V = 64 };
  const tg_gpt_config cfg = {.max_seq_len = T, .vocab_size = V, .num_layers = L,
                             .num_heads = NH, .channels = C, .padded_vocab_size = V};
  size_t sizes[TG_GPT_NPARAMS];
  size_t np = tg_gpt_param_sizes(&cfg, sizes);
  float *params = malloc(sizeof(float) * np);
  if (!params) return -1;
  tg_gpt_init_params(&cfg, 20240611, params);
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  tg_gpt_run_config run = tg_gpt_run_default(B, T);
  run.nmicro = M;
  tg_gpt g;
  int rc = tg_gpt_create(&g, &cfg, params, &run, &opt);
  free(params);
  if (rc < 0) return -1;
  tg_tensor x, y;
  if (tg_tensor_alloc(&x, B * T, 1, TG_I32) < 0) return -1;
  if (tg_tensor_alloc(&y, B * T, 1, TG_I32) < 0) return -1;
  tg_rng rng = {.s = 0x9E3779B97F4A7C15ULL};
  int32_t *xt = x.host, *yt = y.host;
  int32_t prev = (int32_t)(tg_rng_next(&rng) % V);
  for (int i = 0; i < B * T; i++) {
    xt[i] = prev;
    prev = (int32_t)(tg_rng_next(&rng) % V);
    yt[i] = prev;
  }
  tg_split xs = {0}, ys = {0};
  if (tg_tensor_split_static(&x, M, &xs) < 0 || tg_tensor_split_static(&y, M, &ys) < 0)
    return -1;
  tg_batch batch = {.rows = B * T, .nmicro = M, .x = xs.parts, .y = ys.parts};
  if (tg_gpt_step(&g, &batch, 1e-3f) < 0 || tg_gpt_loss(&g, loss1, 1) < 0 ||
      tg_gpt_evaluate(&g, &batch) < 0 || tg_gpt_loss(&g, loss2, 1) < 0)
    rc = -1;
  starpu_task_wait_for_all();
  tg_split_free(&x, &xs);
  tg_split_free(&y, &ys);
  tg_tensor_free(&x);
  tg_tensor_free(&y);
  tg_gpt_destroy(&g);
  return rc;
}

static int child(const char *cfg_sched) {
  tg_runtime_config rc0 = tg_runtime_config_default();
  rc0.sched = cfg_sched;
  /* ours by name (cfg_sched or STARPU_SCHED), as the CLI does: the runtime
   * does not know taskgrad's policies */
  rc0.sched_policy = tg_sched_policy_requested(cfg_sched);
  if (tg_init(&rc0) < 0) {
    fprintf(stderr, "child: tg_init: %s\n", tg_last_error());
    return 2;
  }
  struct starpu_sched_policy *pol = starpu_sched_ctx_get_sched_policy(0);
  const char *sched = pol && pol->policy_name ? pol->policy_name : "?";
  int bad = count_tasks();
  double v[4] = {0, 0, 0, 0};
  int rc = 0;
  if (bad < 0) {
    fprintf(stderr, "child: submitting the counted tasks failed\n");
    rc = 2;
  }
  if (rc == 0 && mlp_losses(&v[0], &v[1]) < 0) {
    fprintf(stderr, "child: MLP step: %s\n", tg_last_error());
    rc = 2;
  }
  if (rc == 0 && gpt_losses(&v[2], &v[3]) < 0) {
    fprintf(stderr, "child: GPT step: %s\n", tg_last_error());
    rc = 2;
  }
  long long total = (long long)starpu_memory_get_total(STARPU_MAIN_RAM);
  int ncpu = tg_ncpu_workers();
  tg_shutdown();
  if (rc) return rc;
  printf("sched %s ncpu %d miscounted %d mlp1 %.9e mlp2 %.9e gpt1 %.9e gpt2 %.9e "
         "ramtotal %lld\n",
         sched, ncpu, bad, v[0], v[1], v[2], v[3], total);
  fflush(stdout);
  return 0;
}

/* ---- parent -------------------------------------------------------------- */

typedef struct config {
  const char *sched;
  int ncpu;
  int via_cfg;  /* 1: name through tg_runtime_config.sched, not STARPU_SCHED */
  int pressure; /* 1: STARPU_LIMIT_CPU_MEM=2048, TG_MEMAWARE_PRESSURE=1 */
} config;

typedef struct outcome {
  char sched[64];
  int ncpu, miscounted;
  double v[4];
  long long ramtotal;
} outcome;
static const char *VNAMES[4] = {"MLP step-1 loss", "MLP step-2 loss", "GPT step loss",
                                "GPT loss after update"};

static int run_child(const config *c, const char *name, outcome *o) {
  static const char *const drop[] = {"STARPU_SCHED=", "STARPU_NCPU=", "STARPU_NCPUS=",
                                     "STARPU_NCUDA=", "STARPU_LIMIT_CPU_MEM=",
                                     "TG_MEMAWARE_PRESSURE=", "TG_NO_PRIORITIES=", NULL};
  char bufs[5][80], out[16384];
  const char *add[6];
  int nb = 0;
  snprintf(bufs[nb++], 80, "STARPU_NCPU=%d", c->ncpu);
  snprintf(bufs[nb++], 80, "STARPU_NCUDA=0");
  if (!c->via_cfg) snprintf(bufs[nb++], 80, "STARPU_SCHED=%s", c->sched);
  if (c->pressure) {
    snprintf(bufs[nb++], 80, "STARPU_LIMIT_CPU_MEM=2048");
    snprintf(bufs[nb++], 80, "TG_MEMAWARE_PRESSURE=1");
  }
  for (int i = 0; i < nb; i++) add[i] = bufs[i];
  add[nb] = NULL;
  if (tg_test_run_self(c->via_cfg ? c->sched : NULL, drop, add, out, sizeof out, name) < 0)
    return -1;
  const char *line = NULL;
  for (const char *p = out; (p = strstr(p, "sched ")) != NULL; p++)
    if (p == out || p[-1] == '\n') line = p;
  if (!line || sscanf(line,
                      "sched %63s ncpu %d miscounted %d mlp1 %le mlp2 %le gpt1 %le gpt2 %le "
                      "ramtotal %lld",
                      o->sched, &o->ncpu, &o->miscounted, &o->v[0], &o->v[1], &o->v[2],
                      &o->v[3], &o->ramtotal) != 8) {
    fprintf(stderr, "%s: no result line in the child's output:\n%s\n", name, out);
    return -1;
  }
  return 0;
}

static int parent(void) {
  static const config CONFIGS[] = {
      {"eager", 1, 0, 0},       {"eager", 2, 0, 0},       {"tg-critpath", 1, 0, 0},
      {"tg-critpath", 2, 0, 0}, {"tg-memaware", 1, 0, 0}, {"tg-memaware", 2, 0, 0},
      {"tg-critpath", 2, 1, 0}, {"tg-memaware", 2, 1, 0}, {"tg-memaware", 2, 0, 1},
  };
  enum { NCONF = sizeof CONFIGS / sizeof CONFIGS[0] };
  /* the library's registry */
  CHECK(tg_sched_policy_find("tg-critpath") == &tg_sched_critpath_policy,
        "tg_sched_policy_find(tg-critpath)");
  CHECK(tg_sched_policy_find("tg-memaware") == &tg_sched_memaware_policy,
        "tg_sched_policy_find(tg-memaware)");
  CHECK(tg_sched_policy_find("eager") == NULL && tg_sched_policy_find(NULL) == NULL,
        "tg_sched_policy_find of a name not ours");
  int nnames = 0;
  for (const char *const *p = tg_sched_policy_names(); *p; p++) {
    CHECK(tg_sched_policy_find(*p) != NULL, "listed name %s not found", *p);
    nnames++;
  }
  CHECK(nnames == 2, "%d names listed, expected 2", nnames);

  outcome ref;
  int have_ref = 0;
  for (int i = 0; i < NCONF; i++) {
    const config *c = &CONFIGS[i];
    char name[96];
    snprintf(name, sizeof name, "%s/%d cpu%s%s", c->sched, c->ncpu,
             c->via_cfg ? " (config)" : "", c->pressure ? " (pressure)" : "");
    outcome o;
    int ok = run_child(c, name, &o) == 0;
    CHECK(ok, "%s: the child failed (see above)", name);
    if (!ok) continue;
    CHECK(strcmp(o.sched, c->sched) == 0, "%s: the child ran with scheduler %s", name,
          o.sched);
    CHECK(o.ncpu == c->ncpu, "%s: the child ran with %d CPU workers", name, o.ncpu);
    CHECK(o.miscounted == 0, "%s: %d of %d tasks did not run exactly once", name,
          o.miscounted, NCOUNT);
    int finite = 1;
    for (int k = 0; k < 4; k++) finite &= isfinite(o.v[k]) && o.v[k] > 0;
    CHECK(finite, "%s: losses not finite or not positive", name);
    if (c->pressure)
      CHECK(o.ramtotal == 2048LL << 20, "%s: StarPU reports %lld bytes of main memory, "
            "not the 2048 MiB limit (the pressure path was not exercised)", name,
            o.ramtotal);
    if (!have_ref) {
      ref = o;
      have_ref = 1;
      printf("%-28s MLP %.9e %.9e GPT %.9e %.9e (reference; main memory %lld)\n", name,
             o.v[0], o.v[1], o.v[2], o.v[3], o.ramtotal);
      continue;
    }
    double worst = 0;
    for (int k = 0; k < 4; k++) {
      double e = fabs(o.v[k] - ref.v[k]) / fabs(ref.v[k]);
      worst = fmax(worst, e);
      CHECK(e <= TOL, "%s: %s %.9e vs eager's %.9e: relative difference %.3e > %.0e", name,
            VNAMES[k], o.v[k], ref.v[k], e, TOL);
    }
    printf("%-28s MLP %.9e %.9e GPT %.9e %.9e (max rel diff %.2e; %d tasks ok)\n", name,
           o.v[0], o.v[1], o.v[2], o.v[3], worst, NCOUNT - o.miscounted);
  }
  CHECK(have_ref, "no configuration ran");
  return tg_test_finish("test_sched_policies");
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) return child(argc > 2 ? argv[2] : NULL);
  if (argc > 1) {
    fprintf(stderr, "usage: %s [child [SCHED]]\n", argv[0]);
    return 2;
  }
  return parent();
}
