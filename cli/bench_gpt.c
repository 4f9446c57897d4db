/*
 * taskgrad bench gpt: measures the GPT training step (forward, backward,
 * AdamW) on random tokens: step time (median), tokens/s, achieved GFLOP/s
 * with llm.c's count (6 N + 6 L C T per token), and a per-codelet table.
 * With --torch it also runs bench/torch_gpt.py on the same checkpoint and
 * batch with Debian's PyTorch, one process, the same number of threads as
 * CPU workers, and prints both.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gpt_run_options.h"
#include "micro_batches.h"
#include "taskgrad/gpt.h"
#include "taskgrad/rng.h"
#include "taskgrad/stats.h"

static void bench_gpt_usage(void) {
  fputs("usage: taskgrad bench gpt [flags]\n"
        "\n"
        "  --init-from FILE     llm.c checkpoint or Hugging Face GPT-2 (as in\n"
        "                       train gpt; default: a random model of the\n"
        "                       shape of --layers ... --max-seq below)\n"
        "  --steps N            measured steps (default 10)\n"
        "  --warmup N           unmeasured steps first (default 2)\n"
        "  --torch              also time PyTorch (/usr/bin/python3) on the same\n"
        "                       model and batch\n"
        "  --quiet              no per-codelet table\n"
        "\n"
        "GPT run options (as in train gpt and simulate gpt):\n",
        stdout);
  tg_cli_gpt_run_help(stdout, TG_RUN_BENCH_GPT, 0);
}

/* Runs the PyTorch reference; returns its median step time in ms or -1. */
static double torch_step_ms(const char *model, const char *tokens, int B, int T, int steps,
                            int warmup, int threads) {
  char script[4096], cmd[16384];
  const char *src = getenv("TG_SOURCE_DIR");
  snprintf(script, sizeof script, "%s/bench/torch_gpt.py", src ? src : TG_SOURCE_DIR_DEFAULT);
  if (access(script, R_OK) != 0) {
    fprintf(stderr, "taskgrad: bench gpt --torch: %s not found (set TG_SOURCE_DIR)\n", script);
    return -1;
  }
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 '%s' --model '%s' --tokens '%s' --batch %d --seq %d --steps %d "
           "--warmup %d --threads %d",
           script, model, tokens, B, T, steps, warmup, threads);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[512];
  double ms = -1;
  while (fgets(line, sizeof line, p)) {
    fputs(line, stdout);
    sscanf(line, "torch median step ms: %lf", &ms);
  }
  if (pclose(p) != 0) return -1;
  return ms;
}

/* One run of the command. */
typedef struct bench_gpt {
  tg_cli_gpt_run ro;             /* the GPT run options */
  const char *init_from;
  int steps, warmup, torch, quiet;
  tg_gpt_config cfg;
  float *params;                 /* the initial parameters (freed once built);
                                    NULL for a random model without --torch */
  tg_llmc_model_reader *reader;  /* else --init-from, read while building */
  size_t nparams;
  uint16_t *tokens;              /* one random batch, reused every step */
  size_t ntok;
  int micro, threads;
  tg_gpt_run_config run;
  tg_gpt g;
  char dir[32], model[256], tokfile[256]; /* PyTorch's inputs (--torch) */
} bench_gpt;

/* The flags; returns 1 after printing the help. */
static int parse_flags(int argc, char **argv, bench_gpt *r) {
  tg_cli_gpt_run_default(&r->ro, TG_RUN_BENCH_GPT);
  r->steps = 10;
  r->warmup = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define VAL tg_cli_value(argc, argv, &i)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      bench_gpt_usage();
      return 1;
    } else if (tg_cli_gpt_run_flag(argc, argv, &i, TG_RUN_BENCH_GPT, &r->ro)) continue;
    else if (!strcmp(a, "--init-from")) r->init_from = VAL;
    else if (!strcmp(a, "--steps")) r->steps = (int)tg_cli_int(a, VAL, 1, 1 << 20);
    else if (!strcmp(a, "--warmup")) r->warmup = (int)tg_cli_int(a, VAL, 0, 1 << 20);
    else if (!strcmp(a, "--torch")) r->torch = 1;
    else if (!strcmp(a, "--quiet")) r->quiet = 1;
    else tg_cli_die("unknown flag '%s' for 'bench gpt' (see --help)", a);
