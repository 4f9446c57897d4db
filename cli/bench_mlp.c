/*
 * taskgrad bench mlp: measures the MLP training step on synthetic data (the
 * step's cost does not depend on the values), so that it needs no data set
 * and isolates compute from loading.
 *
 * Reports samples/s, achieved GFLOP/s (6 flops per weight per sample), the
 * share of the workers' time spent in GEMM tasks (tg_gemm and the fused
 * tg_linear_* tasks, whose bias/activation epilogue is part of the task), and the runtime overhead
 * per task (worker time that is neither task bodies nor waiting for work,
 * from StarPU's worker profiling), with a per-codelet table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "micro_batches.h"
#include "taskgrad/mlp.h"
#include "taskgrad/stats.h"

static void bench_usage(void) {
  puts("usage: taskgrad bench mlp [flags]\n"
       "\n"
       "  --batch N            samples per step (default 2048)\n"
       "  --micro-batches M    micro-batches per step, or auto: one per worker,\n"
       "                       at least 16 samples each (default auto)\n"
       "  --hidden LIST        hidden widths (default 512,256)\n"
       "  --activation NAME    relu or gelu (default relu)\n"
       "  --tiles N            output-feature blocks per layer (1..64, at most\n"
       "                       the narrowest layer; default 1: untiled)\n"
       "  --steps N            measured steps (default 30)\n"
       "  --warmup N           unmeasured steps first, which also calibrate\n"
       "                       the perfmodels (default 5)\n"
       TG_CLI_PRECISION_HELP TG_CLI_RUNTIME_HELP
       "  --per-step           wait for each step's last task and print the median,\n"
       "                       min and max step time (as bench gpt does); without\n"
       "                       it the steps are pipelined and the mean is printed\n"
       "  --quiet              no per-codelet table\n");
}

/* One run of the command. */
typedef struct bench_mlp {
  int batch, micro, steps, warmup, quiet, per_step;
  tg_mlp_config cfg;
  tg_runtime_config rt;
  tg_cli_precision prec;
  tg_optimizer_config opt;
} bench_mlp;

/* The flags; returns 1 after printing the help. */
static int parse_flags(int argc, char **argv, bench_mlp *r) {
  *r = (bench_mlp){.batch = 2048, .micro = 0 /* auto */, .steps = 30, .warmup = 5,
                   .cfg = {.nlayers = 3, .widths = {784, 512, 256, 10}, .act = TG_ACT_RELU,
                           .tiles = 1},
                   .rt = tg_runtime_config_default()};
  tg_cli_precision_default(&r->prec);
  tg_mlp_config *cfg = &r->cfg;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      bench_usage();
      return 1;
    } else if (!strcmp(a, "--batch")) {
      r->batch = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 1 << 20);
    } else if (!strcmp(a, "--micro-batches")) {
      r->micro = tg_cli_micro_batches_arg(a, tg_cli_value(argc, argv, &i), 4096);
    } else if (!strcmp(a, "--steps")) {
      r->steps = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 1000000);
    } else if (!strcmp(a, "--warmup")) {
      r->warmup = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 0, 1000000);
    } else if (!strcmp(a, "--hidden")) {
      cfg->nlayers = 1 + tg_cli_int_list(a, tg_cli_value(argc, argv, &i), cfg->widths + 1,
                                         TG_MLP_MAX_LAYERS - 1, 1, 1 << 16);
    } else if (!strcmp(a, "--activation")) {
      const char *v = tg_cli_value(argc, argv, &i);
      if (!strcmp(v, "relu")) cfg->act = TG_ACT_RELU;
      else if (!strcmp(v, "gelu")) cfg->act = TG_ACT_GELU;
      else tg_cli_die("--activation: '%s' is not relu or gelu", v);
    } else if (!strcmp(a, "--tiles")) {
      cfg->tiles = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, TG_MAX_SPLIT);
    } else if (!strcmp(a, "--quiet")) {
      r->quiet = 1;
    } else if (!strcmp(a, "--per-step")) {
      r->per_step = 1;
    } else if (tg_cli_precision_flag(argc, argv, &i, &r->prec)) {
      continue;
    } else if (!tg_cli_runtime_flag(argc, argv, &i, &r->rt)) {
      tg_cli_die("unknown flag '%s' for 'bench mlp' (see --help)", a);
    }
  }
  if (r->micro > r->batch) /* auto (0): chosen once the workers are known */
    tg_cli_die("--micro-batches %d is larger than --batch %d", r->micro, r->batch);
  cfg->widths[cfg->nlayers] = 10;
  if (cfg->tiles > tg_mlp_max_tiles(cfg))
    tg_cli_die("--tiles %d is larger than the narrowest layer (%d output features)",
               cfg->tiles, tg_mlp_max_tiles(cfg));
  r->opt = tg_optimizer_default(TG_OPT_ADAMW);
  tg_cli_precision_finish(&r->prec);
  tg_cli_precision_mlp(&r->prec, cfg, &r->opt);
  tg_cli_instrument_check(&r->rt);
  return 0;
}

