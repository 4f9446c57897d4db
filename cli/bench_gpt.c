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
#include "rng.h"
#include "taskgrad/gpt.h"
#include "taskgrad/stats.h"

static void bench_gpt_usage(void) {
  fputs("usage: taskgrad bench gpt [flags]\n"
        "\n"
        "  --init-from FILE     llm.c checkpoint (default: a random model of the\n"
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

int tg_cmd_bench_gpt(int argc, char **argv) {
  const char *init_from = NULL;
  int steps = 10, warmup = 2, torch = 0, quiet = 0;
  tg_cli_gpt_run ro;
  tg_cli_gpt_run_default(&ro, TG_RUN_BENCH_GPT);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define VAL tg_cli_value(argc, argv, &i)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      bench_gpt_usage();
      return 0;
    } else if (tg_cli_gpt_run_flag(argc, argv, &i, TG_RUN_BENCH_GPT, &ro)) continue;
    else if (!strcmp(a, "--init-from")) init_from = VAL;
    else if (!strcmp(a, "--steps")) steps = (int)tg_cli_int(a, VAL, 1, 1 << 20);
    else if (!strcmp(a, "--warmup")) warmup = (int)tg_cli_int(a, VAL, 0, 1 << 20);
    else if (!strcmp(a, "--torch")) torch = 1;
    else if (!strcmp(a, "--quiet")) quiet = 1;
    else tg_cli_die("unknown flag '%s' for 'bench gpt' (see --help)", a);
#undef VAL
  }
  tg_cli_gpt_run_finish(&ro, TG_RUN_BENCH_GPT);
  tg_gpt_config cfg = ro.model;
  int B = ro.cfg.B, T = ro.cfg.T, micro = ro.cfg.nmicro;
  tg_runtime_config rt = ro.rt;
  if (cfg.padded_vocab_size < cfg.vocab_size)
    tg_cli_die("--padded-vocab %d is below --vocab %d", cfg.padded_vocab_size, cfg.vocab_size);
  tg_cli_instrument_check(&rt);
  float *params = NULL;
  size_t sizes[TG_GPT_NPARAMS], nparams;
  if (init_from) {
    if (tg_llmc_model_read(init_from, &cfg, &params) < 0) tg_cli_die_last("--init-from");
    nparams = tg_gpt_param_sizes(&cfg, sizes);
  } else {
    if (tg_gpt_config_check(&cfg) < 0) tg_cli_die_last("model shape");
    nparams = tg_gpt_param_sizes(&cfg, sizes);
    params = malloc(sizeof(float) * nparams);
    if (!params) tg_cli_die("out of memory");
    tg_gpt_init_params(&cfg, 1, params);
  }
  if (T > cfg.max_seq_len) tg_cli_die("--seq %d exceeds the model's maximum %d", T, cfg.max_seq_len);

  /* random tokens: one batch, reused every step */
  size_t ntok = (size_t)B * T + 1;
  uint16_t *tokens = malloc(sizeof(uint16_t) * ntok);
  if (!tokens) tg_cli_die("out of memory");
  uint64_t s = 7;
  for (size_t i = 0; i < ntok; i++)
    tokens[i] = (uint16_t)(tg_splitmix64(&s) % (uint64_t)cfg.vocab_size);

  rt.profiling = 1;
  if (tg_init(&rt) < 0) tg_cli_die_last("starting StarPU");
  tg_cli_instrument_begin_bench(&rt);
  int threads = tg_ncpu_workers();
  if (!micro) {
    micro = tg_cli_auto_micro_batches(B, 1, 1, 1);
    tg_cli_check_gpt_micro(B, micro, ro.cfg.attn_splits);
  }
  tg_gpt_run_config run = tg_cli_gpt_run_config(&ro, B, T, micro);
  tg_cli_precision_start(&ro.prec);
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  opt.lr = 1e-4f;
  tg_gpt g;
  tg_cli_check_memory_limit(tg_gpt_managed_bytes(&cfg, &run, tg_ncpu_workers() + tg_ncuda_workers()),
                            "this GPT model and batch");
  /* PyTorch's inputs are written now, so that the host copy of the
   * parameters is gone during the measured steps (peak memory) */
  char dir[] = "/tmp/taskgrad-bench-XXXXXX", model[256], tokfile[256];
  if (torch) {
    if (!mkdtemp(dir)) tg_cli_die("cannot create a temporary directory");
    snprintf(model, sizeof model, "%s/model.bin", dir);
    snprintf(tokfile, sizeof tokfile, "%s/tokens.bin", dir);
    if (tg_llmc_model_write(model, &cfg, params) < 0 ||
        tg_llmc_tokens_write(tokfile, tokens, ntok) < 0)
      tg_cli_die_last("writing the PyTorch inputs");
  }
  if (tg_gpt_create(&g, &cfg, params, &run, &opt) < 0) tg_cli_die_last("building the model");
  free(params);
  tg_token_loader_config lc = {.B = B, .T = T, .nmicro = micro, .prefetch = 1, .shuffled = 0,
                               .seed = 0, .start_batch = 0, .shard = 0, .nshards = 1};
  tg_loader *ld = tg_token_loader_create(tokens, ntok, &lc);
  if (!ld) tg_cli_die_last("batch");
  tg_batch b;
  if (tg_loader_next(ld, &b) < 0) tg_cli_die_last("batch");

  for (int k = 0; k < warmup; k++) {
    if (tg_gpt_step(&g, &b, opt.lr) < 0) tg_cli_die_last("warm-up step");
    if (tg_gpt_loss(&g, NULL, 1) < 0) tg_cli_die_last("loss");
  }
  starpu_task_wait_for_all(); /* the first interval starts with no warm-up task left */
  double *ms = malloc(sizeof(double) * steps);
  if (!ms) tg_cli_die("out of memory");
  if (tg_stats_begin() < 0) tg_cli_die_last("statistics");
  double t_all = tg_cli_now();
  for (int k = 0; k < steps; k++) {
    double t0 = tg_cli_now();
    if (tg_gpt_step(&g, &b, opt.lr) < 0) tg_cli_die_last("training step");
    if (tg_gpt_loss(&g, NULL, 1) < 0) tg_cli_die_last("loss");
    /* the loss is known after the forward; the interval ends when the
     * step's backward and update have ended too, so that it holds one
     * whole step and nothing of the next (bench/results/2026-11-25-per-step.md) */
    starpu_task_wait_for_all();
    ms[k] = (tg_cli_now() - t0) * 1e3;
  }
  t_all = tg_cli_now() - t_all;
  tg_stats st;
  if (tg_stats_end(&st) < 0) tg_cli_die_last("statistics");
  qsort(ms, steps, sizeof *ms, tg_cli_cmp_double);
  double med = ms[steps / 2];
  double flops = tg_gpt_flops_per_token(&cfg, T) * B * T;
  char cls[48] = "fused";
  if (tg_gpt_classifier_blocks(&g))
    snprintf(cls, sizeof cls, "split, dwte in %d block(s)", tg_gpt_classifier_blocks(&g));
  printf("bench gpt: L=%d C=%d NH=%d V=%d Vp=%d, %zu parameters, B=%d T=%d, %d micro-batches, "
         "%s attention (chunk %d, %d tasks), classifier %s, %s, %d CPU + %d CUDA + %d emulated workers, scheduler %s\n",
         cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size,
         nparams, B, T, micro, run.attention == TG_ATTN_NAIVE ? "naive" : "chunked", run.chunk,
         g.run.attn_splits, cls, tg_precision_name(ro.prec.precision), tg_ncpu_workers(),
         tg_ncuda_workers(), tg_nopencl_workers(),
         starpu_sched_ctx_get_sched_policy(0)->policy_name);
  printf("taskgrad median step ms: %.1f (min %.1f, max %.1f)\n", med, ms[0], ms[steps - 1]);
  /* each interval is one whole step (see above), so the mean over the
   * window agrees with the median up to the machine's noise */
  printf("taskgrad mean step ms: %.1f (%d steps in %.2f s, until the last task ended)\n",
         st.wall_us * 1e-3 / steps, steps, st.wall_us * 1e-6);
  printf("taskgrad tokens/s: %.0f\n", B * T / (med * 1e-3));
  printf("taskgrad GFLOP/s: %.1f (llm.c count, %.2f GFLOP per step)\n", flops / (med * 1e6),
         flops * 1e-9);
  if (g.optim.scaler.enabled)
    printf("taskgrad loss scale %g, skipped steps: %ld\n", g.optim.scaler.scale, g.optim.scaler.skipped);
  if (!quiet) tg_stats_print(&st, stdout);
  free(ms);
  tg_loader_destroy(ld);
  tg_gpt_destroy(&g);
  tg_cli_instrument_end(&rt);
  tg_shutdown();

  int rc = 0;
  if (torch) {
    double tms = torch_step_ms(model, tokfile, B, T, steps, warmup, threads);
    unlink(model);
    unlink(tokfile);
    rmdir(dir);
    if (tms > 0)
      printf("speed-up over PyTorch: %.2fx (PyTorch %.1f ms, taskgrad %.1f ms per step)\n",
             tms / med, tms, med);
    else
      rc = 1;
  }
  free(tokens);
  return rc;
}