#undef VAL
  }
  tg_cli_gpt_run_finish(&r->ro, TG_RUN_BENCH_GPT);
  r->cfg = r->ro.model;
  if (r->cfg.padded_vocab_size < r->cfg.vocab_size)
    tg_cli_die("--padded-vocab %d is below --vocab %d", r->cfg.padded_vocab_size,
               r->cfg.vocab_size);
  tg_cli_instrument_check(&r->ro.rt);
  tg_cli_path_in("--init-from", r->init_from);
  tg_cli_paths_check(); /* --trace must not replace it */
  return 0;
}

/* The model (--init-from's or a random one) and a batch of random tokens. */
static void make_inputs(bench_gpt *r) {
  tg_gpt_config *cfg = &r->cfg;
  size_t sizes[TG_GPT_NPARAMS];
  int B = r->ro.cfg.B, T = r->ro.cfg.T;
  if (r->init_from) { /* read whole only for PyTorch's copy, else piece by piece */
    if ((r->torch ? tg_llmc_model_read(r->init_from, cfg, &r->params)
                  : tg_llmc_model_open(r->init_from, cfg, &r->reader)) < 0)
      tg_cli_die_last("--init-from");
    r->nparams = tg_gpt_param_sizes(cfg, sizes);
  } else {
    if (tg_gpt_config_check(cfg) < 0) tg_cli_die_last("model shape");
    r->nparams = tg_gpt_param_sizes(cfg, sizes);
    /* only PyTorch's input file needs the whole random model in one array;
     * else it goes straight into the graph's buffers (build_model) */
    if (r->torch) {
      r->params = malloc(sizeof(float) * r->nparams);
      if (!r->params) tg_cli_die("out of memory");
      tg_gpt_init_params(cfg, 1, r->params);
    }
  }
  if (T > cfg->max_seq_len)
    tg_cli_die("--seq %d exceeds the model's maximum %d", T, cfg->max_seq_len);
  r->ntok = (size_t)B * T + 1;
  r->tokens = malloc(sizeof(uint16_t) * r->ntok);
  if (!r->tokens) tg_cli_die("out of memory");
  uint64_t s = 7;
  for (size_t i = 0; i < r->ntok; i++)
    r->tokens[i] = (uint16_t)(tg_splitmix64(&s) % (uint64_t)cfg->vocab_size);
}

/* StarPU and the graph's model; with --torch, PyTorch's inputs first, so
 * that the host copy of the parameters is gone during the measured steps
 * (peak memory). */