/* Synthetic inputs (x uniform in [-1, 1), labels i % 10), partitioned into
 * the micro-batches of b; the children's handles are allocated. */
static void make_batch(const bench_mlp *r, tg_tensor *x, tg_tensor *y, tg_batch *b) {
  int batch = r->batch, micro = r->micro;
  if (tg_tensor_alloc(x, batch, r->cfg.widths[0], TG_F32) < 0 ||
      tg_tensor_alloc(y, batch, 1, TG_I32) < 0)
    tg_cli_die_last("allocating the batch");
  uint64_t s = 42;
  float *xs = x->host;
  int32_t *ys = y->host;
  for (size_t i = 0; i < tg_tensor_numel(x); i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    xs[i] = (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
  }
  for (int i = 0; i < batch; i++) ys[i] = i % 10;
  struct starpu_data_filter f = {.filter_func = starpu_matrix_filter_vertical_block,
                                 .nchildren = (unsigned)micro};
  starpu_data_partition(x->handle, &f);
  starpu_data_partition(y->handle, &f);
  starpu_data_handle_t *xc = malloc(micro * sizeof *xc), *yc = malloc(micro * sizeof *yc);
  if (!xc || !yc) tg_cli_die("out of memory");
  for (int i = 0; i < micro; i++) {
    xc[i] = starpu_data_get_sub_data(x->handle, 1, i);
    yc[i] = starpu_data_get_sub_data(y->handle, 1, i);
  }
  *b = (tg_batch){.rows = batch, .nmicro = micro, .x = xc, .y = yc};
}

/* The warm-up, then the measured steps (their times in ms[] with
 * --per-step) and statistics. */
static void time_steps(const bench_mlp *r, tg_mlp *m, tg_batch *b, double *ms, tg_stats *st) {
  for (int k = 0; k < r->warmup; k++)
    if (tg_mlp_step(m, b) < 0) tg_cli_die_last("warm-up step");
  /* --per-step: the first interval starts with no warm-up task left */
  if (r->per_step) starpu_task_wait_for_all();
  if (tg_stats_begin() < 0) tg_cli_die_last("statistics");
  for (int k = 0; k < r->steps; k++) {
    double t0 = tg_cli_now();
    if (tg_mlp_step(m, b) < 0) tg_cli_die_last("training step");
    /* each interval ends when the step's last task (an optimizer update)
     * has ended: waiting only for the loss, as before, let the step's
     * backward and update run on into the next interval, so intervals
     * measured parts of two steps and the minimum came out near half a
     * step (bench/results/2026-11-25-per-step.md) */
    if (r->per_step) starpu_task_wait_for_all();
    ms[k] = (tg_cli_now() - t0) * 1e3;
  }
  if (tg_stats_end(st) < 0) tg_cli_die_last("statistics");
}

static void print_results(const bench_mlp *r, int micro, double *ms, const tg_stats *st) {
  const tg_mlp_config *cfg = &r->cfg;
  int steps = r->steps;
  double wall_s = st->wall_us * 1e-6;
  double flops = tg_mlp_step_flops(cfg, r->batch) * steps;
  double worker_us = st->wall_us * st->nworkers;
  /* GEMM tasks: plain GEMMs and the fused linear tasks (a GEMM with its
   * bias/activation epilogue) */
  double gemm_us = tg_stats_codelet_us(st, "tg_gemm") +
                   tg_stats_codelet_us(st, "tg_linear_fwd") +
                   tg_stats_codelet_us(st, "tg_linear_bwd_data");
  double overhead_us = 0;
  for (int w = 0; w < st->nworkers; w++) overhead_us += st->workers[w].overhead_us;
  printf("bench mlp: widths");
  for (int l = 0; l <= cfg->nlayers; l++) printf("%c%d", l ? '-' : ' ', cfg->widths[l]);
  printf(", batch %d, %d micro-batches, %d steps, %d workers, scheduler %s", r->batch,
         micro, steps, st->nworkers, starpu_sched_ctx_get_sched_policy(0)->policy_name);
  if (cfg->tiles > 1) printf(", %d tiles", cfg->tiles);
  if (cfg->amp.precision != TG_PREC_FP32) printf(", %s", tg_precision_name(cfg->amp.precision));
  printf("\n");
  printf("step time:        %.2f ms\n", st->wall_us / steps * 1e-3);
  if (r->per_step) {
    qsort(ms, steps, sizeof *ms, tg_cli_cmp_double);
    printf("taskgrad median step ms: %.2f (min %.2f, max %.2f)\n", ms[steps / 2], ms[0],
           ms[steps - 1]);
  }
  printf("samples/s:        %.0f\n", (double)r->batch * steps / wall_s);
  printf("GFLOP/s:          %.1f\n", flops / wall_s * 1e-9);
  printf("GEMM share:       %.1f%% of worker time (GEMM and fused linear tasks)\n",
         100 * gemm_us / worker_us);
  printf("runtime overhead: %.1f us per task (%ld tasks), %.1f%% of worker time\n",
         st->tasks ? overhead_us / st->tasks : 0, st->tasks, 100 * overhead_us / worker_us);
  if (!r->quiet) tg_stats_print(st, stdout);
}

int tg_cmd_bench_mlp(int argc, char **argv) {
  bench_mlp r;
  if (parse_flags(argc, argv, &r)) return 0;
  r.rt.profiling = 1;
  if (tg_init(&r.rt) < 0) tg_cli_die_last("starting StarPU");
  tg_cli_end_on_signals();
  tg_cli_machine_line(stdout);
  if (!r.micro) r.micro = tg_cli_auto_micro_batches(r.batch, 1, 0, TG_MLP_AUTO_MIN_SAMPLES);
  tg_cli_instrument_begin_bench(&r.rt);
  tg_cli_precision_start(&r.prec);
  tg_cli_check_memory_limit(
      tg_mlp_managed_bytes(&r.cfg, r.batch, tg_ncpu_workers() + tg_ncuda_workers()),
      "this MLP and batch");
  tg_mlp m;
  if (tg_mlp_create(&m, &r.cfg, &r.opt, 1) < 0) tg_cli_die_last("creating the model");
  tg_tensor x, y;
  tg_batch b;
  make_batch(&r, &x, &y, &b);
  double *ms = malloc(sizeof(double) * r.steps);
  if (!ms) tg_cli_die("out of memory");
  tg_stats st;
  time_steps(&r, &m, &b, ms, &st);
  print_results(&r, r.micro, ms, &st);
  free(ms);
  starpu_data_unpartition(x.handle, STARPU_MAIN_RAM);
  starpu_data_unpartition(y.handle, STARPU_MAIN_RAM);
  free(b.x);
  free(b.y);
  tg_tensor_free(&x);
  tg_tensor_free(&y);
  tg_mlp_destroy(&m);
  tg_cli_instrument_end(&r.rt);
  tg_shutdown();
  return 0;
}