static void build_model(bench_gpt *r, tg_optimizer_config *opt) {
  int B = r->ro.cfg.B, T = r->ro.cfg.T;
  r->ro.rt.profiling = 1;
  if (tg_init(&r->ro.rt) < 0) tg_cli_die_last("starting StarPU");
  tg_cli_end_on_signals();
  tg_cli_machine_line(stdout);
  tg_cli_instrument_begin_bench(&r->ro.rt);
  r->threads = tg_ncpu_workers();
  r->micro = r->ro.cfg.nmicro;
  if (!r->micro) {
    r->micro = tg_cli_gpt_auto_micro_batches(B, T, r->cfg.channels, r->ro.prec.precision, 1);
    tg_cli_check_gpt_micro(B, r->micro, r->ro.cfg.attn_splits);
  }
  r->run = tg_cli_gpt_run_config(&r->ro, B, T, r->micro);
  tg_cli_precision_start(&r->ro.prec);
  *opt = tg_optimizer_default(TG_OPT_ADAMW);
  opt->lr = 1e-4f;
  tg_cli_gpt_fit(&r->cfg, &r->run, tg_ncpu_workers() + tg_ncuda_workers(),
                 tg_cli_device_memory(), 1, "this GPT model and batch");
  if (r->torch) {
    snprintf(r->dir, sizeof r->dir, "/tmp/taskgrad-bench-XXXXXX");
    if (!mkdtemp(r->dir)) tg_cli_die("cannot create a temporary directory");
    snprintf(r->model, sizeof r->model, "%s/model.bin", r->dir);
    snprintf(r->tokfile, sizeof r->tokfile, "%s/tokens.bin", r->dir);
    if (tg_llmc_model_write(r->model, &r->cfg, r->params) < 0 ||
        tg_llmc_tokens_write(r->tokfile, r->tokens, r->ntok) < 0)
      tg_cli_die_last("writing the PyTorch inputs");
  }
  tg_cli_gpt_create(&r->g, &r->cfg, r->params, r->reader, 1, &r->run, opt);
  r->reader = NULL; /* closed */
  free(r->params);
  r->params = NULL;
}

/* The warm-up, then the measured steps' times in ms[] and statistics. */
static void time_steps(bench_gpt *r, const tg_batch *b, float lr, double *ms, tg_stats *st) {
  for (int k = 0; k < r->warmup; k++) {
    if (tg_gpt_step(&r->g, b, lr) < 0) tg_cli_die_last("warm-up step");
    if (tg_gpt_loss(&r->g, NULL, 1) < 0) tg_cli_die_last("loss");
  }
  starpu_task_wait_for_all(); /* the first interval starts with no warm-up task left */
  if (tg_stats_begin() < 0) tg_cli_die_last("statistics");
  for (int k = 0; k < r->steps; k++) {
    double t0 = tg_cli_now();
    if (tg_gpt_step(&r->g, b, lr) < 0) tg_cli_die_last("training step");
    if (tg_gpt_loss(&r->g, NULL, 1) < 0) tg_cli_die_last("loss");
    /* the loss is known after the forward; the interval ends when the
     * step's backward and update have ended too, so that it holds one
     * whole step and nothing of the next (bench/results/2026-11-25-per-step.md) */
    starpu_task_wait_for_all();
    ms[k] = (tg_cli_now() - t0) * 1e3;
  }
  if (tg_stats_end(st) < 0) tg_cli_die_last("statistics");
}

/* The figures; returns the median step time in ms (ms[] gets sorted). */
static double print_results(bench_gpt *r, double *ms, const tg_stats *st) {
  const tg_gpt_config *cfg = &r->cfg;
  int B = r->ro.cfg.B, T = r->ro.cfg.T, steps = r->steps;
  qsort(ms, steps, sizeof *ms, tg_cli_cmp_double);
  double med = ms[steps / 2];
  double flops = tg_gpt_flops_per_token(cfg, T) * B * T;
  char cls[48] = "fused";
  if (tg_gpt_classifier_blocks(&r->g))
    snprintf(cls, sizeof cls, "split, dwte in %d block(s)", tg_gpt_classifier_blocks(&r->g));
  if (tg_gpt_classifier_tiles(&r->g))
    snprintf(cls, sizeof cls, "in %d vocabulary tiles, dwte in %d block(s)",
             tg_gpt_classifier_tiles(&r->g), tg_gpt_classifier_blocks(&r->g) ? tg_gpt_classifier_blocks(&r->g) : 1);
  printf("bench gpt: L=%d C=%d NH=%d V=%d Vp=%d, %zu parameters, B=%d T=%d, %d micro-batches, "
         "%s attention (chunk %d, %d tasks), linear layers in %d tile(s)%s%s%s, classifier %s, %s, %d CPU + %d CUDA + %d emulated workers, scheduler %s\n",
         cfg->num_layers, cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size,
         r->nparams, B, T, r->micro, tg_cli_attention_name(r->run.attention),
         r->run.chunk, r->g.run.attn_splits, r->g.run.linear_tiles, r->g.run.fused_blocks > 0 ? (r->g.run.packed_layers > 0 ? ", blocks fused, layers packed" : ", blocks fused") : r->g.run.packed_layers > 0 ? ", layers packed" : "",
         r->run.recompute ? ", recompute" : "",
         r->run.offload_optimizer ? (tg_gpt_relay_devices(&r->g) ? ", optimizer offloaded, gradients reduce-scattered, weights relayed" : tg_gpt_scatter_devices(&r->g) ? ", optimizer offloaded, gradients reduce-scattered" : ", optimizer offloaded") : "", cls, tg_precision_name(r->ro.prec.precision),
         tg_ncpu_workers(), tg_ncuda_workers(), tg_nopencl_workers(),
         starpu_sched_ctx_get_sched_policy(0)->policy_name);
  printf("taskgrad median step ms: %.1f (min %.1f, max %.1f)\n", med, ms[0], ms[steps - 1]);
  /* each interval is one whole step (see above), so the mean over the
   * window agrees with the median up to the machine's noise */
  printf("taskgrad mean step ms: %.1f (%d steps in %.2f s, until the last task ended)\n",
         st->wall_us * 1e-3 / steps, steps, st->wall_us * 1e-6);
  printf("taskgrad tokens/s: %.0f\n", B * T / (med * 1e-3));
  printf("taskgrad GFLOP/s: %.1f (llm.c count, %.2f GFLOP per step)\n", flops / (med * 1e6),
         flops * 1e-9);
  if (r->g.optim.scaler.enabled)
    printf("taskgrad loss scale %g, skipped steps: %ld\n", r->g.optim.scaler.scale,
           r->g.optim.scaler.skipped);
  if (!r->quiet) tg_stats_print(st, stdout);
  return med;
}

/* --torch: PyTorch on the same inputs; returns the exit status. */
static int compare_torch(bench_gpt *r, double med) {
  double tms = torch_step_ms(r->model, r->tokfile, r->ro.cfg.B, r->ro.cfg.T, r->steps,
                             r->warmup, r->threads);
  unlink(r->model);
  unlink(r->tokfile);
  rmdir(r->dir);
  if (tms <= 0) return 1;
  printf("speed-up over PyTorch: %.2fx (PyTorch %.1f ms, taskgrad %.1f ms per step)\n",
         tms / med, tms, med);
  return 0;
}

int tg_cmd_bench_gpt(int argc, char **argv) {
  static bench_gpt r; /* zeroed */
  if (parse_flags(argc, argv, &r)) return 0;
  make_inputs(&r);
  tg_optimizer_config opt;
  build_model(&r, &opt);
  tg_token_loader_config lc = {.B = r.ro.cfg.B, .T = r.ro.cfg.T, .nmicro = r.micro,
                               .prefetch = 1, .shuffled = 0, .seed = 0, .start_batch = 0,
                               .shard = 0, .nshards = 1};
  tg_loader *ld = tg_token_loader_create(r.tokens, r.ntok, &lc);
  if (!ld) tg_cli_die_last("batch");
  tg_batch b;
  if (tg_loader_next(ld, &b) < 0) tg_cli_die_last("batch");
  double *ms = malloc(sizeof(double) * r.steps);
  if (!ms) tg_cli_die("out of memory");
  tg_stats st;
  time_steps(&r, &b, opt.lr, ms, &st);
  double med = print_results(&r, ms, &st);
  free(ms);
  tg_loader_destroy(ld);
  tg_gpt_destroy(&r.g);
  tg_cli_instrument_end(&r.ro.rt);
  tg_shutdown();
  int rc = r.torch ? compare_torch(&r, med) : 0;
  free(r.tokens);
  return rc;
}
